"""The one training loop shared by every job (pre-training, fine-tuning, embeddings, distillation)."""
from bertkit.train.batches import BatchSource, IndexedBatches, to_device
from bertkit.train.loop import TrainConfig, TrainResult, train
from bertkit.train.optim import Schedule, build_optimizer, encoder_layer_of, lr_factor, param_groups, parse_duration

__all__ = ["BatchSource", "IndexedBatches", "TrainConfig", "TrainResult", "to_device", "train", "Schedule",
           "build_optimizer", "encoder_layer_of", "lr_factor", "param_groups", "parse_duration"]
