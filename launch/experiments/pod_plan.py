"""Will a pretraining config fit a TPU slice's memory, and can its hosts feed it? Answered on this machine's CPU
before anything is created (`tpu_pod --plan`, and the same check before every launch).

  python -m launch.experiments.pod_plan --type v4-32 [--mfu 0.5] -- --config configs/pretrain.py:size=base ... \
      --workdir gs://bucket/runs/x
Prints the figures and the verdict, then one JSON object (the figures); exits 1 with `error: --plan: ...` when the
config is refused.

Memory per device: the engine's two programs (launch.train: grad_step, then apply_step), jitted with the run's
shardings over a mesh of the slice's JAX devices (host devices of this CPU) and compiled, never run;
`compiled.memory_analysis()` gives each device's arguments + outputs - aliased + temporaries, the larger program's is
the peak. That is XLA:CPU's buffer assignment, not XLA:TPU's: on BERT-base at 512 tokens in bf16 this CPU's compiler
keeps 760 MiB per row where the H200's kept 457 MiB (docs/gpu.md; 0.60 of it), and it does not lower memory with
remat (docs/performance.md). So the plan gives a range: `high`, the CPU figure; `low`, the state (parameters, optimizer
moments and gradients, exact) plus ACCELERATOR_RATIO of the rest. A config whose `low` exceeds the device's HBM cannot
fit: refused, with the smallest config.grad_accum_steps whose `low` fits. One whose `high` exceeds it may not fit:
said, not refused (the recipe's 200-step smoke test on the slice settles it; TPU's compiler rematerializes to fit).

Input per host: the tokens/s its share of each batch needs when the step runs at --mfu of the chips' dense bf16 peak
(step FLOPs: encoder.flops.step_flops, as launch.train's MFU), against what its input workers supply: the worker
processes of config.data.workers (-1: input_pipeline.worker_count for the host's cores) times one process's rate,
measured here in CPU time on the config's rows (from the sample corpus's text in memory), times BUCKET_READ_FACTOR
when the prepared corpus is in a bucket (reading it there costs as much CPU again: docs/pretraining.md's read
table). A host that cannot keep up is refused, naming the workers it needs.
"""

import argparse
import contextlib
import functools
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from encoder import cli, errors
from launch.experiments import tpu_types

# Tokens per CPU-second of the input pipeline reading a prepared corpus from gs:// over reading it locally (rows of
# 128, 0-2 workers: 64-74k against 130-144k; benchmarks.prepared_read against the GCS emulator, docs/pretraining.md).
BUCKET_READ_FACTOR = 0.5
ACCELERATOR_RATIO = 0.60  # H200 / this CPU's compiled bytes per row, BERT-base, 512 tokens, bf16 (457.2 / 760.1 MiB).
USABLE_MEMORY = 0.95  # Of a device's HBM: the runtime keeps some (a v5e chip reports ~15.75 of 16 GiB).
MASKING_SECONDS = 2.0  # How long one process's masking rate is measured.
SAMPLE_TEXT = Path(__file__).resolve().parents[2] / "objectives" / "sample_corpus" / "wiki.heldout.txt"


class Plan(NamedTuple):
  """The figures and the verdict of one config on one slice type."""
  slice: tpu_types.SliceType
  rows_per_device: int  # Rows of one micro-batch on one device.
  accum: int
  state_bytes: int  # Per device: parameters + optimizer state + gradients.
  high_bytes: int  # Per device: the CPU-compiled peak of the step's two programs.
  low_bytes: int  # state_bytes + ACCELERATOR_RATIO * (high_bytes - state_bytes).
  device_bytes: int  # Usable HBM per device.
  fits_accum: int  # The smallest grad_accum_steps whose low estimate fits (0: none does).
  step_seconds: float  # At `mfu` of the peak.
  host_tokens_per_s: float  # What one host's input must supply.
  workers: int  # Input worker processes on a host (0: threads).
  process_tokens_per_s: float  # One process's masking rate, measured here.
  supply_tokens_per_s: float
  mfu: float

  def problems(self) -> list[str]:
    """One line per reason the launch must not go ahead, each with its remedy (empty: it may)."""
    out = []
    if self.low_bytes > self.device_bytes:
      accum = (f"--config.grad_accum_steps={self.fits_accum * self.accum} (low estimate fits)" if self.fits_accum
               else "a larger slice or --config.fsdp=true (even one row per device does not fit)")
      out.append(f"memory: {_gib(self.low_bytes)}-{_gib(self.high_bytes)} GiB per device, over the "
                 f"{_gib(self.device_bytes)} GiB of a {self.slice.generation} device; use {accum}, "
                 "--config.model.remat=full, or a smaller config.batch_size")
    if self.supply_tokens_per_s < self.host_tokens_per_s:
      needed = math.ceil(self.host_tokens_per_s / self.process_tokens_per_s)
      remedy = (f"set --config.data.workers={needed} (of the host's {self.slice.host_cores} cores)"
                if needed < self.slice.host_cores else
                f"{needed} workers would be needed, more than the host's {self.slice.host_cores} cores: the chips "
                "would wait for input (a larger model per token, or --mfu if the step will be slower)")
      out.append(f"input: a host needs {self.host_tokens_per_s:,.0f} tokens/s at MFU {self.mfu}, its {self.workers} "
                 f"input worker(s) supply ~{self.supply_tokens_per_s:,.0f}; {remedy}")
    return out

  def report(self) -> str:
    """The figures, one line each, then the verdict."""
    t = self.slice
    lines = [
        f"slice {t.name}: {t.chips} chips, {t.devices} devices on {t.hosts} host(s), "
        f"{_gib(t.device_memory)} GiB HBM and {t.device_peak_flops / 1e12:.0f} bf16 TFLOP/s per device",
        f"per device: {self.rows_per_device} rows per micro-batch x {self.accum} micro-batch(es)",
        f"memory per device: state {_gib(self.state_bytes)} GiB; step {_gib(self.low_bytes)} (accelerator estimate) to "
        f"{_gib(self.high_bytes)} (XLA:CPU's compiled program) GiB; usable {_gib(self.device_bytes)} GiB",
        f"input per host: {self.host_tokens_per_s:,.0f} tokens/s needed (step {self.step_seconds:.3f} s at MFU "
        f"{self.mfu}); supplied ~{self.supply_tokens_per_s:,.0f} by {self.workers} worker(s) x "
        f"{self.process_tokens_per_s:,.0f} (one process's rate per CPU-second, measured on this CPU; halved for a "
        "gs:// corpus)"]
    problems = self.problems()
    if problems:
      lines += [f"verdict: refused: {p}" for p in problems]
    elif self.high_bytes > self.device_bytes:
      lines.append("verdict: may not fit (only the accelerator estimate fits); the 200-step smoke test on the slice "
                   "settles it")
    else:
      lines.append("verdict: fits and can be fed")
    return "\n".join(lines)


def _gib(n: float) -> str:
  return f"{n / tpu_types.GIB:.1f}"


def _tree_bytes(tree: Any) -> int:
  """Bytes one device holds of an abstract tree whose leaves carry shardings."""
  import jax  # pylint: disable=import-outside-toplevel
  return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


class StepPrograms(NamedTuple):
  """The engine's two step programs for a config, compiled for jax's devices, with their abstract inputs."""
  state: Any  # ShapeDtypeStructs with the run's shardings.
  batch: Any
  grad_step: Any  # Compiled: (state, batch) -> (loss, metrics, grads).
  apply_step: Any  # Compiled: (state, acc, loss, metrics, grads) -> (state, acc); state and acc donated.
  state_bytes: int  # Per device: the state and the gradients.


def step_programs(config: Any, work: Any, accum: int) -> StepPrograms:
  """launch.train's grad_step and apply_step for `config` (its batch_size, mesh_model, fsdp, optimizer) over all of
  jax's devices with `accum` micro-batches, lowered from abstract inputs and compiled (nothing is allocated)."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel

  from launch import optimizer, sharding, steps  # pylint: disable=import-outside-toplevel
  from launch.model import EncoderWithHeads, encoder_config, term_weights  # pylint: disable=import-outside-toplevel
  cfg = encoder_config(config.model, work.vocab_size)
  fns = steps.StepFns(EncoderWithHeads(cfg, work.objectives), work.objectives,
                      term_weights(work.objectives, work.weights),
                      optimizer.make_optimizer(config.optimizer, work.total_steps), None)
  mesh = sharding.make_mesh(config.mesh_model)
  replicated = NamedSharding(mesh, P())
  on = lambda tree, sh: jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h), tree, sh)
  everywhere = lambda tree: on(tree, jax.tree.map(lambda _: replicated, tree))
  abstract = jax.eval_shape(functools.partial(steps.init_state, fns, seed=config.seed), work.example, None)
  shardings = sharding.state_shardings(abstract, mesh, fsdp=config.fsdp)
  state = on(abstract, shardings)
  rows = config.batch_size // accum
  batch_sharding = NamedSharding(mesh, sharding.batch_spec(accum))
  batch = {k: jax.ShapeDtypeStruct(((accum,) if accum > 1 else ()) + (rows,) + v.shape[1:], v.dtype,
                                   sharding=batch_sharding) for k, v in work.example.items()}
  grad_step = jax.jit(functools.partial(steps.grad_step, fns, grad_shardings=shardings.params, accum=accum),
                      in_shardings=(shardings, batch_sharding),
                      out_shardings=(replicated, replicated, shardings.params))
  loss, metrics, grads = jax.eval_shape(grad_step, state, batch)
  acc = jax.eval_shape(lambda: steps.zero_metrics(functools.partial(steps.train_step, fns, accum=accum),
                                                  state, batch))
  apply_step = jax.jit(functools.partial(steps.apply_step, fns),
                       in_shardings=(shardings, replicated, replicated, replicated, shardings.params),
                       out_shardings=(shardings, replicated), donate_argnums=(0, 1))
  applied = apply_step.lower(state, everywhere(acc), everywhere(loss), everywhere(metrics), on(grads, shardings.params))
  return StepPrograms(state, batch, grad_step.lower(state, batch).compile(), applied.compile(),
                      _tree_bytes(state) + _tree_bytes(on(grads, shardings.params)))


def program_bytes(compiled: Any) -> int:
  """Per device: arguments + outputs - aliased + temporaries of a compiled program (XLA's buffer assignment)."""
  stats = compiled.memory_analysis()
  return (stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
          + stats.temp_size_in_bytes)


def sample_workload(config: Any) -> Any:
  """The workload of `config` with its rows built from the packaged sample text (the shapes, vocabulary and masking
  of the real run without reading its corpus); pretraining configs only."""
  from launch import workload  # pylint: disable=import-outside-toplevel
  if workload.is_finetuning(config):
    raise errors.UserError("--plan: estimates pretraining configs (configs/pretrain.py); a fine-tuning config has "
                           "a task block")
  sample = config.copy_and_resolve_references()
  sample.data.prepared, sample.data.train_files, sample.data.eval_files = "", str(SAMPLE_TEXT), ""
  with tempfile.TemporaryDirectory(prefix="pod-plan-") as folder:
    return workload.pretraining(sample, Path(folder))


def masking_rate(work: Any, config: Any, seconds: float = MASKING_SECONDS) -> float:
  """Tokens per CPU-second that one process's input pipeline (grain, one thread) reads, masks and batches of the
  config's rows, over about `seconds` of this process's CPU time: CPU time, not wall time, so that other processes
  sharing this machine's cores do not lower it (what one dedicated core of a like CPU does)."""
  from launch import input_pipeline  # pylint: disable=import-outside-toplevel
  batch = 64
  batches = input_pipeline.train_batches(work.data.train, work.data.mask_options, global_batch=batch,
                                         seed=config.seed, start_step=0, prefetch=1, workers=0)
  next(batches)  # Warm-up.
  count, start = 0, time.process_time()
  while time.process_time() - start < seconds:
    next(batches)
    count += 1
  return count * batch * config.data.max_length / (time.process_time() - start)


def smallest_fit(state_bytes: float, low_bytes: float, device_bytes: float, rows: int) -> int:
  """The smallest factor of `rows` that, splitting the micro-batch that many times more, brings the low estimate
  within `device_bytes` (activations scale with the micro-batch's rows; the state does not); 0 when none does."""
  for factor in (f for f in range(1, rows + 1) if rows % f == 0):
    if state_bytes + (low_bytes - state_bytes) / factor <= device_bytes:
      return factor
  return 0


def plan(config: Any, slice_: tpu_types.SliceType, mfu: float = 0.5) -> Plan:
  """The memory and input figures of `config` on `slice_` (jax must have slice_.devices devices: `main` sees to it)."""
  import jax  # pylint: disable=import-outside-toplevel

  from encoder import flops  # pylint: disable=import-outside-toplevel
  from launch import input_pipeline  # pylint: disable=import-outside-toplevel
  from launch.model import encoder_config, last_positions  # pylint: disable=import-outside-toplevel
  from objectives import objective  # pylint: disable=import-outside-toplevel
  if jax.device_count() != slice_.devices:
    raise RuntimeError(f"plan: jax has {jax.device_count()} devices, the slice {slice_.devices}")
  accum, data_devices = config.grad_accum_steps, slice_.devices // config.mesh_model
  if config.batch_size % (accum * data_devices) or config.batch_size % slice_.hosts:
    raise errors.ConfigError(f"config.batch_size={config.batch_size}: expected a multiple of grad_accum_steps "
                             f"({accum}) x the {data_devices} data-parallel devices of {slice_.name}")
  work = sample_workload(config)
  programs = step_programs(config, work, accum)
  state_bytes = programs.state_bytes
  high = max(program_bytes(programs.grad_step), program_bytes(programs.apply_step))
  low = state_bytes + ACCELERATOR_RATIO * (high - state_bytes)
  device_bytes = int(USABLE_MEMORY * slice_.device_memory)
  rows = config.batch_size // (accum * data_devices)
  fits = smallest_fit(state_bytes, low, device_bytes, rows)
  cfg = encoder_config(config.model, work.vocab_size)
  last = last_positions(work.objectives, work.example)
  step_flops = flops.step_flops(cfg, config.batch_size, config.data.max_length, None if last is None else last.shape[1],
                                objective.extra_encoders(work.objectives, cfg))
  step_seconds = step_flops / (mfu * slice_.devices * slice_.device_peak_flops)
  host_tokens = config.batch_size // slice_.hosts * config.data.max_length / step_seconds
  workers = input_pipeline.worker_count(config.data.workers, "tpu", slice_.host_cores)
  process_rate = masking_rate(work, config) * (BUCKET_READ_FACTOR if config.data.prepared.startswith("gs://") else 1)
  return Plan(slice_, rows, accum, state_bytes, int(high), int(low), device_bytes, fits,
              step_seconds, host_tokens, workers, process_rate, max(workers, 1) * process_rate, mfu)


# docs/pretraining.md's table of the recipe's plans: what `plan` measured for each row (2026-11-28, on a 2-core Zen 3
# VM: base, MLM + NSP, phase 1 batch 8,192 rows of 128, phase 2 4,096 rows of 512; --mfu 0.5): rows per micro-batch
# per device, state and XLA:CPU's compiled peak per device (GiB), the tokens/s a host needs, and one process's masking
# rate per CPU-second reading a local corpus. `docs_table` derives the rest (the low estimate, the usable HBM, the
# workers and the read factor of a gs:// corpus, the verdict) with the code as it is; tests/.../test_pod_docs.py
# fails when the page's table differs from it.
RECIPE = (
    (1, "v4-32", 1, 512, 1.6, 69.9, 1.12e6, 130.6e3),
    (1, "v4-32", 4, 128, 1.6, 19.1, 1.12e6, 156.3e3),
    (1, "v5e-16", 1, 512, 1.6, 69.9, 0.80e6, 113.6e3),
    (1, "v5e-16", 8, 64, 1.6, 10.4, 0.80e6, 123.6e3),
    (2, "v4-32", 1, 256, 1.6, 191.5, 1.03e6, 453.8e3),
    (2, "v4-32", 8, 32, 1.6, 26.0, 1.03e6, 405.6e3),
    (2, "v5e-16", 1, 256, 1.6, 191.5, 0.74e6, 418.6e3),
    (2, "v5e-16", 16, 16, 1.6, 13.9, 0.74e6, 307.9e3),
)


def recipe_plans() -> list[tuple[int, Plan]]:
  """(phase, Plan) of every RECIPE row, with a gs:// corpus (the recipe's), as `plan` would make it today."""
  from launch import input_pipeline  # pylint: disable=import-outside-toplevel
  out = []
  for phase, name, accum, rows, state, high, need, rate in RECIPE:
    slice_ = tpu_types.slice_type(name)
    state_bytes, high_bytes = state * tpu_types.GIB, high * tpu_types.GIB
    low_bytes = state_bytes + ACCELERATOR_RATIO * (high_bytes - state_bytes)
    device_bytes = int(USABLE_MEMORY * slice_.device_memory)
    workers = input_pipeline.worker_count(-1, "tpu", slice_.host_cores)
    process = rate * BUCKET_READ_FACTOR
    out.append((phase, Plan(slice_, rows, accum, int(state_bytes), int(high_bytes), int(low_bytes), device_bytes,
                            smallest_fit(state_bytes, low_bytes, device_bytes, rows), 0.0, need, workers, process,
                            max(workers, 1) * process, 0.5)))
  return out


def docs_table() -> str:
  """docs/pretraining.md's table of the recipe's plans (`recipe_plans`), as Markdown."""
  lines = ["| phase, slice | rows per device | memory per device: accelerator estimate - XLA:CPU's | HBM usable | "
           "a host needs / its workers supply from gs:// (tokens/s) | verdict |", "|---|---|---|---|---|---|"]
  for phase, p in recipe_plans():
    rows = f"{p.rows_per_device}" + (f" x {p.accum}" if p.accum > 1 else "")
    problems = p.problems()
    verdict = ("fits and can be fed" if not problems and p.high_bytes <= p.device_bytes else
               "may not fit (only the accelerator estimate fits)" if not problems else
               "**refused**: " + "; ".join(
                   f"`grad_accum_steps={p.fits_accum * p.accum}`" if problem.startswith("memory") else
                   f"input: {problem.split('; ')[-1]}" for problem in problems))
    lines.append(f"| {phase}, {p.slice.name.replace('v5litepod', 'v5e')}, `grad_accum_steps={p.accum}` | {rows} | "
                 f"{_gib(p.low_bytes)} - {_gib(p.high_bytes)} GiB | {_gib(p.device_bytes)} GiB | "
                 f"{p.host_tokens_per_s / 1e6:.2f}M / {p.supply_tokens_per_s / 1e6:.2f}M ({p.workers} workers) | "
                 f"{verdict} |")
  return "\n".join(lines)


def parse_main_args(main_args: Sequence[str]) -> Any:
  """launch.main's arguments -> its config, with the checks launch.main makes before it trains (the parsing, then
  configs.checks.check_config, as launch.train does first): a config launch.main refuses is refused here, in one
  line, by the same check."""
  from absl import flags  # pylint: disable=import-outside-toplevel

  from configs import checks  # pylint: disable=import-outside-toplevel
  from launch import main as launch_main  # pylint: disable=import-outside-toplevel
  launch_main.parse_flags(["launch.main", *main_args])
  config = flags.FLAGS.config
  checks.check_config(config)
  return config


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = cli.ArgumentParser(prog="python -m launch.experiments.pod_plan", description=__doc__.split("\n")[0])
  root.add_argument("--type", required=True, help="slice: v4-32, v5e-16, ...")
  root.add_argument("--mfu", type=cli.number(0, 1, low_open=True), default=0.5,
                    help="the fraction of the chips' bf16 peak the step reaches, in (0, 1]")
  return root


def main(argv: Sequence[str] | None = None) -> None:
  """Prints the plan; exits 1 with `error: --plan: ...` lines' first when the config cannot fit or be fed."""
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  slice_ = tpu_types.slice_type(args.type)
  if not argv[split + 1:]:
    raise errors.UserError("--plan: expected launch.main's arguments after --, e.g. -- --config "
                           "configs/pretrain.py:size=base --workdir gs://my-bucket/runs/base")
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_platforms", "cpu")
  jax.config.update("jax_num_cpu_devices", slice_.devices)  # Before the backend starts: a mesh of the slice's size.
  with contextlib.redirect_stdout(sys.stderr):  # Library chatter (compilation, grain) stays off the report.
    config = parse_main_args(argv[split + 1:])
    if slice_.devices % config.mesh_model:
      raise errors.ConfigError(f"config.mesh_model={config.mesh_model}: expected a divisor of the {slice_.devices} "
                               f"devices of {slice_.name}")
    result = plan(config, slice_, args.mfu)
  print(result.report(), flush=True)
  print(json.dumps({k: v for k, v in result._asdict().items() if k != "slice"} | {"type": slice_.name}), flush=True)
  problems = result.problems()
  if problems:
    raise errors.UserError(f"--plan: {problems[0]}")


if __name__ == "__main__":
  errors.run(main)
