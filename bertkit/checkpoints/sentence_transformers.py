"""sentence-transformers folders: modules.json names the steps (Transformer -> Pooling -> Dense -> Normalize),
each in its own subfolder. They are read exactly, or refused with a message naming the module bertkit cannot
compute; never approximated (a Dense layer skipped or an unknown pooling read as mean would give vectors
that look fine and are wrong).

bertkit writes the same files (write_modules) beside its own bertkit.json "encode" for every sentence pipeline
sentence-transformers computes, so `SentenceTransformer(folder)` gives bertkit's vectors. A pipeline it does not
compute (a fitted whitening, layer strategies other than the last layer) gets no modules.json and bertkit.json
says why: sentence-transformers would otherwise fall back to plain mean pooling, silently.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bertkit.atomic_write import json_text
from bertkit.checkpoints.json_files import read_json
from bertkit.checkpoints.weights import read_weights
from bertkit.errors import CheckpointError
from bertkit.folder_names import member
from bertkit.model.sentence import Dense, SentencePipeline

# sentence-transformers' pooling modes -> bertkit's pooling names
POOLING_MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean-sqrt-len",
                 "weightedmean": "weighted-mean", "lasttoken": "last-token"}
# Older folders store one boolean per mode instead of "pooling_mode".
_LEGACY_MODE_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                     "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# torch activation classes a Dense module may name -> bertkit.model.sentence.DENSE_ACTIVATIONS
_ACTIVATIONS = {"Tanh": "tanh", "Identity": "identity", "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid"}
_SUPPORTED = ("Transformer", "Pooling", "Dense", "Normalize")
_MODULE_TYPES = {kind: f"sentence_transformers.models.{kind}" for kind in _SUPPORTED}


def read_modules(folder: Path) -> Optional[list[dict]]:
    """modules.json's entries, or None for a folder that is not a sentence-transformers model."""
    path = folder / "modules.json"
    if not path.is_file():
        return None
    modules = read_json(path, expect=None)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str)
                                                for m in modules):
        raise CheckpointError(f"{path}: expected a list of modules with a \"type\" each")
    for i, module in enumerate(modules):
        kind = module["type"].rsplit(".", 1)[-1]
        if module.get("path"):         # "" is the folder itself; anything else a subfolder of it, never elsewhere
            member(folder, module["path"], path, f"module {i}'s path")
        if kind not in _SUPPORTED:
            raise CheckpointError(f"{path}: module {module['type']} ({module.get('path') or 'root'}) is not "
                                  f"supported; bertkit computes {', '.join(_SUPPORTED)} modules only")
    if not modules or modules[0]["type"].rsplit(".", 1)[-1] != "Transformer":
        raise CheckpointError(f"{path}: the first module must be a Transformer (the encoder)")
    return modules


def transformer_folder(folder: Path) -> Path:
    """Where the encoder's config.json, weights and tokenizer are: the folder itself, or the Transformer
    module's subfolder in older sentence-transformers layouts (0_Transformer/)."""
    modules = read_modules(folder) if not (folder / "config.json").is_file() else None
    if modules and modules[0].get("path"):
        return folder / modules[0]["path"]
    return folder


def read_sentence_settings(folder: Path, limit: int, tokenizer_max_length: Optional[int]) -> Optional[dict]:
    """{"pooling", "normalize", "max_length", "dense"} of a sentence-transformers folder; None for others.

    limit: the encoder's position limit. The length comes from sentence_bert_config.json's max_seq_length,
    else (as sentence-transformers does) from the tokenizer's model_max_length, capped at the limit.
    """
    modules = read_modules(folder)
    if modules is None:
        return None
    _check_prompts(folder)
    settings: dict[str, Any] = {"normalize": False, "dense": []}
    module_folder = folder / (modules[0].get("path") or "")
    settings["max_length"] = _max_length(module_folder / "sentence_bert_config.json", limit, tokenizer_max_length)
    for module in modules[1:]:
        kind = module["type"].rsplit(".", 1)[-1]
        where = folder / module.get("path", "")
        if settings["normalize"]:
            raise CheckpointError(f"{folder / 'modules.json'}: a {kind} module after Normalize is not supported")
        if kind == "Pooling":
            settings["pooling"] = _pooling(where / "config.json")
        elif kind == "Dense":
            settings["dense"].append(_dense(where))
        elif kind == "Normalize":
            settings["normalize"] = True
        else:   # a second Transformer
            raise CheckpointError(f"{folder / 'modules.json'}: more than one Transformer module is not supported")
    if "pooling" not in settings:
        raise CheckpointError(f"{folder / 'modules.json'}: no Pooling module; bertkit needs one to make a "
                              "sentence vector")
    return settings


def _check_prompts(folder: Path) -> None:
    path = folder / "config_sentence_transformers.json"
    if path.is_file():
        config = read_json(path)
        if isinstance(config, dict) and config.get("default_prompt_name"):
            raise CheckpointError(f"{path}: default_prompt_name {config['default_prompt_name']!r} makes "
                                  "sentence-transformers prefix every text with a prompt, which bertkit does not do; "
                                  "put the prompt into your texts and set default_prompt_name to null")


def _max_length(path: Path, limit: int, tokenizer_max_length: Optional[int]) -> Optional[int]:
    config = read_json(path) if path.is_file() else {}
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    if config.get("do_lower_case"):
        raise CheckpointError(f"{path}: do_lower_case=true (lowercasing before the tokenizer) is not supported; "
                              "use an uncased tokenizer (do_lower_case in tokenizer_config.json) instead")
    value = config.get("max_seq_length")
    if value is None:
        return min(tokenizer_max_length, limit) if tokenizer_max_length else None
    if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= limit:
        raise CheckpointError(f"{path}: max_seq_length {value!r} must be an integer between 2 and the model's "
                              f"position limit {limit}")
    return value


def _pooling(path: Path) -> str:
    config = read_json(path) if path.is_file() else None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: missing or not a JSON object; the Pooling module needs its config")
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in _LEGACY_MODE_KEYS.items() if config.get(key)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise CheckpointError(f"{path}: pooling mode {unknown[0]!r} is not supported; bertkit reads "
                              f"{', '.join(POOLING_MODES)}")
    if len(modes) != 1:
        raise CheckpointError(f"{path}: pooling concatenates {' + '.join(modes)}; bertkit supports one pooling "
                              "mode per model")
    return POOLING_MODES[modes[0]]


def _dense(folder: Path) -> Dense:
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else None
    if not isinstance(config, dict):
        raise CheckpointError(f"{folder / 'config.json'}: missing or not a JSON object; the Dense module needs it")
    where = folder / "config.json"
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, "sentence_embedding") != "sentence_embedding":
            raise CheckpointError(f"{where}: {key} {config[key]!r} is not supported (only sentence_embedding)")
    if config.get("use_residual"):
        raise CheckpointError(f"{where}: use_residual=true is not supported")
    activation = str(config.get("activation_function", "torch.nn.modules.activation.Tanh")).rsplit(".", 1)[-1]
    if activation not in _ACTIVATIONS:
        raise CheckpointError(f"{where}: activation_function {config.get('activation_function')!r} is not "
                              f"supported; bertkit reads {', '.join(_ACTIVATIONS)}")
    sizes = [config.get("in_features"), config.get("out_features")]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise CheckpointError(f"{where}: in_features and out_features must be positive integers, got {sizes}")
    state = read_weights(folder)
    bias = bool(config.get("bias", True))
    expected = {"linear.weight": (sizes[1], sizes[0]), **({"linear.bias": (sizes[1],)} if bias else {})}
    found = {k: tuple(v.shape) for k, v in state.items()}
    if found != expected:      # compared before anything is allocated: the sizes in config.json are not trusted
        raise CheckpointError(f"{folder}: Dense weights {sorted(found.items())} do not match its config.json "
                              f"({sorted(expected.items())})")
    dense = Dense(sizes[0], sizes[1], bias=bias, activation=_ACTIVATIONS[activation])
    dense.load_state_dict({k: v.float() for k, v in state.items()})
    return dense.eval()


def write_modules(folder: Path, pipeline: SentencePipeline, hidden_size: int, limit: int) -> dict[str, Any]:
    """Write modules.json, sentence_bert_config.json and the Pooling / Dense / Normalize subfolders for
    `pipeline` into `folder` (a save in progress); returns bertkit.json's "sentence_transformers" entry."""
    from safetensors.torch import save_file

    config = pipeline.config
    why_not = []
    if pipeline.whitening is not None:
        why_not.append("it has no whitening module (bertkit.json \"whitening\")")
    if config.layers != "last":
        why_not.append(f"it pools the last layer only, this model pools layers {config.layers!r}")
    mode = {name: mode for mode, name in POOLING_MODES.items()}.get(config.pooling)
    if mode is None:
        why_not.append(f"it has no {config.pooling!r} pooling")
    if why_not:
        return {"sentence_transformers": {"loads": False, "why_not": "; ".join(why_not)}}
    modules: list[dict] = [{"idx": 0, "name": "0", "path": "", "type": _MODULE_TYPES["Transformer"]}]

    def add(kind: str, module_config: dict) -> Path:
        index = len(modules)
        path = folder / f"{index}_{kind}"
        path.mkdir()
        (path / "config.json").write_text(json_text(module_config), encoding="utf-8")
        modules.append({"idx": index, "name": str(index), "path": path.name, "type": _MODULE_TYPES[kind]})
        return path

    # the boolean-per-mode keys: what sentence-transformers 2.x writes, and 3+ still reads
    add("Pooling", {"word_embedding_dimension": hidden_size,
                    **{key: key_mode == mode for key, key_mode in _LEGACY_MODE_KEYS.items()}, "include_prompt": True})
    names = {name: cls for cls, name in _ACTIVATIONS.items()}
    for dense in pipeline.dense:
        linear = dense.linear
        where = "linear" if dense.activation == "identity" else "activation"
        path = add("Dense", {"in_features": linear.in_features, "out_features": linear.out_features,
                             "bias": linear.bias is not None,
                             "activation_function": f"torch.nn.modules.{where}.{names[dense.activation]}"})
        save_file({f"linear.{k}": v.detach().cpu().float().contiguous() for k, v in linear.state_dict().items()},
                  str(path / "model.safetensors"))
    if config.normalize:
        add("Normalize", {})
    (folder / "modules.json").write_text(json_text(modules), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(json_text(
        {"max_seq_length": config.max_length or limit, "do_lower_case": False}), encoding="utf-8")
    return {"sentence_transformers": {"loads": True}}
