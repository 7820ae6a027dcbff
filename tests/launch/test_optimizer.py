"""Schedule (BERT: linear warmup, linear decay) and the weight-decay mask, against hand-computed values."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from configs import common
from encoder.config import preset
from encoder.model import Encoder
from launch import optimizer


def test_schedule_warmup_then_linear_decay():
  opt = common.optimizer_config(learning_rate=1e-3, warmup_steps=10, end_learning_rate=0.0)
  schedule = optimizer.learning_rate_schedule(opt, 110)
  steps = np.arange(0, 111)
  expected = np.where(steps < 10, 1e-3 * steps / 10, 1e-3 * (110 - steps) / 100)
  np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-5, atol=1e-9)


def test_decay_mask_skips_biases_and_layer_norms():
  cfg = preset("tiny", vocab_size=50, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=8)
  params = Encoder(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32))["params"]
  mask = optimizer.decay_mask(params)
  assert mask["embeddings"]["word_embeddings"]["embedding"]
  assert not mask["embeddings"]["layer_norm"]["scale"] and not mask["embeddings"]["layer_norm"]["bias"]
  assert mask["layer_0"]["attention"]["qkv"]["kernel"] and not mask["layer_0"]["attention"]["qkv"]["bias"]
  assert not mask["layer_0"]["output_layer_norm"]["scale"]
  assert mask["pooler"]["kernel"] and not mask["pooler"]["bias"]


def test_adamw_decays_only_masked_weights():
  """With zero gradients AdamW's update is -lr * wd * w on decayed leaves and exactly 0 on the others."""
  opt = common.optimizer_config(learning_rate=0.1, warmup_steps=0, weight_decay=0.5, clip_norm=0.0)
  tx = optimizer.make_optimizer(opt, 10)
  params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}, "layer_norm": {"scale": jnp.ones(2)}}
  updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  np.testing.assert_allclose(updates["dense"]["kernel"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
  assert not np.any(updates["dense"]["bias"]) and not np.any(updates["layer_norm"]["scale"])


def test_lamb_and_unknown_name():
  opt = common.optimizer_config(name="lamb")
  assert isinstance(optimizer.make_optimizer(opt, 10), optax.GradientTransformation)
  bad = ml_collections.ConfigDict(common.optimizer_config(name="sgd"))
  try:
    optimizer.make_optimizer(bad, 10)
  except ValueError as err:
    assert "config.optimizer.name='sgd'" in str(err)
  else:
    raise AssertionError("unknown optimizer accepted")


def test_parameter_ema_follows_the_recurrence_and_is_what_evaluation_reads():
  """ema_decay: the average starts at the initial parameters and after each step moves (1 - d) toward the updated
  ones; the updates themselves are those of the plain optimizer. Checked against a numpy loop."""
  plain_opt = common.optimizer_config(learning_rate=0.1, warmup_steps=0)
  tx_plain = optimizer.make_optimizer(plain_opt, 10)
  tx = optimizer.make_optimizer(common.optimizer_config(learning_rate=0.1, warmup_steps=0, ema_decay=0.75), 10)
  rng = np.random.default_rng(0)
  params = {"dense": {"kernel": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)}}
  plain, state, state_plain = params, tx.init(params), tx_plain.init(params)
  expected = np.asarray(params["dense"]["kernel"])
  for _ in range(4):
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
    updates, state = tx.update(grads, state, params)
    updates_plain, state_plain = tx_plain.update(grads, state_plain, plain)
    np.testing.assert_allclose(updates["dense"]["kernel"], updates_plain["dense"]["kernel"], rtol=1e-6)
    params, plain = optax.apply_updates(params, updates), optax.apply_updates(plain, updates_plain)
    expected = 0.75 * expected + 0.25 * np.asarray(params["dense"]["kernel"])
  np.testing.assert_allclose(state.ema["dense"]["kernel"], expected, rtol=1e-6)
  assert not np.allclose(expected, params["dense"]["kernel"])

  class State:  # The fields evaluation_params reads from a TrainState.
    def __init__(self, params, opt_state):
      self.params, self.opt_state = params, opt_state
  assert optimizer.evaluation_params(State(params, state)) is state.ema
  assert optimizer.evaluation_params(State(plain, state_plain)) is plain
  try:
    optimizer.make_optimizer(common.optimizer_config(ema_decay=1.0), 10)
  except ValueError as err:
    assert "ema_decay=1.0" in str(err)
  else:
    raise AssertionError("ema_decay 1.0 accepted")
