"""Export a model folder to one ONNX file: token ids in, sentence vectors out.

The folder's whole sentence path (model/sentence.py: pooling, dense layers, whitening, normalization) is
inside the graph, so an ONNX runtime needs no bertkit code: only the
tokenizer, which is written beside the .onnx file (vocab.txt / tokenizer.json). When the folder holds a
classification head, the graph has a second output, the head's logits, so `predict` runs on ONNX too; the
folder's task options (max_length, long_texts) are saved with it, so texts are cut for the head as the folder cuts them.
Batch and sequence axes are dynamic. The export is checked against PyTorch at several shapes before the
command reports success; the largest absolute difference is part of the result.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.checkpoints import load_checkpoint
from bertkit.checkpoints.families import require_bert_encoder
from bertkit.distill.student import same_vocabulary
from bertkit.errors import BertkitError, CheckpointError
from bertkit.model.pooling import pooled_or_cls
from bertkit.model.precision import dequantize_encoder, has_int8
from bertkit.model.sentence import SentenceEncoder
from bertkit.tokenizer import Tokenizer

# the tasks whose head the graph computes (the "classifier" head reading one text: logits); others export vectors only
GRAPH_TASKS = ("classification", "multi-label", "regression")
# (batch, sequence length) pairs the export is compared with PyTorch at; they differ from the trace shape.
DEFAULT_OPSET = 17
CHECK_SHAPES = ((1, 3), (2, 17), (5, 64), (3, 128))
TOLERANCE = 1e-3


class ExportedGraph(nn.Module):
    """The folder's sentence path (pooling, dense layers, whitening, normalization); plus classifier logits
    when there is a classifier head."""

    def __init__(self, sentence: SentenceEncoder, classifier: Optional[nn.Module] = None):
        super().__init__()
        self.sentence, self.classifier = sentence, classifier

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        # attention_bias always carries the mask: the encoder's "nothing padded -> no mask" shortcut is a
        # Python branch that tracing would freeze to whatever the example batch happened to be.
        bias = attention_mask.bool()[:, None, None, :]
        out = self.sentence.encoder(input_ids, attention_bias=bias, output_hidden_states=self.sentence.all_layers)
        vectors = self.sentence.vectors(out, attention_mask)
        if self.classifier is None:
            return vectors
        pooled = pooled_or_cls(out)
        return vectors, self.classifier(pooled)


class ExportResult(NamedTuple):
    path: Path
    max_abs_diff: float              # largest |onnx - torch| over CHECK_SHAPES, all outputs
    outputs: tuple[str, ...]
    size_bytes: int


def export_onnx(model_dir: str | os.PathLike, output: str | os.PathLike, pooling: Optional[str] = None,
                normalized: Optional[bool] = None, opset: int = DEFAULT_OPSET, check: bool = True) -> ExportResult:
    """pooling, normalized: default to the folder's; its dense layers and whitening are in the graph too."""
    output = Path(output)
    if output.suffix != ".onnx":
        raise BertkitError(f"--output {output}: name the file *.onnx (the tokenizer is written beside it)")
    needed = ("onnx", "onnxruntime") if check else ("onnx",)     # the writer; the runtime the check runs on
    missing = [name for name in needed if not _importable(name)]
    if missing:        # before the model is loaded and traced, and before anything is written
        raise BertkitError(f"export-onnx needs {' and '.join(missing)}: pip install 'bertkit[onnx]'")
    checkpoint = load_checkpoint(model_dir, precision="fp32")
    require_bert_encoder(checkpoint, "export-onnx")
    _check_tokenizer_beside(output.parent, checkpoint.tokenizer)
    if has_int8(checkpoint.encoder):
        print(f"bertkit: {model_dir} is an int8 folder; the ONNX graph holds the fp32 weights its int8 weights "
              "describe (the int8 accuracy, not its speed or size)", file=sys.stderr)
    dequantize_encoder(checkpoint.encoder)       # an int8 folder: the fp32 model its int8 weights describe
    encoder = checkpoint.encoder.float().eval()
    classifier = checkpoint.heads.get("classifier")
    _say_what_the_graph_leaves_out(model_dir, checkpoint.meta.get("task"))
    try:
        sentence = checkpoint.sentence.build(encoder, pooling, None, normalized)
    except ValueError as err:
        raise BertkitError(f"{model_dir}: {err}") from None
    graph = ExportedGraph(sentence, classifier.eval() if classifier is not None else None).eval()
    output.parent.mkdir(parents=True, exist_ok=True)
    names = ("embeddings", "logits") if classifier is not None else ("embeddings",)
    example = _example_inputs(encoder.config.vocab_size, 2, 8)
    example[1][1, 5:] = 0                                          # a padded row in the trace
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    axes.update({name: {0: "batch"} for name in names})
    tmp = output.with_name(output.name + ".tmp")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # Tracer warnings flag shape-dependent Python (the reshapes); the shape checks below are the real test.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            try:
                torch.onnx.export(graph, example, str(tmp), input_names=["input_ids", "attention_mask"],
                                  output_names=list(names), dynamic_axes=axes, opset_version=opset, dynamo=False)
            except (torch.onnx.errors.OnnxExporterError, RuntimeError) as err:
                if opset == DEFAULT_OPSET:
                    raise
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise BertkitError(f"--opset {opset}: the exporter cannot write this model at it ({reason}); the "
                                   f"default is {DEFAULT_OPSET}") from None
        _write_metadata(tmp, _metadata(checkpoint, sentence, model_dir))
        diff = max_abs_difference(graph, tmp, encoder.config.vocab_size) if check else float("nan")
        if check and not diff <= TOLERANCE:
            raise BertkitError(f"the ONNX export differs from PyTorch by {diff:.2e} (> {TOLERANCE}); not written")
        if checkpoint.tokenizer is not None and not _has_tokenizer(output.parent):
            checkpoint.tokenizer.save(output.parent)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)          # a failed export leaves nothing behind; a good one was renamed
    return ExportResult(output, diff, names, output.stat().st_size)


def _metadata(checkpoint, sentence: SentenceEncoder, model_dir) -> dict:
    """The export's settings, read back by read_metadata."""
    config, limit = sentence.config, sentence.encoder.config.max_length
    return {"pooling": config.pooling, "layers": config.layers, "normalize": config.normalize,
            "max_length": config.max_length or limit, "position_limit": limit,
            "dense_layers": len(sentence.dense), "whitened": sentence.whitening is not None,
            "dimension": sentence.dim, "task": checkpoint.meta.get("task"),
            "labels": checkpoint.meta.get("labels"), "source": str(model_dir),
            # how predict encodes texts (max_length, long_texts: head+tail, ...), as the folder does
            "task_options": checkpoint.meta.get("task_options")}


def _say_what_the_graph_leaves_out(model_dir, task: Optional[str]) -> None:
    """One line on stderr when the folder's predictions cannot all come from the graph: a head other than the
    classifier is left out (NER, QA, MLM), and a pair classifier's graph has no token types, so it reads one text."""
    if task == "pair-classification":
        print(f"bertkit: {model_dir} is a pair classifier; the ONNX graph takes one text per row (no token type ids), "
              "so its logits are for single texts: predict pairs with the source folder", file=sys.stderr)
    elif task and task not in GRAPH_TASKS:
        print(f"bertkit: {model_dir} holds a {task!r} head, which the ONNX graph leaves out: it computes sentence "
              f"vectors only (the graph holds {', '.join(GRAPH_TASKS)} heads)", file=sys.stderr)


def _check_tokenizer_beside(folder: Path, tokenizer) -> None:
    """The export is read with the tokenizer in its folder: one written there for another model (an earlier
    export of another folder) would silently tokenize for that model, so it is refused, before anything is written.
    The same tokenizer (exporting the same model again) is kept."""
    if tokenizer is None or not _has_tokenizer(folder):
        return
    try:
        there = Tokenizer.from_folder(folder)
    except BertkitError as err:
        raise BertkitError(f"--output: {folder} holds tokenizer files this export cannot read ({err}); export into "
                           "an empty folder") from None
    if not (same_vocabulary(there, tokenizer) and there.lowercase == tokenizer.lowercase):
        raise BertkitError(f"--output: {folder} already holds another model's tokenizer (vocab.txt / tokenizer.json, "
                           "which the export is read with); export into an empty folder, or delete them first")


def max_abs_difference(graph: nn.Module, onnx_path: Path, vocab_size: int,
                       shapes: Sequence[tuple[int, int]] = CHECK_SHAPES) -> float:
    """Run PyTorch and onnxruntime on random ids with some padded rows at each (batch, length) shape."""
    session = make_session(onnx_path)
    worst = 0.0
    limit = graph.sentence.encoder.config.max_length
    for batch, length in shapes:
        length = min(length, limit)
        ids, mask = _example_inputs(vocab_size, batch, length, seed=batch * 1000 + length)
        if batch > 1:
            mask[-1, max(1, length // 2):] = 0
        with torch.no_grad():
            expected = graph(ids, mask)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        for e, g in zip(expected, got):
            worst = max(worst, float(np.abs(e.numpy() - g).max()))
    return worst


def make_session(path: str | os.PathLike, threads: Optional[int] = None):
    try:
        import onnxruntime as ort
    except ImportError:
        raise BertkitError("running ONNX files needs onnxruntime: pip install 'bertkit[onnx]'") from None
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def read_metadata(path: str | os.PathLike) -> dict:
    """The export's settings (a JSON object in the graph's metadata). Anyone may have edited a model.onnx: the
    shape and types are checked here, task_options by TaskOptions.saved, each a one-line CheckpointError."""
    session = make_session(path)
    raw = session.get_modelmeta().custom_metadata_map.get("bertkit")
    try:
        meta = json.loads(raw) if raw else {}
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: its bertkit metadata is not JSON ({err.msg})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its bertkit metadata must be a JSON object, got {type(meta).__name__}")
    for key, least in (("max_length", 3), ("position_limit", 3), ("dimension", 1)):
        value = meta.get(key)
        if value is not None and (type(value) is not int or value < least):
            raise CheckpointError(f"{path}: metadata {key} must be a whole number >= {least}, got {value!r}")
    for key in ("pooling", "layers", "task"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise CheckpointError(f"{path}: metadata {key} must be a string, got {meta[key]!r}")
    labels = meta.get("labels")
    if labels is not None and not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        raise CheckpointError(f"{path}: metadata labels must be a list of strings, got {labels!r}")
    return meta


def _write_metadata(path: Path, meta: dict) -> None:
    import onnx
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = "bertkit", json.dumps(meta)
    onnx.save(model, str(path))


def _example_inputs(vocab_size: int, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    return ids, torch.ones(batch, length, dtype=torch.long)


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()
