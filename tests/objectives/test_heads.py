"""MLM, NSP and SBO heads on a tiny encoder: shapes, parameter names, and losses/metrics equal a numpy reference.

The references run in float64 on the encoder's float32 outputs; the heads are float32 dots of at most 3 x 32 terms
through GELU and LayerNorm (sum_bound(96) ~ 3.5e-6 of the magnitudes summed, divided by the LayerNorm's spread), and
losses over a few tokens. The bounds are measured: on Zen 3 every comparison used at most 2.7% of its bound, while a
missing LayerNorm or GELU, an untied decoder or a wrong span position moves logits by O(1).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf, log_softmax

from encoder import Encoder, preset
from objectives import layers, registry

TINY = preset("tiny", vocab_size=61, max_positions=32, hidden_size=32, num_heads=2, intermediate_size=64,
              hidden_dropout=0.0, attention_dropout=0.0)
B, L, P = 3, 16, 5


class Pretrainer(nn.Module):
  """Encoder plus named heads, as the engine composes them: heads/<name> receive the encoder's tied `attend`."""
  names: tuple[str, ...]

  @nn.compact
  def __call__(self, batch):
    encoder = Encoder(TINY, name="encoder")
    outputs = encoder(batch["input_ids"], batch["type_ids"], batch["positions"], batch["attention_segments"])
    heads = {name: registry.build(name, {"use_pooler": True}).head.clone(parent=self, name=name)
             for name in self.names}
    return outputs, {name: head(outputs, batch, encoder.attend, False) for name, head in heads.items()}


@pytest.fixture(scope="module")
def run():
  rng = np.random.default_rng(0)
  batch = {
      "input_ids": rng.integers(5, TINY.vocab_size, (B, L)).astype(np.int32),
      "type_ids": np.zeros((B, L), np.int32),
      "positions": np.broadcast_to(np.arange(L), (B, L)).astype(np.int32),
      "attention_segments": np.ones((B, L), np.int32),
      "masked_positions": rng.integers(1, L - 1, (B, P)).astype(np.int32),
      "masked_ids": rng.integers(5, TINY.vocab_size, (B, P)).astype(np.int32),
      "masked_weights": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.float32),
      "span_left": rng.integers(0, L - 2, (B, P)).astype(np.int32),
      "span_offset": rng.integers(0, 40, (B, P)).astype(np.int32),  # Some beyond max_span_tokens (clipped).
      "nsp_label": np.array([0, 1, 1], np.int32),
  }
  batch["span_right"] = np.minimum(batch["span_left"] + 3, L - 1).astype(np.int32)
  model = Pretrainer(("mlm", "nsp", "sbo"))
  params = jax.jit(model.init)(jax.random.key(1), batch)
  # Random (not zero-initialized) biases and LayerNorm params so the reference checks every term.
  params = jax.tree.map(lambda x: np.asarray(x) + 0.1 * rng.standard_normal(x.shape).astype(np.float32), params)
  outputs, predictions = jax.jit(model.apply)(params, batch)
  return batch, params["params"], outputs, predictions


def _gelu(x):
  return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _layer_norm(x, p, eps=1e-12):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * np.asarray(p["scale"]) + np.asarray(p["bias"])


def _dense(x, p):
  return x @ np.asarray(p["kernel"], np.float64) + np.asarray(p["bias"], np.float64)


def _reference_ce(logits, labels, weights):
  logp = log_softmax(logits, axis=-1)
  nll = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
  correct = (logits.argmax(-1) == labels) * weights
  return (nll * weights).sum() / weights.sum(), (nll * weights).sum(), correct.sum(), weights.sum()


def _check_loss(name, predictions, batch, reference_logits, labels, weights):
  loss, metrics = registry.build(name).loss(predictions, batch)
  ref_loss, ref_sum, ref_correct, ref_count = _reference_ce(reference_logits, labels, weights)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-4)
  np.testing.assert_allclose(metrics[f"{name}_loss"][0], ref_sum, rtol=1e-4)
  assert metrics[f"{name}_loss"][1] == ref_count
  assert metrics[f"{name}_accuracy"] == (ref_correct, ref_count)


@pytest.mark.slow
def test_parameter_names_match_hf_import_tree(run):
  _, params, _, _ = run
  assert set(params["mlm"]) == {"transform", "layer_norm", "output_bias"}
  assert set(params["mlm"]["transform"]) == {"kernel", "bias"} and set(params["mlm"]["layer_norm"]) == {"scale", "bias"}
  assert params["mlm"]["output_bias"].shape == (TINY.vocab_size,)
  assert set(params["nsp"]) == {"kernel", "bias"} and params["nsp"]["kernel"].shape == (TINY.hidden_size, 2)
  assert params["sbo"]["position_embeddings"]["embedding"].shape == (32, TINY.hidden_size)
  assert params["sbo"]["layer_0"]["kernel"].shape == (3 * TINY.hidden_size, TINY.hidden_size)


def test_mlm_head_and_loss_equal_numpy_reference(run):
  batch, params, outputs, predictions = run
  logits = predictions["mlm"]
  assert logits.shape == (B, P, TINY.vocab_size) and logits.dtype == jnp.float32
  hidden = np.asarray(outputs.last, np.float64)
  x = np.take_along_axis(hidden, batch["masked_positions"][..., None], 1)
  x = _layer_norm(_gelu(_dense(x, params["mlm"]["transform"])), params["mlm"]["layer_norm"])
  embedding = np.asarray(params["encoder"]["embeddings"]["word_embeddings"]["embedding"], np.float64)
  reference = x @ embedding.T + np.asarray(params["mlm"]["output_bias"])
  np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-4)
  _check_loss("mlm", logits, batch, reference, batch["masked_ids"], batch["masked_weights"])


def test_nsp_head_and_loss_equal_numpy_reference(run):
  batch, params, outputs, predictions = run
  assert predictions["nsp"].shape == (B, 2)
  reference = _dense(np.asarray(outputs.pooled, np.float64), params["nsp"])
  np.testing.assert_allclose(predictions["nsp"], reference, rtol=1e-4, atol=1e-5)
  _check_loss("nsp", predictions["nsp"], batch, reference, batch["nsp_label"], np.ones(B))


def test_nsp_raw_cls_option():
  head = registry.build("nsp", {"use_pooler": False}).head
  cls, pooled = jnp.ones((2, 4)), jnp.zeros((2, 4))
  outputs = type("Out", (), {"cls": cls, "pooled": pooled})()
  params = head.init(jax.random.key(0), outputs, {})
  logits = head.apply(params, outputs, {})
  np.testing.assert_allclose(logits, cls @ params["params"]["kernel"] + params["params"]["bias"], rtol=1e-6)


def test_sbo_head_and_loss_equal_numpy_reference(run):
  batch, params, outputs, predictions = run
  logits = predictions["sbo"]
  assert logits.shape == (B, P, TINY.vocab_size)
  p = params["sbo"]
  hidden = np.asarray(outputs.last, np.float64)
  left = np.take_along_axis(hidden, batch["span_left"][..., None], 1)
  right = np.take_along_axis(hidden, batch["span_right"][..., None], 1)
  position = np.asarray(p["position_embeddings"]["embedding"])[np.minimum(batch["span_offset"], 31)]
  x = np.concatenate([left, right, position], -1)
  for i in range(2):
    x = _layer_norm(_gelu(_dense(x, p[f"layer_{i}"])), p[f"layer_norm_{i}"])
  embedding = np.asarray(params["encoder"]["embeddings"]["word_embeddings"]["embedding"], np.float64)
  reference = x @ embedding.T + np.asarray(p["output_bias"])
  np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-4)
  _check_loss("sbo", logits, batch, reference, batch["masked_ids"], batch["masked_weights"])


def test_all_padding_batch_gives_zero_loss_not_nan():
  logits = jnp.zeros((1, 3, 7))
  batch = {"masked_ids": jnp.zeros((1, 3), jnp.int32), "masked_weights": jnp.zeros((1, 3))}
  loss, metrics = registry.build("mlm").loss(logits, batch)
  assert loss == 0 and metrics["mlm_loss"] == (0, 0)


def test_softmax_nll_value_and_gradient_equal_numpy_reference():
  """The custom-gradient cross-entropy: value = -log_softmax at the label, gradient = (softmax - one_hot) * g."""
  rng = np.random.default_rng(0)
  logits = rng.normal(0, 3, (4, 5, 37))
  labels = rng.integers(0, 37, (4, 5))
  g = rng.normal(size=(4, 5))
  nll = lambda x: layers.softmax_nll(x, jnp.asarray(labels, jnp.int32))
  value, vjp = jax.vjp(nll, jnp.asarray(logits, jnp.float32))
  reference = -np.take_along_axis(log_softmax(logits, -1), labels[..., None], -1)[..., 0]
  np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-5)
  probs = np.exp(log_softmax(logits, -1))
  expected = (probs - np.eye(37)[labels]) * g[..., None]
  np.testing.assert_allclose(vjp(jnp.asarray(g, jnp.float32))[0], expected, rtol=1e-5, atol=1e-6)


def test_accuracy_counts_the_label_with_the_largest_logit():
  logits = jnp.asarray([[[0.0, 2.0, 1.0], [3.0, 0.0, -1.0], [0.5, 0.1, 0.7]]])
  _, metrics = layers.cross_entropy(logits, jnp.asarray([[1, 1, 2]]), jnp.asarray([[1.0, 1.0, 0.0]]), "x")
  assert metrics["x_accuracy"] == (1.0, 2.0)


def test_registry_unknown_name_lists_choices():
  with pytest.raises(ValueError, match=r"unknown objective 'xlnet'.*\['electra', 'mlm', 'nsp', 'sbo'\]"):
    registry.get("xlnet")
