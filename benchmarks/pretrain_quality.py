"""Held-out MLM quality after a fixed CPU wall-clock budget: our engine (MLM, MLM+SBO) vs HF BertForMaskedLM.

  python -m benchmarks.pretrain_quality [--minutes 20] [--reference] [--runs mlm,mlm+sbo] [--workdir DIR]
  python -m benchmarks.pretrain_quality --runs mlm --steps 1500 --variant bf16:model.dtype=bfloat16,...

Setup (every system): the mini model (L4/H256/A4, configs/pretrain.py:size=mini), MiniLM's uncased WordPiece
vocabulary, WikiText-2 raw train packed into rows of 128 tokens (full sentences), batch 32, masking 15% (80/10/10,
unigram replacements; SpanBERT spans for mlm+sbo), AdamW 5e-4, 500 warmup steps then linear decay to 0, weight decay
0.01, clipping 1.0. The reference trains on exactly our masked batches (dense labels).

Wall-clock budget, the same protocol for each system: (1) a calibration run of --calibration_steps measures the
system's steady steps/s (compilation and the first steps excluded); (2) the real run lays its learning-rate schedule
out over planned = steps/s x budget steps and stops at planned steps or at the budget, whichever comes first (ours:
a timer sends the engine SIGTERM, on which it saves and returns). The budget covers everything from the training
call on: for ours that includes jit compilation; tokenizing the corpus (cached) and the calibration are outside it.
Evaluation: every run on the same rows of WikiText-2 raw valid with the same fixed masks (our pipeline, seed 0 + 1,
token masking), accuracy and mean loss over all masked tokens, computed by one numpy function from each model's
logits. The last line printed is one JSON object.

Numerics at equal steps instead (`--steps N`): every run of ours trains exactly N steps (the schedule laid out over
N, no calibration, no budget), so a change of arithmetic (bf16 activations on a CPU without bf16 units, where it is
slower) is compared step for step. `--variant NAME:KEY=VALUE[,KEY=VALUE...]` (repeatable) adds a run of the first
--runs objectives with those config overrides (values as Python literals, else strings), e.g.
`bf16:model.dtype=bfloat16,model.activation_dtype=bfloat16` or `seed1:seed=1` (a second seed: how far runs that
differ in nothing but chance land apart); a NAME of --runs sets that run's overrides instead.
"""

import argparse
import ast
import contextlib
import itertools
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import jax
import ml_collections
import numpy as np

from configs import pretrain
from encoder import cli, errors, init_from
from launch import host_memory, input_pipeline, metrics_writer, train, xla_flags
from launch.model import EncoderWithHeads, encoder_config
from objectives import data as pretraining_data, registry

RUNS = ("mlm", "mlm+sbo")
CALIBRATION_WARMUP = 5  # Untimed first steps of a calibration (compilation, allocation).
EVAL_FILES = "wikitext-2/raw/wiki.valid.raw"


def run_config(objectives: str, workdir: Path, *, batch_size: int, steps: int,
               warmup_steps: int = 500) -> ml_collections.ConfigDict:
  """configs/pretrain.py at size=mini with the benchmark's batch, optimizer and logging (no engine evaluation)."""
  config = pretrain.get_config(f"size=mini,objectives={objectives},steps={steps}")
  config.data.eval_files = ""  # Evaluated here, identically for every system.
  config.data.cache_dir = str(workdir / "cache")
  config.batch_size = batch_size
  config.optimizer.learning_rate = 5e-4
  config.optimizer.warmup_steps = warmup_steps
  # The engine dispatches steps asynchronously and notices SIGTERM at dispatch, up to log_every_steps ahead of the
  # computation; a metrics fetch every 5 steps keeps the overshoot past the budget to at most 5 steps.
  config.log_every_steps = 5
  config.eval_every_steps = 0
  config.checkpoint_every_steps = 10**9  # Saved once: at the end or on the budget's SIGTERM.
  config.keep_checkpoints = 1
  config.best_metric = ""
  config.measure_mfu = False
  return config


@contextlib.contextmanager
def sigterm_after(seconds: float) -> Iterator[None]:
  """Sends this process SIGTERM after `seconds` (the engine saves and returns); a signal arriving while the engine's
  handler is not installed (before it starts or after it returned) is ignored instead of killing the benchmark."""
  previous = signal.signal(signal.SIGTERM, lambda *_: None)
  timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM))
  timer.daemon = True
  timer.start()
  try:
    yield
  finally:
    timer.cancel()
    signal.signal(signal.SIGTERM, previous)


def fresh(directory: Path) -> Path:
  """An empty run directory (the benchmark owns it; an old run there would otherwise be resumed)."""
  shutil.rmtree(directory, ignore_errors=True)
  return directory


def override(config: ml_collections.ConfigDict, overrides: dict[str, Any]) -> ml_collections.ConfigDict:
  """config with each dotted KEY set to its value (an unknown key is a UserError)."""
  for key, value in overrides.items():
    *parents, leaf = key.split(".")
    block = config
    for parent in parents:
      block = block.get(parent)
      if not isinstance(block, ml_collections.ConfigDict):
        raise errors.UserError(f"--variant: {key!r} is not a config key")
    if leaf not in block:
      raise errors.UserError(f"--variant: {key!r} is not a config key")
    block[leaf] = value
  return config


def train_ours(objectives: str, root: Path, args: argparse.Namespace, name: str | None = None,
               overrides: dict[str, Any] | None = None) -> tuple[ml_collections.ConfigDict, dict]:
  """Trains our engine in root/<name> (default: the objectives) with `overrides`: --steps steps, or calibrated and
  then for the budget; returns the run's config and results."""
  name, overrides = name or objectives, overrides or {}
  if args.steps:
    config = override(run_config(objectives, root, batch_size=args.batch_size, steps=args.steps,
                                 warmup_steps=args.warmup_steps), overrides)
    start = time.perf_counter()
    results = train.train_and_evaluate(config, fresh(root / name))
    return config, {"steps": results["step"], "planned_steps": args.steps,
                    "train_seconds": time.perf_counter() - start}
  calibration_dir = fresh(root / f"calibrate_{name}")
  config = override(run_config(objectives, root, batch_size=args.batch_size,
                               steps=CALIBRATION_WARMUP + args.calibration_steps), overrides)
  config.log_every_steps = CALIBRATION_WARMUP  # The first interval holds compilation: only the later ones are timed.
  train.train_and_evaluate(config, calibration_dir)
  records = [r for r in metrics_writer.read_jsonl(calibration_dir / "metrics.jsonl") if "train/loss" in r]
  seconds = sum((r["step"] - p["step"]) / r["train/steps_per_second"] for p, r in itertools.pairwise(records))
  rate = (records[-1]["step"] - records[0]["step"]) / seconds
  shutil.rmtree(calibration_dir)
  planned = max(1, int(rate * args.minutes * 60))
  print(f"[{name}] calibrated {rate:.3f} steps/s -> schedule over {planned} steps", flush=True)
  config = override(run_config(objectives, root, batch_size=args.batch_size, steps=planned,
                               warmup_steps=args.warmup_steps), overrides)
  start = time.perf_counter()
  with sigterm_after(args.minutes * 60):
    results = train.train_and_evaluate(config, fresh(root / name))
  return config, {"steps": results["step"], "planned_steps": planned, "train_seconds": time.perf_counter() - start}


def evaluate(logits_fn: Callable[[dict[str, np.ndarray]], np.ndarray],
             batches: Iterable[dict[str, np.ndarray]]) -> dict[str, float]:
  """MLM accuracy (argmax) and mean cross-entropy over every real masked token, in float64 numpy."""
  correct = nll = count = 0.0
  for batch in batches:
    logits = np.asarray(logits_fn(batch), np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    targets, weights = batch["masked_ids"], batch["masked_weights"]
    nll -= float((np.take_along_axis(log_probs, targets[..., None], -1)[..., 0] * weights).sum())
    correct += float(((logits.argmax(-1) == targets) * weights).sum())
    count += float(weights.sum())
  return {"accuracy": correct / count, "loss": nll / count, "masked_tokens": int(count)}


def our_logits(config: ml_collections.ConfigDict, params: Any, vocab_size: int):
  """The MLM head's logits at masked_positions of our trained encoder (other heads' parameters are not needed)."""
  model = EncoderWithHeads(encoder_config(config.model, vocab_size), (registry.build("mlm", config.model),))
  params = {k: params[k] for k in ("encoder", "mlm")}
  apply = jax.jit(lambda p, b: cast(dict[str, Any], model.apply({"params": p}, b))["mlm"])
  keys = ("input_ids", "type_ids", "positions", "attention_segments", "masked_positions")
  return lambda batch: np.asarray(apply(params, {k: batch[k] for k in keys}))


def train_reference(data: pretraining_data.PretrainingData, config: ml_collections.ConfigDict,
                    args: argparse.Namespace):
  """Calibrates, then trains HF BertForMaskedLM on our batches for the budget; returns (model, results)."""
  from benchmarks import pretrain_reference  # pylint: disable=import-outside-toplevel  (torch only with --reference)
  batches = lambda: input_pipeline.train_batches(data.train, data.mask_options, global_batch=args.batch_size,
                                                 seed=config.seed, start_step=0, prefetch=2)
  build = lambda: pretrain_reference.build_model(config.model, data.tokenizer.vocab_size, config.seed)
  model = build()  # Calibration: CALIBRATION_WARMUP untimed steps, then calibration_steps timed ones.
  pretrain_reference.train(model, batches(), opt=config.optimizer, schedule_steps=10**6,
                           max_steps=CALIBRATION_WARMUP, seconds=float("inf"))
  warm = pretrain_reference.train(model, batches(), opt=config.optimizer, schedule_steps=10**6,
                                  max_steps=args.calibration_steps, seconds=float("inf"))
  planned = max(1, int(warm["steps_per_second"] * args.minutes * 60))
  print(f"[reference] calibrated {warm['steps_per_second']:.3f} steps/s -> schedule over {planned} steps", flush=True)
  model = build()
  results = pretrain_reference.train(model, batches(), opt=config.optimizer, schedule_steps=planned,
                                     max_steps=planned, seconds=args.minutes * 60)
  return model, {"steps": results["steps"], "planned_steps": planned, "train_seconds": results["train_seconds"]}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = cli.ArgumentParser(prog="python -m benchmarks.pretrain_quality", description=__doc__.split("\n\n")[0])
  parser.add_argument("--minutes", type=cli.number(0, low_open=True), default=20.0,
                      help="wall-clock training budget per run")
  parser.add_argument("--reference", action="store_true", help="also train HF BertForMaskedLM (PyTorch)")
  parser.add_argument("--runs", type=cli.Names(tuple(RUNS)), default=",".join(RUNS),
                      help=f"comma-separated subset of {','.join(RUNS)}")
  parser.add_argument("--workdir", default="runs/pretrain_quality", help="run directories and the corpus cache")
  parser.add_argument("--batch_size", type=cli.integer(1), default=32)
  parser.add_argument("--calibration_steps", type=cli.integer(1), default=30, help="timed calibration steps per system")
  parser.add_argument("--warmup_steps", type=cli.integer(0), default=500, help="learning-rate warmup (every system)")
  parser.add_argument("--eval_batches", type=cli.integer(1, also=(-1,)), default=-1,
                      help="held-out batches to evaluate (-1: all)")
  parser.add_argument("--steps", type=cli.integer(0), default=0,
                      help="train ours exactly this many steps (0: --minutes)")
  parser.add_argument("--variant", action="append", default=[],
                      help="NAME:KEY=VALUE[,KEY=VALUE...]: another run of the first --runs objectives with overrides")
  args = parser.parse_args(argv)
  args.runs = list(args.runs)
  args.variants = {}
  for spec in args.variant:
    name, _, assignments = spec.partition(":")
    pairs = [item.partition("=") for item in assignments.split(",") if item]
    if not name or name in args.variants or not pairs or any(not eq for _, eq, _ in pairs):
      parser.error(f"--variant {spec!r}: expected a new NAME:KEY=VALUE[,KEY=VALUE...]")
    args.variants[name] = {key: literal(value) for key, _, value in pairs}
  if args.steps and args.reference:
    parser.error("--steps trains ours only; the reference runs for --minutes (drop one)")
  return args


def literal(value: str) -> Any:
  """A --variant value: a Python literal (0.0, True, 3), else the string itself (bfloat16)."""
  try:
    return ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return value


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  host_memory.retain_freed_memory()  # Both frameworks, same process, same malloc.
  xla_flags.apply_gpu_defaults()
  root = Path(args.workdir)
  shared = run_config("mlm", root, batch_size=args.batch_size, steps=1, warmup_steps=args.warmup_steps)
  shared.data.eval_files = EVAL_FILES
  data = pretraining_data.load(shared, cache_dir=Path(shared.data.cache_dir))  # Tokenized once, outside every budget.
  vocab_size, eval_rows = data.tokenizer.vocab_size, data.eval
  assert eval_rows is not None  # shared.data.eval_files is set above.
  held_out = lambda: input_pipeline.eval_batches(eval_rows, data.mask_options, global_batch=args.batch_size,
                                                 seed=shared.seed, max_batches=args.eval_batches)[1]
  print(f"train rows {len(data.train)}, held-out rows {len(eval_rows)} x {shared.data.max_length} tokens; budget "
        f"{args.minutes:g} min per run, calibration {args.calibration_steps} steps", flush=True)

  report: dict[str, dict[str, Any]] = {}
  runs = [(objectives, objectives, args.variants.get(objectives, {})) for objectives in args.runs]
  runs += [(name, args.runs[0], overrides) for name, overrides in args.variants.items() if name not in args.runs]
  for name, objectives, overrides in runs:
    config, results = train_ours(objectives, root, args, name, overrides)
    _, params = init_from.run_params(root / name)
    report[name] = evaluate(our_logits(config, params, vocab_size), held_out()) | results
  if args.reference:
    model, results = train_reference(data, shared, args)
    from benchmarks import pretrain_reference  # pylint: disable=import-outside-toplevel
    report["reference"] = evaluate(lambda b: pretrain_reference.masked_logits(model, b), held_out()) | results
  tokens_per_step = args.batch_size * shared.data.max_length
  for row in report.values():
    row["tokens_per_second"] = row["steps"] * tokens_per_step / row["train_seconds"]

  budget = f"{args.steps} steps" if args.steps else f"{args.minutes:g} min of training"
  print(f"\nheld-out MLM on {EVAL_FILES} ({next(iter(report.values()))['masked_tokens']} masked tokens), "
        f"{budget} each:")
  print(f"{'run':<14} {'accuracy':>9} {'loss':>7} {'steps':>7} {'planned':>8} {'seconds':>8} {'tokens/s':>9}")
  for name, row in report.items():
    print(f"{name:<14} {row['accuracy']:9.2%} {row['loss']:7.3f} {row['steps']:7d} {row['planned_steps']:8d} "
          f"{row['train_seconds']:8.0f} {row['tokens_per_second']:9.0f}")
  print(json.dumps({name: {k: row[k] for k in ("accuracy", "loss", "steps", "tokens_per_second", "train_seconds")}
                    for name, row in report.items()}))


if __name__ == "__main__":
  errors.run(main)
