"""Turning texts into vectors for an index, the same way for documents and for queries.

The index records the encoder's spec (model folder, pooling, layers, max length, long texts, precision) in its
manifest, so a query is encoded by the same composition that built the index: encoder -> pooling -> the
whitening saved in the model folder (applied by the model's own `encode`) -> the index's normalization.

The search package sits below the Python API, so it never loads a model folder itself: it is given a loaded
model, or a `load_model(folder, precision=...)` function (`bertkit.load`, which `bertkit.Index` passes) that it
calls on first use.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from bertkit.embed.whitening import encode_composed
from bertkit.errors import BertkitError
from bertkit.options import POOLINGS


# Loads a model folder: called as load_model(folder, precision=...) and returns a model like `bertkit.load`'s.
LoadModel = Callable[..., Any]

# Every save records the encoder's vector of this text in index.json ("probe"). A model folder changed in place
# after the build (whiten or simcse written into it, a fine-tune over it) keeps its name and width but no longer
# gives the index's vectors: its probe disagrees (0.47-0.93 measured). all-MiniLM-L6-v2 in bf16 agrees with its
# fp32 to 0.99995, its int8 to 0.9995; the floor is the least cosine `bertkit quantize` lets an int8 folder give.
PROBE_TEXT = "bertkit index probe: this text's vector shows whether a model still gives the index's vectors."
PROBE_AGREEMENT = 0.95


class TextEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray:
        """(N, dim) float32 vectors."""

    def spec(self) -> dict:
        """What to record in the index manifest to rebuild this encoder (JSON-serializable)."""


@dataclass(frozen=True)
class EncoderSpec:
    model: str                     # model folder (absolute path)
    pooling: str | None = None     # None: the pooling saved with the model (bertkit.json), else its default
    layers: str | None = None      # None: the model folder's
    max_length: int | None = None  # None: the model folder's
    batch_size: int = 64
    precision: str | None = None   # fp32 | bf16 | int8 | auto (bertkit.load); None: what the folder holds
    long_texts: str = "truncate"   # texts over max_length: truncate | sliding-window | error (Model.encode)
    stride: int | None = None      # sliding-window overlap in tokens; None: features.window_stride's default


SPEC_TYPES: dict[str, tuple] = {"model": (str,), "pooling": (str, type(None)), "layers": (str, type(None)),
                                 "max_length": (int, type(None)), "batch_size": (int,), "precision": (str, type(None)),
                                 "long_texts": (str,), "stride": (int, type(None))}


def spec_from_manifest(value: Any, where: object) -> EncoderSpec:
    """index.json's "encoder", checked: anyone who could write the folder wrote it, and a bad field was a
    traceback at open or a 500 on every /search. A bad one is one BertkitError naming `where` and the field."""
    if not isinstance(value, dict):
        raise BertkitError(f"{where}: encoder must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(SPEC_TYPES))
    if unknown or "model" not in value:
        raise BertkitError(f"{where}: encoder " + (f"has unknown fields {unknown}" if unknown else "names no model"))
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, SPEC_TYPES[key]):
            raise BertkitError(f"{where}: encoder.{key} has the wrong type ({item!r})")
    spec = EncoderSpec(**value)
    if spec.pooling is not None and spec.pooling not in POOLINGS:
        raise BertkitError(f"{where}: encoder.pooling {spec.pooling!r} is not one of {', '.join(POOLINGS)}")
    if spec.long_texts not in ("truncate", "sliding-window", "error"):
        raise BertkitError(f"{where}: encoder.long_texts {spec.long_texts!r} is not truncate, sliding-window or error")
    for key, least in (("max_length", 3), ("batch_size", 1), ("stride", 0)):
        if getattr(spec, key) is not None and getattr(spec, key) < least:
            raise BertkitError(f"{where}: encoder.{key} must be at least {least}, got {getattr(spec, key)}")
    return spec


class ModelTextEncoder:
    """Encodes with the spec's model folder, loaded with `load_model` on first use (`bertkit.load` when the
    encoder is handed to `bertkit.Index`)."""

    def __init__(self, spec: EncoderSpec, load_model: LoadModel | None = None):
        self._spec = EncoderSpec(**{**asdict(spec), "model": str(Path(spec.model).resolve())})
        self._model = None
        self._load_model = load_model

    @classmethod
    def from_spec(cls, spec: dict, load_model: LoadModel | None = None) -> "ModelTextEncoder":
        return cls(spec_from_manifest(spec, "the encoder spec"), load_model)

    @classmethod
    def from_model(cls, model) -> "ModelTextEncoder":
        """Wrap an already loaded `bertkit.load(folder)` model: its folder and precision go into the spec."""
        encoder = cls(EncoderSpec(str(model.path), precision=model.precision))
        encoder._model = model
        return encoder

    @property
    def model(self):
        if self._model is None:
            if self._load_model is None:
                raise BertkitError(f"no way to load the index's model {self._spec.model}: use bertkit.Index, or "
                                   "pass load_model=bertkit.load (or a model loaded with bertkit.load)")
            self._model = self._load_model(self._spec.model, precision=self._spec.precision)
        return self._model

    def use_loader(self, load_model: LoadModel | None) -> None:
        """Load the model with `load_model` unless this encoder was given its own loader or model."""
        if self._load_model is None:
            self._load_model = load_model

    def pooling(self) -> str:
        return self._spec.pooling or self.model.sentence.config.pooling

    def layers(self) -> str:
        return self._spec.layers or self.model.sentence.config.layers

    def encode(self, texts: list[str], long_texts: str | None = None) -> np.ndarray:
        """long_texts: the spec's unless given (the probe is cut, never refused, under long_texts 'error')."""
        return encode_composed(self.model, list(texts), batch_size=self._spec.batch_size,
                               max_length=self._spec.max_length, pooling=self.pooling(),
                               layers=self.layers(), normalize=False, long_texts=long_texts or self._spec.long_texts,
                               stride=self._spec.stride)

    def spec(self) -> dict:
        spec = asdict(self._spec)
        if self._model is not None:   # record what was actually used, not just "the default"
            spec["pooling"], spec["layers"] = self.pooling(), self.layers()
        return spec


def probe_of(encoder: TextEncoder) -> list[float]:
    """The encoder's vector of PROBE_TEXT, as index.json records it (its [UNK] rate or length is no news to the
    user: warnings are not shown)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vector = (encoder.encode([PROBE_TEXT], long_texts="truncate") if isinstance(encoder, ModelTextEncoder)
                  else encoder.encode([PROBE_TEXT]))
    return [float(x) for x in np.asarray(vector, dtype=np.float32).reshape(-1)]


def check_probe(recorded: list[float] | None, vector: Any, where: object, model: object) -> None:
    """Refuse a model whose vector of PROBE_TEXT is not the one the index recorded: its vectors are not the
    index's, so every score would be wrong. Indexes saved before probes were recorded (None) are not checked;
    other widths are refused by the width check, with its own message."""
    if recorded is None or vector is None:       # None: an older index, or a non-finite vector (refused later)
        return
    saved, given = np.asarray(recorded, dtype=np.float64), np.asarray(vector, dtype=np.float64).reshape(-1)
    if saved.shape != given.shape:
        return
    norms = float(np.linalg.norm(saved) * np.linalg.norm(given))
    agreement = float(saved @ given) / norms if norms > 0 else 0.0
    if agreement < PROBE_AGREEMENT:
        raise BertkitError(f"{where}: model {model} does not give the vectors the index was built with (its vector "
                           f"of a fixed text agrees to cosine {agreement:.3f}): was the folder changed since (whiten, "
                           "simcse or a fine-tune written into it), or is it used with other pooling, layers or "
                           "max length than the index (bertkit index info shows them)? Rebuild the index (bertkit "
                           "index build --overwrite), or use the model and settings it was built with")


def as_text_encoder(encoder, load_model: LoadModel | None = None) -> TextEncoder | None:
    """The index's encoder: a TextEncoder as given (a ModelTextEncoder without a loader gets `load_model`), or a
    loaded model folder (`bertkit.load(M)`) wrapped."""
    if isinstance(encoder, ModelTextEncoder):
        encoder.use_loader(load_model)
        return encoder
    if encoder is None or callable(getattr(encoder, "spec", None)):
        return encoder
    if getattr(encoder, "sentence", None) is not None and getattr(encoder, "path", None) is not None:
        return ModelTextEncoder.from_model(encoder)
    raise BertkitError(f"index encoder {type(encoder).__name__} is neither a TextEncoder (encode + spec) nor a "
                       "model loaded with bertkit.load(folder)")
