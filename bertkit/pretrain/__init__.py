"""Pre-training: instances from shards, masking, the objectives (objectives/), and the job that ties them.
Names load on first use, so that `bertkit.pretrain.objectives.OBJECTIVES` is readable without torch."""
import importlib

_NAMES = {"DataConfig": "config", "PretrainConfig": "config", "VocabConfig": "config", "PretrainResult": "job",
          "evaluate_mlm_on_corpus": "job", "run_pretraining": "job", "MaskingConfig": "masking",
          "mask_row": "masking", "PretrainingModel": "objectives.mlm", "evaluate_mlm": "objectives.mlm",
          "pretraining_loss": "objectives.mlm"}

__all__ = list(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'bertkit.pretrain' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bertkit.pretrain.{_NAMES[name]}"), name)
