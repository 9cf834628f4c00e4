"""The encoder and its configuration. Names load on first use (bertkit/lazy.py), so `bertkit.model.config` (the
configs the command line builds flags from) imports without torch."""
from bertkit.lazy import lazy_exports

_NAMES = {"PRESETS": "config", "EncoderConfig": "config", "preset": "config", "Encoder": "encoder",
          "EncoderOutput": "encoder"}
__all__ = ["PRESETS", "Encoder", "EncoderConfig", "EncoderOutput", "preset"]
__getattr__ = lazy_exports(__name__, _NAMES)
