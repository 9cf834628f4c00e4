"""TASKS (finetune/tasks.py) and HEADS (model/head_registry.py): the one table of each, and what reads them."""
from __future__ import annotations

import pytest
import torch

from bertkit import options
from bertkit.checkpoints import electra, hf_names, load_checkpoint, save_checkpoint, xlnet
from bertkit.finetune.linear.model import LINEAR_TASKS
from bertkit.finetune.model import hf_config_extra, model_from_checkpoint, model_meta
from bertkit.finetune.recipe import SEQUENCE_TASKS, WEIGHTED_TASKS
from bertkit.finetune.tasks import HEAD_TASKS, SAVED_TASKS, TASKS, TaskOptions, build_task
from bertkit.model.head_registry import HEAD_ORDER, HEADS
from bertkit.serve.runner import PREDICT_HEADS


def test_the_command_line_names_are_the_registry():
    assert options.FINETUNE_TASKS == tuple(TASKS)
    assert options.TRAINABLE_TASKS == tuple(name for name, kind in TASKS.items() if kind.job != "prompt")
    assert options.SAVED_TASKS == SAVED_TASKS
    assert "rerank" not in SAVED_TASKS and TASKS["rerank"].saved_as in HEAD_TASKS


def test_every_task_names_a_registered_head_and_every_adapter_only_registered_heads():
    assert {kind.head for kind in TASKS.values()} <= set(HEADS)
    for table in (hf_names.BERT_HEADS, hf_names.ROBERTA_HEADS, electra.HEAD_NAMES, xlnet.HEAD_NAMES):
        assert set(table) <= set(HEADS), set(table) - set(HEADS)
    assert HEAD_ORDER == tuple(HEADS)


def test_routing_is_what_it_was_before_the_registry():
    """The tables the registry replaced (finetune HEAD_KEYS, serve PREDICT_HEADS, the task objects' main metric)."""
    assert {name: TASKS[name].head for name in HEAD_TASKS} == {
        "classification": "classifier", "pair-classification": "classifier", "multi-label": "classifier",
        "regression": "classifier", "ner": "token_classifier", "qa": "qa"}
    assert PREDICT_HEADS == {"classification": "classifier", "pair-classification": "classifier",
                             "multi-label": "classifier", "regression": "classifier", "ner": "token_classifier"}
    assert {name: TASKS[name].main_metric for name in HEAD_TASKS} == {
        "classification": "accuracy", "pair-classification": "accuracy", "multi-label": "micro_f1",
        "regression": "spearman", "ner": "f1", "qa": "f1"}
    assert (WEIGHTED_TASKS, SEQUENCE_TASKS, LINEAR_TASKS) == (
        ("classification", "pair-classification"), ("classification", "pair-classification", "multi-label",
                                                    "regression"), ("classification", "pair-classification", "regression"))


@pytest.mark.parametrize("task", HEAD_TASKS)
def test_a_new_head_saves_and_loads_as_its_registered_kind(task, finetune_model_dir, tmp_path):
    """new_head (finetune) and build_head (checkpoints) both build from HEADS: a saved head reloads as the same
    module with the same weights, and the reloaded model computes the same logits."""
    torch.manual_seed(0)
    checkpoint = load_checkpoint(finetune_model_dir)
    labels = None if TASKS[task].labels in ("score", "none") else ["B-X", "I-X", "O"]
    net = model_from_checkpoint(checkpoint, task, labels).eval()
    assert net.head_key == TASKS[task].head
    save_checkpoint(tmp_path / "m", net.encoder, checkpoint.tokenizer, {net.head_key: net.head}, model_meta(net),
                    hf_config_extra(net))
    loaded = load_checkpoint(tmp_path / "m")
    assert list(loaded.heads) == [TASKS[task].head]
    again = model_from_checkpoint(loaded, task, labels).eval()
    assert type(again.head) is type(net.head)
    ids = torch.tensor([[2, 40, 41, 42, 3]])
    before, after = net(ids), again(ids)
    for a, b in zip(before if isinstance(before, tuple) else (before,), after if isinstance(after, tuple) else (after,)):
        torch.testing.assert_close(a, b)
    task_object = build_task(task, checkpoint.tokenizer, labels, TaskOptions(max_length=16))
    assert task_object.task == task


def test_an_unknown_head_is_one_checkpoint_error_for_every_family(tmp_path):
    """BERT folders raised a bare ValueError from HEAD_ORDER.index; ELECTRA named the head. One check for all."""
    from bertkit.errors import CheckpointError
    from bertkit.model.config import EncoderConfig
    from bertkit.model.encoder import Encoder
    for family in ("bert", "electra"):
        config = EncoderConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                               max_position_embeddings=16, family=family,
                               use_pooler=family == "bert")
        with pytest.raises(CheckpointError, match="unknown head 'nonsense'; heads are mlm"):
            save_checkpoint(tmp_path / family, Encoder(config), None, heads={"nonsense": torch.nn.Linear(2, 2)})
