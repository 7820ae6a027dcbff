"""The bidirectional transformer encoder, its size presets, tokenizers and HuggingFace checkpoint I/O.

The names below load on first use (PEP 562): a process that only needs `encoder.errors`, `files` or `cli` (the pod
supervisor, the sweep driver, a command's one-line error) does not import JAX and Flax for them (about 1.4 s of CPU
per process)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from encoder.config import ARCHITECTURES, PRESETS, EncoderConfig, preset
  from encoder.hf import CheckpointError, load_hf_checkpoint, save_hf_checkpoint
  from encoder.model import Encoder, EncoderOutput
  from encoder.pretrained import minilm_path, pretrained_path
  from encoder.tokenizer import Encoding, Tokenizer, load_tokenizer, train_sentencepiece, train_wordpiece

_HOMES = {
    "ARCHITECTURES": "config", "PRESETS": "config", "EncoderConfig": "config", "preset": "config",
    "CheckpointError": "hf", "load_hf_checkpoint": "hf", "save_hf_checkpoint": "hf",
    "Encoder": "model", "EncoderOutput": "model", "minilm_path": "pretrained", "pretrained_path": "pretrained",
    "Encoding": "tokenizer", "Tokenizer": "tokenizer", "load_tokenizer": "tokenizer",
    "train_sentencepiece": "tokenizer", "train_wordpiece": "tokenizer",
}

__all__ = [  # _HOMES's names, spelled out for the linters and type checkers (test_layers checks they agree).
    "ARCHITECTURES", "PRESETS", "CheckpointError", "Encoder", "EncoderConfig", "EncoderOutput", "Encoding", "Tokenizer",
    "load_hf_checkpoint", "load_tokenizer", "minilm_path", "preset", "pretrained_path", "save_hf_checkpoint",
    "train_sentencepiece", "train_wordpiece",
]


def __getattr__(name: str) -> Any:
  """`encoder.Encoder` and the other names of __all__, imported from their module when first asked for."""
  if name not in _HOMES:
    raise AttributeError(f"module 'encoder' has no attribute {name!r}")
  value = getattr(importlib.import_module(f"encoder.{_HOMES[name]}"), name)
  globals()[name] = value
  return value
