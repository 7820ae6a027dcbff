"""Encoder: parameter counts equal HF BertModel's (ModernBertModel's; ElectraModel's with factorized embeddings);
padding and packing never change an output."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from encoder import ARCHITECTURES, PRESETS, Encoder, preset
from encoder.errors import ConfigError
from tests.conftest import require_package

TINY = preset("tiny", vocab_size=97, max_positions=64, hidden_dropout=0.0, attention_dropout=0.0)
# The tests marked numerics compare float results with bounds set by the CPU's summation order (docs/testing.md:
# the lane reruns them ISA-capped); the rest check shapes, errors and exact results.


def _hf_parameter_count(cfg) -> int:
  """Parameters of HF's BertModel for `cfg`, of ModernBertModel (from our exported config.json) plus our pooler,
  which ModernBERT lacks, or with factorized embeddings of ElectraModel plus the pooler ELECTRA lacks."""
  torch = require_package("torch")
  transformers = require_package("transformers")
  shape = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
               num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
               max_position_embeddings=cfg.max_positions, type_vocab_size=cfg.type_vocab_size)
  with torch.device("meta"):  # Shapes only: no memory for the 560M-parameter preset.
    if cfg.position_embedding == "rotary":
      from encoder.hf import config_to_hf
      model = transformers.ModernBertModel(transformers.ModernBertConfig(**config_to_hf(cfg)))
    elif cfg.embedding_size:
      model = transformers.ElectraModel(transformers.ElectraConfig(**shape, embedding_size=cfg.embedding_size))
    else:
      model = transformers.BertModel(transformers.BertConfig(**shape))
  pooler = (cfg.hidden_size**2 if cfg.position_embedding == "rotary" else
            cfg.hidden_size * (cfg.hidden_size + 1) if cfg.embedding_size else 0)
  return sum(p.numel() for p in model.parameters()) + pooler


def _parameter_count(cfg) -> int:
  ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  shapes = jax.eval_shape(Encoder(cfg).init, jax.random.key(0), ids)
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_equals_hf_bert(name):
  cfg = preset(name)
  assert _parameter_count(cfg) == _hf_parameter_count(cfg)


# ELECTRA-small: 13.5M as google/electra-small-discriminator holds them (the paper rounds to 14M).
@pytest.mark.parametrize("name,millions", [("base", 110), ("large", 335), ("xlmr-large", 560), ("minilm", 22.7),
                                           ("modernbert-base", 149), ("modernbert-large", 395),
                                           ("electra-small", 13.5)])
def test_parameter_count_matches_published_sizes(name, millions):
  assert _parameter_count(preset(name)) / 1e6 == pytest.approx(millions, rel=0.02)  # Exact counts, rounded sizes.


@pytest.fixture(scope="module")
def tiny_model():
  model = Encoder(TINY)
  params = jax.jit(model.init)(jax.random.key(0), jnp.ones((1, 16), jnp.int32))  # One program, not one per operation.
  return jax.jit(lambda ids, types, pos, segs: model.apply(params, ids, types, pos, segs).hidden_states)


def _alone(apply, ids, types):
  n = len(ids)
  out = apply(jnp.asarray([ids]), jnp.asarray([types]), jnp.arange(n)[None], jnp.ones((1, n), jnp.int32))
  return [np.asarray(h[0]) for h in out]


@pytest.mark.numerics
@pytest.mark.slow
def test_padding_never_changes_outputs(tiny_model):
  rng = np.random.default_rng(0)
  ids = rng.integers(1, TINY.vocab_size, size=9).tolist()
  types = [0] * 4 + [1] * 5
  alone = _alone(tiny_model, ids, types)
  pad = 7
  padded = tiny_model(jnp.asarray([ids + [0] * pad]), jnp.asarray([types + [0] * pad]),
                      jnp.arange(9 + pad)[None], jnp.asarray([[1] * 9 + [0] * pad]))
  for a, p in zip(alone, padded):  # Padding keys add exact zeros (exp(-huge) = 0): measured equal on Zen 3.
    np.testing.assert_allclose(np.asarray(p[0, :9]), a, atol=1e-5, rtol=1e-5)


@pytest.mark.numerics
@pytest.mark.slow
def test_packing_never_crosses_sequence_boundaries(tiny_model):
  rng = np.random.default_rng(1)
  lengths = [5, 8, 3]
  sequences = [rng.integers(1, TINY.vocab_size, size=n).tolist() for n in lengths]
  types = [[0] * n for n in lengths]
  types[1] = [0] * 4 + [1] * 4
  ids = [i for sequence in sequences for i in sequence] + [0, 0]
  packed_types = [t for row in types for t in row] + [0, 0]
  positions = [p for n in lengths for p in range(n)] + [0, 0]
  segments = [k + 1 for k, n in enumerate(lengths) for _ in range(n)] + [0, 0]
  packed = tiny_model(jnp.asarray([ids]), jnp.asarray([packed_types]), jnp.asarray([positions]),
                      jnp.asarray([segments]))
  start = 0
  for seq, seq_types in zip(sequences, types):
    alone = _alone(tiny_model, seq, seq_types)
    for a, p in zip(alone, packed):  # Other key counts, other summation orders: measured <= 3.6e-7 on Zen 3 (1/60
      # of the bound) on O(1) post-LN states; a key leaking across sequences moves them by > 1e-1 (next test).
      np.testing.assert_allclose(np.asarray(p[0, start:start + len(seq)]), a, atol=1e-5, rtol=1e-5)
    start += len(seq)


@pytest.mark.numerics
def test_a_token_outside_the_segment_does_change_outputs(tiny_model):
  """Guards the two tests above: if attention leaked, this is how it would show."""
  ids = [5, 6, 7, 8]
  same = tiny_model(jnp.asarray([ids]), jnp.zeros((1, 4), jnp.int32), jnp.arange(4)[None], jnp.ones((1, 4), jnp.int32))
  split = tiny_model(jnp.asarray([ids]), jnp.zeros((1, 4), jnp.int32), jnp.arange(4)[None],
                     jnp.asarray([[1, 1, 2, 2]]))
  assert not np.allclose(np.asarray(same[-1][0, :2]), np.asarray(split[-1][0, :2]), atol=1e-4)  # 10x their bound.


def _numpy_pre_ln_encoder(p, ids, types, eps):
  """Pre-LN BERT restated in float64 numpy from the parameter tree: x = word + position + type embeddings (no
  LayerNorm), each block x += Attn(LN(x)); x += FFN(LN(x)), a final LayerNorm, the pooler on [CLS]."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
  norm = lambda x, n: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * n["scale"] + n[
      "bias"]
  gelu = lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))
  e = p["embeddings"]
  x = (e["word_embeddings"]["embedding"][ids] + e["position_embeddings"]["embedding"][np.arange(ids.shape[1])]
       + e["token_type_embeddings"]["embedding"][types])
  bias = np.where((ids != 0)[:, None, None, :], 0.0, -1e30)  # [batch, 1, 1, key]: padding keys never attended.
  hidden = [x]
  for i in range(len([k for k in p if k.startswith("layer_")])):
    layer = p[f"layer_{i}"]
    attention = layer["attention"]
    h = norm(x, layer["attention_layer_norm"])
    q, k, v = (np.einsum("blh,hnd->bnld", h, attention["qkv"]["kernel"][:, j])
               + attention["qkv"]["bias"][j][None, :, None] for j in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    context = (weights / weights.sum(-1, keepdims=True)) @ v  # [batch, heads, length, head_dim]
    x = x + np.einsum("bnld,ndh->blh", context, attention["output"]["kernel"]) + attention["output"]["bias"]
    mlp = layer["mlp"]
    h = gelu(norm(x, layer["output_layer_norm"]) @ mlp["intermediate"]["kernel"] + mlp["intermediate"]["bias"])
    x = x + h @ mlp["output"]["kernel"] + mlp["output"]["bias"]
    hidden.append(x)
  hidden[-1] = norm(x, p["final_layer_norm"])
  pooled = np.tanh(hidden[-1][:, 0] @ p["pooler"]["kernel"] + p["pooler"]["bias"])
  return hidden, pooled


@pytest.mark.numerics
def test_pre_layer_norm_variant_equals_a_numpy_restatement_and_differs_from_post_ln():
  """Every hidden state (real tokens) and the pooled [CLS] of pre-LN equal the float64 restatement on the same random
  weights (biases and LayerNorm parameters too); post-LN on the same block weights gives another encoder."""
  cfg = TINY.replace(pre_layer_norm=True)
  rng = np.random.default_rng(0)
  ids = np.array([[2, 7, 9, 11, 4, 5, 0, 0], [3, 8, 15, 6, 12, 10, 14, 13]], np.int32)
  types = np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0] * 4 + [1] * 4], np.int32)
  init = jax.jit(Encoder(cfg).init)(jax.random.key(0), jnp.asarray(ids))["params"]
  params = jax.tree.map(lambda a: np.asarray(a) + rng.normal(0.0, 0.1, a.shape).astype(np.float32), init)
  out = jax.jit(Encoder(cfg).apply)({"params": params}, jnp.asarray(ids), jnp.asarray(types))
  hidden, pooled = _numpy_pre_ln_encoder(params, ids, types, cfg.layer_norm_eps)
  valid = ids != 0
  assert len(out.hidden_states) == len(hidden) == cfg.num_layers + 1
  # Against float64: the residual stream's rounding is relative to its size (it sums every block's output), so the
  # bound is 1e-5 of each layer's largest value (measured: 4.3e-6 absolute, 6e-7 of the scale, on Zen 3); a wrong
  # LayerNorm placement or epsilon, a missing bias or scale moves the states by 1e-2 or more (post-LN: > 0.1).
  for ours, reference in zip(out.hidden_states, hidden):
    np.testing.assert_allclose(np.asarray(ours)[valid], reference[valid], rtol=1e-5,
                               atol=1e-5 * np.abs(reference[valid]).max())
  np.testing.assert_allclose(out.pooled, pooled, rtol=1e-5, atol=1e-5)  # tanh in [-1, 1]: measured 1.6e-6.
  post_ln = {k: v for k, v in params.items() if k != "final_layer_norm"}
  post_ln["embeddings"] = {**params["embeddings"], "layer_norm": {"scale": np.ones(cfg.hidden_size, np.float32),
                                                                  "bias": np.zeros(cfg.hidden_size, np.float32)}}
  post = jax.jit(Encoder(TINY).apply)({"params": post_ln}, jnp.asarray(ids), jnp.asarray(types))
  assert np.abs(np.asarray(post.last) - np.asarray(out.last))[valid].max() > 0.1


@pytest.mark.numerics
@pytest.mark.slow
def test_mixed_precision_keeps_fp32_params_and_hidden_states():
  cfg = TINY.replace(dtype=jnp.bfloat16)
  model = Encoder(cfg)
  ids = jnp.asarray([[3, 4, 5, 0]])
  params = jax.jit(model.init)(jax.random.key(0), ids)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
  out, f32 = jax.jit(model.apply)(params, ids), jax.jit(Encoder(TINY).apply)(params, ids)
  assert all(h.dtype == jnp.float32 for h in out.hidden_states) and out.pooled.dtype == jnp.float32
  assert not np.array_equal(out.last, f32.last)  # The matmuls really ran in bf16.


@pytest.mark.numerics
@pytest.mark.slow
def test_bf16_forward_of_minilm_stays_close_to_float32():
  """The MiniLM checkpoint in mixed precision: every hidden state within 1% (relative L2) of float32 and each token's
  vector at cosine >= 0.9999 (measured: 0.54% and 0.99997 at the last layer; HF under autocast: 0.73%). bf16 rounds
  each operand by up to 2^-8 = 0.4%: the bounds are measured, for mixed precision as a whole."""
  from encoder import load_hf_checkpoint, load_tokenizer, minilm_path
  cfg, params, _ = load_hf_checkpoint(minilm_path())
  tokenizer = load_tokenizer(minilm_path())
  texts = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
           "Mixed precision rounds matmul operands to bfloat16 and accumulates in float32."]
  encoded = [tokenizer.encode(t).input_ids for t in texts]
  ids = np.zeros((len(encoded), max(map(len, encoded))), np.int32)
  for row, e in enumerate(encoded):
    ids[row, :len(e)] = e
  real = ids != 0
  out = {dtype: jax.jit(Encoder(cfg.replace(dtype=dtype)).apply)({"params": params}, jnp.asarray(ids))
         for dtype in (jnp.float32, jnp.bfloat16)}
  for a, b in zip(out[jnp.float32].hidden_states, out[jnp.bfloat16].hidden_states):
    a, b = np.asarray(a)[real], np.asarray(b)[real]
    assert np.linalg.norm(a - b) <= 0.01 * np.linalg.norm(a)
    assert np.min((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)) >= 0.9999


def test_dropout_is_active_only_in_training():
  cfg = TINY.replace(hidden_dropout=0.5)
  model = Encoder(cfg)
  ids = jnp.asarray([[3, 4, 5, 6]])
  params = jax.jit(model.init)(jax.random.key(0), ids)
  apply = jax.jit(lambda params, train, key: model.apply(params, ids, train=train, rngs={"dropout": key}).last,
                  static_argnums=1)  # Two programs (evaluation, training), not one per operation.
  eval_a, eval_b = apply(params, False, jax.random.key(1)), apply(params, False, jax.random.key(2))
  np.testing.assert_array_equal(eval_a, eval_b)
  train = apply(params, True, jax.random.key(1))
  assert not np.allclose(np.asarray(train), np.asarray(eval_a))  # Dropout 0.5 changes values by O(1).


@functools.cache
def _remat_gradient(cfg):
  """(parameters, (loss, gradients), dots in the compiled gradient) of a tanh loss on a fixed batch, dropout on; one
  compilation per config (the plain encoder's is shared by every policy)."""
  ids = jnp.asarray(np.random.RandomState(0).randint(1, cfg.vocab_size, (2, 12)))
  weights = jnp.asarray(np.random.RandomState(1).randn(cfg.hidden_size), jnp.float32)
  model = Encoder(cfg)
  params = jax.jit(model.init)(jax.random.key(0), ids)["params"]
  loss = lambda p: jnp.tanh(model.apply({"params": p}, ids, train=True, rngs={"dropout": jax.random.key(2)}
                                        ).last @ weights).sum()
  step = jax.jit(jax.value_and_grad(loss)).lower(params).compile()
  return params, step(params), step.as_text().count(" dot(")


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", "dots_saveable", "dots_with_no_batch_dims_saveable"])
def test_remat_gives_the_plain_values_and_gradients_and_recomputes(policy):
  """Same parameter tree, outputs and gradients (dropout on) as the plain encoder; "full" and the no-batch-dims policy
  redo forward products in the backward (more dots in the compiled gradient)."""
  cfg = TINY.replace(hidden_dropout=0.1, attention_dropout=0.1)
  (params, (loss, grads), dots), (params_r, (loss_r, grads_r), dots_r) = (
      _remat_gradient(cfg), _remat_gradient(cfg.replace(remat=policy)))
  assert jax.tree.structure(params) == jax.tree.structure(params_r)
  # Remat recomputes the same products: measured equal to the bit on Zen 3, gradients within 1.2e-7 (1/100 of the
  # bound); the bounds allow a recomputation that XLA fuses in another order.
  np.testing.assert_allclose(loss_r, loss, rtol=1e-6)
  for g, g_r in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_r)):
    np.testing.assert_allclose(g_r, g, rtol=1e-5, atol=1e-6)
  assert dots_r > dots if policy != "dots_saveable" else dots_r == dots
  with pytest.raises(ConfigError, match=re.escape("config.model.remat='some': expected one of")):
    TINY.replace(remat="some")


def test_bad_sizes_are_clear_errors():
  with pytest.raises(ConfigError, match=re.escape("config.model.num_heads=3: expected a divisor")):
    preset("tiny", num_heads=3)
  with pytest.raises(ConfigError, match="size='huge' is not an encoder size"):
    preset("huge")


def test_hash_dropout_statistics():
  """Drop rate, unbiased scale, independence between keys and between neighbouring elements."""
  from encoder.model import dropout
  x = jnp.ones((64, 12, 128, 128))
  a = np.asarray(dropout(x, 0.1, jax.random.key(0)))
  b = np.asarray(dropout(x, 0.1, jax.random.key(1)))
  n = a.size
  sigma = np.sqrt(0.1 * 0.9 / n)
  assert abs((a == 0).mean() - 0.1) < 5 * sigma
  assert abs(a.mean() - 1.0) < 5 * sigma / 0.9
  assert abs(((a == 0) & (b == 0)).mean() - 0.01) < 5 * np.sqrt(0.01 * 0.99 / n)
  dropped = (a == 0).reshape(-1).astype(np.float64)
  neighbours = np.corrcoef(dropped[:-1], dropped[1:])[0, 1]
  assert abs(neighbours) < 5 / np.sqrt(n)
  np.testing.assert_array_equal(dropout(x[:2], 0.1, None), x[:2])


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["bert", "pre_ln", "modernbert"])
@pytest.mark.parametrize("train", [False, True])
def test_last_positions_equal_the_full_last_block(arch, train):
  """last_positions (what the heads read): the same [CLS], pooled, earlier layers and last-layer rows as the full
  encoder, dropout masks included, and the same gradients (ModernBERT's last block, layer 1, attends locally)."""
  cfg = TINY.replace(**ARCHITECTURES[arch]).replace(hidden_dropout=0.3, attention_dropout=0.3,
                                                     local_attention_window=4)
  model = Encoder(cfg)
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(1, cfg.vocab_size, size=(3, 11)))
  segments = jnp.asarray((np.arange(11)[None] < np.array([[11], [7], [4]])).astype(np.int32))
  last_positions = jnp.asarray([[0, 5, 2, 5], [0, 1, 6, 0], [0, 3, 3, 3]])  # Per-row positions, repeats allowed.
  wanted = jnp.asarray([[2, 5], [6, 1], [3, 0]])
  params = model.init(jax.random.key(0), ids)
  rngs = {"dropout": jax.random.key(5)} if train else {}

  def run(params, positions):
    return model.apply(params, ids, attention_segments=segments, train=train, last_positions=positions, rngs=rngs)

  # Op by op, not jitted: the six cases share these shapes, so after the first case every operation's program is
  # already compiled (measured cheaper than one jitted program per case).
  full, part = run(params, None), run(params, last_positions)
  assert part.last.shape == (3, 4, cfg.hidden_size)
  for a, b in zip(full.hidden_states[:-1], part.hidden_states[:-1]):
    np.testing.assert_array_equal(a, b)
  # The last block on fewer query rows: other summation orders only, relative to each output's scale (measured:
  # 7.2e-7 absolute, 1/60 of the bound, on Zen 3); a wrong row or mask moves them by O(1).
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))
  close(part.at(wanted), full.at(wanted))
  close(part.at(wanted), np.take_along_axis(np.asarray(full.last), np.asarray(wanted)[..., None], axis=1))
  close(part.pooled, full.pooled)
  close(part.cls, full.cls)
  loss = lambda positions: lambda p: jnp.sum(run(p, positions).pooled ** 2) + jnp.sum(
      jnp.sin(run(p, positions).at(wanted)))
  grads = [jax.grad(loss(positions))(params) for positions in (None, last_positions)]
  for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(a).max()))  # Summation order only.
  if train:  # Dropout is really on: the [CLS] vector differs from evaluation mode.
    evaluated = model.apply(params, ids, attention_segments=segments, last_positions=last_positions)
    assert not np.allclose(evaluated.cls, part.cls)
