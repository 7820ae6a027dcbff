"""Fine-tuning benchmark: our engine from the MiniLM checkpoint on a task preset, optionally against the HF PyTorch
reference on the same encoded examples and length-bucketed batches (benchmarks/finetune_reference.py).

  python -m benchmarks.finetune --task sick --reference
  python -m benchmarks.finetune --task conll2003 --set optimizer.learning_rate=5e-5 --set epochs=3
  python -m benchmarks.finetune --task sick --set task.score_weight=0.5   # + relatedness as an auxiliary target
  python -m benchmarks.finetune --task sick --reference --precision bfloat16  # mixed precision, HF under autocast
  python -m benchmarks.finetune --task squad --reference --set task.train_split=train[:1000] \
      --set task.test_split=test[:500]   # a subset (the whole data: ~1 hour per side on 2 CPU cores)
  python -m benchmarks.finetune --task mrpc --reference   # accuracy and the paraphrase class's F1, both tested

The last printed line is one JSON object: task, split, metric, score (percent; the test split, or dev where test has
no labels, SST-2), dev_score, scores (every metric of that split), train_seconds, examples_per_s, eval_examples_per_s
(that split's examples, SQuAD's windows, per second of forward passes and decoding), and with --reference
reference_score, reference_scores, reference_train_seconds, reference_examples_per_s, reference_eval_examples_per_s,
speedup, p_value (paired bootstrap, tasks.scoring.bootstrap: the probability that our gain over the reference on that
split arises by chance; 1.0 when we do not beat it) and reference_p_value (the same for the reference's gain over
ours), on the preset's metric, and p_value_accuracy too where that metric is another (MRPC's F1); both runs'
prediction files are tested by the task's scoring kind, as `tasks.scoring.score bootstrap` would (SQuAD: on
per-question F1). records, train_records and train_examples count the scored split's records and the training
split's records and encoded examples (SQuAD's questions and windows). The reference's predictions are written beside
ours, in WORKDIR/reference_predictions/<split>.jsonl (and the task's other files), for `tasks.scoring.score`.

The two sides train one after the other, so a VM whose cores slow down in between (another guest on the same physical
cores: a 2-core VM here ran the same step in 3.8 s, then 2.2 s half an hour later) skews `speedup`. With --reference
the matmul ceiling of the run's precision is measured before ours, between the sides and after the reference's
training (`ceilings_gflops`, launch.flops.matmul_ceiling), and a spread over 15% prints a warning line before the JSON.
"""

import ast
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from configs import checks, common, finetune
from encoder import cli, errors
from launch import flops, host_memory, metrics_writer, train, xla_flags
from tasks import evaluation, finetune_data, registry
from tasks.family import TaskFamily
from tasks.scoring import bootstrap, kinds


def _set(config, assignment: str) -> None:
  """'optimizer.learning_rate=5e-5' -> the config field (the value parsed as a Python literal when it is one); a
  mistyped key or a value of the wrong type is a ConfigError naming it."""
  key, equals, text = assignment.partition("=")
  if not equals:
    raise errors.ConfigError(f"--set {assignment!r}: expected key=value (--set optimizer.learning_rate=5e-5)")
  checks.check_overrides(config, [(key, text)], f"task={config.task.dataset or config.task.name}",
                                flag="--set ")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  *parents, leaf = key.split(".")
  target = config
  for parent in parents:
    target = target[parent]
  target[leaf] = type(target[leaf])(value) if isinstance(target[leaf], (int, float)) and not isinstance(
      target[leaf], bool) else value


DRIFT_WARNING = 1.15  # Largest ratio between the ceilings of one run that leaves `speedup` unflagged.


def drift_warning(ceilings: Sequence[float]) -> str | None:
  """A one-line warning when the matmul ceilings measured through a --reference run differ by more than 15%
  (the machine's speed changed between the sides), else None."""
  if max(ceilings) <= DRIFT_WARNING * min(ceilings):
    return None
  listed = ", ".join(f"{c:.0f}" for c in ceilings)
  return (f"warning: the matmul ceiling moved during the run ({listed} GFLOP/s before ours, between the sides, after "
          f"the reference's training): another load shared the cores, so speedup is not the frameworks' ratio")


def train_seconds(workdir: Path) -> float:
  """Seconds spent in training steps (compilation included, evaluations excluded), from metrics.jsonl."""
  seconds, previous = 0.0, 0
  for record in metrics_writer.read_jsonl(workdir / "metrics.jsonl"):
    if "train/steps_per_second" in record:
      seconds += (record["step"] - previous) / record["train/steps_per_second"]
      previous = record["step"]
  return seconds


def _columns(kind: kinds.ScoringKind, predictions: Path, split: str) -> tuple[list, list]:
  """(gold, predicted) per example of the run's `split` in its `predictions` directory, as `kind` reads them."""
  columns = kind.run_columns(predictions, split) if kind.run_columns else None
  if columns is None:
    raise FileNotFoundError(f"{predictions}: no {split} prediction file that scoring kind {kind.name!r} reads")
  return columns


def p_value(family: TaskFamily, workdir: Path, split: str, metric: str, *, reverse: bool = False) -> float | None:
  """Paired bootstrap p-value that ours beats the reference on `metric` (with `reverse`, the reference ours), over
  both runs' prediction files of `split` (WORKDIR/predictions and reference_predictions), read and counted by the
  family's scoring kind (`tasks.scoring.kinds`: entity F1 or accuracy of tag columns, accuracy or the positive label's
  F1, Pearson's r, SQuAD's per-question F1), as `python -m tasks.scoring.score bootstrap` tests two runs; None for a
  metric without additive statistics (macro F1, Spearman's rho)."""
  if family.scoring is None:
    raise errors.ConfigError(f"task family {family.name!r} has no scoring kind (TaskFamily.scoring): its runs cannot "
                             "be compared by a paired bootstrap")
  kind, task = kinds.KINDS[family.scoring], family.task
  gold, ours = _columns(kind, workdir / "predictions", split)
  _, theirs = _columns(kind, workdir / "reference_predictions", split)
  options = dict(positive=task["positive_label"] or None, mode=task["score_mode"], scheme=task["scheme"],
                 version2=task["unanswerable"])
  counted = [kind.statistics(metric, gold, predicted, **options) for predicted in (ours, theirs)]
  first, second = counted[::-1] if reverse else counted
  if first is None or second is None:
    return None
  (a, measure), (b, _) = first, second
  return bootstrap.paired_bootstrap(a, b, measure).p_value


def run_reference(config, data: finetune_data.TaskData, split: finetune_data.Split,
                  after_training: Callable[[], Any] = lambda: None) -> dict[str, Any]:
  """HF PyTorch fine-tuning of config.init's checkpoint with the same recipe: scores and predictions on `split`
  (`after_training` is called between training and prediction). Span NER is compared with plain BIO tagging of the
  same data (the target: within 0.5 F1 of tagging)."""
  from benchmarks import finetune_reference  # pylint: disable=import-outside-toplevel  (torch only when asked)
  family, train_examples, split_examples = data.family, data.train.examples, split.examples
  if family.name == "span_ner":
    family = registry.family(finetune_data.task_mapping(config.task, ()) | {"name": "tagging"})
    family = registry.family(family.task | {"labels": family.label_vocabulary(data.train.records)})
    train_examples = finetune_data.encode(family, data.tokenizer, data.train.records)
    split_examples = finetune_data.encode(family, data.tokenizer, split.records)
  task = family.task
  kind = {"classification": "sequence", "regression": "regression", "question_answering": "span"}.get(family.name,
                                                                                                      "token")
  labels, score_weight = task["labels"], config.task.score_weight if kind == "sequence" else 0.0
  bf16 = config.model.dtype == "bfloat16"  # Our mixed precision: the reference runs under torch.autocast.
  model = finetune_reference.build_model(kind, common.model_from_init(config.init)[1],
                                         len(labels) + int(score_weight > 0), config.seed, task.get("score_mean"))
  timing = finetune_reference.train(
      kind, model, train_examples, epochs=config.epochs, batch_size=config.batch_size,
      learning_rate=config.optimizer.learning_rate, warmup_fraction=config.optimizer.warmup_fraction,
      weight_decay=config.optimizer.weight_decay, seed=config.seed, layer_decay=config.layer_decay,
      regime=config.regime, top_k=config.top_k,
      rdrop=config.task.rdrop if kind == "sequence" else 0.0, score_weight=score_weight, bf16=bf16)
  after_training()
  started = time.perf_counter()
  raw = finetune_reference.predict(kind, model, split_examples, batch_size=config.batch_size, num_labels=len(labels),
                                   bf16=bf16)
  if kind == "span":  # Our decoding of HF's logits (SQuAD v1.1: no null threshold).
    predictions = evaluation.decode(family, split, raw)
  elif kind == "sequence":
    predictions = [labels[i] for i in raw]
  elif kind == "regression":
    predictions = raw
  else:
    predictions = [[labels[t] for t in row] for row in raw]
  eval_rate = len(split_examples) / (time.perf_counter() - started)  # Forward passes + decoding, as ours.
  return {"scores": family.score(split.records, predictions), "family": family, "predictions": predictions,
          "eval_examples_per_s": eval_rate, **timing}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  parser = cli.ArgumentParser(prog="python -m benchmarks.finetune", description=__doc__.split("\n")[0])
  parser.add_argument("--task", required=True, choices=sorted(finetune.TASK_PRESETS))
  parser.add_argument("--init", default="hf:all-MiniLM-L6-v2", help="checkpoint to fine-tune (configs/finetune.py)")
  parser.add_argument("--reference", action="store_true", help="also run the HF PyTorch reference")
  parser.add_argument("--workdir", default="", help="run directory (default: a fresh temporary one)")
  parser.add_argument("--set", action="append", default=[], help="config override key=value (repeatable)")
  parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                      help="config.model.dtype: bfloat16 is mixed precision (float32 parameters; the reference under "
                           "torch.autocast)")
  args = parser.parse_args(argv)
  host_memory.retain_freed_memory()  # Ours and the HF reference: same process, same malloc.
  xla_flags.apply_gpu_defaults()
  config = finetune.get_config(f"task={args.task},init={args.init}")
  with config.unlocked():
    config.model.dtype = args.precision
    for assignment in args.set:
      _set(config, assignment)
  if args.reference and args.precision == "bfloat16":
    from benchmarks import torch_device  # pylint: disable=import-outside-toplevel  (torch only when asked)
    if reason := torch_device.autocast_skip_reason(torch_device.torch_device()):
      raise errors.UserError(f"--reference --precision bfloat16: {reason}; compare in float32 (--precision float32), "
                          "or run ours alone in bfloat16")
  if args.reference and config.task.name == "span_ner" and config.task.nested:
    parser.error("--reference compares span NER with HF's tagger of the same entities, which cannot hold nested ones "
                 "(task.nested): compare the tagger of the outer entities instead (e.g. --task genia_flat)")
  if args.reference and config.optimizer.ema_decay > 0:
    parser.error(f"--reference tests its last parameters: it cannot mirror optimizer.ema_decay="
                 f"{config.optimizer.ema_decay} (a parameter average)")
  workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"finetune_{args.task}_"))
  ceiling = lambda: flops.matmul_ceiling(repeats=5, dtype=config.model.dtype) / 1e9
  ceilings = [ceiling()] if args.reference else []
  started = time.perf_counter()
  results = train.train_and_evaluate(config, workdir)
  wall = time.perf_counter() - started
  if results["stopped_early"]:
    raise SystemExit(f"training stopped at step {results['step']} (SIGTERM) before any score; the same command "
                     f"with --workdir {workdir} resumes it")
  data = finetune_data.load(config)
  split = data.test if data.test is not None and results["test"] else data.eval
  scores = results["test"] if split is data.test else results["dev"]
  metric = config.task.metric
  seconds = train_seconds(workdir)
  out = {"task": args.task, "split": "test" if split is data.test else "dev", "metric": metric,
         "score": round(scores[metric], 2), "dev_score": round(results["dev"][metric], 2),
         "scores": {k: round(v, 2) for k, v in scores.items()},
         "best_step": results["best_step"], "steps": results["step"], "train_seconds": round(seconds, 1),
         "examples_per_s": round(config.epochs * len(data.train.examples) / seconds, 1),
         "eval_examples_per_s": round(results["evaluation_examples_per_second"][split.name], 1),
         "wall_seconds": round(wall, 1), "workdir": str(workdir), "records": len(split.records),
         "train_records": len(data.train.records), "train_examples": len(data.train.examples),
         "precision": config.model.dtype, "recipe": {"epochs": config.epochs, "batch_size": config.batch_size,
                    "learning_rate": config.optimizer.learning_rate, "layer_decay": config.layer_decay,
                    "rdrop": config.task.rdrop, "score_weight": config.task.score_weight, "regime": config.regime}}
  if args.reference:
    ceilings.append(ceiling())
    reference = run_reference(config, data, split, after_training=lambda: ceilings.append(ceiling()))
    # The reference's predictions as ours are written (`tasks.scoring.score` reads both; so do the p-values).
    evaluation.write_predictions(workdir / "reference_predictions", reference["family"], split,
                                 reference["predictions"])
    out.update(reference_score=round(100 * reference["scores"][metric], 2),
               reference_scores={k: round(100 * v, 2) for k, v in reference["scores"].items()},
               reference_train_seconds=round(reference["train_seconds"], 1),
               reference_examples_per_s=round(reference["examples_per_s"], 1),
               reference_eval_examples_per_s=round(reference["eval_examples_per_s"], 1),
               speedup=round(out["examples_per_s"] / reference["examples_per_s"], 2),
               p_value=p_value(data.family, workdir, split.name, metric),
               reference_p_value=p_value(data.family, workdir, split.name, metric, reverse=True),
               ceilings_gflops=[round(c, 1) for c in ceilings])
    if metric != "accuracy" and "accuracy" in scores:  # MRPC: GLUE's pair, both tested.
      out["p_value_accuracy"] = p_value(data.family, workdir, split.name, "accuracy")
  if ceilings and (warning := drift_warning(ceilings)):
    print(warning)
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  errors.run(main)
