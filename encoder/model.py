"""The bidirectional transformer encoder (spec, "Bidirectional Transformer Encoders").

Inputs are subword ids plus segment (token-type) ids, positions and `attention_segments`
(0 = padding, k > 0 = the k-th sequence packed in a row): a token attends to every token of
its own segment and to nothing else, so padding and packing never change an output.

Every matmul (dense layers, QK^T and the weights times V, the tied vocabulary projection) is `encoder.matmul.matmul`:
operands in `cfg.dtype`, float32 accumulation and result, forward and backward in the plain layout XLA CPU's fast
kernels need. With dtype=bfloat16 that is mixed precision: parameters, embeddings, LayerNorm, softmax, residuals and
the returned hidden states stay float32 (as torch.autocast does), only the matmul operands are rounded to bf16. With
activation_dtype=bfloat16 too, what flows between the matmuls (dense outputs after their float32 bias, GELU, dropout,
residuals, LayerNorm outputs, the attention probabilities) is bf16 as well; LayerNorm statistics, softmax and the
returned hidden states stay float32.

Attention takes one of three paths (cfg.attention, docs/design.md): "matmul" (heads-first `encoder.matmul` products,
the CPU's fast path, with attention dropout) or jax.nn.dot_product_attention's "xla" or "cudnn" implementation on the
natural [batch, length, heads, head_dim] layout (no attention dropout). All three compute the same function.
"""

import math
from collections.abc import Callable
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from encoder import matmul
from encoder.config import EncoderConfig

Array = jax.Array


@flax.struct.dataclass
class EncoderOutput:
  # num_layers + 1 arrays [batch, length, hidden]: embeddings, then each block (the last [batch, R, hidden], the rows
  # at last_positions, when the encoder computed only those).
  hidden_states: tuple[Array, ...]
  cls: Array  # [batch, hidden]: the last layer's vector at position 0 ([CLS]).
  pooled: Array  # [batch, hidden]: tanh(W cls + b), BERT's pooler (used by the NSP head).
  last_positions: Array | None = None  # [batch, R]: the positions of `last`'s rows (None: every position).

  @property
  def last(self) -> Array:
    return self.hidden_states[-1]

  def at(self, positions: Array) -> Array:
    """The last layer at `positions` [batch, P] -> [batch, P, hidden] (each must be among last_positions if set)."""
    if self.last_positions is not None:  # Row of each wanted position among the computed ones.
      positions = jnp.argmax(self.last_positions[:, None, :] == positions[:, :, None], axis=-1)
    return rows(self.last, positions.astype(jnp.int32))


def per_token(fn: Callable[[Array], Array], x: Array) -> Array:
  """fn(x) for x [batch, length, ...] run on one [batch * length, ...] matrix.

  A dense layer's kernel gradient then contracts one axis, a plain 2-D matmul; over two axes XLA CPU first copies a
  transpose of the activations (MiniLM pretraining step 1.19 s instead of 1.43 s, the same values).
  """
  y = fn(x.reshape((-1,) + x.shape[2:]))
  return y.reshape(x.shape[:2] + y.shape[1:])


def _init(cfg: EncoderConfig):
  return nn.initializers.normal(stddev=cfg.initializer_range)


class Dense(nn.DenseGeneral):
  """flax's DenseGeneral (the same parameters and values) with its output, float32 product plus float32 bias, rounded
  to `out_dtype` (the activation dtype)."""
  out_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    return super().__call__(inputs).astype(self.out_dtype)


def _dense(cfg: EncoderConfig, features, name: str, axis=-1, out_dtype: Any = None, use_bias: bool | None = None,
           kernel_init: Any = None) -> nn.Module:
  """A dense layer over `axis` whose product is `matmul.matmul` in the compute dtype (float32 result and bias, then
  `out_dtype`, default the activation dtype; no bias when cfg.use_bias is off)."""
  return Dense(features, axis=axis, use_bias=cfg.use_bias if use_bias is None else use_bias,
               kernel_init=kernel_init or _init(cfg), param_dtype=cfg.param_dtype,
               dot_general=matmul.dense_dot_general(cfg.dtype, cfg.dots),
               out_dtype=cfg.activation_dtype if out_dtype is None else out_dtype, name=name)


# PEFT's initialisation of LoRA's A (torch's kaiming_uniform_ with a=sqrt(5)): uniform in +-1/sqrt(fan_in).
lora_a_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


class LoRA(nn.Module):
  """LoRA's branch of a dense layer (Hu et al., 2021; PEFT's lora.Linear): x [N, in] -> float32 [N, features],
  (alpha / rank) (dropout(x) A) B with a [in, rank] (PEFT's lora_A.weight transposed) and b [rank, features]
  (lora_B.weight transposed, zero at init). Dropout only while training (`index`: as `dropout`'s)."""
  cfg: EncoderConfig
  features: int

  @nn.compact
  def __call__(self, x: Array, train: bool, index: Array | None = None) -> Array:
    cfg = self.cfg
    a = self.param("a", lora_a_init, (x.shape[-1], cfg.lora_rank), cfg.param_dtype)
    b = self.param("b", nn.initializers.zeros, (cfg.lora_rank, self.features), cfg.param_dtype)
    x = dropout(x, cfg.lora_dropout, _dropout_key(self, cfg.lora_dropout, train), index)
    h = matmul.matmul(x, a, cfg.dtype, cfg.dots)
    return matmul.matmul(h, b, cfg.dtype, cfg.dots) * (cfg.lora_alpha / cfg.lora_rank)


def _project(cfg: EncoderConfig, x: Array, features, name: str, train: bool, lora: tuple[str, ...] = (),
             axis=-1, slices: tuple[str, ...] = (), at: tuple[Array, int] | None = None) -> Array:
  """Dense layer `name` (`_dense`) of x [batch, length, ...] per token, plus LoRA's branch `lora_<target>` for each
  target of `lora`, added in float32 before the rounding to the activation dtype. `slices` names the parts of the
  features' first axis (the fused QKV: query, key, value): each branch then adds to its own slice. at: (positions
  [batch, R], length) when x holds only those rows of a block of that length: LoRA's dropout masks are then the
  full block's at those rows."""
  if not lora:
    return per_token(_dense(cfg, features, name, axis), x)
  dense = _dense(cfg, features, name, axis, out_dtype=jnp.float32)
  sizes = (features,) if isinstance(features, int) else tuple(features)
  width = math.prod(sizes[1:] if slices else sizes)
  branches = {target: LoRA(cfg, width, name=f"lora_{target}") for target in lora}

  def project(flat: Array) -> Array:
    y = dense(flat)
    inputs = flat.reshape(flat.shape[0], -1)
    index = None
    if at is not None and train and cfg.lora_dropout > 0:
      index = flat_index((x.shape[0], at[1], inputs.shape[1]), at[0]).reshape(inputs.shape)
    if slices:  # Each slice its branch's output, or zeros.
      delta = jnp.stack([branches[t](inputs, train, index) if t in branches else jnp.zeros((flat.shape[0], width))
                         for t in slices], axis=1)
    else:
      delta = branches[lora[0]](inputs, train, index)
    return (y + delta.reshape(y.shape)).astype(cfg.activation_dtype)
  return per_token(project, x)


class Adapter(nn.Module):
  """A bottleneck adapter (Houlsby et al., 2019; AdapterHub's "double_seq_bn"): h + up(silu(down(h))), h [batch,
  length, hidden]; down [hidden, size] and up [size, hidden] with biases, up zero at init (the identity)."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, h: Array) -> Array:
    cfg = self.cfg
    down = per_token(_dense(cfg, cfg.adapter_size, "down", use_bias=True), h)
    up = _dense(cfg, cfg.hidden_size, "up", use_bias=True, kernel_init=nn.initializers.zeros)
    return h + per_token(up, jax.nn.silu(down))


def _norm(cfg: EncoderConfig, name: str) -> nn.Module:
  """A LayerNorm over the hidden axis (no bias when cfg.use_bias is off): float32 statistics, output in the
  activation dtype."""
  return nn.LayerNorm(cfg.layer_norm_eps, use_bias=cfg.use_bias, dtype=cfg.activation_dtype,
                      param_dtype=cfg.param_dtype, name=name)


def _mix32(h: Array) -> Array:
  """murmur3's 32-bit finalizer: a bijection of uint32 with full avalanche."""
  h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
  h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def dropout(x: Array, rate: float, key: Array | None, index: Array | None = None) -> Array:
  """Inverted dropout (zero with probability `rate`, scale the rest by 1/(1-rate)); identity when key is None.

  The keep mask is a counter-based hash of each element's index (x.size < 2^32) keyed by 64 random bits drawn from
  `key` (two murmur3 finalizer rounds): it fuses into the surrounding elementwise code, where drawing threefry/rbg
  bits per element costs ~10 ns each on this CPU (~0.5 s of a MiniLM training step). `index` (default: x's own,
  `flat_index(x.shape)`) gives each element's index in the array x was taken from, so rows gathered from a block
  get the mask the full block would draw.
  """
  if key is None or rate == 0.0:
    return x
  seeds = jax.random.bits(key, (2,), jnp.uint32)
  index = flat_index(x.shape) if index is None else index
  bits = _mix32(_mix32(index ^ seeds[0]) + seeds[1])
  keep = bits >= jnp.uint32(min(round(rate * 2.0**32), 2**32 - 1))
  scaled = (x.astype(jnp.float32) * (1.0 / (1.0 - rate))).astype(x.dtype)  # A bf16 scale would be 0.16% off.
  return jnp.where(keep, scaled, jnp.zeros((), x.dtype))


def hash_uniform(key: Array, shape: tuple[int, ...]) -> Array:
  """float32 uniforms in (0, 1) of `shape` (size < 2^32), 24 random bits each, from the counter-based hash `dropout`
  draws its masks with: fused into the surrounding elementwise code, ~3x cheaper than jax.random.uniform's threefry
  bits on this CPU (ELECTRA's generator samples over the vocabulary with it)."""
  seeds = jax.random.bits(key, (2,), jnp.uint32)
  bits = _mix32(_mix32(flat_index(shape) ^ seeds[0]) + seeds[1])
  return ((bits >> 8).astype(jnp.float32) + 0.5) * (1.0 / (1 << 24))


def flat_index(shape: tuple[int, ...], positions: Array | None = None, axis: int = 1) -> Array:
  """uint32 row-major index of every element of an array of `shape`, taken at `positions` [batch, R] along `axis`."""
  index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
  return index if positions is None else rows(index, positions, axis)


def rows(x: Array, positions: Array | None, axis: int = 1) -> Array:
  """x's slices at `positions` [batch, R] along `axis` (batch first), or x itself when positions is None."""
  if positions is None:
    return x
  shape = positions.shape[:1] + (1,) * (axis - 1) + positions.shape[1:] + (1,) * (x.ndim - axis - 1)
  return jnp.take_along_axis(x, positions.reshape(shape), axis=axis)


def _dropout_key(module: nn.Module, rate: float, train: bool) -> Array | None:
  """The module's next "dropout" key when dropout is active (training with rate > 0), else None (no rng needed)."""
  return module.make_rng("dropout") if train and rate > 0.0 else None


def _gelu(x: Array, approximate: bool) -> Array:
  """GELU; exact as x/2 (1 + erf(x/sqrt 2)), BERT/HF's form (cheaper on CPU than flax's erfc form)."""
  if approximate:
    return nn.gelu(x, approximate=True)
  return x * (0.5 + 0.5 * jax.lax.erf(x * jnp.asarray(0.7071067811865476, x.dtype)))


def activation(name: str, x: Array) -> Array:
  """The feed-forward activation `name` (EncoderConfig.hidden_act) of x."""
  return jax.nn.silu(x) if name == "silu" else _gelu(x, approximate=name == "gelu_tanh")


def attention_mask(attention_segments: Array, window: int = 0) -> Array:
  """[batch, 1, q, k] bool: True where query and key share a nonzero segment (and, with a window > 0, are at most
  window // 2 tokens apart: a local layer's sliding window). Padding, packing and the window in one mask."""
  same = attention_segments[:, :, None] == attention_segments[:, None, :]
  allowed = same & (attention_segments[:, None, :] > 0)
  if window:
    index = jnp.arange(attention_segments.shape[1])
    allowed &= jnp.abs(index[:, None] - index[None, :]) <= window // 2
  return allowed[:, None]


def additive_bias(mask: Array) -> Array:
  """An `attention_mask` as the float32 bias the "matmul" path adds to its scores: 0 where allowed, else a huge
  negative (exp underflows to 0; a row allowed nowhere, padding's, averages every value, as the "xla" path's does)."""
  return jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)


def rotary_angles(positions: Array, head_dim: int, theta: float) -> tuple[Array, Array]:
  """(cos, sin) [batch, length, head_dim / 2] float32 of RoPE's angles position * theta^(-2i / head_dim) (Su et al.,
  2021); packed rows' positions restart at each sequence, so every sequence is rotated as if alone."""
  inverse_frequency = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
  angles = positions.astype(jnp.float32)[..., None] * inverse_frequency
  return jnp.cos(angles), jnp.sin(angles)


def rotate(x: Array, angles: tuple[Array, Array]) -> Array:
  """x [batch, length, heads, head_dim] with each pair of dimensions (i, i + head_dim / 2) rotated by its angle (the
  half-split pairing of GPT-NeoX and HF's `rotate_half`): q.k then depends on the two positions' difference only."""
  cos, sin = (a[:, :, None] for a in angles)  # [batch, length, 1, head_dim / 2]
  first, second = jnp.split(x, 2, axis=-1)
  return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


class Embeddings(nn.Module):
  """word + learned absolute position + segment embeddings -> LayerNorm -> dropout, in the parameters' dtype (no
  position table with rotary positions, no segment table when type_vocab_size is 0; the LayerNorm in post-LN, or in
  pre-LN with embedding_norm).

  The lookups gather in the parameters' dtype, not the compute dtype: the gradient of a gather is a scatter-add into
  the table, and in bfloat16 on a GPU that is an atomic compare-and-swap loop; every row of a batch adds into the same
  few position rows, so the MiniLM bf16 backward took 126 ms instead of 13 ms per 256 x 128 batch on an H100.
  """
  cfg: EncoderConfig

  def setup(self):
    cfg = self.cfg
    embed = lambda n, name: nn.Embed(n, cfg.embedding_width, embedding_init=_init(cfg), dtype=cfg.param_dtype,
                                     param_dtype=cfg.param_dtype, name=name)
    self.word_embeddings = embed(cfg.vocab_size, "word_embeddings")
    if cfg.position_embedding == "absolute":
      self.position_embeddings = embed(cfg.max_positions, "position_embeddings")
    if cfg.type_vocab_size:
      self.token_type_embeddings = embed(cfg.type_vocab_size, "token_type_embeddings")
    self.layer_norm = _norm(cfg, "layer_norm")

  def __call__(self, input_ids, type_ids, positions, train: bool):
    cfg = self.cfg
    x = self.word_embeddings(input_ids)
    if cfg.position_embedding == "absolute":
      x = x + self.position_embeddings(positions)
    if cfg.type_vocab_size:
      x = x + self.token_type_embeddings(type_ids)
    if not cfg.pre_layer_norm or cfg.embedding_norm:  # Plain pre-LN normalizes inside each block instead.
      x = self.layer_norm(x)
    x = x.astype(cfg.activation_dtype)
    return dropout(x, self.cfg.hidden_dropout, _dropout_key(self, self.cfg.hidden_dropout, train))

  def attend(self, hidden: Array) -> Array:
    """hidden [..., hidden] -> float32 logits [..., vocab] with the tied word embeddings (MLM decoders)."""
    flat = hidden.reshape((-1, hidden.shape[-1]))
    logits = matmul.matmul(flat, self.word_embeddings.embedding, self.cfg.dtype, self.cfg.dots, transpose_b=True)
    return logits.reshape(hidden.shape[:-1] + logits.shape[-1:])


QUERY_BLOCK = 64  # Queries per block of `blocked_attend`.
BLOCK_ABOVE = 256  # Keys past which XLA CPU's one-piece softmax leaves its fast path (docs/performance.md).


def attend(q: Array, k: Array, v: Array, bias: Array, dtype, dots: matmul.Dots) -> Array:
  """softmax(q k^T + bias) v: q [batch, heads, R, d], k and v [batch, heads, length, d], bias [batch, 1, R, length]."""
  scores = matmul.matmul(q, k, dtype, dots, transpose_b=True) + bias
  return matmul.matmul(jax.nn.softmax(scores, axis=-1), v, dtype, dots)


def blocked_attend(q: Array, k: Array, v: Array, bias: Array, dtype, dots: matmul.Dots,
                   block: int = QUERY_BLOCK) -> Array:
  """`attend`, `block` queries at a time (queries padded to a multiple of it): the same outputs to float32 rounding.
  The encoder's inference forward on CPU past 256 keys, where one [batch, heads, R, length] softmax runs 3-4x slower
  than the same work in blocks (SQuAD's 384-subword windows: docs/performance.md)."""
  length = q.shape[2]
  pad = ((0, 0), (0, 0), (0, -length % block), (0, 0))
  blocks = lambda x: jnp.moveaxis(x.reshape(x.shape[:2] + (-1, block) + x.shape[3:]), 2, 0)
  out = jax.lax.map(lambda qb: attend(qb[0], k, v, qb[1], dtype, dots),
                    (blocks(jnp.pad(q, pad)), blocks(jnp.pad(bias, pad))))
  return jnp.moveaxis(out, 0, 2).reshape(q.shape[:2] + (-1, q.shape[3]))[:, :, :length]


def fused_attend(q: Array, k: Array, v: Array, mask: Array, implementation: Literal["xla", "cudnn"],
                 even: bool | None = None) -> Array:
  """jax.nn.dot_product_attention(q, k, v, mask) with `implementation` on q [batch, R, heads, d], k and v [batch,
  length, heads, d], mask [batch, 1, R, length] bool: [batch, R, heads, d], scaled by 1/sqrt(d).

  `even` (default: for cuDNN, whose training kernels with a bias, what the mask becomes, take even lengths only)
  pads an odd R (the last block's [CLS] and masked rows) or length by one fully masked row or key, and drops the row
  from the output: the padded row's output is discarded, a padded key gets no weight."""
  if even is None:
    even = implementation == "cudnn"
  rows_, keys = q.shape[1], k.shape[1]
  if even and (rows_ % 2 or keys % 2):
    pad = lambda x, n: jnp.pad(x, ((0, 0), (0, n), (0, 0), (0, 0)))
    q, k, v = pad(q, rows_ % 2), pad(k, keys % 2), pad(v, keys % 2)
    mask = jnp.pad(mask, ((0, 0), (0, 0), (0, rows_ % 2), (0, keys % 2)))
  out = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0 / math.sqrt(q.shape[-1]),
                                     implementation=implementation)
  return out[:, :rows_]


class SelfAttention(nn.Module):
  """Multi-head bidirectional self-attention, fused QKV projection (spec eq. "head = softmax(QK^T/sqrt(d_k))V").

  With rotary positions, queries and keys are rotated by their positions' angles (`rotate`) before attending. Then,
  by cfg.attention:
  - "matmul": heads go first ([batch, heads, length, head_dim]) so that QK^T and the weights times V are plain batched
    products (`matmul`: forward and backward on XLA CPU's fast kernels, see encoder/matmul.py); scores and softmax
    are float32, the mask an additive bias, dropout on the probabilities. The inference forward on CPU attends in
    blocks of queries past 256 keys (`blocked_attend`: the same outputs, faster).
  - "xla", "cudnn": jax.nn.dot_product_attention with that implementation on queries, keys and values as the QKV
    projection lays them out, [batch, length, heads, head_dim], and the boolean mask; its output goes to the output
    projection in the same layout. No transposes of the head layout; no attention dropout (EncoderConfig refuses it).
  """
  cfg: EncoderConfig
  layer: int = 0  # The block's index (which projections carry LoRA: cfg.lora_at).

  @nn.compact
  def __call__(self, x: Array, mask: Array, train: bool, query_positions: Array | None = None,
               angles: tuple[Array, Array] | None = None) -> Array:
    """x [batch, length, hidden] -> [batch, length, hidden], or [batch, R, hidden] where only
    `query_positions` [batch, R] query (keys and values still span the sequence). mask: [batch, 1, length, length]
    bool (`attention_mask`); angles: RoPE's (cos, sin) [batch, length, head_dim / 2] (`rotary_angles`), None without
    rotary positions."""
    cfg = self.cfg
    lora = lambda *targets: tuple(t for t in targets if cfg.lora_at(self.layer, t))
    qkv = _project(cfg, x, (3, cfg.num_heads, cfg.head_dim), "qkv", train, lora("query", "key", "value"),
                   slices=("query", "key", "value"))  # [batch, length, 3, heads, head_dim]
    q, k, v = rows(qkv[:, :, 0], query_positions), qkv[:, :, 1], qkv[:, :, 2]  # [batch, length or R, heads, d]
    if angles is not None:
      cos, sin = angles
      q, k = rotate(q, (rows(cos, query_positions), rows(sin, query_positions))), rotate(k, angles)
    mask = rows(mask, query_positions, 2)
    at = None if query_positions is None else (query_positions, x.shape[1])
    output = lambda context: _project(cfg, context, cfg.hidden_size, "output", train, lora("attention_output"),
                                      axis=(-2, -1), at=at)
    if cfg.attention != "matmul":
      q, k, v = (y.astype(cfg.dtype) for y in (q, k, v))
      context = fused_attend(q, k, v, mask, cfg.attention)  # [batch, R, heads, d]
      return output(context)
    heads_first = lambda y: matmul.transpose(y.astype(cfg.dtype), cfg.dots, (0, 2, 1, 3))  # Moves bf16, not f32.
    q = heads_first(q * (1.0 / math.sqrt(cfg.head_dim)))  # [batch, heads, R, head_dim]
    k, v = heads_first(k), heads_first(v)  # [batch, heads, length, head_dim]
    bias = additive_bias(mask)
    if not train and k.shape[2] > BLOCK_ABOVE and cfg.kernels == "cpu":
      context = blocked_attend(q, k, v, bias, cfg.dtype, cfg.dots)
    else:
      scores = matmul.matmul(q, k, cfg.dtype, cfg.dots, transpose_b=True) + bias
      weights = jax.nn.softmax(scores, axis=-1).astype(cfg.activation_dtype)  # [batch, heads, R, length]
      key = _dropout_key(self, cfg.attention_dropout, train)
      if key is not None:
        full = (x.shape[0], cfg.num_heads, x.shape[1], x.shape[1])
        weights = dropout(weights, cfg.attention_dropout, key, flat_index(full, query_positions, 2))
      context = matmul.matmul(weights, v, cfg.dtype, cfg.dots)
    return output(heads_first(context))  # [batch, R, hidden]


class FeedForward(nn.Module):
  """dense -> activation -> dense (BERT's intermediate and output layers); gated (GeGLU, SwiGLU: Shazeer, 2020): one
  dense layer to [2, intermediate] = (input, gate) -> act(input) * gate -> dense, HF ModernBERT's Wi -> chunk -> Wo."""
  cfg: EncoderConfig
  layer: int = 0  # The block's index (which projections carry LoRA: cfg.lora_at).

  @nn.compact
  def __call__(self, x: Array, train: bool = False, at: tuple[Array, int] | None = None) -> Array:
    """x [batch, length, hidden] -> [batch, length, hidden]; at: (positions, the block's length) when x holds only
    those rows (`_project`)."""
    cfg = self.cfg
    lora = lambda target: (target,) if cfg.lora_at(self.layer, target) else ()
    if cfg.gated_feed_forward:
      h = _project(cfg, x, (2, cfg.intermediate_size), "intermediate", train, lora("intermediate"), at=at)
      h = activation(cfg.hidden_act, h[:, :, 0]) * h[:, :, 1]  # h: [batch, length, 2, intermediate]
    else:
      h = activation(cfg.hidden_act, _project(cfg, x, cfg.intermediate_size, "intermediate", train,
                                              lora("intermediate"), at=at))
    return _project(cfg, h, cfg.hidden_size, "output", train, lora("output"), at=at)


class TransformerBlock(nn.Module):
  """Attention and feed-forward sublayers, each with dropout, a residual and LayerNorm (post- or pre-LN; in pre-LN
  the first block of an encoder with embedding_norm reads the normalized embeddings as they are). A block with
  adapters (cfg.adapter_at) passes a sublayer's output after dropout through its `Adapter` before the residual (and
  post-LN's LayerNorm), as Houlsby et al. and AdapterHub do."""
  cfg: EncoderConfig
  attention_norm: bool = True  # Pre-LN: LayerNorm the attention's input (off in the first block with embedding_norm).
  layer: int = 0  # The block's index in the encoder (where LoRA and adapters go).

  @nn.compact
  def __call__(self, x: Array, mask: Array, train: bool, query_positions: Array | None = None,
               angles: tuple[Array, Array] | None = None) -> Array:
    """x [batch, length, hidden] -> the block's output at every position, or only at `query_positions` [batch, R]
    (attention still reads them all): ~3/4 of the block's work is per row, and heads often read a few.
    angles: RoPE's (cos, sin) for this block's attention (None without rotary positions)."""
    cfg = self.cfg
    norm = lambda name: _norm(cfg, name)
    at = query_positions
    index = flat_index(x.shape, at) if train and cfg.hidden_dropout > 0 and at is not None else None
    drop = lambda y: dropout(y, cfg.hidden_dropout, _dropout_key(self, cfg.hidden_dropout, train), index)
    adapt = {sublayer: Adapter(cfg, name=f"adapter_{sublayer}") if cfg.adapter_at(self.layer, sublayer)
             else (lambda y: y) for sublayer in ("attention", "feed_forward")}
    attention = lambda h: adapt["attention"](drop(SelfAttention(cfg, self.layer, name="attention")(
        h, mask, train, at, angles)))
    rows_of = None if at is None else (at, x.shape[1])  # The feed-forward reads only these rows of the block.
    feed_forward = lambda h: adapt["feed_forward"](drop(FeedForward(cfg, self.layer, name="mlp")(h, train, rows_of)))
    if cfg.pre_layer_norm:
      h = norm("attention_layer_norm")(x) if self.attention_norm else x
      x = rows(x, at) + attention(h)
      return x + feed_forward(norm("output_layer_norm")(x))
    x = norm("attention_layer_norm")(rows(x, at) + attention(x))
    return norm("output_layer_norm")(x + feed_forward(x))


def remat_block(policy: str) -> type[nn.Module]:
  """TransformerBlock under `nn.remat` with a jax.checkpoint policy ("full": save nothing but the block's input);
  the parameter tree, the values and the dropout masks are those of the plain block."""
  if policy == "none":
    return TransformerBlock
  saved = None if policy == "full" else getattr(jax.checkpoint_policies, policy)
  return nn.remat(TransformerBlock, policy=saved, static_argnums=(3,))  # `train` (self is argument 0).


class Encoder(nn.Module):
  """BERT encoder: returns every layer's hidden states, the [CLS] vector and the pooled [CLS].

  The architecture switches of EncoderConfig (rotary positions, gated feed-forward, no biases, embedding_norm, local
  attention windows) turn it into other encoders of the family, ModernBERT among them.
  """
  cfg: EncoderConfig
  # Another encoder's Embeddings, used instead of an own table (ELECTRA's generator shares the discriminator's);
  # their width must be cfg.embedding_width.
  shared_embeddings: Embeddings | None = None

  def setup(self):
    cfg = self.cfg
    if self.shared_embeddings is None:
      self.embeddings = Embeddings(cfg, name="embeddings")
    if cfg.embedding_width != cfg.hidden_size:  # Factorized embeddings (ELECTRA-small): [E] -> [H].
      self.embeddings_project = _dense(cfg, cfg.hidden_size, "embeddings_project")
    block = remat_block(cfg.remat)
    self.layers = [block(cfg, attention_norm=not (cfg.embedding_norm and i == 0), layer=i, name=f"layer_{i}")
                   for i in range(cfg.num_layers)]
    if cfg.pre_layer_norm:
      self.final_layer_norm = _norm(cfg, "final_layer_norm")
    self.pooler = _dense(cfg, cfg.hidden_size, "pooler")

  def __call__(self, input_ids: Array, type_ids: Array | None = None, positions: Array | None = None,
               attention_segments: Array | None = None, train: bool = False,
               last_positions: Array | None = None) -> EncoderOutput:
    """input_ids, type_ids, positions, attention_segments: [batch, length] ints.

    Defaults: type_ids 0, positions 0..length-1, attention_segments = (input_ids != pad). `last_positions`
    [batch, R], first column 0 ([CLS]): the last block computes only these positions (what the heads read), with the
    values and dropout masks of the full block.
    """
    if type_ids is None:
      type_ids = jnp.zeros_like(input_ids)
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    if attention_segments is None:
      attention_segments = (input_ids != self.cfg.pad_token_id).astype(jnp.int32)
    cfg = self.cfg
    masks = {True: attention_mask(attention_segments)}  # By whether a block attends globally.
    if not all(map(cfg.is_global, range(cfg.num_layers))):
      masks[False] = attention_mask(attention_segments, cfg.local_attention_window)
    angles: dict[bool, tuple[Array, Array] | None] = {True: None, False: None}
    if cfg.position_embedding == "rotary":
      angles = {True: rotary_angles(positions, cfg.head_dim, cfg.rope_theta),
                False: rotary_angles(positions, cfg.head_dim, cfg.rope_local_theta)}
    x = self._embeddings()(input_ids, type_ids, positions, train)
    if cfg.embedding_width != cfg.hidden_size:
      x = per_token(self.embeddings_project, x)
    hidden_states = [x]
    for depth, layer in enumerate(self.layers, 1):
      kind = cfg.is_global(depth - 1)
      x = layer(x, masks[kind], train, last_positions if depth == len(self.layers) else None, angles[kind])
      hidden_states.append(x)
    if self.cfg.pre_layer_norm:
      hidden_states[-1] = x = self.final_layer_norm(x)
    cls = x[:, 0]
    float32 = lambda y: y.astype(jnp.float32)  # What callers read, whatever the activation dtype.
    return EncoderOutput(hidden_states=tuple(map(float32, hidden_states)), cls=float32(cls), pooled=self.pool(cls),
                         last_positions=last_positions)

  def pool(self, cls: Array) -> Array:
    """BERT's pooler on [CLS] vectors [..., hidden]: tanh(W cls + b), float32 (packed rows pool each example's)."""
    return jnp.tanh(self.pooler(cls)).astype(jnp.float32)

  def _embeddings(self) -> Embeddings:
    return self.embeddings if self.shared_embeddings is None else self.shared_embeddings

  def attend(self, hidden: Array) -> Array:
    """Logits over the vocabulary with the tied input embeddings: hidden [..., E] -> [..., vocab]."""
    return self._embeddings().attend(hidden)
