"""The attention paths (EncoderConfig.attention): jax.nn.dot_product_attention's XLA implementation on the natural
[batch, length, heads, head_dim] layout ("xla") computes the function of the heads-first "matmul" path, outputs and
every gradient, under every architecture switch, on padded and packed rows, with last_positions and in ELECTRA's
generator; "auto" is resolved per platform before tracing; bf16 activations keep LayerNorm statistics and softmax in
float32.

Tolerance of the path comparisons: float32, max |a - b| <= 1e-5 max |b| for every array (elementwise ratios mean
nothing near zero). The paths differ in rounding only: the 1/sqrt(d) scale applied to the queries or to the scores, the
order of the products' sums (plain dots or einsums), the mask added as -3.4e38 or selected; each is a few float32 ulps
(6e-8) per operation. Measured on an AMD Zen 3 (AVX2): at most 2.1e-6 over the cases below.

A loss must read real tokens only, as every objective and task loss does: the "matmul" path's additive bias lets a
padding query's scores (all masked) pass a gradient to its query and to the keys, although its output (the mean of
every value) does not depend on them; the "xla" path selects the mask and passes none.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import common
from encoder import ARCHITECTURES, Encoder, config as config_module, preset
from encoder.matmul import Dots, dense_dot_general
from encoder.model import Dense, fused_attend
from launch.model import EncoderWithHeads
from objectives import registry

TINY = preset("tiny", vocab_size=97, max_positions=64, hidden_size=32, num_heads=4, intermediate_size=48,
              hidden_dropout=0.1, attention_dropout=0.0)
WINDOW = 6  # Local layers see part of the 20-token rows below.
RELATIVE = 1e-5


def _cfg(arch: str):
  cfg = TINY.replace(**ARCHITECTURES[arch]).replace(hidden_dropout=0.1, attention_dropout=0.0)
  return cfg.replace(local_attention_window=WINDOW) if cfg.local_attention_window else cfg


def _batch():
  """Three rows of 20 tokens: one full sequence; three sequences packed (positions restarting) and padding; one
  sequence and padding."""
  rng = np.random.default_rng(0)
  segments = np.array([[1] * 20, [1] * 7 + [2] * 5 + [3] * 6 + [0] * 2, [1] * 11 + [0] * 9], np.int32)
  positions = np.array([list(range(20)), list(range(7)) + list(range(5)) + list(range(6)) + [0, 0],
                        list(range(20))], np.int32)
  ids = np.where(segments > 0, rng.integers(1, TINY.vocab_size, segments.shape), 0).astype(np.int32)
  types = np.where(segments > 0, rng.integers(0, 2, segments.shape), 0).astype(np.int32)
  return ids, types, positions, segments


def _random_params(cfg, ids):
  """Encoder(cfg)'s parameters made random everywhere (LayerNorm scales and biases too)."""
  init = jax.jit(Encoder(cfg).init)(jax.random.key(0), ids)["params"]  # One program, not one per operation.
  rng = np.random.default_rng(1)
  return jax.tree.map(lambda a: np.asarray(a) + rng.normal(0.0, 0.1, a.shape).astype(np.float32), init)


def _assert_close(got, want):
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.abs(a - b).max() <= RELATIVE * np.abs(b).max(), (jax.tree_util.keystr(path), np.abs(a - b).max(),
                                                              np.abs(b).max())


def _outputs_and_gradients(cfg, params, last_positions=None):
  """(every hidden state and the pooled [CLS] in training mode, dropout on; the gradient of every parameter of a loss
  reading the real tokens of the last layer and the pooled [CLS])."""
  ids, types, positions, segments = _batch()
  real = jnp.asarray(segments > 0)

  def run(params):
    return Encoder(cfg).apply({"params": params}, ids, types, positions, segments, train=True,
                              last_positions=last_positions, rngs={"dropout": jax.random.key(2)})

  def loss(params):
    out = run(params)
    last = out.last if last_positions is None else out.at(last_positions)
    weights = real if last_positions is None else jnp.take_along_axis(real, last_positions, axis=1)
    return jnp.sum(jnp.sin(last) * weights[..., None]) + jnp.sum(out.pooled ** 2), out

  # Outputs and gradient from one program (one compilation per path, not two).
  (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  hidden = [np.asarray(h) * np.asarray(real)[..., None] for h in out.hidden_states[:-1]]
  return hidden + [out.pooled], grads


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_xla_path_equals_matmul_path(arch):
  """Every switch (post-/pre-LN, RoPE, local/global windows, GeGLU/SwiGLU, no biases, ModernBERT's set), padded and
  packed rows, hidden dropout on: the same outputs at real tokens and the same gradient of every parameter."""
  cfg = _cfg(arch)
  params = _random_params(cfg, _batch()[0])
  got, want = (_outputs_and_gradients(cfg.replace(attention=path), params) for path in ("xla", "matmul"))
  _assert_close(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_xla_path_equals_matmul_path_at_last_positions(arch):
  """The engine's pretraining form: the last block only at [CLS] and the positions the heads read."""
  cfg = _cfg(arch)
  params = _random_params(cfg, _batch()[0])
  last = jnp.asarray([[0, 3, 9, 15], [0, 2, 8, 13], [0, 1, 5, 10]])
  got, want = (_outputs_and_gradients(cfg.replace(attention=path), params, last) for path in ("xla", "matmul"))
  _assert_close(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("rows, keys", [(5, 8), (4, 7), (3, 9)])
def test_odd_lengths_padded_for_cudnn_give_the_same_attention(rows, keys):
  """cuDNN trains with a mask only on even lengths: the padding to even (one masked query row or key, dropped) leaves
  outputs and gradients as they are (checked with the XLA implementation, padded as for cuDNN and not)."""
  rng = np.random.default_rng(6)
  q = jnp.asarray(rng.normal(size=(2, rows, 3, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, keys, 3, 8)), jnp.float32) for _ in range(2))
  mask = jnp.asarray(rng.random((2, 1, rows, keys)) < 0.7).at[..., 0].set(True)
  run = lambda even: lambda q, k, v: fused_attend(q, k, v, mask, "xla", even)

  @jax.jit
  def outputs_and_gradients(q, k, v):  # Both paddings in one program (one compilation per shape).
    return [(run(even)(q, k, v), jax.value_and_grad(lambda *a, even=even: jnp.sum(jnp.sin(run(even)(*a))),
                                                    argnums=(0, 1, 2))(q, k, v)) for even in (True, False)]

  (padded, got), (_, want) = outputs_and_gradients(q, k, v)
  assert padded.shape == q.shape
  _assert_close(got, want)


def _electra_batch(rows=3, length=20, width=4):
  ids, types, positions, segments = _batch()
  rng = np.random.default_rng(3)
  masked = np.stack([np.sort(rng.choice(np.arange(1, 10), width, replace=False)) for _ in range(rows)])
  return dict(input_ids=ids, type_ids=types, positions=positions, attention_segments=segments,
              masked_positions=masked.astype(np.int32),
              masked_ids=np.take_along_axis(ids, masked, axis=1).astype(np.int32),
              masked_weights=np.ones((rows, width), np.float32))


@pytest.mark.slow
def test_xla_path_equals_matmul_path_in_electra():
  """ELECTRA (objectives=electra): the generator (a quarter as wide, sharing the embeddings) samples replacements,
  the discriminator classifies them; the loss and every gradient of both encoders and heads agree."""
  objective = registry.build("electra", {"rtd_weight": 50.0})
  batch = _electra_batch()
  results = {}
  # The attention path has no parameters: both models start from the same tree (one initialization).
  params = jax.jit(EncoderWithHeads(_cfg("bert"), (objective,)).init)(jax.random.key(0), batch)["params"]
  for path in ("xla", "matmul"):
    model = EncoderWithHeads(_cfg("bert").replace(attention=path), (objective,))

    def loss(params):
      predictions = model.apply({"params": params}, batch, train=True, rngs={"dropout": jax.random.key(4)})  # noqa: B023  (called within the iteration)
      return objective.loss(predictions["electra"], batch)[0]

    results[path] = jax.jit(jax.value_and_grad(loss))(params)
  _assert_close(results["xla"], results["matmul"])


def test_auto_resolves_per_platform_and_fields():
  """"auto": the matmul path where attention dropout is on or on CPUs, cuDNN on NVIDIA GPUs in bf16/f16 with a head
  dimension it takes, XLA's fused attention elsewhere; a concrete choice stays; a saved config without the field ran
  "matmul"."""
  auto = config_module.auto_attention
  assert auto("cpu", jnp.float32, 0.0, 64) == auto("cpu", jnp.bfloat16, 0.0, 64) == "matmul"
  assert auto("cuda", jnp.bfloat16, 0.0, 64) == auto("cuda", jnp.float16, 0.0, 128) == "cudnn"
  assert auto("cuda", jnp.float32, 0.0, 64) == auto("cuda", jnp.bfloat16, 0.0, 12) == "xla"
  assert auto("cuda", jnp.bfloat16, 0.0, 256) == auto("tpu", jnp.bfloat16, 0.0, 64) == auto("rocm", jnp.bfloat16, 0.0,
                                                                                            64) == "xla"
  assert auto("cuda", jnp.bfloat16, 0.1, 64) == auto("tpu", jnp.float32, 0.1, 64) == "matmul"
  fields = dict(attention="auto", dtype="bfloat16", attention_dropout=0.0, hidden_size=768, num_heads=12)
  assert config_module.resolve_attention(fields, "cuda") == "cudnn"
  assert config_module.resolve_attention(fields | {"attention": "xla"}, "cuda") == "xla"
  assert config_module.resolve_attention({k: v for k, v in fields.items() if k != "attention"}, "cuda") == "matmul"
  assert config_module.resolve_attention(fields, None) == config_module.auto_attention(
      config_module.platform(), jnp.bfloat16, 0.0, 64)
  model = common.model_config("tiny")
  assert model.attention == "auto" and model.attention_dropout == 0.1
  assert config_module.from_fields(model.to_dict(), 97).attention == "matmul"  # Resolved when the config is built.


@pytest.mark.parametrize("changes, message", [
    (dict(attention="xla", attention_dropout=0.1), "applies no attention dropout"),
    (dict(attention="auto"), "config.model.attention='auto' reached the model unresolved"),
    (dict(activation_dtype=jnp.bfloat16), "activation_dtype='bfloat16': expected 'float32' or config.model.dtype"),
])
def test_bad_attention_fields_are_clear_errors(changes, message):
  with pytest.raises(ValueError, match=message):
    TINY.replace(**changes)


def _equations(jaxpr):
  """Every equation of a jaxpr and of the jaxprs inside it (jit, custom_vjp, remat, ...)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        sub = getattr(sub, "jaxpr", sub)
        if isinstance(sub, jax.extend.core.Jaxpr):
          yield from _equations(sub)


@pytest.mark.parametrize("path", ["matmul", "xla"])
def test_bf16_activations_keep_statistics_and_softmax_in_float32(path):
  """The training step's program with activation_dtype=bfloat16: GELU's erf and dropout's select run on bf16;
  every reduction (LayerNorm's mean and variance, softmax's max and sum) and softmax's exp (over [.., 20, 20] scores)
  read float32; the hidden states come back float32."""
  cfg = TINY.replace(dtype=jnp.bfloat16, activation_dtype=jnp.bfloat16, attention=path)
  ids, types, positions, segments = _batch()
  model = Encoder(cfg)
  params = jax.eval_shape(model.init, jax.random.key(0), ids)  # Traced only: shapes suffice.

  def loss(params):
    out = model.apply(params, ids, types, positions, segments, train=True, rngs={"dropout": jax.random.key(1)})
    assert all(h.dtype == jnp.float32 for h in out.hidden_states) and out.pooled.dtype == jnp.float32
    return jnp.sum(out.last * (segments > 0)[..., None])

  equations = list(_equations(jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr))
  dtypes = lambda name, scores=False: {
      v.aval.dtype.name for e in equations if e.primitive.name == name for v in e.invars
      if hasattr(v, "aval") and v.aval.shape and (not scores or v.aval.shape[-2:] == (20, 20))}
  assert dtypes("erf") == {"bfloat16"}
  assert "bfloat16" in dtypes("select_n")
  assert dtypes("reduce_sum") == dtypes("reduce_max") == dtypes("exp", scores=True) == {"float32"}


@pytest.mark.slow
def test_bf16_activations_of_minilm_stay_close_to_float32():
  """The MiniLM checkpoint with bf16 operands and activations: every hidden state within 3% (relative L2) of
  float32, each token's vector at cosine >= 0.999 (measured 1.1% and 0.99985 at the last layer; bf16's unit
  roundoff is 0.4%)."""
  from encoder import load_hf_checkpoint, load_tokenizer, minilm_path  # pylint: disable=import-outside-toplevel
  cfg, params, _ = load_hf_checkpoint(minilm_path())
  tokenizer = load_tokenizer(minilm_path())
  texts = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
           "Activations in bfloat16 halve the memory between the matrix products."]
  encoded = [tokenizer.encode(t).input_ids for t in texts]
  ids = np.zeros((len(encoded), max(map(len, encoded))), np.int32)
  for row, e in enumerate(encoded):
    ids[row, :len(e)] = e
  real = ids != 0
  bf16 = cfg.replace(dtype=jnp.bfloat16, activation_dtype=jnp.bfloat16)
  out = [jax.jit(Encoder(c).apply)({"params": params}, jnp.asarray(ids)).hidden_states for c in (cfg, bf16)]
  for a, b in zip(*out):
    a, b = np.asarray(a)[real], np.asarray(b)[real]
    assert np.linalg.norm(a - b) <= 0.03 * np.linalg.norm(a)
    assert np.min((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)) >= 0.999


@pytest.mark.parametrize("pinned", [True, False], ids=["cpu_kernels", "accelerator_kernels"])
def test_dense_is_flax_dense_general_with_its_output_cast(pinned):
  """The encoder's dense layers: flax DenseGeneral's parameters (names, shapes, initial values) and product, the
  output rounded to the activation dtype, with either kernels choice (EncoderConfig.kernels)."""
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 5, 32)), jnp.float32)
  dots = dense_dot_general(jnp.float32, Dots(pinned=pinned, bf16=False))
  kwargs = dict(features=(3, 4), kernel_init=nn.initializers.normal(0.02), dot_general=dots)
  ours, flax_dense = Dense(**kwargs, out_dtype=jnp.bfloat16), nn.DenseGeneral(**kwargs)
  params = flax_dense.init(jax.random.key(0), x)
  assert jax.tree.all(jax.tree.map(np.array_equal, ours.init(jax.random.key(0), x), params))
  out = ours.apply(params, x)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(out, flax_dense.apply(params, x).astype(jnp.bfloat16))
