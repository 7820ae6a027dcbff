"""train_and_evaluate(config, workdir): the training loop (DESIGN, "The flow of one training step").

files -> grain (shard by process, shuffle, mask, batch) -> host batch -> make_array_from_process_local_data ->
jit(grad_step), jit(apply_step) over the mesh (or pmap) -> metric sums on device, fetched every log_every_steps ->
metrics.jsonl + TensorBoard + progress line -> async orbax checkpoints. Resumes from the newest readable checkpoint
by itself; stops on NaN/inf (naming the step) without touching the last good checkpoint; on SIGTERM saves and
returns.
The same loop fine-tunes when the config has a task block: what differs (the data, the update scales of a
fine-tuning regime, the evaluation, the programs it compiles ahead and the results it adds) is asked of the workload
(launch/workload.py), and the initial encoder of launch/warm_start.py; the loop itself reads setup, compile, loop,
final results, as flax's examples/wmt and big_vision's train.py do.
"""

import functools
import itertools
import os
import signal
import sys
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from encoder import errors, files, flops as encoder_flops
from launch import (
  checkpointing,
  compile_ahead,
  flops,
  metrics_writer,
  optimizer,
  sharding,
  steps,
  stopping,
  warm_start,
  workload,
)
from launch.model import EncoderWithHeads, last_positions, run_encoder_config, term_weights
from launch.programs import Programs, build_programs
from launch.progress import Progress
from objectives import objective
from tasks import evaluation, regimes


class NonFiniteLossError(errors.UserError, FloatingPointError):
  """The loss or gradient norm became NaN/inf; the message names the step and the checkpoint kept."""


def _every(step: int, period: int, last: int) -> bool:
  return step == last or (period > 0 and step % period == 0)


def _periods(config: ml_collections.ConfigDict, steps_per_epoch: int) -> tuple[int, int]:
  """(eval period, checkpoint period) in steps: -1 means every epoch / with every evaluation."""
  evals = steps_per_epoch if config.eval_every_steps == -1 else config.eval_every_steps
  return evals, evals if config.checkpoint_every_steps == -1 else config.checkpoint_every_steps


def _grad_outputs(programs: Programs, fns: steps.StepFns, state: Any, device_state: Any, first: dict | None,
                  example: dict[str, np.ndarray], *, parallelism: str, accum: int) -> Any:
  """The gradient program's outputs' shapes, per device (the metric sums' zeros need them). The program itself is
  traced on the run's first batch, so that the loop's own call and the compile-ahead of that shape lower the same
  trace (jit and pmap keep it): each program of a run is traced once. A run with no step left traces the function on
  the example batch."""
  if first is None:
    micro_batches = {k: np.stack([v] * accum) for k, v in example.items()} if accum > 1 else example
    return jax.eval_shape(functools.partial(steps.grad_step, fns, accum=accum), state, micro_batches)
  if parallelism == "jit":
    return programs.grad_step.trace(device_state, first).out_info
  outputs = jax.eval_shape(programs.grad_step, device_state, first)  # pmap's: a leading axis of devices.
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), outputs)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> dict[str, Any]:
  """Trains config.num_train_steps steps in workdir (resuming if it holds checkpoints); returns the final results."""
  # Local or gs:// (never through pathlib, which would make gs://b a folder gs:/b); typed apart from `workdir`.
  run_dir = files.reachable(workdir)
  if run_dir.exists() and not run_dir.is_dir():
    raise errors.UserError(f"--workdir {run_dir}: expected a run directory, found a file")
  lead = jax.process_index() == 0
  # Nothing is written before the config, the run it resumes and the data are checked: a refused command leaves the
  # workdir as it was.
  kind = workload.kind_of(config)  # Pretraining or fine-tuning, decided here once.
  kind.check()  # What it resolved (the objectives, the files, the dataset): its load reuses it.
  saved = checkpointing.saved_config(run_dir)  # The run this start resumes (None: a new one), read here only.
  kind.resolve(saved)  # The start-up choices made concrete for config.json to record.
  checkpointing.check_compatible(run_dir, config, saved)
  work = kind.load(run_dir)
  run_dir.mkdir(parents=True, exist_ok=True)

  # Setup: the model, its step functions and the train state (restored, or initialized on the mesh).
  cfg = run_encoder_config(config, work.vocab_size, starting=True)  # config.model with the regime's LoRA, adapters.
  total_steps, accum = work.total_steps, config.grad_accum_steps
  model = EncoderWithHeads(cfg, work.objectives)
  scales = work.update_scales(model)
  trainable = None if scales is None or min(jax.tree.leaves(scales)) > 0 else jax.tree.map(lambda s: s > 0, scales)
  fns = steps.StepFns(model, work.objectives, term_weights(work.objectives, work.weights),
                      optimizer.make_optimizer(config.optimizer, total_steps, scales), trainable)
  mesh = sharding.make_mesh(config.mesh_model)
  pretrained = warm_start.pretrained_params(config.init)
  init = functools.partial(steps.init_state, fns, seed=config.seed)
  # Traced once: jax keeps the trace of `init` for these arguments' shapes, which `fresh` below compiles.
  abstract = jax.eval_shape(init, work.example, pretrained)
  if pretrained is not None:
    warm_start.check_matches(config.init, pretrained, abstract.params)
  # Minimal adjustments checkpoint what trains alone; the frozen rest is the init's, checked unchanged on resume.
  partial = trainable if config.get("regime") in regimes.PARTIAL else None
  fingerprint = checkpointing.base_fingerprint(pretrained, config.seed) if partial is not None else ""
  if partial is not None:
    checkpointing.check_base(run_dir, config, fingerprint, saved)
  state_shardings = sharding.state_shardings(abstract, mesh, fsdp=config.fsdp)
  manager = checkpointing.create_manager(run_dir, config)
  target = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), abstract, state_shardings)
  fresh = lambda: jax.jit(init, out_shardings=state_shardings)(work.example, pretrained)
  base = fresh() if partial is not None else None  # The parameters a partial checkpoint lacks.
  state = checkpointing.restore_latest(manager, target, run_dir, None if base is None else base.params)
  if state is None:
    state = fresh() if base is None else base
  start = int(jax.device_get(state.step))
  progress = Progress(start, total_steps, enabled=lead)
  if start >= total_steps and (run_dir / "results.json").is_file():  # A finished run: keep what it wrote.
    manager.close()
    progress.message(f"already trained {start} steps; results in {run_dir / 'results.json'}")
    return files.read_json(run_dir / "results.json")
  checkpointing.write_config(run_dir, config)  # What this run trains with (a finished run keeps its own).
  if partial is not None:
    checkpointing.write_base(run_dir, config, fingerprint)
  progress.message(f"{'resuming from checkpoint step ' + str(start) if start else 'starting'}: "
                   f"{jax.device_count()} devices in {jax.process_count()} processes, mesh {dict(mesh.shape)}, "
                   f"{config.parallelism}{', fsdp' if config.fsdp else ''}; model {cfg.num_layers}x{cfg.hidden_size}"
                   f"{'' if cfg.remat == 'none' else ', remat ' + cfg.remat}, "
                   f"{sharding.bytes_per_device(state) / 2**20:,.1f} MiB of state per device; {work.description}"
                   + (f", {100 * regimes.trainable_fraction(abstract.params, scales):.1f}% of parameters trained"
                      if scales is not None else ""))
  if config.fsdp and lead and cfg.vocab_size % mesh.shape["data"]:
    padded = sharding.padded_vocab_size(cfg.vocab_size, mesh.shape["data"])
    print(f"warning: config.fsdp: vocab_size {cfg.vocab_size} is not divisible by the {mesh.shape['data']} data "
          "devices, so the word embeddings are split on their hidden dimension and every device gathers the whole "
          f"table for the tied MLM decoder; config.model.vocab_size={padded} (rows the tokenizer never produces) "
          "splits it by row", file=sys.stderr, flush=True)

  # Compile: the step's programs and the workload's evaluation (jit compiles each on its first call, or ahead: below).
  programs = build_programs(fns, mesh, state_shardings, parallelism=config.parallelism, accum=accum)
  device_state = programs.to_layout(state)
  # Fine-tuning's length buckets: a batch of each shape in order of first use, compiled ahead below.
  shapes = ([programs.to_device(b, accum=accum) for b in work.batch_shapes(start)]
            if config.parallelism == "jit" and config.compile_ahead else [])
  evaluator = work.evaluation(fns, programs, target)
  writer = metrics_writer.MetricsWriter(run_dir)
  # The last block's rows, when the heads name theirs (read from the host example: numpy, which jnp and `reads` take).
  last = last_positions(work.objectives, work.example)  # type: ignore[arg-type]  # numpy batch, annotated jax.Array
  flops_per_step = encoder_flops.step_flops(cfg, config.batch_size, work.tokens_per_example,
                                            None if last is None else last.shape[1],
                                            objective.extra_encoders(work.objectives, cfg))
  ceiling = flops.matmul_ceiling(dtype=cfg.dtype, bf16_dots=cfg.bf16_dots) if config.measure_mfu else None
  schedule = optimizer.learning_rate_schedule(config.optimizer, total_steps)

  # Loop: train, log, evaluate and save at their periods; SIGTERM saves and stops (launch/stopping.py: checked after
  # every step on the host, the step agreed between processes). Called outside launch.main: the loop's own handler.
  own_handler = not stopping.installed()
  if own_handler:
    stopping.requested.clear()
  previous_handler = signal.signal(signal.SIGTERM, lambda *_: stopping.requested.set()) if own_handler else None
  stopping.begin_loop()
  agreement = stopping.Agreement(jax.process_count(), stopping.distributed_client())
  stopped = False
  batches = work.train_batches(start)
  eval_every, checkpoint_every = _periods(config, work.steps_per_epoch)
  train_metrics, eval_metrics, best, ahead = {}, {}, None, None
  try:
    feed = (programs.to_device(b, accum=accum) for b in batches)
    first = next(feed, None)  # None: no step left (a run stopped between its last save and its results).
    device_batches = itertools.chain([] if first is None else [first], feed)
    train_zero = steps.zero_step_sums(_grad_outputs(programs, fns, state, device_state, first, work.example,
                                                    parallelism=config.parallelism, accum=accum)[1])
    acc = programs.place(train_zero)
    # Fine-tuning's length buckets: each shape's gradient program (the update program after the first), then the
    # evaluation's programs, compile on a background thread before they are first needed (the first shape's from the
    # trace above).
    if shapes:
      ahead = compile_ahead.CompileAhead(programs.grad_step, device_state, shapes, update=(programs.apply_step, acc))
      for program, first_argument, eval_batches in evaluator.programs(device_state):
        ahead.add(program, first_argument, eval_batches)
    interval_start, interval_step = time.perf_counter(), start
    for step in range(start, total_steps):
      batch = next(device_batches)
      if ahead is not None:
        ahead.wait(batch)
      device_state, acc = programs.train_step(device_state, batch, acc)
      done = step + 1
      log_due = _every(done, config.log_every_steps, total_steps)
      stop = agreement.should_stop(done, jax.process_index())  # Saving is collective: every process at `done`.
      eval_due = _every(done, eval_every, total_steps)
      save_due = _every(done, checkpoint_every, total_steps) or stop
      if not (log_due or eval_due or save_due):
        continue
      sums = programs.fetch(acc)
      if sums["nonfinite_step"] != steps.NO_STEP:
        raise NonFiniteLossError(
            f"loss or gradient norm is NaN/inf at step {int(sums['nonfinite_step']) + 1} (the step that ran with "
            f"state step {int(sums['nonfinite_step'])}); stopping. The last good checkpoint, step "
            f"{manager.latest_step()}, in {run_dir / 'checkpoints'} is intact: lower the learning rate or check the "
            "data, then run again")
      elapsed = time.perf_counter() - interval_start
      rate = (done - interval_step) / elapsed
      train_metrics = metrics_writer.summarize(sums, "train", fns.weights) | {
          "train/learning_rate": float(schedule(done - 1)), "train/steps_per_second": rate,
          "train/examples_per_second": rate * config.batch_size,
          "train/tokens_per_second": rate * config.batch_size * work.tokens_per_example}
      if config.measure_mfu:
        assert ceiling is not None  # Measured above when config.measure_mfu.
        train_metrics["train/mfu"] = rate * flops_per_step / ceiling
      writer.write(done, train_metrics)
      progress.update(done, {k.split("/")[1]: v for k, v in train_metrics.items()
                             if k in ("train/loss", "train/tokens_per_second") or k.endswith("_accuracy")})
      acc = programs.place(train_zero)
      if eval_due:
        if ahead is not None:
          ahead.wait_added()  # Not compiling the evaluation's programs a second time here.
        eval_metrics = evaluator.evaluate(device_state)
        if eval_metrics:  # Nothing to report without an eval split.
          writer.write(done, eval_metrics)
          progress.message(f"eval at step {done}: " + ", ".join(f"{k}={v:.4g}" for k, v in eval_metrics.items()))
        if config.best_metric in eval_metrics:
          value = eval_metrics[config.best_metric]
          # A tie goes to the later step, as the checkpoint kept as best (launch.checkpointing.KeepBest).
          if best is None or (value <= best[1] if config.best_mode == "min" else value >= best[1]):
            best = (done, value)
      if save_due:
        checkpointing.save(manager, done, programs.canonical(device_state),
                           eval_metrics if eval_due and config.best_metric in eval_metrics else None, partial)
      interval_start, interval_step = time.perf_counter(), done
      if stop:
        progress.message(f"SIGTERM: saved step {done} in {run_dir / 'checkpoints'}; run again to resume")
        stopped = done < total_steps
        break
    manager.wait_until_finished()
  finally:
    if ahead is not None:
      ahead.close()
    if hasattr(batches, "close"):  # grain's worker processes (config.data.workers) and their shared memory.
      batches.close()
    manager.close()
    writer.close()
    stopping.end_loop()  # A SIGTERM from here on ends the process at once: the last step is saved.
    if own_handler:
      signal.signal(signal.SIGTERM, previous_handler)

  # Final results: the loop's, then the workload's (fine-tuning: the best-dev checkpoint's scores and predictions).
  final_state = programs.canonical(device_state)
  results = {"step": int(jax.device_get(final_state.step)), "train": train_metrics, "eval": eval_metrics,
             "best": None if best is None else {"metric": config.best_metric, "step": best[0], "value": best[1]},
             "stopped_early": stopped}
  if not results["stopped_early"]:
    results |= evaluator.final(final_state)
  evaluation.write_results(run_dir, results)
  return results

