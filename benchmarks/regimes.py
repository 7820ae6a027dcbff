"""Fine-tuning regimes side by side: step time, parameter, optimizer-state and peak memory of one training step.

For each encoder size (--sizes: encoder.config presets, MiniLM's 6x384 and BERT-base's 12x768 by default, vocabulary
30,522) and each regime (full, frozen, top_k=2, lora r=8 on query and value, bitfit, adapters of size 64 in both
places), the engine's step as launch.train runs it: jit(launch.steps.grad_step) then jit(launch.steps.apply_step)
(donated state), a 2-label classification head on [CLS], dropout 0.1, AdamW (tasks.regimes.update_scales ->
launch.optimizer.make_optimizer). Every regime trains on the same batch of random ids (--batch x --length). Timed rounds
run each regime's step once in turn, so a shared machine's load reaches every regime alike, and the figure is the
median over rounds (min beside it).

Reported per regime: `step_s` (median), `vs_full` (full's median / this one's: > 1 is faster), `params_mib` (every
parameter), `trained_mib` (those the regime trains), `opt_state_mib` (AdamW's moments), `peak_mib` (the larger of the
two programs' XLA memory estimate: arguments + outputs + temporaries - donated buffers, from
`compiled.memory_analysis()`), `grad_dots` and `kernel_grad_dots` (dot products in the compiled gradient program, and
those whose output has a feed-forward kernel's shape: weight gradients; batch x length must then differ from the
hidden and intermediate sizes, or a forward product has that shape too) and `update_mib` (bytes the update program
reads and writes, XLA's cost analysis). A regime whose modules the encoder lacks is reported as missing.

  python -m benchmarks.regimes --sizes minilm,base --batch 8 --length 64 --rounds 5
"""

import argparse
import functools
import json
import re
import statistics
from typing import Any

import jax
import ml_collections
import numpy as np

from benchmarks import timing
from configs import common
from encoder import cli, errors
from encoder.config import PRESETS, preset
from launch import model as model_lib, optimizer, steps
from tasks import classification, regimes

REGIMES: tuple[tuple[str, dict[str, int]], ...] = (
    ("full", {}), ("frozen", {}), ("top_k", {"top_k": 2}), ("lora", {}), ("bitfit", {}), ("adapters", {}))
MIB = 2**20


def classification_batch(rows: int, length: int, vocab: int) -> dict[str, np.ndarray]:
  """Random sentence-classification rows (seed 0), the same for every regime."""
  rng = np.random.default_rng(0)
  return dict(input_ids=rng.integers(5, vocab, (rows, length)).astype(np.int32),
              type_ids=np.zeros((rows, length), np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32), label=rng.integers(0, 2, rows).astype(np.int32),
              example_mask=np.ones(rows, np.float32))


def _bytes(tree: Any) -> int:
  return sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def _peak(compiled) -> int:
  memory = compiled.memory_analysis()
  return (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
          - memory.alias_size_in_bytes)


def _dots(compiled, kernel_shapes: set[str]) -> tuple[int, int]:
  lines = [line for line in compiled.as_text().splitlines() if re.search(r"\b(dot|convolution)\(", line)]
  shapes = [line.split("=")[1].split()[0].split("{")[0] for line in lines if "=" in line]
  return len(lines), sum(shape in kernel_shapes for shape in shapes)


def _setup(size: str, regime: str, fields: dict, batch: dict, vocab: int) -> dict[str, Any]:
  """One regime's step programs and state on `size`'s encoder."""
  config = ml_collections.ConfigDict({"regime": regime, "top_k": fields.get("top_k", 0), "init": ""}
                                     | regimes.config_blocks())
  cfg = preset(size, vocab_size=vocab, max_positions=512, hidden_dropout=0.1, attention_dropout=0.1)
  cfg = cfg.replace(**model_lib.regime_fields(config, cfg))
  objectives = [classification.build({"num_labels": 2})]
  model = model_lib.EncoderWithHeads(cfg, objectives)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch, train=False))["params"]
  scales = regimes.update_scales(params, num_layers=cfg.num_layers, regime=regime, top_k=config.top_k)
  if regime in ("lora", "adapters") and not any(s > 0 for s in jax.tree.leaves(
      regimes.select(scales, regimes.trainable(params, num_layers=cfg.num_layers, regime=regime))["encoder"])):
    raise LookupError(f"the encoder has no {regime} modules")
  trainable = None if min(jax.tree.leaves(scales)) > 0 else jax.tree.map(lambda s: s > 0, scales)
  fns = steps.StepFns(model, objectives, {"classification": 1.0},
                      optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 1000, scales), trainable)
  state = jax.jit(functools.partial(steps.init_state, fns, seed=0))(batch)
  grad = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
  update = jax.jit(functools.partial(steps.apply_step, fns), donate_argnums=(0, 1))
  outputs = jax.eval_shape(grad, state, batch)
  acc = steps.zero_step_sums(outputs[1])
  grad_compiled, update_compiled = grad.lower(state, batch).compile(), update.lower(state, acc, *outputs).compile()
  kernels = {f"f32[{cfg.hidden_size},{cfg.intermediate_size}]", f"f32[{cfg.intermediate_size},{cfg.hidden_size}]"}
  dots, kernel_dots = _dots(grad_compiled, kernels)
  return dict(state=state, acc=acc, grad=grad_compiled, update=update_compiled, times=[], row=dict(
      params_mib=_bytes(state.params) / MIB, trained_mib=_bytes(steps.trained(fns, state.params)) / MIB,
      opt_state_mib=_bytes(state.opt_state) / MIB, peak_mib=max(_peak(grad_compiled), _peak(update_compiled)) / MIB,
      grad_dots=dots, kernel_grad_dots=kernel_dots,
      update_mib=(update_compiled.cost_analysis() or {}).get("bytes accessed", float("nan")) / MIB))


def _step(run: dict[str, Any], batch: dict) -> None:
  run["state"], run["acc"] = run["update"](run["state"], run["acc"], *run["grad"](run["state"], batch))
  jax.block_until_ready(run["state"])


def measure(size: str, rows: int, length: int, rounds: int, vocab: int) -> dict[str, dict]:
  """{regime: row} for `size` (module docstring)."""
  batch = classification_batch(rows, length, vocab)
  runs, missing = {}, {}
  for regime, fields in REGIMES:
    try:
      runs[regime] = _setup(size, regime, fields, batch, vocab)
    except LookupError as err:
      missing[regime] = {"missing": str(err)}
  for run in runs.values():  # Warm-up: the first call of a donated program allocates.
    _step(run, batch)
  for _ in range(rounds):
    for run in runs.values():
      run["times"] += timing.timed(functools.partial(_step, run, batch), 1)
  full = statistics.median(runs["full"]["times"])
  out = {}
  for regime, run in runs.items():
    median = statistics.median(run["times"])
    out[regime] = dict(step_s=median, min_s=min(run["times"]), vs_full=full / median) | run["row"]
  return out | missing


def table(size: str, rows: dict[str, dict]) -> str:
  """A markdown table of `measure`'s rows."""
  head = ("| regime | step (s, median) | x faster than full | params MiB | trained MiB | Adam state MiB | peak MiB | "
          "grad dots (kernel-grad) | update MiB accessed |\n|---|---|---|---|---|---|---|---|---|")
  lines = [f"**{size}**", "", head]
  for regime, r in rows.items():
    if "missing" in r:
      lines.append(f"| {regime} | missing: {r['missing']} |||||||")
      continue
    lines.append(f"| {regime} | {r['step_s']:.3f} (min {r['min_s']:.3f}) | {r['vs_full']:.2f} | "
                 f"{r['params_mib']:.1f} | {r['trained_mib']:.2f} | {r['opt_state_mib']:.2f} | {r['peak_mib']:.0f} | "
                 f"{r['grad_dots']} ({r['kernel_grad_dots']}) | {r['update_mib']:.1f} |")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.regimes", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--sizes", type=cli.Names(tuple(PRESETS)), default="minilm,base",
                      help="encoder.config presets, comma-separated")
  parser.add_argument("--batch", type=cli.integer(1), default=8, help="rows of the batch")
  parser.add_argument("--length", type=cli.integer(2, 512), default=64, help="tokens per row")
  parser.add_argument("--rounds", type=cli.integer(1), default=5, help="timed steps of each regime")
  parser.add_argument("--vocab", type=cli.integer(10), default=30522, help="vocabulary size")
  parser.add_argument("--json", default="", help="also write the rows to this file")
  args = parser.parse_args(argv)
  results = {}
  for size in args.sizes:
    results[size] = measure(size, args.batch, args.length, args.rounds, args.vocab)
    print(table(size, results[size]) + "\n", flush=True)
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"args": vars(args), "devices": str(jax.devices()), "results": results}, f, indent=2)


if __name__ == "__main__":
  errors.run(main)
