"""Sentence embeddings: whitening, contrastive training (SimCSE), evaluation and plots.

The whitening names load on first use (PEP 562), so `bertkit.embed.config` imports without torch."""
from __future__ import annotations

import importlib

__all__ = ["Whitening", "WhiteningStats", "fit_whitening", "load_whitening", "save_whitening"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("bertkit.embed.whitening"), name)
