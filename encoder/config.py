"""Encoder hyperparameters and the size presets (the one place they are defined)."""

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp

from encoder import fields, matmul
from encoder.errors import ConfigError

ACTIVATIONS = ("gelu", "gelu_tanh", "silu")
POSITION_EMBEDDINGS = ("absolute", "rotary")
REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}  # Names in configs -> dtypes.
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
# The attention implementations (EncoderConfig.attention); configs may also say AUTO, resolved at start-up.
ATTENTIONS = ("matmul", "xla", "cudnn")
KERNELS = ("cpu", "accelerator")  # EncoderConfig.kernels: whose fast paths the modules take.
BF16_DOTS = ("native", "float32")  # EncoderConfig.bf16_dots: what a bf16 dot reads.
AUTO = "auto"
# LoRA's target projections: the fused QKV's query, key and value slices, the attention's output projection, the
# feed-forward's two dense layers (HF BERT's attention.self.{query,key,value}, attention.output.dense,
# intermediate.dense, output.dense).
LORA_TARGETS = ("query", "key", "value", "attention_output", "intermediate", "output")
ADAPTER_PLACEMENTS = ("attention", "feed_forward", "both")  # Which sublayers get adapters (Houlsby: both).
# Fields a run's regime sets (launch.model.peft_fields), not config.model: left out of its model fields.
REGIME_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "lora_layers", "adapter_size",
                 "adapter_placement", "adapter_layers")
# The fields "auto" makes concrete for the platform at start-up (`resolve_platform`): the weights never depend on them.
PLATFORM_FIELDS = ("attention", "kernels", "bf16_dots")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """Shape and numerics of a bidirectional transformer encoder (BERT family)."""
  vocab_size: int = 30522  # Rows of the word-piece embedding table (configs: 0 = the tokenizer's vocabulary size).
  hidden_size: int = 768  # Width d of every hidden state (and of the embeddings unless embedding_size is set).
  num_layers: int = 12  # Transformer blocks.
  num_heads: int = 12  # Attention heads per block (hidden_size must be divisible by it).
  intermediate_size: int = 3072  # Width of each block's feedforward layer.
  max_positions: int = 512  # The longest input in tokens (rows of the learned position table when "absolute").
  type_vocab_size: int = 2  # Rows of the segment (token type) embedding table: sentence A / B (0: no table).
  # Width of the embedding tables (factorized embeddings, as ELECTRA-small and ALBERT): the embeddings are projected
  # to hidden_size by a dense layer when it differs; 0 = hidden_size (BERT: no projection).
  embedding_size: int = 0
  layer_norm_eps: float = 1e-12  # Epsilon of every LayerNorm.
  hidden_dropout: float = 0.1  # Dropout on the embeddings and on each sublayer's output, while training.
  attention_dropout: float = 0.1  # Dropout on the attention probabilities, while training.
  # Activation of the feed-forward layer: "gelu" (exact, erf) as BERT; "gelu_tanh" for the tanh approximation; "silu"
  # (x sigmoid(x), SwiGLU's with gated_feed_forward).
  hidden_act: str = "gelu"
  pre_layer_norm: bool = False  # False: post-LN (BERT); True: pre-LN with a final LayerNorm.
  # Architecture switches, each independent (docs/design.md, "Architecture switches"; ARCHITECTURES names sets).
  position_embedding: str = "absolute"  # "absolute": learned table of max_positions rows (BERT); "rotary": RoPE.
  rope_theta: float = 10_000.0  # RoPE base theta of global-attention layers (ModernBERT: 160,000).
  rope_local_theta: float = 10_000.0  # RoPE base theta of local (sliding-window) layers (ModernBERT: 10,000).
  # Feed-forward act(x W_in) * (x W_gate) -> W_out, W_in and W_gate intermediate_size wide: GeGLU with hidden_act
  # "gelu", SwiGLU with "silu" (False: BERT's dense -> act -> dense).
  gated_feed_forward: bool = False
  use_bias: bool = True  # Biases in every dense layer and LayerNorm of the encoder (False: none, as ModernBERT).
  # Pre-LN only: LayerNorm the embeddings, and the first block then reads them without an attention LayerNorm of its
  # own (ModernBERT); False: the embeddings enter the first block's LayerNorm raw. Post-LN always normalizes them.
  embedding_norm: bool = False
  # Local layers attend only to keys at most window/2 tokens away (ModernBERT's local_attention: 128); 0: all global.
  local_attention_window: int = 0
  global_attention_every: int = 1  # With a window: layer i attends globally when i % this == 0 (ModernBERT: 3).
  pad_token_id: int = 0  # Token id of padding: masked out of attention when the caller passes no mask.
  initializer_range: float = 0.02  # Std of the normal initializer of weights and embeddings.
  # Matmul operand dtype: bfloat16 is mixed precision (bf16 operands, float32 accumulation and products; LayerNorm,
  # softmax, residuals and hidden states stay float32 unless activation_dtype says otherwise; encoder/matmul.py).
  # Parameters stay param_dtype.
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32  # Parameter storage dtype (configs: "float32", "bfloat16" or "float16").
  # Activation rematerialization per block, trading compute for memory: "none"; "full" (keep only each block's input,
  # recompute the rest in the backward); "dots_saveable" (keep matmul outputs, recompute elementwise work);
  # "dots_with_no_batch_dims_saveable" (keep the dense layers' outputs, recompute attention's [q, k] products).
  remat: str = "none"
  # Attention implementation, each computing softmax(q k^T / sqrt(d) + mask) v (docs/design.md, "Attention paths"):
  # "matmul": heads-first products of encoder/matmul.py (XLA CPU's fast kernels, attention dropout); "xla" / "cudnn":
  # jax.nn.dot_product_attention on [batch, length, heads, dim] with that implementation (no attention dropout; cudnn:
  # bf16/f16 on NVIDIA GPUs). Configs default to "auto": chosen once at start-up for the platform (`auto_attention`;
  # attention dropout > 0 keeps "matmul") and recorded in the run's config.json; runs saved before the field: "matmul".
  attention: Literal["matmul", "xla", "cudnn"] = "matmul"
  # dtype of the activations between matmuls (dense outputs, bias, GELU, dropout, residuals, LayerNorm outputs):
  # bfloat16 halves their memory and traffic; LayerNorm statistics, softmax, the returned hidden states and the
  # loss stay float32. Needs dtype bfloat16 (configs: "float32" or "bfloat16").
  activation_dtype: Any = jnp.float32
  # Whose fast paths the modules take (the same values to float32 rounding): "cpu": every matmul's transposes are
  # materialized so that each dot, forward and backward, reads the plain layout of XLA CPU's library kernel, and the
  # inference attention past 256 keys runs in blocks of 64 queries (encoder/matmul.py, docs/performance.md);
  # "accelerator": layouts are left to the compiler (GPUs and TPUs fold transposes into their GEMMs) and attention is
  # one piece. Configs default to "auto": the platform's, chosen once at start-up and recorded in config.json.
  kernels: str = "cpu"
  # What a bfloat16 dot reads: "native": bf16 operands; "float32": the bf16-rounded operands in float32, the same
  # products at float32 speed on a CPU without bf16 matrix instructions (AVX2-only x86), where bf16 dots run slower.
  # Configs default to "auto": "float32" on such a CPU (/proc/cpuinfo, or XLA_FLAGS capping XLA below bf16
  # instructions), else "native"; chosen once at start-up and recorded in config.json. No effect with float32 dtype.
  bf16_dots: str = "native"
  # LoRA (Hu et al., 2021) and bottleneck adapters (Houlsby et al., 2019), set by a run's regime from config.lora and
  # config.adapters (launch.model.peft_fields; docs/regimes.md "LoRA and adapters"), never by config.model
  # (REGIME_FIELDS). lora_rank 0: no LoRA; else each of lora_targets (LORA_TARGETS) in each block of lora_layers gets
  # W x + (alpha / rank) B A dropout(x), A [in, rank], B [rank, out] (B starts at zero: the plain encoder's function).
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_dropout: float = 0.0  # Dropout on the LoRA branch's input, while training (PEFT's lora_dropout).
  lora_targets: tuple[str, ...] = ()
  lora_layers: tuple[int, ...] = ()
  # adapter_size 0: no adapters; else each block of adapter_layers gets a bottleneck h + up(silu(down(h))) on the
  # output of its sublayers of adapter_placement (ADAPTER_PLACEMENTS), before the residual and LayerNorm (up starts
  # at zero: the identity).
  adapter_size: int = 0
  adapter_placement: str = "both"
  adapter_layers: tuple[int, ...] = ()

  def __post_init__(self):
    fields.check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if "dtype" not in f.name},
                        FIELD_RULES, prefix="config.model.")
    if self.hidden_size % self.num_heads:
      raise ConfigError(f"config.model.num_heads={self.num_heads}: expected a divisor of config.model.hidden_size="
                        f"{self.hidden_size} (each head is hidden_size / num_heads wide)")
    for name, choices in (("attention", ATTENTIONS), ("kernels", KERNELS), ("bf16_dots", BF16_DOTS)):
      if getattr(self, name) == AUTO:
        raise ConfigError(f"config.model.{name}='auto' reached the model unresolved: expected one of "
                          f"{', '.join(map(repr, choices))} (encoder.config.resolve_platform picks one at start-up)")
    if self.position_embedding == "rotary" and self.head_dim % 2:
      raise ConfigError(f"config.model.num_heads={self.num_heads}: rotary positions rotate pairs of dimensions, so "
                        f"the head size hidden_size / num_heads must be even, got {self.hidden_size} / "
                        f"{self.num_heads} = {self.head_dim}")
    if self.embedding_norm and not self.pre_layer_norm:
      raise ConfigError("config.model.embedding_norm=True is a pre-LN switch (post-LN always normalizes the "
                        "embeddings); set config.model.pre_layer_norm=True or config.model.embedding_norm=False")
    if self.attention != "matmul" and self.attention_dropout:
      raise ConfigError(f"config.model.attention_dropout={self.attention_dropout}: the {self.attention!r} attention "
                        "path applies no attention dropout (jax.nn.dot_product_attention has none); expected 0.0, or "
                        "config.model.attention='matmul'")
    self._check_regime_fields()
    if jnp.dtype(self.activation_dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(self.dtype)):
      raise ConfigError(f"config.model.activation_dtype={jnp.dtype(self.activation_dtype).name!r}: expected "
                        f"'float32' or config.model.dtype ({jnp.dtype(self.dtype).name!r})")

  def _check_regime_fields(self) -> None:
    """LoRA's and the adapters' fields, named as the run's config does (config.lora.*, config.adapters.*)."""
    unknown = [t for t in self.lora_targets if t not in LORA_TARGETS]
    if unknown:
      raise ConfigError(f"config.lora.targets: unknown projection(s) {unknown}; expected some of "
                        f"{', '.join(LORA_TARGETS)}")
    if self.lora_rank < 0 or self.lora_rank > self.hidden_size:
      raise ConfigError(f"config.lora.rank={self.lora_rank}: expected an integer in [1, {self.hidden_size}] (the "
                        "width), or no LoRA")
    if self.adapter_size < 0:
      raise ConfigError(f"config.adapters.size={self.adapter_size}: expected an integer >= 1")
    if self.adapter_placement not in ADAPTER_PLACEMENTS:
      raise ConfigError(f"config.adapters.placement={self.adapter_placement!r}: expected one of "
                        f"{', '.join(map(repr, ADAPTER_PLACEMENTS))}")
    for name in ("lora_layers", "adapter_layers"):
      outside = [i for i in getattr(self, name) if not 0 <= i < self.num_layers]
      if outside:
        field = "config.lora.layers" if name == "lora_layers" else "config.adapters.layers"
        raise ConfigError(f"{field}: layer(s) {outside} outside the encoder's {self.num_layers} (0 to "
                          f"{self.num_layers - 1})")

  def lora_at(self, layer: int, target: str) -> bool:
    """Whether projection `target` of block `layer` carries LoRA."""
    return self.lora_rank > 0 and target in self.lora_targets and layer in self.lora_layers

  def adapter_at(self, layer: int, sublayer: str) -> bool:
    """Whether block `layer` has an adapter after its `sublayer` ("attention" or "feed_forward")."""
    return self.adapter_size > 0 and layer in self.adapter_layers and self.adapter_placement in (sublayer, "both")

  @property
  def dots(self) -> matmul.Dots:
    """How encoder.matmul computes the products (kernels and bf16_dots)."""
    return matmul.Dots(pinned=self.kernels == "cpu", bf16=self.bf16_dots == "native")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  def is_global(self, layer: int) -> bool:
    """Whether block `layer` (from 0) attends to the whole sequence rather than a local window."""
    return self.local_attention_window == 0 or layer % self.global_attention_every == 0

  @property
  def embedding_width(self) -> int:
    """Width of the embedding tables and of the tied vocabulary projection's input."""
    return self.embedding_size or self.hidden_size

  def replace(self, **changes) -> "EncoderConfig":
    return dataclasses.replace(self, **changes)


# What each field accepts (checked when an EncoderConfig is made, and by configs.checks before a run writes anything;
# dtype fields as the config names them).
FIELD_RULES: dict[str, fields.Rule] = {
    "vocab_size": fields.NON_NEGATIVE_INT, "hidden_size": fields.POSITIVE_INT, "num_layers": fields.POSITIVE_INT,
    "num_heads": fields.POSITIVE_INT, "intermediate_size": fields.POSITIVE_INT, "max_positions": fields.POSITIVE_INT,
    "type_vocab_size": fields.NON_NEGATIVE_INT, "embedding_size": fields.NON_NEGATIVE_INT,
    "layer_norm_eps": fields.POSITIVE, "hidden_dropout": fields.PROBABILITY, "attention_dropout": fields.PROBABILITY,
    "hidden_act": fields.Choice(ACTIVATIONS), "position_embedding": fields.Choice(POSITION_EMBEDDINGS),
    "rope_theta": fields.POSITIVE, "rope_local_theta": fields.POSITIVE,
    "local_attention_window": fields.NON_NEGATIVE_INT,
    "global_attention_every": fields.POSITIVE_INT, "pad_token_id": fields.NON_NEGATIVE_INT,
    "initializer_range": fields.NON_NEGATIVE, "remat": fields.Choice(REMAT_POLICIES),
    "pre_layer_norm": fields.Anything("true or false"), "gated_feed_forward": fields.Anything("true or false"),
    "use_bias": fields.Anything("true or false"), "embedding_norm": fields.Anything("true or false"),
    "dtype": fields.Choice(tuple(DTYPES)), "param_dtype": fields.Choice(tuple(DTYPES)),
    "activation_dtype": fields.Choice(tuple(DTYPES)), "attention": fields.Choice(ATTENTIONS + (AUTO,)),
    "kernels": fields.Choice(KERNELS + (AUTO,)), "bf16_dots": fields.Choice(BF16_DOTS + (AUTO,)),
}


def _size(layers, hidden, heads, **extra):
  return dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden) | extra


# Architecture switch sets, applied on top of a size (`preset(size, **ARCHITECTURES[name])`): one switch alone, or
# ModernBERT's recipe (Warner et al., 2024): RoPE (theta 160k global, 10k local), GeGLU, no biases, pre-LN with a
# normalized embedding and a final LayerNorm, no segment embeddings, global attention every 3rd layer and a 128-token
# window in the others, no dropout, LayerNorm epsilon 1e-5.
ARCHITECTURES: dict[str, dict] = {
    "bert": {},
    "pre_ln": dict(pre_layer_norm=True),
    "rope": dict(position_embedding="rotary"),
    "geglu": dict(gated_feed_forward=True, hidden_act="gelu"),
    "swiglu": dict(gated_feed_forward=True, hidden_act="silu"),
    "no_bias": dict(use_bias=False),
    "local_global": dict(local_attention_window=128, global_attention_every=3),
    "modernbert": dict(position_embedding="rotary", rope_theta=160_000.0, rope_local_theta=10_000.0,
                       gated_feed_forward=True, hidden_act="gelu", use_bias=False, pre_layer_norm=True,
                       embedding_norm=True, type_vocab_size=0, local_attention_window=128, global_attention_every=3,
                       hidden_dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5),
}
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
    # ModernBERT-base and -large as released (answerdotai/ModernBERT-*: config.json), their tokenizer's sizes.
    "modernbert-base": _size(22, 768, 12, **ARCHITECTURES["modernbert"], intermediate_size=1152, vocab_size=50368,
                             max_positions=8192, pad_token_id=50283),
    "modernbert-large": _size(28, 1024, 16, **ARCHITECTURES["modernbert"], intermediate_size=2624, vocab_size=50368,
                              max_positions=8192, pad_token_id=50283),
    "electra-small": _size(12, 256, 4, embedding_size=128),  # ELECTRA-small's discriminator (Clark et al., 2020).
}


def preset(name: str, **overrides) -> EncoderConfig:
  """`preset("base", vocab_size=32000)` -> EncoderConfig; unknown names list the choices."""
  if name not in PRESETS:
    raise ConfigError(f"size={name!r} is not an encoder size; expected one of {', '.join(sorted(PRESETS))} "
                      "(encoder/config.py PRESETS)")
  return EncoderConfig(**{**PRESETS[name], **overrides})


def platform() -> str:
  """What the default devices are, as the attention choice needs it: "cpu", "tpu", "cuda" (NVIDIA GPUs), "rocm"."""
  device = jax.devices()[0]
  if device.platform == "gpu":
    return "cuda" if "cuda" in device.client.platform_version.lower() else "rocm"
  return device.platform


def auto_attention(where: str, dtype: Any, attention_dropout: float, head_dim: int) -> str:
  """The attention path "auto" stands for on platform `where` (`platform()`) for these fields.

  Attention dropout > 0: "matmul", the only path that applies it. NVIDIA GPUs with bf16/f16 operands and a head
  dimension cuDNN's flash attention takes (a multiple of 8, at most 128): "cudnn". CPUs: "matmul", whose products
  stay on XLA CPU's fast kernels forward and backward (the "xla" path's einsums do not: docs/performance.md). Other
  accelerators (TPU, ROCm, float32 on NVIDIA): "xla", the fused attention of jax.nn.dot_product_attention without
  the head-layout transposes."""
  if attention_dropout > 0 or where == "cpu":
    return "matmul"
  if where == "cuda" and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)) and (
      head_dim % 8 == 0 and head_dim <= 128):
    return "cudnn"
  return "xla"


def resolve_attention(model: Mapping[str, Any], where: str | None = None) -> str:
  """model["attention"] (config.model's; a saved config without it ran "matmul"), with AUTO resolved for platform
  `where` (default: this process's `platform()`). Called once at start-up, never while tracing."""
  choice = model.get("attention", "matmul")
  if choice != AUTO:
    return choice
  dtype = DTYPES.get(model["dtype"], model["dtype"])
  return auto_attention(where or platform(), dtype, model["attention_dropout"],
                        model["hidden_size"] // model["num_heads"])


def auto_kernels(where: str) -> str:
  """The kernels "auto" stands for on platform `where` (`platform()`): "cpu" on a CPU, else "accelerator"."""
  return "cpu" if where == "cpu" else "accelerator"


def auto_bf16_dots(where: str) -> str:
  """The bf16_dots "auto" stands for on platform `where`: "float32" on a CPU without bf16 matrix instructions (or
  with XLA capped below them), else "native" (encoder.matmul.native_bf16_dots reads /proc/cpuinfo and XLA_FLAGS)."""
  return "native" if matmul.native_bf16_dots(where) else "float32"


def resolve_platform(model: Mapping[str, Any], where: str | None = None) -> dict[str, str]:
  """model's attention, kernels and bf16_dots with AUTO resolved for platform `where` (default: this process's
  `platform()`); absent fields are AUTO too (a config saved before them). Called once at start-up (launch.train,
  `from_fields`), never while tracing."""
  choices = {name: model.get(name, AUTO) for name in ("kernels", "bf16_dots")}
  if AUTO in choices.values() or model.get("attention") == AUTO:
    where = where or platform()
    if choices["kernels"] == AUTO:
      choices["kernels"] = auto_kernels(where)
    if choices["bf16_dots"] == AUTO:
      choices["bf16_dots"] = auto_bf16_dots(where)
  return choices | ({"attention": resolve_attention(model, where)} if "attention" in model else {})


def from_fields(model: Mapping[str, Any], vocab_size: int) -> EncoderConfig:
  """EncoderConfig from a config's model fields (config.model, a run's config.json): dtype names become dtypes,
  vocab_size 0 takes the tokenizer's `vocab_size`, attention, kernels and bf16_dots "auto" (or absent: a run saved
  before the field) this platform's (`resolve_platform`)."""
  values = dict(model)
  known = {f.name for f in dataclasses.fields(EncoderConfig)}
  unknown = sorted(set(values) - known)
  if unknown:
    raise ConfigError(f"config.model has fields {unknown} that EncoderConfig does not know ({sorted(known)})")
  values.setdefault("activation_dtype", "float32")  # Saved before the field existed: float32.
  dtypes = ("dtype", "param_dtype", "activation_dtype")
  fields.check_fields(values, {key: FIELD_RULES[key] for key in dtypes + ("attention", "kernels", "bf16_dots")},
                      prefix="config.model.")
  values.update({key: DTYPES[values[key]] for key in dtypes})
  values.update(resolve_platform(values))
  if values["vocab_size"] == 0:
    values["vocab_size"] = vocab_size
  elif values["vocab_size"] < vocab_size:
    raise ConfigError(f"config.model.vocab_size={values['vocab_size']}: expected at least the tokenizer's vocabulary "
                      f"({vocab_size}), or 0 for the tokenizer's size")
  return EncoderConfig(**values)
