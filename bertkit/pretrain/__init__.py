"""Pre-training: instances from shards, masking, the MLM + NSP/SOP model, and the job that ties them."""
from bertkit.pretrain.config import DataConfig, PretrainConfig, VocabConfig
from bertkit.pretrain.job import PretrainResult, evaluate_mlm_on_corpus, run_pretraining
from bertkit.pretrain.masking import MaskingConfig, mask_row
from bertkit.pretrain.model import PretrainingModel, evaluate_mlm, pretraining_loss

__all__ = ["DataConfig", "PretrainConfig", "VocabConfig", "PretrainResult", "evaluate_mlm_on_corpus",
           "run_pretraining", "MaskingConfig", "mask_row", "PretrainingModel", "evaluate_mlm", "pretraining_loss"]
