"""sentence-transformers folders (modules.json, 1_Pooling/config.json, sentence_bert_config.json): their
pooling, normalization and length limit become the loaded model's encode defaults."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_MODES = [("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
          ("pooling_mode_max_tokens", "max")]


def read_encode_defaults(folder: Path) -> dict[str, Any]:
    """{"pooling", "normalize", "max_length"} as far as the folder says; {} for a plain HF folder."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return {}
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    defaults: dict[str, Any] = {"normalize": any(m.get("type", "").endswith("Normalize") for m in modules)}
    for module in modules:
        if module.get("type", "").endswith("Pooling"):
            config_file = folder / module.get("path", "") / "config.json"
            if config_file.is_file():
                pooling = json.loads(config_file.read_text(encoding="utf-8"))
                for key, name in _MODES:
                    if pooling.get(key):
                        defaults["pooling"] = name
                        break
    bert_config = folder / "sentence_bert_config.json"
    if bert_config.is_file():
        max_length = json.loads(bert_config.read_text(encoding="utf-8")).get("max_seq_length")
        if isinstance(max_length, int):
            defaults["max_length"] = max_length
    return defaults


def encode_defaults(folder: Path | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The folder's encode defaults: bertkit.json "encode" over a sentence-transformers folder's."""
    return {**(read_encode_defaults(folder) if folder is not None else {}), **(meta or {}).get("encode", {})}
