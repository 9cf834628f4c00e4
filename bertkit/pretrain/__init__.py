"""Pre-training: instances from shards, masking, the objectives (objectives/), and the job that ties them.
Names load on first use, so that `bertkit.pretrain.objectives.OBJECTIVES` is readable without torch."""
from bertkit.lazy import lazy_exports

_NAMES = {"DataConfig": "config", "PretrainConfig": "config", "VocabConfig": "config", "PretrainResult": "job",
          "evaluate_mlm_on_corpus": "job", "run_pretraining": "job", "MaskingConfig": "masking",
          "mask_row": "masking", "PretrainingModel": "objectives.mlm", "evaluate_mlm": "objectives.mlm",
          "pretraining_loss": "objectives.mlm"}

__all__ = list(_NAMES)


__getattr__ = lazy_exports(__name__, _NAMES)
