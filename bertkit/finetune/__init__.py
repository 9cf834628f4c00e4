"""Fine-tuning: sequence classification and regression, NER, extractive QA; evaluation and prediction.

The names below load on first use, so `bertkit.finetune.config` (plain dataclasses the command line builds its
flags from) imports without torch. A module class rather than a module `__getattr__`: `predict` names both a
function exported here and a submodule, and importing the submodule would otherwise shadow the function."""
from __future__ import annotations

import importlib
import sys
import types

_WHERE = {"FinetuneConfig": "config", "TaskOptions": "config", "FinetuneResult": "job", "run_finetune": "job",
          "TASKS": "tasks", "FinetuneModel": "model", "evaluate_file": "predict", "predict": "predict",
          "predict_file": "predict"}

__all__ = list(_WHERE)


class _LazyExports(types.ModuleType):
    def __getattribute__(self, name: str):
        if name in _WHERE:
            return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        return super().__getattribute__(name)


sys.modules[__name__].__class__ = _LazyExports
