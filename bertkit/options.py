"""The names of the choices that several layers and the command line accept: plain data, no torch, so that
`bertkit --help` lists them without loading a model (tests/cli/test_light_help.py)."""
from __future__ import annotations

# how token vectors become one sentence vector (model/pooling.py), and which layers it reads
POOLINGS: tuple[str, ...] = ("cls", "pooler", "mean", "max", "first-last-avg", "mean-sqrt-len", "weighted-mean",
                             "last-token", "none")
LAYER_STRATEGIES: tuple[str, ...] = ("last", "second-to-last", "first", "sum-all", "sum-last-4", "concat-last-4")

# inference precisions (runtime.py): what the weights are stored and computed in; "auto" resolves to another
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "int8")

# the names of finetune/tasks.py's TASKS, in its order (tests/finetune/test_task_registry.py holds them equal)
FINETUNE_TASKS: tuple[str, ...] = ("classification", "pair-classification", "multi-label", "regression", "ner", "qa",
                                   "prompt-classification", "seq2seq", "rerank", "simbert")
# `finetune --task`: every task but prompt classification, which `--template` chooses
TRAINABLE_TASKS: tuple[str, ...] = tuple(t for t in FINETUNE_TASKS if t != "prompt-classification")
# `evaluate / predict --task`: what a folder's bertkit.json records (a rerank folder is a pair-classification one)
SAVED_TASKS: tuple[str, ...] = tuple(t for t in FINETUNE_TASKS if t not in ("rerank", "simbert"))   # simbert: generate --similar
