"""Sentence embeddings: whitening, contrastive training (SimCSE), evaluation and plots.

The whitening names load on first use (PEP 562), so `bertkit.embed.config` imports without torch."""
from __future__ import annotations

from bertkit.lazy import lazy_exports

__all__ = ["Whitening", "WhiteningStats", "fit_whitening", "load_whitening", "save_whitening"]
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "whitening"))
