"""`bertkit convert`: any folder bertkit reads -> a folder transformers loads as is, checked before it is kept.

The target is written to a temporary folder, checked, and only then put in place, so a failed check leaves
nothing behind and an existing target untouched. The check: the weights fit the loading rules of the
transformers class config.json names (checkpoints/hf_check.py), and, when transformers is installed, that
class loaded from the folder computes the source model's hidden states and head logits within 1e-4 (ELECTRA and
XLNet folders: checkpoints/hf_check_family.py, which has transformers report missing or unexpected weights).
A model no transformers class computes is refused with the reason (exit 2 from the CLI); so are folders that
hold no such model at all (linear models over vectors, TF-IDF baselines, ONNX exports, search indexes).
A pruned model is written with full shapes and its pruned heads zeroed (exact outputs, no speed-up); an int8
folder (bertkit quantize) as the fp32 model its int8 weights describe (dequantized weights: its outputs are
those of `bertkit.load(folder, precision="fp32")`, not of the int8 kernels' rounded activations).
"""
from __future__ import annotations

import filecmp
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.checkpoints.gpt2 import is_gpt2_folder, load_gpt2, save_gpt2
from bertkit.checkpoints.hf_check import check_structure, compare_with_transformers
from bertkit.checkpoints.hf_check_family import compare_family_with_transformers
from bertkit.checkpoints.hf_form import choose_form, head_keys_of
from bertkit.checkpoints.io import save_folder
from bertkit.checkpoints.json_files import read_json
from bertkit.checkpoints.weights import holds_model
from bertkit.distill.onnx_model import onnx_file_of
from bertkit.distill.prune import full_shape_copy
from bertkit.errors import BertkitError
from bertkit.model.precision import dequantize_encoder, has_int8
from bertkit.search.generations import MANIFEST


@dataclass
class ConvertReport:
    path: Path
    architecture: str                 # the transformers class that loads the folder
    max_difference: Optional[float]   # largest |bertkit - transformers| output difference; None: not compared
    note: str = ""                    # what the conversion changed (pruned heads zeroed, int8 dequantized)

    def line(self) -> str:
        note = f" ({self.note})" if self.note else ""
        if self.max_difference is None and "not compared" in self.note:
            return f"wrote {self.path}{note}: transformers' {self.architecture} folder"
        if self.max_difference is None:
            return (f"wrote {self.path}{note}: its weights fit transformers' {self.architecture} loading rules "
                    "(transformers is not installed here, so outputs were not compared)")
        return (f"wrote {self.path}{note}: transformers' {self.architecture} loads it and computes bertkit's hidden "
                f"states and logits within {self.max_difference:.1g}")


def no_hf_form(path: str | os.PathLike) -> Optional[str]:
    """Why the folder at `path` holds nothing a transformers class computes, judged from its files; None when
    it holds an encoder (whose own form is then decided by hf_form.choose_form)."""
    path = Path(path)
    if onnx_file_of(path) is not None:
        return "an ONNX export: ONNX Runtime loads it as it is; convert the model folder it was exported from"
    if not path.is_dir():
        return None
    if (path / MANIFEST).is_file():
        return (f"a search index ({MANIFEST}), not a model; convert the model folder the index was built with")
    meta = read_json(path / "bertkit.json") if (path / "bertkit.json").is_file() else {}
    linear = meta.get("linear")
    if isinstance(linear, dict):
        if linear.get("method") == "tfidf":
            return "a TF-IDF + linear baseline (bertkit baseline): no encoder, nothing a transformers class computes"
        if linear.get("method") == "hybrid":
            return ("a hybrid model (a linear layer over TF-IDF features stacked with the frozen encoder's sentence "
                    "vectors, bertkit.json \"linear\"): no transformers class computes it; bertkit.load reads it")
        return (f"a {linear.get('method', 'linear')} model (a linear layer over the frozen encoder's sentence "
                "vectors, bertkit.json \"linear\"): no transformers class computes it; bertkit.load reads it")
    return None


def convert(source: str | os.PathLike, target: str | os.PathLike) -> ConvertReport:
    reason = no_hf_form(source)
    if reason is not None:
        raise BertkitError(f"{source}: cannot be converted to a transformers folder: {reason}")
    _check_target(Path(source), Path(target))
    if is_gpt2_folder(source):
        return _convert_gpt2(Path(source), Path(target))
    checkpoint = load_checkpoint(source, device="cpu", precision="fp32")
    quantized = has_int8(checkpoint.encoder)
    dequantize_encoder(checkpoint.encoder)      # an int8 folder: the fp32 model its int8 weights describe
    if checkpoint.config.family != "bert":
        return _convert_family(checkpoint, Path(target))
    form = choose_form(checkpoint.config, head_keys_of(checkpoint.heads))
    if form.architecture is None:
        raise BertkitError(f"{source}: cannot be converted to a transformers folder: {form.reason}. bertkit.load "
                           "reads it as it is; `bertkit export-onnx` gives an ONNX Runtime model")
    encoder, meta = checkpoint.encoder, dict(checkpoint.meta)
    if encoder.pruned_heads():
        encoder = full_shape_copy(encoder)
        meta["pruning"] = {**meta.get("pruning", {}), "form": "full shapes with the pruned heads' weights zeroed: "
                           "plain from_pretrained loads it, with exact outputs and no speed-up",
                           "pruned_heads": {str(k): v for k, v in checkpoint.encoder.pruned_heads().items()}}
    meta["converted_from"] = str(Path(source).resolve())   # what _check_target compares
    if quantized:
        meta.pop("quantization", None)
        meta["dequantized_from_int8"] = True
    found: dict = {}

    def check(folder: Path) -> None:
        found["architecture"] = form.architecture    # save_checkpoint has held the folder to its loading rules
        if importlib.util.find_spec("transformers") is not None:
            found["architecture"], found["difference"] = compare_with_transformers(folder, checkpoint)

    path = save_checkpoint(target, encoder, checkpoint.tokenizer, checkpoint.heads, meta,
                           sentence=checkpoint.sentence, check=check)
    notes = (["int8 weights dequantized to fp32"] if quantized else []) + \
        (["full shapes, pruned heads zeroed"] if encoder is not checkpoint.encoder else [])
    return ConvertReport(path, found["architecture"], found.get("difference"), "; ".join(notes))


def _check_target(source: Path, target: Path) -> None:
    """A target holding another model (a fine-tuned one, say) would be replaced: refused in one line. The source
    itself (converted in place) and an earlier conversion of the same source may be written again."""
    if not target.is_dir() or not holds_model(target) or target.resolve() == source.resolve():
        return
    meta = read_json(target / "bertkit.json") if (target / "bertkit.json").is_file() else {}
    earlier = meta.get("converted_from")
    if isinstance(earlier, str) and Path(earlier).resolve() == source.resolve():
        return
    if is_gpt2_folder(source) and all((target / name).is_file() and filecmp.cmp(source / name, target / name, False)
                                      for name in ("config.json", "model.safetensors")):
        return               # a GPT-2 folder converts to its own files (no bertkit.json to record the source)
    raise BertkitError(f"{target} holds another model, which converting {source} there would replace; name a new "
                       "folder, or delete that one first")


def _convert_family(checkpoint, target: Path) -> ConvertReport:
    """ELECTRA and XLNet folders: written by their family's module (checkpoints/families.py) and, when
    transformers is installed, loaded with the class config.json names and compared on probe inputs
    (checkpoints/hf_check_family.py) before the folder is put in place."""
    meta = {k: v for k, v in checkpoint.meta.items() if k != "quantization"}
    meta["converted_from"] = str(Path(checkpoint.path).resolve())
    found: dict = {}

    def check(folder: Path) -> None:
        found["architecture"] = (read_json(folder / "config.json").get("architectures") or ["?"])[0]
        if importlib.util.find_spec("transformers") is not None:
            found["architecture"], found["difference"] = compare_family_with_transformers(folder, checkpoint)

    path = save_checkpoint(target, checkpoint.encoder, checkpoint.tokenizer, checkpoint.heads, meta,
                           sentence=checkpoint.sentence, check=check)
    note = "" if "difference" in found else \
        f"{checkpoint.config.family}: transformers is not installed here, so outputs were not compared"
    return ConvertReport(path, found["architecture"], found.get("difference"), note)


def _convert_gpt2(source: Path, target: Path) -> ConvertReport:
    loaded = load_gpt2(source)
    found: dict = {}

    def write(tmp: Path) -> None:
        save_gpt2(tmp, loaded.model, loaded.tokenizer)
        found["architecture"], found["difference"] = check_structure(tmp), None
        if importlib.util.find_spec("transformers") is not None:
            found["architecture"], found["difference"] = compare_with_transformers(tmp, loaded.model)

    return ConvertReport(save_folder(target, write), found["architecture"], found["difference"])
