"""ULMFiT-style options, multi-label classification and head+tail truncation on a tiny model."""
from __future__ import annotations

import json

import torch

from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint
from bertkit.finetune import FinetuneConfig, predict, run_finetune
from bertkit.finetune.classification import SequenceTask
from bertkit.tokenizer import Tokenizer


def test_multilabel_with_gradual_unfreezing_slanted_triangular_and_layer_decay(finetune_model_dir, tmp_path):
    rows = [{"text": f"the {a} was {b}", "label": [a, b]} for a in ("movie", "book") for b in ("good", "bad")] * 4
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_finetune(job_config(FinetuneConfig, 
        task="multi-label", model=str(finetune_model_dir), train=str(train), dev=str(train),
        output=str(tmp_path / "m"), epochs=1, lr=1e-3, batch_size=8, max_length=16, progress_bar=False,
        gradual_unfreezing=True, schedule="slanted_triangular", layerwise_lr_decay=0.8,
        early_stopping_patience=1, eval_every=1))
    assert {"micro_f1", "macro_f1", "subset_accuracy"} <= set(result.metrics)
    before, after = load_checkpoint(finetune_model_dir).encoder, load_checkpoint(tmp_path / "m").encoder
    # one epoch of gradual unfreezing trains the head and pooler only
    assert torch.equal(before.blocks[1].ffn.up.weight, after.blocks[1].ffn.up.weight)
    assert torch.equal(before.embeddings.token.weight, after.embeddings.token.weight)
    assert not torch.equal(before.pooler.dense.weight, after.pooler.dense.weight)
    prediction = predict(str(tmp_path / "m"), ["the book was bad"])[0]
    assert set(prediction["scores"]) == {"bad", "book", "good", "movie"}


def test_head_plus_tail_keeps_both_ends(finetune_model_dir):
    tokenizer = Tokenizer.from_folder(finetune_model_dir)
    task = SequenceTask("classification", tokenizer, ["x"], max_length=10, long_texts="head+tail")
    text = "alice " + "the " * 20 + "bob"
    feature = task.encode([type("E", (), {"text": text, "text_pair": None, "label": None})()], quiet=True)[0]
    tokens = [tokenizer.id_to_token(i) for i in feature.input_ids]
    assert len(tokens) == 10 and tokens[1] == "alice" and tokens[-2] == "bob"
