"""The bidirectional transformer encoder, its size presets, tokenizers and HuggingFace checkpoint I/O."""

from encoder.config import ARCHITECTURES, PRESETS, EncoderConfig, preset
from encoder.hf import CheckpointError, load_hf_checkpoint, save_hf_checkpoint
from encoder.model import Encoder, EncoderOutput
from encoder.pretrained import minilm_path, pretrained_path
from encoder.tokenizer import Encoding, Tokenizer, load_tokenizer, train_sentencepiece, train_wordpiece

__all__ = [
    "ARCHITECTURES", "PRESETS", "CheckpointError", "Encoder", "EncoderConfig", "EncoderOutput", "Encoding", "Tokenizer",
    "load_hf_checkpoint", "load_tokenizer", "minilm_path", "preset", "pretrained_path", "save_hf_checkpoint",
    "train_sentencepiece", "train_wordpiece",
]
