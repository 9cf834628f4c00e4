from bertkit.model.config import PRESETS, EncoderConfig, preset
from bertkit.model.encoder import Encoder, EncoderOutput

__all__ = ["PRESETS", "Encoder", "EncoderConfig", "EncoderOutput", "preset"]
