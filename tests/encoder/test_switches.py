"""Each architecture switch alone changes only what it should: RoPE scores depend on relative positions only, a
bias-free encoder has no bias, a window covering the sequence is global attention, GeGLU/SwiGLU equal a numpy
restatement; padding and packing (positions restarting per sequence) never change an output under any switch."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from encoder import ARCHITECTURES, Encoder, preset
from encoder.errors import ConfigError
from encoder.model import FeedForward, rotary_angles, rotate
from tests.tolerances import U32, assert_within, sum_bound

TINY = preset("tiny", vocab_size=97, max_positions=64, hidden_size=32, num_heads=4, intermediate_size=48,
              hidden_dropout=0.0, attention_dropout=0.0)
WINDOW = 4  # Small enough that local layers see part of the 8- to 16-token sequences below.
# The tests marked numerics compare float results with bounds set by the CPU's summation order (docs/testing.md:
# the lane reruns them ISA-capped); the rest check shapes, errors and exact results.


def _cfg(arch: str):
  cfg = TINY.replace(**ARCHITECTURES[arch])
  return cfg.replace(local_attention_window=WINDOW) if cfg.local_attention_window else cfg


@functools.cache
def _params(cfg, seed: int = 0):
  """Encoder(cfg)'s parameters made random everywhere (LayerNorm scales and biases too, not the init's 1 and 0); made
  once per config (tests share them) by one compiled init."""
  init = jax.jit(Encoder(cfg).init)(jax.random.key(seed), jnp.ones((1, 8), jnp.int32))["params"]
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: np.asarray(a) + rng.normal(0.0, 0.1, a.shape).astype(np.float32), init)


def _leaves(cfg) -> dict[str, tuple]:
  """{"a/b/leaf": shape} of Encoder(cfg)'s parameter tree (traced, not computed)."""
  tree = jax.eval_shape(Encoder(cfg).init, jax.random.key(0), jnp.ones((1, 8), jnp.int32))["params"]
  return {"/".join(k.key for k in path): leaf.shape for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_padding_and_packing_never_change_outputs(arch):
  """Three sequences packed in a row (positions restarting, segments 1..3, padding) give each sequence's outputs
  alone, and a padded row its unpadded outputs, with every switch set."""
  cfg = _cfg(arch)
  params = _params(cfg)
  apply = jax.jit(lambda ids, pos, segs: Encoder(cfg).apply({"params": params}, ids, None, pos, segs).hidden_states)
  rng = np.random.default_rng(1)
  lengths = [5, 11, 5]  # Two lengths alone, and the padded row as long as the packed one: 3 compiled shapes.
  sequences = [rng.integers(1, cfg.vocab_size, size=n) for n in lengths]
  alone = [apply(s[None], np.arange(len(s))[None], np.ones((1, len(s)), np.int32)) for s in sequences]
  row = np.concatenate(sequences + [np.zeros(3, int)])[None]
  positions = np.concatenate([np.arange(n) for n in lengths] + [np.zeros(3, int)])[None]
  segments = np.concatenate([np.full(n, k + 1) for k, n in enumerate(lengths)] + [np.zeros(3, int)])[None]
  packed = apply(row, positions, segments)
  start = 0  # Other key counts, other summation orders (O(1) states): measured <= 7.7e-7 on Zen 3, 1/35 of the bound.
  for n, outputs in zip(lengths, alone):
    for p, a in zip(packed, outputs):
      np.testing.assert_allclose(np.asarray(p[0, start:start + n]), np.asarray(a[0]), atol=2e-5, rtol=1e-5)
    start += n
  width = row.shape[1]
  padded = apply(np.pad(sequences[1], (0, width - 11))[None], np.arange(width)[None],
                 (np.arange(width) < 11)[None].astype(int))
  for p, a in zip(padded, alone[1]):  # As above: measured 7.2e-7.
    np.testing.assert_allclose(np.asarray(p[0, :11]), np.asarray(a[0]), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch, removed, added, reshaped", [
    ("rope", {"embeddings/position_embeddings/embedding"}, set(), set()),
    ("geglu", set(), set(), {f"layer_{i}/mlp/intermediate/{leaf}" for i in range(2) for leaf in ("kernel", "bias")}),
    ("swiglu", set(), set(), {f"layer_{i}/mlp/intermediate/{leaf}" for i in range(2) for leaf in ("kernel", "bias")}),
    ("local_global", set(), set(), set()),
    ("pre_ln", {"embeddings/layer_norm/scale", "embeddings/layer_norm/bias"},
     {"final_layer_norm/scale", "final_layer_norm/bias"}, set()),
])
def test_each_switch_changes_only_its_parameters(arch, removed, added, reshaped):
  plain, switched = _leaves(TINY), _leaves(_cfg(arch))
  assert set(plain) - set(switched) == removed and set(switched) - set(plain) == added
  assert {k for k in set(plain) & set(switched) if plain[k] != switched[k]} == reshaped


def test_bias_free_encoder_has_no_bias_parameters():
  names = _leaves(_cfg("no_bias"))
  assert names and not [name for name in names if name.endswith("bias")]
  assert set(names) == {name for name in _leaves(TINY) if not name.endswith("bias")}
  assert not [name for name in _leaves(_cfg("modernbert")) if name.endswith("bias")]


@pytest.mark.numerics
def test_rotary_scores_depend_only_on_relative_positions():
  """q_m . k_n after rotation is a function of n - m: shifting both positions by s leaves every score unchanged;
  shifting one of them changes it."""
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(1, 6, 2, 16)), jnp.float32) for _ in range(2))  # [batch, length, heads, d]
  m, n = jnp.asarray([[0, 1, 2, 3, 4, 5]]), jnp.asarray([[3, 0, 5, 1, 1, 4]])

  def scores(query_positions, key_positions):
    qr, kr = rotate(q, rotary_angles(query_positions, 16, 10_000.0)), rotate(k, rotary_angles(key_positions, 16, 1e4))
    return np.asarray(jnp.einsum("blhd,bmhd->bhlm", qr, kr))

  # Measured bound: float32 angles p * theta^(-2i/d) at positions up to 255 round by ~u p (1.5e-5 rad), so a score of
  # |q||k| ~ 16 moves by up to 5e-4 if every rounding adds up, by far less as they do not: measured 1.4e-5 on Zen 3
  # (4% of the bound). An angle off by one position moves scores by ~0.1 (the assertion after the loop).
  for shift in (1, 17, 250):
    np.testing.assert_allclose(scores(m + shift, n + shift), scores(m, n), atol=1e-4, rtol=1e-4)
  assert np.abs(scores(m + 3, n) - scores(m, n)).max() > 0.1
  plain = np.asarray(jnp.einsum("blhd,bmhd->bhlm", q, k))
  np.testing.assert_allclose(scores(jnp.zeros_like(m), jnp.zeros_like(n)), plain, atol=1e-5)  # Angle 0: exact.


@pytest.mark.numerics
@pytest.mark.slow
def test_rotary_encoder_sees_only_relative_positions():
  """With rotary positions and no position table, shifting every position leaves the outputs unchanged (the learned
  table's encoder does change)."""
  ids = np.random.default_rng(2).integers(1, TINY.vocab_size, (2, 12))
  for arch, invariant in (("rope", True), ("bert", False)):
    cfg = _cfg(arch)
    params = _params(cfg)
    run = jax.jit(lambda shift: Encoder(cfg).apply({"params": params}, ids, None, np.arange(12)[None] + shift).last)  # noqa: B023  (called within the iteration)
    # RoPE: the same angle differences up to the angles' rounding (5e-4 worst case on scores, see above; measured
    # far less); a learned position table changes the inputs by O(1).
    assert np.allclose(run(0), run(9), atol=1e-4) == invariant  # One program for both shifts.


@pytest.mark.numerics
@pytest.mark.slow
def test_window_covering_the_sequence_equals_global_attention():
  """Every layer local with a window of 2 (L - 1) (a token sees L - 1 either side) is global attention, bit for bit;
  a window one token narrower each side is not."""
  length = 10
  ids = np.random.default_rng(3).integers(1, TINY.vocab_size, (2, length))
  cfg = TINY.replace(position_embedding="rotary", rope_local_theta=TINY.rope_theta)
  params = _params(cfg)
  run = lambda window: np.asarray(Encoder(cfg.replace(local_attention_window=window, global_attention_every=99)
                                          ).apply({"params": params}, ids).last)
  np.testing.assert_array_equal(run(2 * (length - 1)), run(0))
  assert np.abs(run(2 * (length - 2)) - run(0)).max() > 1e-3


@pytest.mark.numerics
@pytest.mark.parametrize("act, fn", [("gelu", lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
                                     ("silu", lambda x: x / (1 + np.exp(-x)))])
def test_gated_feed_forward_equals_numpy(act, fn):
  """GeGLU / SwiGLU: act(x W_in + b_in) * (x W_gate + b_gate) W_out + b_out in float64 numpy."""
  cfg = TINY.replace(gated_feed_forward=True, hidden_act=act)
  x = np.random.default_rng(4).normal(size=(2, 5, cfg.hidden_size)).astype(np.float32)
  init = FeedForward(cfg).init(jax.random.key(0), x)["params"]
  params = jax.tree.map(lambda a: np.asarray(a) + np.random.default_rng(5).normal(0, 0.3, a.shape), init)
  params = jax.tree.map(lambda a: a.astype(np.float32), params)
  ours = np.asarray(FeedForward(cfg).apply({"params": params}, x))
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  w, b = p["intermediate"]["kernel"], p["intermediate"]["bias"]  # [hidden, 2, intermediate], [2, intermediate]
  a, g = x @ w[:, 0] + b[0], x @ w[:, 1] + b[1]
  h = fn(a) * g
  # Derived bound (tests/tolerances.py): each float32 dot errs by sum_bound(n) of its terms' magnitudes; the
  # activation (slope <= 1.13, its own rounding a few u) and the gate carry those errors into h, and the output dot
  # sums them with its own. About 6e-4 on outputs up to 19 here (measured 1% of it on Zen 3); swapping the gate and
  # the activation's input moves the outputs by 3e4 times it.
  terms = lambda v, w, b: np.abs(v) @ np.abs(w) + np.abs(b)
  err_a, err_g = (sum_bound(cfg.hidden_size + 1) * terms(x, w[:, j], b[j]) for j in range(2))
  err_h = np.abs(g) * (1.13 * err_a + 4 * U32 * np.abs(fn(a))) + np.abs(fn(a)) * err_g + U32 * np.abs(h)
  kernel, bias = p["output"]["kernel"], p["output"]["bias"]
  assert_within(ours, h @ kernel + bias, 1.0,
                err_h @ np.abs(kernel) + sum_bound(cfg.intermediate_size + 1) * terms(h, kernel, bias))


@pytest.mark.numerics
@pytest.mark.slow
def test_modernbert_gradients_under_remat_equal_the_plain_block():
  cfg = _cfg("modernbert").replace(hidden_dropout=0.1, attention_dropout=0.1)
  ids = jnp.asarray(np.random.default_rng(6).integers(1, cfg.vocab_size, (2, 12)))
  params = _params(cfg)

  def grad(c):
    loss = lambda p: jnp.sum(jnp.tanh(Encoder(c).apply({"params": p}, ids, train=True,
                                                       rngs={"dropout": jax.random.key(1)}).last))
    return jax.jit(jax.grad(loss))(params)

  for a, b in zip(jax.tree.leaves(grad(cfg)), jax.tree.leaves(grad(cfg.replace(remat="full")))):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # Recomputed products: measured equal on Zen 3.


@pytest.mark.parametrize("changes, message", [
    (dict(embedding_norm=True), "config.model.embedding_norm=True is a pre-LN switch"),
    (dict(position_embedding="alibi"), "config.model.position_embedding='alibi': expected one of 'absolute', 'rotary'"),
    (dict(hidden_act="relu"), "config.model.hidden_act='relu': expected one of"),
    (dict(position_embedding="rotary", hidden_size=36, num_heads=4), "must be even, got 36 / 4 = 9"),
    (dict(local_attention_window=-1), "config.model.local_attention_window=-1: expected an integer >= 0"),
])
def test_bad_switches_are_clear_errors(changes, message):
  with pytest.raises(ConfigError, match=re.escape(message)):
    TINY.replace(**changes)
