"""Fine-tuning evaluation: predict a whole split on device, decode on the host, score, write prediction files.

Device outputs per task: the class index (classification), the score (regression), word-level tag ids by argmax or
Viterbi (tagging, `tasks.tagging.decode`), span probabilities over NULL + types (span_ner). Span NER's acceptance
threshold is tuned on dev (`tasks.span_ner.tune_threshold`) and the dev value is used on test: choices are made on
dev, never on test.
"""

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from launch import finetune_data
from tasks import evaluation, span_ner, tagging


def device_outputs(model, task_name: str) -> Callable[[Any, dict[str, jax.Array]], jax.Array]:
  """(params, batch) -> the task's decodable outputs for every row (jit it)."""
  def outputs(params, batch):
    predictions = model.apply({"params": params}, batch, train=False)[task_name]
    if task_name == "classification":
      return jnp.argmax(predictions["logits"], axis=-1)
    if task_name == "regression":
      return predictions["score"]
    if task_name == "tagging":
      return tagging.decode(predictions, batch)
    return jax.nn.softmax(predictions, axis=-1)
  return outputs


def raw_predictions(predict: Callable, params: Any, split: finetune_data.Split, *, batch_size: int,
                    buckets: Sequence[int], widths: dict[str, Callable[[int], int]], to_device: Callable
                    ) -> list[np.ndarray]:
  """Per-example device outputs of a whole split, in split order (padding rows and widths cut off)."""
  out: list[Any] = [None] * len(split.examples)
  for indices, local in finetune_data.eval_batches(split, batch_size=batch_size, buckets=buckets,
                                                         widths=widths):
    values = np.asarray(jax.device_get(predict(params, to_device(local))))
    for row, i in enumerate(indices):
      example = split.examples[i]
      if "word_positions" in example:
        out[i] = values[row, :len(example["word_positions"])]
      elif "span_labels" in example:
        out[i] = values[row, :len(example["span_labels"])]
      else:
        out[i] = values[row]
  return out


def _gold_spans(split: finetune_data.Split) -> list[list[tuple[int, int, int]]]:
  return [[(int(s), int(e) + 1, int(label)) for (s, e), label in zip(ex["span_words"], ex["span_labels"]) if label > 0]
          for ex in split.examples]


def decode(task: dict[str, Any], split: finetune_data.Split, raw: Sequence[np.ndarray],
           threshold: float | None = None) -> list[Any]:
  """Raw outputs -> predictions as the scorer reads them: label names, scores, tag lists, or (start, end, type)
  spans."""
  labels = task["labels"]
  if task["name"] == "regression":
    return [float(r) for r in raw]
  if task["name"] == "classification":
    return [labels[int(r)] for r in raw]
  if task["name"] == "tagging":
    return [[labels[int(t)] for t in r] for r in raw]
  return [[(start, end, labels[label - 1]) for start, end, label in
           span_ner.decode_spans(r, ex["span_words"].reshape(-1, 2), threshold=threshold, nested=task["nested"])]
          for r, ex in zip(raw, split.examples)]


def tuned_threshold(task: dict[str, Any], dev: finetune_data.Split, raw: Sequence[np.ndarray]) -> float | None:
  """Span NER: the acceptance threshold with the best dev F1; None for other tasks."""
  if task["name"] != "span_ner":
    return None
  words = [ex["span_words"].reshape(-1, 2) for ex in dev.examples]
  return span_ner.tune_threshold(raw, words, _gold_spans(dev), nested=task["nested"])


def has_labels(task: dict[str, Any], split: finetune_data.Split) -> bool:
  """Whether the split can be scored (SST-2's test split has no labels)."""
  if task["name"] == "regression":
    return all(r.get("score") is not None for r in split.records)
  return task["name"] != "classification" or all(r.get("label") is not None for r in split.records)


def score_split(task: dict[str, Any], split: finetune_data.Split, predictions: Sequence[Any]) -> dict[str, float]:
  """The task's scores of a split (fractions), {} when it has no labels."""
  return evaluation.score(task, split.records, predictions) if has_labels(task, split) else {}


def write(directory: Path, task: dict[str, Any], split: finetune_data.Split, predictions: Sequence[Any]) -> None:
  """predictions/<split>.jsonl (+ .conll for word tasks, + .labels, one predicted label or score a line, for
  classification and regression)."""
  evaluation.write_predictions(directory, split.name, task, split.records, predictions)
  if task["name"] in ("classification", "regression"):
    (directory / f"{split.name}.labels").write_text("".join(f"{p}\n" for p in predictions), encoding="utf-8")


def make_evaluator(data: finetune_data.TaskData, predict: Callable, *, batch_size: int, to_device: Callable):
  """(evaluate_dev(params) -> {"eval/<metric>": value}, final(params, workdir) -> {"dev", "test", ...})."""
  run = lambda params, split: raw_predictions(predict, params, split, batch_size=batch_size, buckets=data.buckets,
                                              widths=data.widths, to_device=to_device)

  def evaluate_dev(params) -> dict[str, float]:
    raw = run(params, data.eval)
    threshold = tuned_threshold(data.task, data.eval, raw)
    scores = score_split(data.task, data.eval, decode(data.task, data.eval, raw, threshold))
    return {f"eval/{k}": float(v) for k, v in scores.items()} | (
        {} if threshold is None else {"eval/threshold": threshold})

  def final(params, workdir: Path, write_files: bool) -> dict[str, Any]:
    raw = run(params, data.eval)
    threshold = tuned_threshold(data.task, data.eval, raw)
    results: dict[str, Any] = {"threshold": threshold} if threshold is not None else {}
    for split, split_raw in ((data.eval, raw), (data.test, None)):
      if split is None:
        continue
      predictions = decode(data.task, split, split_raw if split_raw is not None else run(params, split), threshold)
      results[split.name] = score_split(data.task, split, predictions)
      if write_files:
        write(workdir / "predictions", data.task, split, predictions)
    return results
  return evaluate_dev, final


def write_results(workdir: Path, results: dict[str, Any]) -> None:
  """workdir/results.json (process 0 only), replaced atomically so a kill never leaves half a file."""
  if jax.process_index() == 0:
    partial = workdir / "results.json.tmp"
    partial.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(partial, workdir / "results.json")
