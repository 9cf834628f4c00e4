"""Run under torchrun (or directly) by test_distributed.py: trains the toy model and writes its losses."""
import json
import sys

import torch

from bertkit.train import TrainConfig, train
from bertkit.train.distributed import rank
from train_toy import ToyModel, toy_batches, toy_loss

if __name__ == "__main__":
    out, batch_size = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = ToyModel(dropout=0.0)
    config = TrainConfig(lr=1e-3, max_steps=20, warmup_steps=2, progress_bar=False, seed=0)
    result = train(model, toy_loss, toy_batches(batch_size), config)
    if rank() == 0:
        with open(out, "w") as handle:
            json.dump(result.losses, handle)
