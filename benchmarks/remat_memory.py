"""What one `model.remat` policy costs and saves on one device: the largest pretraining batch whose step fits the
device's memory, and the step time and peak memory at a given batch.

The step is benchmarks.pretrain_throughput's (MLM + NSP, AdamW, the engine's grad_step then apply_step). Its memory
at a batch is what XLA's buffer assignment gives the compiled grad_step (arguments + outputs - aliased + temporaries:
the state, the gradients and the activations kept for the backward), read from `compiled.memory_analysis()` without
running it, so the search never runs out of memory. That memory grows linearly with the batch: two probe batches
(b and 2b) give the slope, the largest fitting batch is extrapolated (a multiple of b), checked by compiling it, and
lowered by b until it fits. The limit is the allocator's `bytes_limit` (`memory_stats()`; set
XLA_PYTHON_CLIENT_MEM_FRACTION to let JAX use more of the device), or --memory-limit-mb where the device reports none
(CPUs: there the search only shows the mechanics; XLA's CPU scheduler does not lower memory with remat).

With --time-batch B (-1: the largest batch found) the step also runs at B rows (real WikiText-2 pairs, tiled): the
median step time over --steps steps after two warm-up steps, and the device's peak memory in use
(`memory_stats()["peak_bytes_in_use"]`, a high-water mark of this process: one process per policy gives each policy's
own peak), with the step's tokens/s and its useful FLOP/s over the device's dense peak (`mfu_peak`,
benchmarks.pretrain_throughput's count and PEAK_TFLOPS; null where no peak is known, as on CPUs).

--attention names the attention variant (benchmarks.encoder_speed's syntax: auto, matmul, xla or cudnn, optionally
:bfloat16 activations; a path other than matmul runs without attention dropout).

  python -m benchmarks.remat_memory --policy full [--size base] [--seq 512] [--precision bfloat16] [--time-batch B]
                                    [--attention auto]
Last line: one JSON object (policy, attention, activation_dtype, max_batch, bytes_per_row, fixed_bytes,
memory_limit_bytes, step_s, seconds_per_token, tokens_per_s, mfu_peak, peak_bytes_in_use, device).
"""

import argparse
import functools
import json
import statistics
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import pretrain_throughput
from benchmarks.encoder_speed import ATTENTION, variant_config
from benchmarks.timing import timed
from encoder import cli, errors, paths
from encoder.config import PRESETS, REMAT_POLICIES, preset
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch import steps, xla_flags

SAMPLE_ROWS = 16  # Real rows built from WikiText-2; larger batches tile them (the step's cost does not depend on text).


def tiled(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
  """`batch` repeated along its rows up to `rows` rows."""
  return {key: np.resize(value, (rows,) + value.shape[1:]) for key, value in batch.items()}


def abstract(tree):
  """The shapes and dtypes of `tree` (what lowering needs, without any device memory)."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def step_bytes(fns: steps.StepFns, state_shape, batch: dict[str, np.ndarray]) -> int:
  """Device bytes of the compiled grad_step on `batch`'s shapes: arguments + outputs - aliased + temporaries."""
  grad_step = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
  stats = grad_step.lower(state_shape, abstract(batch)).compile().memory_analysis()
  if stats is None:
    raise RuntimeError(f"XLA gives no memory analysis of compiled programs on this backend ({jax.default_backend()})")
  return (stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
          + stats.temp_size_in_bytes)


def largest_batch(fns, state_shape, sample: dict[str, np.ndarray], probe: int, limit: int,
                  max_batch: int) -> dict:
  """The largest multiple of `probe` rows whose step fits `limit` bytes (module docstring), with the fitted line."""
  low, high = step_bytes(fns, state_shape, tiled(sample, probe)), step_bytes(fns, state_shape, tiled(sample, 2 * probe))
  per_row = (high - low) / probe
  fixed = low - per_row * probe
  found: dict[str, Any] = {"bytes_per_row": round(per_row), "fixed_bytes": round(fixed), "probe_bytes": [low, high],
           "compiles": 2, "max_batch": None}
  if low > limit:
    return found | {"max_batch_note": f"{probe} rows already need {low} bytes of {limit}"}
  if per_row <= 0:
    return found | {"max_batch_note": "the compiled memory does not grow with the batch here"}
  batch = min(max_batch, int((limit - fixed) / per_row) // probe * probe)
  while batch > 2 * probe:
    found["compiles"] += 1
    if step_bytes(fns, state_shape, tiled(sample, batch)) <= limit:
      return found | {"max_batch": batch}
    batch -= probe
  return found | {"max_batch": max(batch, 2 * probe if high <= limit else probe)}


def timed_step(cfg, sample: dict[str, np.ndarray], rows: int, count: int) -> dict:
  """Median seconds of our step at `rows` rows (after 2 warm-up steps), its tokens/s and mfu_peak, and the device's
  peak memory in use."""
  batch = tiled(sample, rows)
  step = pretrain_throughput.OurStep(cfg, batch, num_steps=count + 2)
  timed(step, 2)
  seconds = statistics.median(timed(step, count))
  memory = jax.local_devices()[0].memory_stats() or {}
  length = sample["input_ids"].shape[1]
  work = pretrain_throughput.useful_flops(cfg, rows, length, int(batch["masked_weights"].sum()))
  peak = pretrain_throughput.PEAK_TFLOPS.get(jax.devices()[0].device_kind, (None, None))[
      0 if cfg.dtype == jnp.bfloat16 else 1]
  return {"step_s": round(seconds, 4), "seconds_per_token": seconds / (rows * length),
          "tokens_per_s": round(rows * length / seconds, 1),
          "mfu_peak": round(work / seconds / (peak * 1e12), 3) if peak else None,
          "peak_bytes_in_use": memory.get("peak_bytes_in_use")}


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.remat_memory", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--policy", default="none", choices=REMAT_POLICIES, help="model.remat")
  parser.add_argument("--size", default="base", choices=sorted(PRESETS), help="encoder.config preset")
  parser.add_argument("--seq", type=cli.integer(8), default=512, help="tokens per row")
  parser.add_argument("--precision", choices=("default", "bfloat16"), default="bfloat16")
  parser.add_argument("--probe-batch", type=cli.integer(1), default=8, help="the search's step: probes b and 2b rows")
  parser.add_argument("--max-batch", type=cli.integer(1), default=4096, help="the search stops here")
  parser.add_argument("--memory-limit-mb", type=cli.number(0, low_open=True), default=None,
                      help="the memory to fit (default: the device's bytes_limit; required where it has none)")
  parser.add_argument("--time-batch", type=cli.integer(0, also=(-1,)), default=0,
                      help="also time the step at this many rows (0: no; -1: the largest batch found)")
  parser.add_argument("--steps", type=cli.integer(1), default=3, help="timed steps")
  parser.add_argument("--attention", type=ATTENTION, default="auto",
                      help="the attention variant (auto, matmul, xla, cudnn, optionally :bfloat16 activations)")
  args = parser.parse_args()
  (name, choice, activation), *more = args.attention
  if more:
    parser.error(f"argument --attention: one variant per run, got {','.join(name for name, _, _ in args.attention)}")
  if args.max_batch < args.probe_batch:
    parser.error(f"argument --max-batch: expected at least --probe-batch {args.probe_batch}, got {args.max_batch}")
  xla_flags.apply_gpu_defaults()

  memory = jax.local_devices()[0].memory_stats() or {}
  limit = int(args.memory_limit_mb * 2**20) if args.memory_limit_mb else memory.get("bytes_limit")
  if not limit:
    raise errors.UserError(f"{jax.devices()[0].device_kind} reports no memory limit: pass --memory-limit-mb")
  dtype = jnp.bfloat16 if args.precision == "bfloat16" else jnp.float32
  cfg = variant_config(preset(args.size, max_positions=max(512, args.seq), remat=args.policy), choice, activation,
                       dtype, no_attention_dropout=choice != "matmul")
  tokenizer = load_tokenizer(minilm_path())
  text = paths.data_file("wikitext-2/raw/wiki.valid.raw")
  sample = pretrain_throughput.mask_batch(pretrain_throughput.nsp_batch(text, tokenizer, SAMPLE_ROWS, args.seq, seed=0),
                                          tokenizer, max_predictions=max(20, round(0.15 * args.seq)), seed=0)
  fns = pretrain_throughput.step_fns(cfg, num_steps=10)
  state_shape = jax.eval_shape(functools.partial(steps.init_state, fns, seed=0), abstract(tiled(sample, 1)))
  result = {"policy": args.policy, "size": args.size, "seq": args.seq, "precision": args.precision,
            "attention": cfg.attention, "activation_dtype": jnp.dtype(cfg.activation_dtype).name, "variant": name,
            "memory_limit_bytes": limit, "memory_limit_source": "--memory-limit-mb" if args.memory_limit_mb
            else "memory_stats()['bytes_limit']"}
  result |= largest_batch(fns, state_shape, sample, args.probe_batch, limit, args.max_batch)
  print(f"{args.policy}: largest batch {result['max_batch']} x {args.seq} in {limit / 2**30:.2f} GiB "
        f"({result['bytes_per_row'] / 2**20:.1f} MiB per row, {result['fixed_bytes'] / 2**30:.2f} GiB fixed)",
        flush=True)
  rows = result["max_batch"] if args.time_batch == -1 else args.time_batch
  if rows:
    result |= {"time_batch": rows} | timed_step(cfg, sample, rows, args.steps)
    peak = result["peak_bytes_in_use"]
    print(f"{args.policy}: {result['step_s']:.4f} s/step at {rows} rows, peak in use "
          + (f"{peak / 2**30:.2f} GiB" if peak else "not reported"), flush=True)
  print(json.dumps(result | {"device": jax.devices()[0].device_kind}))


if __name__ == "__main__":
  errors.run(main)
