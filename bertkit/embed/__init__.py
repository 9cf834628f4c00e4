"""Sentence embeddings: whitening, contrastive training (SimCSE), evaluation and plots."""
from bertkit.embed.whitening import Whitening, WhiteningStats, fit_whitening, load_whitening, save_whitening

__all__ = ["Whitening", "WhiteningStats", "fit_whitening", "load_whitening", "save_whitening"]
