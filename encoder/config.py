"""Encoder hyperparameters and the size presets (the one place they are defined)."""

import dataclasses
from typing import Any, Mapping

import jax.numpy as jnp


REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}  # Names in configs -> dtypes.


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """Shape and numerics of a bidirectional transformer encoder (BERT family)."""
  vocab_size: int = 30522  # Rows of the word-piece embedding table (configs: 0 = the tokenizer's vocabulary size).
  hidden_size: int = 768  # Width d of every hidden state (and of the embeddings unless embedding_size is set).
  num_layers: int = 12  # Transformer blocks.
  num_heads: int = 12  # Attention heads per block (hidden_size must be divisible by it).
  intermediate_size: int = 3072  # Width of each block's feedforward layer.
  max_positions: int = 512  # Rows of the learned position-embedding table: the longest input in tokens.
  type_vocab_size: int = 2  # Rows of the segment (token type) embedding table: sentence A / B.
  # Width of the embedding tables (factorized embeddings, as ELECTRA-small and ALBERT): the embeddings are projected
  # to hidden_size by a dense layer when it differs; 0 = hidden_size (BERT: no projection).
  embedding_size: int = 0
  layer_norm_eps: float = 1e-12  # Epsilon of every LayerNorm.
  hidden_dropout: float = 0.1  # Dropout on the embeddings and on each sublayer's output, while training.
  attention_dropout: float = 0.1  # Dropout on the attention probabilities, while training.
  hidden_act: str = "gelu"  # "gelu" (exact, erf) as BERT; "gelu_tanh" for the tanh approximation.
  pre_layer_norm: bool = False  # False: post-LN (BERT); True: pre-LN with a final LayerNorm.
  pad_token_id: int = 0  # Token id of padding: masked out of attention when the caller passes no mask.
  initializer_range: float = 0.02  # Std of the normal initializer of weights and embeddings.
  # Matmul operand dtype: bfloat16 is mixed precision (bf16 operands, float32 accumulation and products; LayerNorm,
  # softmax, residuals and hidden states stay float32; encoder/matmul.py). Parameters stay param_dtype.
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32  # Parameter storage dtype (configs: "float32", "bfloat16" or "float16").
  # Activation rematerialization per block, trading compute for memory: "none"; "full" (keep only each block's input,
  # recompute the rest in the backward); "dots_saveable" (keep matmul outputs, recompute elementwise work);
  # "dots_with_no_batch_dims_saveable" (keep the dense layers' outputs, recompute attention's [q, k] products).
  remat: str = "none"

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
    if self.hidden_act not in ("gelu", "gelu_tanh"):
      raise ValueError(f"hidden_act {self.hidden_act!r} is not one of 'gelu', 'gelu_tanh'")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"remat {self.remat!r} is not one of {', '.join(map(repr, REMAT_POLICIES))}")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def embedding_width(self) -> int:
    """Width of the embedding tables and of the tied vocabulary projection's input."""
    return self.embedding_size or self.hidden_size

  def replace(self, **changes) -> "EncoderConfig":
    return dataclasses.replace(self, **changes)


def _size(layers, hidden, heads, **extra):
  return dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden, **extra)


# Sizes from the spec (BERT-base/large, XLM-R large), the BERT miniatures (Turc et al., 2019), MiniLM, ELECTRA-small.
PRESETS: dict[str, dict] = {
    "tiny": _size(2, 128, 2),
    "mini": _size(4, 256, 4),
    "small": _size(4, 512, 8),
    "medium": _size(8, 512, 8),
    "base": _size(12, 768, 12),
    "large": _size(24, 1024, 16),
    "xlmr-large": _size(24, 1024, 16, vocab_size=250002, max_positions=514, type_vocab_size=1,
                        layer_norm_eps=1e-5, pad_token_id=1),
    "minilm": _size(6, 384, 12),
    "electra-small": _size(12, 256, 4, embedding_size=128),  # ELECTRA-small's discriminator (Clark et al., 2020).
}


def preset(name: str, **overrides) -> EncoderConfig:
  """`preset("base", vocab_size=32000)` -> EncoderConfig; unknown names list the choices."""
  if name not in PRESETS:
    raise ValueError(f"unknown encoder size {name!r}; choose one of {sorted(PRESETS)}")
  return EncoderConfig(**{**PRESETS[name], **overrides})


def from_fields(fields: Mapping[str, Any], vocab_size: int) -> EncoderConfig:
  """EncoderConfig from a config's model fields (config.model, a run's config.json): dtype names become dtypes,
  vocab_size 0 takes the tokenizer's `vocab_size`."""
  fields = dict(fields)
  for key in ("dtype", "param_dtype"):
    if fields[key] not in DTYPES:
      raise ValueError(f"config.model.{key}={fields[key]!r} is not one of {sorted(DTYPES)}")
    fields[key] = DTYPES[fields[key]]
  if fields["vocab_size"] == 0:
    fields["vocab_size"] = vocab_size
  elif fields["vocab_size"] < vocab_size:
    raise ValueError(f"config.model.vocab_size={fields['vocab_size']} is smaller than the tokenizer's vocabulary "
                     f"({vocab_size}); set it to 0 to use the tokenizer's size")
  known = {f.name for f in dataclasses.fields(EncoderConfig)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"config.model has fields {unknown} that EncoderConfig does not know ({sorted(known)})")
  return EncoderConfig(**fields)
