"""HuggingFace BERT, ModernBERT and ELECTRA checkpoints <-> our encoder: config.json + model.safetensors in, the same
files out, bit for bit (safetensors only, never pickles).

files.py reads and writes the directory and holds the errors; tensors.py how a leaf is made of HF tensors; bert.py,
modernbert.py and electra.py each layout's encoder and config.json; config.py the mapping between them; checkpoint.py
loads and saves an encoder. Heads are not this layer's: objectives/hf_heads.py gives pretraining heads (each
objective's `hf` layout), a task family its fine-tuned head (`TaskFamily.hf_head`).
"""

# The entry points, so that callers write `from encoder import hf` and `hf.load_hf_checkpoint(...)`.
from encoder.hf.checkpoint import HeadReader, Heads, hf_state, load_hf_checkpoint, save_hf_checkpoint, without_heads
from encoder.hf.config import REMOTE_MODEL_TYPES, checked_config, config_from_hf, config_to_hf, hf_layout
from encoder.hf.electra import GENERATOR_DIRECTORY
from encoder.hf.files import (
    CheckpointError,
    CorruptCheckpointError,
    MissingConfigError,
    MissingTensorError,
    PickledCheckpointError,
    ShapeMismatchError,
    UnexpectedTensorError,
    UnsupportedArchitectureError,
)
from encoder.hf.tensors import linear_to_hf

__all__ = [
    "CheckpointError", "CorruptCheckpointError", "GENERATOR_DIRECTORY", "HeadReader", "Heads", "MissingConfigError",
    "MissingTensorError", "PickledCheckpointError", "REMOTE_MODEL_TYPES", "ShapeMismatchError", "UnexpectedTensorError",
    "UnsupportedArchitectureError", "checked_config", "config_from_hf", "config_to_hf", "hf_layout", "hf_state",
    "linear_to_hf", "load_hf_checkpoint", "save_hf_checkpoint", "without_heads",
]
