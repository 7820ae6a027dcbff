"""encoder.matmul and the heads-first attention: the same values and gradients as plain references (float64 numpy,
the previous einsum attention), and on CPU every product of a training step stays a plain dot in its dtype."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import Encoder, model as model_module, preset
from encoder.config import resolve_platform
from encoder.matmul import Dots, cpu_bf16_flags, matmul, transpose
from encoder.model import SelfAttention, additive_bias, attend, attention_mask, blocked_attend
from tests.tolerances import U32, U_BF16, assert_within, softmax_bound, sum_bound

# This platform's kernels and bf16 dots, as a run's start-up chooses them.
TINY = preset("tiny", vocab_size=97, max_positions=64, hidden_dropout=0.0, attention_dropout=0.0,
              **resolve_platform({}))
# The tests marked numerics compare float results with bounds set by the CPU's summation order (docs/testing.md:
# the lane reruns them ISA-capped); the rest check shapes, errors and exact results.


def _rounded(x, dtype) -> np.ndarray:
  return np.asarray(jnp.asarray(x).astype(dtype).astype(jnp.float32), np.float64)


@pytest.fixture(params=[True, False], ids=["bf16_units", "no_bf16_units"])
def bf16_units(request):
  """Both operand routes of a bf16 dot on any machine: bf16 as they are, or rounded and read as float32."""
  return request.param


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("shapes", [((3, 5, 7), (3, 7, 6)), ((4, 300), (300, 8)), ((300, 40), (40, 4)),
                                    ((40, 8), (8, 300))])
def test_matmul_and_its_gradients_equal_float64(dtype, transpose_b, shapes, bf16_units):
  """Forward and both gradients against float64 on operands and cotangent rounded to `dtype`: only float32
  accumulation differs. The shapes take every route (an operand transposed, or the result: (Y^T X)^T), with and
  without bf16 matrix units."""
  rng = np.random.default_rng(0)
  a_shape, b_shape = shapes
  if transpose_b:
    b_shape = b_shape[:-2] + b_shape[-2:][::-1]
  a, b = rng.normal(size=a_shape).astype(np.float32), rng.normal(size=b_shape).astype(np.float32)
  product = lambda a, b: matmul(a, b, dtype, Dots(True, bf16_units), transpose_b)
  g = rng.normal(size=jax.eval_shape(product, a, b).shape).astype(np.float32)

  @jax.jit
  def forward_and_back(a, b, g):  # One program (one compilation) for the product and both gradients.
    out, vjp = jax.vjp(product, a, b)
    return out, *vjp(g)

  out, da, db = forward_and_back(a, b, g)
  a64, b64, g64 = _rounded(a, dtype), _rounded(b, dtype), _rounded(g, dtype)
  b64 = np.swapaxes(b64, -1, -2) if transpose_b else b64
  want_db = np.swapaxes(a64, -1, -2) @ g64
  # float32 dots of at most 300 terms (bf16 products are exact in float32), each relative to its sum of |terms|.
  close = lambda got, want, scale: assert_within(got, want, sum_bound(300), scale)
  abs_b64, abs_db = np.abs(b64), np.swapaxes(np.abs(a64), -1, -2) @ np.abs(g64)
  assert out.dtype == da.dtype == db.dtype == jnp.float32
  close(out, a64 @ b64, np.abs(a64) @ abs_b64)
  close(da, g64 @ np.swapaxes(b64, -1, -2), np.abs(g64) @ np.swapaxes(abs_b64, -1, -2))
  close(db, *((np.swapaxes(x, -1, -2) for x in (want_db, abs_db)) if transpose_b else (want_db, abs_db)))


def test_cpu_bf16_flags_reads_x86_and_arm_cpuinfo():
  assert cpu_bf16_flags("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n") == {
      "avx512_bf16", "amx_bf16"}
  assert cpu_bf16_flags("flags\t\t: fpu sse avx2 fma sha_ni\nmodel name\t: AMD EPYC bf16\n") == set()
  assert cpu_bf16_flags("Features\t: fp asimd sve bf16 i8mm\n") == {"bf16"}


@pytest.mark.parametrize("pinned", [True, False])
def test_transpose_and_its_gradient(pinned):
  x = jnp.arange(24.0).reshape(2, 3, 4)
  y, vjp = jax.vjp(lambda x: transpose(x, Dots(pinned, True), (1, 2, 0)), x)
  np.testing.assert_array_equal(y, np.transpose(np.asarray(x), (1, 2, 0)))
  np.testing.assert_array_equal(vjp(y)[0], x)


def _einsum_attention(params, x, bias, cfg, query_positions=None):
  """The previous implementation: [batch, length, heads, head_dim] einsums, the scale applied to the scores."""
  p = params["params"]
  qkv = jnp.einsum("blh,hcnd->blcnd", x, p["qkv"]["kernel"], precision="highest") + p["qkv"]["bias"]
  q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
  if query_positions is not None:
    q = jnp.take_along_axis(q, query_positions[:, :, None, None], axis=1)
    bias = jnp.take_along_axis(bias, query_positions[:, None, :, None], axis=2)
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision="highest") / np.sqrt(cfg.head_dim) + bias
  context = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v, precision="highest")
  return jnp.einsum("bqnd,ndh->bqh", context, p["output"]["kernel"], precision="highest") + p["output"]["bias"]


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("query_positions", [None, [[0, 4, 2], [0, 1, 1]]])
def test_attention_equals_the_einsum_reference(query_positions):
  """Heads-first layout, scale folded into q, plain products: the same outputs and gradients to float32 rounding."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(2, 9, TINY.hidden_size)), jnp.float32)
  mask = attention_mask(jnp.asarray([[1] * 9, [1] * 6 + [0] * 3]))
  bias = additive_bias(mask)
  positions = None if query_positions is None else jnp.asarray(query_positions)
  attention = SelfAttention(TINY)
  params = jax.jit(lambda x: attention.init(jax.random.key(0), x, mask, False))(x)
  loss = lambda fn: lambda params, x: jnp.sum(jnp.sin(fn(params, x)))
  ours = lambda params, x: attention.apply(params, x, mask, False, positions)
  reference = lambda params, x: _einsum_attention(params, x, bias, TINY, positions)
  # Both attentions, outputs and gradients, in one program (one compilation).
  both = jax.jit(lambda params, x: [(fn(params, x), jax.grad(loss(fn), argnums=(0, 1))(params, x))
                                    for fn in (ours, reference)])
  (out, got), (out_reference, want) = both(params, x)
  # Two float32 attentions (9 keys, head size 16; the scale folded into q rounds once more): measured 3e-8 on outputs
  # of ~0.06 and gradients 1/60 of their bounds on Zen 3, while a missing scale or a wrong mask moves them by 1e-1.
  np.testing.assert_allclose(out, out_reference, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))


def _attention_float64(q, k, v, bias, dtype) -> tuple[np.ndarray, float, np.ndarray]:
  """softmax(q k^T + bias) v in float64 on the same operands, and `attend`'s rounding bound, relative to each
  element's sum_j p_j |v_j| (tests/tolerances.py): scores are float32 dots over d (bf16 products are exact) plus their
  own rounding, the softmax runs over n keys, and p is rounded to `dtype` for its float32 dot with v over n keys.
  A masked key's bias absorbs its score in both (float32 min), so only allowed scores' errors count."""
  q, k, v = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (q, k, v))
  d, n = q.shape[-1], k.shape[-2]
  scores = q @ np.swapaxes(k, -1, -2) + np.asarray(bias, np.float64)
  p = np.exp(scores - scores.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  allowed = np.broadcast_to(np.asarray(bias) == 0, scores.shape)
  magnitudes = np.abs(q) @ np.abs(np.swapaxes(k, -1, -2))
  logit_error = sum_bound(d) * magnitudes[allowed].max() + U32 * np.abs(scores[allowed]).max()
  bound = softmax_bound(logit_error, n) + (U_BF16 if dtype == jnp.bfloat16 else 0.0) + sum_bound(n)
  return p @ v, bound, p @ np.abs(v)


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("length,block", [(300, 64), (128, 32), (5, 4)])
def test_blocked_attention_equals_one_piece(dtype, length, block):
  """Blocks of queries (the last one padded) give every row of the one-piece attention, with packed sequences and
  padding in the bias: both are softmax(q k^T + bias) v in float64 to their derived float32 bound (~1e-4 of the
  values' scale at 300 keys, measured ~1e-6), where a wrong mask, a row off by one or a missed block moves rows by
  O(1)."""
  rng = np.random.default_rng(2)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 3, length, 8)), dtype) for _ in range(3))
  segments = np.ones((2, length), np.int32)
  segments[0, length // 3:] = 2
  segments[1, -(length // 4 + 1):] = 0
  bias = additive_bias(attention_mask(jnp.asarray(segments)))
  want, bound, scale = _attention_float64(q, k, v, bias, dtype)
  blocked, one_piece = jax.jit(lambda q, k, v, bias: (blocked_attend(q, k, v, bias, dtype, TINY.dots, block),
                                                      attend(q, k, v, bias, dtype, TINY.dots)))(q, k, v, bias)
  assert_within(blocked, want, bound, scale, "blocked")  # Both in one program (one compilation).
  assert_within(one_piece, want, bound, scale, "one piece")


@pytest.mark.numerics
@pytest.mark.slow
def test_encoder_inference_past_256_keys_attends_in_blocks(monkeypatch):
  """A deterministic forward over 300 keys with kernels "cpu" (a CPU's choice) runs `blocked_attend` (a scan in the
  program) and gives the one-piece forward's outputs; training, 256 keys or fewer, and kernels "accelerator" keep the
  one-piece attention."""
  cfg = preset("tiny", vocab_size=97, max_positions=320, **resolve_platform({}))
  model = Encoder(cfg)
  rng = np.random.default_rng(3)
  ids = jnp.asarray(rng.integers(1, 97, size=(2, 300)))
  segments = jnp.asarray(np.where(np.arange(300) < 280, 1, 0)[None].repeat(2, 0))
  params = jax.jit(lambda ids: model.init(jax.random.key(0), ids, attention_segments=segments))(ids)
  forward = lambda p: model.apply(p, ids, attention_segments=segments).last
  blocked = jax.jit(forward)(params)
  has_loop = lambda fn: "scan" in str(jax.make_jaxpr(fn)(params))
  assert has_loop(forward) == (cfg.kernels == "cpu") == (jax.default_backend() == "cpu")
  other = Encoder(cfg.replace(kernels="accelerator" if cfg.kernels == "cpu" else "cpu"))
  assert has_loop(lambda p: other.apply(p, ids, attention_segments=segments).last) == (other.cfg.kernels == "cpu")
  assert not has_loop(lambda p: model.apply(p, ids, attention_segments=segments, train=True,
                                            rngs={"dropout": jax.random.key(1)}).last)
  assert not has_loop(lambda p: model.apply(p, ids[:, :256], attention_segments=segments[:, :256]).last)
  monkeypatch.setattr(model_module, "BLOCK_ABOVE", 10**9)
  # Post-LN O(1) states through two layers of blocked or one-piece attention (the same sums in other orders,
  # test_blocked_attention_equals_one_piece bounds each): measured 7.2e-7, 1/50 of the bound, on Zen 3.
  one_piece = jax.jit(lambda p: model.apply(p, ids, attention_segments=segments).last)  # Traced anew, after the patch.
  np.testing.assert_allclose(blocked, one_piece(params), rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the plain-layout constraint is XLA CPU's")
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_every_training_product_is_a_plain_dot_on_cpu(dtype, bf16_units):
  """The optimized HLO of a training step: every dot (forward and backward, attention and the tied vocabulary
  projection) contracts lhs's last axis with rhs's first non-batch one, in `dtype` with a float32 result: the form
  XLA CPU runs in its fast kernels (a bf16 dot in any other form is upcast to float32, or fails at run time). Without
  bf16 matrix units a bf16 step's dots read float32 operands (bf16-rounded)."""
  cfg = TINY.replace(dtype=dtype, hidden_dropout=0.1, attention_dropout=0.1, kernels="cpu",
                     bf16_dots="native" if bf16_units else "float32")
  model = Encoder(cfg)
  ids = jnp.ones((2, 16), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.key(0), ids)  # Lowered, not run: shapes suffice.

  def loss(params):
    out = model.apply(params, ids, train=True, rngs={"dropout": jax.random.key(1)})
    return jnp.sum(out.last) + jnp.sum(model.apply(params, out.last[:, :3], method=Encoder.attend))

  hlo = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
  shapes = dict(re.findall(r"%(\S+) = (\w+)\[", hlo))
  dots = re.findall(r"= (\w+)\[([\d,]*)\]\S* dot\(%(\S+), %(\S+)\), (.*?), metadata", hlo)
  assert len(dots) >= 5 * cfg.num_layers
  name = "bf16" if dtype == jnp.bfloat16 and bf16_units else "f32"
  for result, dims, lhs, rhs, numbers in dots:
    rank = dims.count(",") + 1
    batch = rank - 2
    assert result == "f32" and shapes[lhs] == shapes[rhs] == name, (lhs, rhs, numbers)
    assert f"lhs_contracting_dims={{{rank - 1}}}" in numbers and f"rhs_contracting_dims={{{batch}}}" in numbers, numbers


@pytest.mark.numerics
def test_this_numerics_file_compiles_as_users_runs_do():
  """tests/conftest.py compiles a test marked `numerics` at XLA's default optimisations (the rest at -O0)."""
  assert jax.config.values["jax_disable_most_optimizations"] is False
