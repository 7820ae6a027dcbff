"""The bidirectional transformer encoder, its size presets, tokenizers and HuggingFace checkpoint I/O."""

from encoder.config import PRESETS, EncoderConfig, preset
from encoder.model import Encoder, EncoderOutput

__all__ = ["PRESETS", "Encoder", "EncoderConfig", "EncoderOutput", "preset"]
