"""Run by tests/launch/test_regime_parallel.py with 4 host devices: top_k's and lora's steps under jit over a
4-device mesh with FSDP and under pmap give the 1-device jit step's parameters (dropout off: pmap draws each
device's masks from its own key), and lora's runs with bf16 activations. Prints one JSON line {case: largest
parameter difference from the 1-device float32 run}."""

import functools
import json

import jax
import numpy as np

from benchmarks.regimes import classification_batch
from configs import common
from encoder.config import preset
from launch import model as model_lib, optimizer, sharding, steps
from launch.programs import build_programs
from tasks import classification, regimes

_INITIAL: dict[tuple[str, str], steps.TrainState] = {}  # (regime, dtype) -> the initial state on the host.


def train(regime: str, devices: int, parallelism: str, fsdp: bool = False, dtype: str = "float32") -> dict:
  import ml_collections  # pylint: disable=import-outside-toplevel
  config = ml_collections.ConfigDict({"regime": regime, "top_k": 1 if regime == "top_k" else 0, "init": ""}
                                     | regimes.config_blocks())
  cfg = preset("tiny", vocab_size=100, max_positions=32, hidden_dropout=0.0, attention_dropout=0.0, dtype=dtype)
  cfg = cfg.replace(**model_lib.regime_fields(config, cfg))
  objectives = [classification.build({"num_labels": 2, "dropout": 0.0})]
  model = model_lib.EncoderWithHeads(cfg, objectives)
  batch = classification_batch(8, 16, 100)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch, train=False))["params"]
  scales = regimes.update_scales(params, num_layers=2, regime=regime, top_k=config.top_k, layer_decay=0.9)
  trainable = None if min(jax.tree.leaves(scales)) > 0 else jax.tree.map(lambda s: s > 0, scales)
  fns = steps.StepFns(model, objectives, {"classification": 1.0},
                      optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 10, scales), trainable)
  mesh = sharding.make_mesh(1, jax.devices()[:devices])
  init = functools.partial(steps.init_state, fns, seed=0)
  abstract = jax.eval_shape(init, batch)
  shardings = sharding.state_shardings(abstract, mesh, fsdp=fsdp)
  programs = build_programs(fns, mesh, shardings, parallelism=parallelism, accum=1)
  # The initial state is made once per regime and dtype, on one device, and placed in each layout: the layouts' steps
  # are the point (launch.main's sharded init is test_engine_runs'), and an init program per layout only compiled.
  if (regime, dtype) not in _INITIAL:
    _INITIAL[regime, dtype] = jax.device_get(jax.jit(init)(batch))
  state = programs.to_layout(jax.device_put(_INITIAL[regime, dtype], shardings))
  acc = programs.place(steps.zero_step_sums(jax.eval_shape(functools.partial(steps.grad_step, fns, accum=1),
                                                           abstract, batch)[1]))
  for _ in range(3):
    state, acc = programs.train_step(state, programs.to_device(batch, accum=1), acc)
  final = programs.canonical(state)
  return {"params": jax.device_get(final.params), "opt_leaves": len(jax.tree.leaves(final.opt_state)),
          "all_leaves": 2 * len(jax.tree.leaves(final.params))}


def main() -> None:
  out = {}
  for regime in ("top_k", "lora"):
    reference = train(regime, 1, "jit")
    assert reference["opt_leaves"] < reference["all_leaves"], regime  # Moments for the trainable part alone.
    for case, kwargs in {"jit4_fsdp": dict(devices=4, parallelism="jit", fsdp=True),
                         "pmap4": dict(devices=4, parallelism="pmap")}.items():
      other = train(regime, **kwargs)
      out[f"{regime}/{case}"] = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
                                    for a, b in zip(jax.tree.leaves(reference["params"]),
                                                    jax.tree.leaves(other["params"])))
    if regime != "lora":
      continue
    bf16 = train(regime, 4, "jit", dtype="bfloat16")
    out[f"{regime}/jit4_bf16_moved"] = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
                                           for a, b in zip(jax.tree.leaves(reference["params"]),
                                                           jax.tree.leaves(bf16["params"])))
  print(json.dumps(out))


if __name__ == "__main__":
  main()
