"""Which module reads and writes a model folder: one per family of Hugging Face layouts.

Each module answers the same calls, so checkpoints/io.py runs one load and one save for all of them:
  config_from_hf(config.json dict, source, bertkit.json "encoder") -> the model's config
  split_state(weights, architectures, task) -> hf.SplitState (encoder weights in bertkit names, head weights, skipped)
  new_encoder(config), build_head(key, config, head weights) -> modules of the right shape
  load_tokenizer(folder) -> the family's tokenizer, or None (with a warning) for a bare model folder
  state_to_hf(encoder, heads), folder_config(config, head keys), folder_meta(config) -> what a save writes
Adding a family is one module and one line here.
"""
from __future__ import annotations

from types import ModuleType

from bertkit.checkpoints import bert, electra, xlnet
from bertkit.errors import CheckpointError

FAMILIES: dict[str, ModuleType] = {"bert": bert, "electra": electra, "xlnet": xlnet}
# config.json model_type -> family; any other model_type is handed to the BERT reader, which names what it reads
_MODEL_TYPES = {"electra": "electra", "xlnet": "xlnet"}


def for_model_type(model_type: object) -> ModuleType:
    return FAMILIES[_MODEL_TYPES.get(model_type, "bert")] if isinstance(model_type, str) else bert


def for_config(config) -> ModuleType:
    return FAMILIES[config.family]


def require_bert_encoder(checkpoint, command: str) -> None:
    """Distillation, head pruning, int8 quantization and the ONNX export rebuild the shared encoder's own modules; XLNet's relative
    two-stream attention is another model. Say so in one line instead of failing inside them."""
    if checkpoint.config.family == "xlnet":
        raise CheckpointError(f"{checkpoint.path}: {command} works on BERT-family encoders (BERT, RoBERTa, ALBERT, "
                              "ELECTRA); this is an XLNet model")
