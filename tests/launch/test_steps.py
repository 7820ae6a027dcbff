"""launch.steps: the engine's two programs (gradients, then the update) compute what the one-program step computes."""

import functools
import re

import jax
import numpy as np
import pytest

from configs import common
from encoder.config import preset
from launch import optimizer, steps
from launch.model import EncoderWithHeads
from objectives import registry


def _batch(rows: int = 4, length: int = 16, masked: int = 3, vocab: int = 100) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  return dict(input_ids=rng.integers(5, vocab, (rows, length)).astype(np.int32),
              type_ids=np.zeros((rows, length), np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32),
              masked_positions=rng.integers(1, length, (rows, masked)).astype(np.int32),
              masked_ids=rng.integers(5, vocab, (rows, masked)).astype(np.int32),
              masked_weights=np.ones((rows, masked), np.float32), nsp_label=rng.integers(0, 2, rows).astype(np.int32))


def _initial_state(fns, batch):
  """steps.init_state as one jitted program (op by op it compiles ~100 small programs)."""
  return jax.jit(functools.partial(steps.init_state, fns, seed=0))(batch)


@pytest.mark.slow
def test_two_programs_equal_the_fused_step():
  cfg = preset("tiny", vocab_size=100, max_positions=32, num_layers=1)  # The split is the step's: one layer does.
  objectives = [registry.build("mlm"), registry.build("nsp")]
  fns = steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                      weights={"mlm": 1.0, "nsp": 1.0},
                      tx=optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 10))
  batch = _batch()
  fused = jax.jit(functools.partial(steps.train_step, fns, accum=1))
  grads = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
  update = jax.jit(functools.partial(steps.apply_step, fns))
  state = _initial_state(fns, batch)
  acc = steps.zero_metrics(functools.partial(steps.train_step, fns, accum=1), state, batch)
  # The engine's zeros, from the gradient program's outputs alone (launch.train), are the fused step's.
  engine_zeros = steps.zero_step_sums(jax.eval_shape(grads, state, batch)[1])
  assert jax.tree.map(lambda x: (x.shape, x.dtype, x.tolist()), engine_zeros) == jax.tree.map(
      lambda x: (x.shape, x.dtype, x.tolist()), {k: np.asarray(v) for k, v in acc.items()})
  one, one_acc, two, two_acc = state, acc, state, acc
  for _ in range(3):
    one, one_acc = fused(one, batch, one_acc)
    two, two_acc = update(two, two_acc, *grads(two, batch))
  assert int(two.step) == 3 and float(two_acc["mlm_loss"][1]) == 3 * 12  # Three steps of 12 masked tokens.
  moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()), state.params, two.params)
  assert min(jax.tree.leaves(moved)) > 0  # Every parameter was updated.
  for a, b in zip(jax.tree.leaves((one.params, one.opt_state, one_acc)), jax.tree.leaves((two.params, two.opt_state,
                                                                                           two_acc))):
    # The same float32 arithmetic in one program or two: measured equal to the bit on Zen 3; the bounds allow XLA
    # to fuse the two programs' sums otherwise. A missed or doubled update moves parameters by lr ~ 1e-3.
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


def _sbo_fields(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  length = batch["input_ids"].shape[1]
  return batch | dict(span_left=np.maximum(batch["masked_positions"] - 1, 0),
                      span_right=np.minimum(batch["masked_positions"] + 2, length - 1),
                      span_offset=np.zeros_like(batch["masked_positions"]))


def _three_steps(cfg, objectives, batch):
  """(state, metric sums) after three jitted training steps on `batch`, every objective weighted 1."""
  fns = steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                      weights={o.name: 1.0 for o in objectives},
                      tx=optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 10))
  step = jax.jit(functools.partial(steps.train_step, fns, accum=1))
  state = _initial_state(fns, batch)
  acc = steps.zero_metrics(functools.partial(steps.train_step, fns, accum=1), state, batch)
  for _ in range(3):
    state, acc = step(state, batch, acc)
  return state, acc


@pytest.mark.slow
def test_last_block_on_the_rows_the_heads_read_trains_like_the_full_block():
  """Objectives name the positions they read (objective.reads); the last block then computes [CLS] plus those rows
  only. Three dropout-on training steps with MLM + NSP + SBO equal those with every row computed."""
  cfg = preset("tiny", vocab_size=100, max_positions=32)
  objectives = [registry.build("mlm"), registry.build("nsp"), registry.build("sbo")]
  batch = _sbo_fields(_batch(length=24, masked=3))
  from launch import model as model_lib  # pylint: disable=import-outside-toplevel
  assert model_lib.last_positions(objectives, batch).shape == (4, 1 + 3 + 6)
  assert model_lib.last_positions(objectives + [registry.build("mlm")._replace(name="x", reads=None)], batch) is None

  (rows, rows_acc), (full, full_acc) = (_three_steps(cfg, objectives, batch),
                                        _three_steps(cfg, [o._replace(reads=None) for o in objectives], batch))
  assert float(rows_acc["sbo_loss"][1]) == 3 * 12
  # Three AdamW steps from the last block on fewer rows: other summation orders, which Adam's per-component
  # normalization does not damp; measured 7.5e-9 on Zen 3 (1/180 of the bound), while a wrong row read by a head
  # changes the gradients, and so every parameter, by O(lr) = 1e-3.
  for a, b in zip(jax.tree.leaves((rows.params, rows_acc)), jax.tree.leaves((full.params, full_acc))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_rdrop_runs_each_example_twice_and_equals_the_plain_step_without_dropout():
  """Objective.train_copies: the step repeats each example (adjacent rows); with dropout off both copies agree, the
  KL term is zero and three R-Drop steps equal three plain steps; with dropout on the copies differ (KL > 0)."""
  from tasks import classification  # pylint: disable=import-outside-toplevel
  batch = {k: v for k, v in _batch().items() if k in ("input_ids", "type_ids", "positions", "attention_segments")}
  batch |= {"label": np.asarray([0, 1, 2, 1], np.int32), "example_mask": np.asarray([1, 1, 1, 0], np.float32)}

  def train(rdrop, dropout):  # One layer: the copies are the step's and the head's, not the depth's.
    cfg = preset("tiny", vocab_size=100, max_positions=32, num_layers=1, hidden_dropout=dropout,
                 attention_dropout=dropout)
    return _three_steps(cfg, [classification.build({"num_labels": 3, "rdrop": rdrop, "dropout": dropout})], batch)

  (rdrop, rdrop_acc), (plain, plain_acc) = train(1.0, 0.0), train(0.0, 0.0)
  assert float(rdrop_acc["classification_loss"][1]) == 3 * 6 and float(plain_acc["classification_loss"][1]) == 3 * 3
  # Both copies compute the same float32 logits, so the KL is rounding (two softmaxes of 3 logits: ~1e-7 each); the
  # doubled batch sums each loss twice (measured 9.5e-8 relative, 1/100 of the bound; parameters 3.7e-8, 1/30).
  assert float(rdrop_acc["classification_rdrop_kl"][0]) < 1e-6
  np.testing.assert_allclose(rdrop_acc["classification_loss"][0] / 2, plain_acc["classification_loss"][0], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(rdrop.params), jax.tree.leaves(plain.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  assert float(train(1.0, 0.1)[1]["classification_rdrop_kl"][0]) > 1e-4  # Dropout on: 100 times the bound above.


def _kernel_gradient_dots(compiled, cfg) -> int:
  """Dots of a compiled program whose output has the shape of a feed-forward kernel ([hidden, intermediate] either
  way round): the weight gradients of the FFN's two dense layers (no forward or input-gradient dot has it: those
  are [rows, width])."""
  shapes = {f"f32[{cfg.hidden_size},{cfg.intermediate_size}]", f"f32[{cfg.intermediate_size},{cfg.hidden_size}]"}
  return sum(1 for line in compiled.as_text().splitlines()
             if re.search(r"\b(dot|convolution)\(", line) and line.split("=")[1].split()[0].split("{")[0] in shapes)


@pytest.mark.slow
def test_frozen_parameters_cost_no_gradient_work_and_keep_no_adam_state():
  """A regime that freezes the embeddings and the first layer (top_k=1 of 2, layer decay 0.5): the gradient program
  differentiates the trainable part alone (StepFns.trainable): it has the weight-gradient dots of the trained layer
  only, none for the frozen one (counted in the compiled HLO) and returns the trainable part's gradients; the
  optimizer keeps no moments for frozen parameters; yet three steps give the parameters of the plain gradient with
  frozen updates zeroed."""
  import optax  # pylint: disable=import-outside-toplevel

  from tasks import regimes  # pylint: disable=import-outside-toplevel
  cfg = preset("tiny", vocab_size=100, max_positions=32)
  objectives = [registry.build("mlm"), registry.build("nsp")]
  model, batch = EncoderWithHeads(cfg, objectives), _batch()
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch, train=False))["params"]  # The tree alone.
  scales = regimes.update_scales(params, num_layers=2, regime="top_k", top_k=1, layer_decay=0.5)
  live = jax.tree.map(lambda s: s > 0, scales)
  opt = common.optimizer_config(warmup_steps=1)
  lean = steps.StepFns(model, objectives, {"mlm": 1.0, "nsp": 1.0}, optimizer.make_optimizer(opt, 10, scales), live)
  base = optax.adamw(optimizer.learning_rate_schedule(opt, 10), eps=opt.eps, weight_decay=opt.weight_decay,
                     mask=optimizer.decay_mask)  # Every parameter through AdamW, frozen updates scaled to zero.
  plain = steps.StepFns(model, objectives, {"mlm": 1.0, "nsp": 1.0}, optax.chain(
      regimes.scale_updates(jax.tree.map(float, live)), optax.clip_by_global_norm(opt.clip_norm), base,
      regimes.scale_updates(scales)))
  states, start = [], _initial_state(lean, batch)
  grads = jax.eval_shape(functools.partial(steps.grad_step, lean, accum=1), start, batch)[2]
  assert jax.tree.structure(grads) == jax.tree.structure(regimes.select(params, live))  # The trainable part's.
  assert "embeddings" not in grads["encoder"] and "layer_0" not in grads["encoder"]
  starts = [start, _initial_state(plain, batch)]
  compiled = [jax.jit(functools.partial(steps.grad_step, fns, accum=1)).lower(state, batch).compile()
              for fns, state in zip((lean, plain), starts)]
  # The trained layer's two FFN kernel gradients, none of the frozen layer's (the plain step computes both layers').
  assert [_kernel_gradient_dots(c, cfg) for c in compiled] == [2, 4]
  for fns, grads_of, state in zip((lean, plain), compiled, starts):
    # The engine's two programs (launch.train; test_two_programs_equal_the_fused_step: the fused step's values),
    # running the gradient programs whose dots were counted.
    update = jax.jit(functools.partial(steps.apply_step, fns))
    acc = steps.zero_metrics(functools.partial(steps.train_step, fns, accum=1), state, batch)
    for _ in range(3):
      state, acc = update(state, acc, *grads_of(state, batch))
    states.append(state)
  assert len(jax.tree.leaves(states[0].opt_state)) < len(jax.tree.leaves(states[1].opt_state))
  embeddings = states[0].params["encoder"]["embeddings"]["word_embeddings"]["embedding"]
  np.testing.assert_array_equal(embeddings, start.params["encoder"]["embeddings"]["word_embeddings"]["embedding"])
  # Frozen gradients skipped or zeroed: the same arithmetic on the live parameters (measured equal on Zen 3); a
  # frozen update let through moves a parameter by lr ~ 1e-3.
  for a, b in zip(jax.tree.leaves(states[0].params), jax.tree.leaves(states[1].params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
