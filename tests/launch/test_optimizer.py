"""Schedule (BERT: linear warmup, linear decay; NVIDIA's power-0.5 decay) and the weight-decay mask against
hand-computed values, LAMB against the paper's update in numpy."""

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax.traverse_util import flatten_dict, unflatten_dict

from configs import common
from encoder import errors
from encoder.config import preset
from encoder.model import Encoder
from launch import optimizer


def test_schedule_warmup_then_linear_decay():
  opt = common.optimizer_config(learning_rate=1e-3, warmup_steps=10, end_learning_rate=0.0)
  schedule = optimizer.learning_rate_schedule(opt, 110)
  steps = np.arange(0, 111)
  expected = np.where(steps < 10, 1e-3 * steps / 10, 1e-3 * (110 - steps) / 100)
  # float32 schedule (a product and a division of small integers and lr) against float64: a few roundings, u = 6e-8
  # relative; a step off by one moves the rate by >= 1e-5, 1% of it or more.
  np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-5, atol=1e-9)


def test_schedule_power_half_decay_and_a_bad_power():
  """decay_power 0.5 (NVIDIA's LAMB recipe's power) in float64 against lr * (1 - p)^0.5 over the post-warmup steps;
  float32 rounding of the schedule's few operations bounds the difference (rtol 1e-6)."""
  opt = common.optimizer_config(learning_rate=6e-3, warmup_steps=20, end_learning_rate=0.0, decay_power=0.5)
  schedule = optimizer.learning_rate_schedule(opt, 100)
  steps = np.arange(0, 101)
  expected = np.where(steps < 20, 6e-3 * steps / 20, 6e-3 * np.sqrt(np.clip(1 - (steps - 20) / 80, 0, 1)))
  np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-6, atol=1e-12)
  with pytest.raises(errors.ConfigError, match=r"decay_power=0\.0: expected a positive power"):
    optimizer.learning_rate_schedule(common.optimizer_config(decay_power=0.0), 100)


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
  np.testing.assert_allclose(updates["dense"]["kernel"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)  # 2 roundings.
  assert not np.any(updates["dense"]["bias"]) and not np.any(updates["layer_norm"]["scale"])


def _numpy_lamb(params, grad_fn, opt, steps: int, total: int) -> list[dict]:
  """LAMB as You et al. (2019) write it, after global-norm clipping, with the BERT schedule and decay mask, in float64:
  m, v Adam moments with bias correction, r = m/(sqrt(v)+eps) + wd*w (decayed weights only), each tensor moved by
  -lr * (||w|| / ||r||) * r (ratio 1 where a norm is 0). Returns the parameters after each step."""
  flat = {k: np.asarray(v, np.float64) for k, v in flatten_dict(params, sep="/").items()}
  decays = {k: not (k.endswith("/bias") or k.startswith("layer_norm/")) for k in flat}
  m, v = ({k: np.zeros_like(w) for k, w in flat.items()} for _ in range(2))
  history = []
  for t in range(1, steps + 1):
    current = unflatten_dict({k: w.astype(np.float32) for k, w in flat.items()}, sep="/")
    grads = {k: np.asarray(g, np.float64) for k, g in flatten_dict(grad_fn(current), sep="/").items()}
    norm = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
    grads = {k: g * min(1.0, opt.clip_norm / norm) for k, g in grads.items()}
    count = t - 1  # The schedule reads the number of updates done before this one.
    lr = (opt.learning_rate * count / opt.warmup_steps if count < opt.warmup_steps else
          opt.learning_rate + (opt.end_learning_rate - opt.learning_rate) * (count - opt.warmup_steps)
          / (total - opt.warmup_steps))
    for k, w in flat.items():
      m[k] = opt.b1 * m[k] + (1 - opt.b1) * grads[k]
      v[k] = opt.b2 * v[k] + (1 - opt.b2) * grads[k] ** 2
      r = (m[k] / (1 - opt.b1 ** t)) / (np.sqrt(v[k] / (1 - opt.b2 ** t)) + opt.eps) + opt.weight_decay * w * decays[k]
      w_norm, r_norm = np.linalg.norm(w), np.linalg.norm(r)
      flat[k] = w - lr * (w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0) * r
    history.append(dict(flat))
  return history


def test_lamb_equals_the_papers_update_and_unknown_name_is_refused():
  """Six LAMB steps on a toy regression (warmup, decay, clipping that bites, decayed and undecayed tensors) equal the
  paper's update written in numpy."""
  opt = common.optimizer_config(name="lamb", learning_rate=0.05, warmup_steps=2, weight_decay=0.5, clip_norm=0.5)
  total = 6
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(16, 3)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)
  params = {"dense": {"kernel": rng.normal(size=(3, 2)).astype(np.float32), "bias": np.array([0.5, -1.0], np.float32)},
            "layer_norm": {"scale": np.full(2, 1.5, np.float32)}}
  dense, norm = lambda p: p["dense"], lambda p: p["layer_norm"]
  loss = lambda p: jnp.sum(jnp.square((x @ dense(p)["kernel"] + dense(p)["bias"]) * norm(p)["scale"] - y))
  grad_fn = jax.jit(jax.grad(loss))
  tx = optimizer.make_optimizer(opt, total)
  state, ours = tx.init(params), params
  expected = _numpy_lamb(params, grad_fn, opt, total, total)
  for step, reference in enumerate(expected):
    grads = grad_fn(ours)
    if step == 0:
      assert optax.tree.norm(grads) > 2 * opt.clip_norm  # The clipping really scales the gradients.
    updates, state = tx.update(grads, state, ours)
    ours = optax.apply_updates(ours, updates)
    for name, value in flatten_dict(ours, sep="/").items():
      # float32 against the numpy update: elementwise ops and norms of <= 6 terms, a few u each, which LAMB's trust
      # ratio and Adam's 1/sqrt(v) keep relative; measured 2.1e-7 on Zen 3 (1/30 of the bound).
      np.testing.assert_allclose(value, reference[name], rtol=2e-5, atol=1e-6, err_msg=f"{name} after step {step + 1}")
  assert not np.allclose(ours["dense"]["kernel"], params["dense"]["kernel"], atol=1e-2)  # It did move.
  bad = ml_collections.ConfigDict(common.optimizer_config(name="sgd"))
  with pytest.raises(ValueError, match=re.escape("config.optimizer.name='sgd'")):
    optimizer.make_optimizer(bad, 10)


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
    np.testing.assert_allclose(updates["dense"]["kernel"], updates_plain["dense"]["kernel"], rtol=1e-6)  # Equal.
    params, plain = optax.apply_updates(params, updates), optax.apply_updates(plain, updates_plain)
    expected = 0.75 * expected + 0.25 * np.asarray(params["dense"]["kernel"])
  # Four steps of 0.75 e + 0.25 p in float32 on both sides, 3 roundings a step: <= 12 u = 7e-7 (measured equal).
  np.testing.assert_allclose(state.ema["dense"]["kernel"], expected, rtol=1e-6)
  assert not np.allclose(expected, params["dense"]["kernel"])  # A guard: the average lags by O(lr).

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
