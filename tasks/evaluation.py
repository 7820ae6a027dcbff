"""Decoded predictions -> scores and prediction files (`workdir/predictions/<split>.jsonl`, and `.conll` for
tagging) so that any result can be re-scored independently with `python -m tasks.score`."""

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from tasks import metrics, tag_schemes


def score(task: Mapping[str, Any], records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
  """The task's metrics: accuracy + macro-F1 (classification), Pearson + Spearman + MSE (regression), entity P/R/F1
  or tag accuracy (tagging, spans)."""
  if task["name"] == "regression":
    return metrics.regression_scores([r["score"] for r in records], list(predictions))
  if task["name"] == "classification":
    gold = [r["label"] for r in records]
    result = metrics.label_scores(gold, list(predictions))
    return {"accuracy": result["accuracy"], "macro_f1": result["macro"]["f1"]}
  gold_tags = [gold_tags_of(task, r) for r in records]
  pred_tags = [tags_of(task, p, len(r["words"])) for r, p in zip(records, predictions)]
  if task["name"] == "tagging" and not task.get("scheme"):  # Plain labels (POS): word accuracy.
    return {"accuracy": float(metrics.accuracy_from_counts(metrics.accuracy_counts(gold_tags, pred_tags).sum(0)))}
  scheme = task.get("scheme") or "IOB2"
  result = metrics.entity_scores(gold_tags, pred_tags, mode=task.get("score_mode", "conlleval"), scheme=scheme)
  out = {"precision": result["micro"]["precision"], "recall": result["micro"]["recall"], "f1": result["micro"]["f1"],
         "accuracy": result["accuracy"]}
  out.update({f"f1_{kind}": row["f1"] for kind, row in result["per_type"].items()})
  return out


def gold_tags_of(task: Mapping[str, Any], record: dict) -> list[str]:
  """Gold tags in the scored scheme (span records are rendered in BIO/`scheme`)."""
  if "tags" in record:
    source, target = task.get("source_scheme"), task.get("scheme")
    if source and target and tag_schemes.canonical_scheme(source) != tag_schemes.canonical_scheme(target):
      return tag_schemes.convert(record["tags"], source, target)
    return list(record["tags"])
  spans = [(s["label"], s["start"], s["end"]) for s in record["spans"]]
  return tag_schemes.tags_from_spans(spans, len(record["words"]), task.get("scheme") or "IOB2")


def tags_of(task: Mapping[str, Any], prediction: Any, num_words: int) -> list[str]:
  """Predicted tags for every word: tag lists are padded with "O" past truncation; span lists are rendered."""
  if task["name"] == "span_ner":
    spans = [(label, start, end) for start, end, label in prediction]
    return tag_schemes.tags_from_spans(spans, num_words, task.get("scheme") or "IOB2")
  return list(prediction) + ["O"] * (num_words - len(prediction))


def write_predictions(directory: str | os.PathLike, split: str, task: Mapping[str, Any], records: Sequence[dict],
                      predictions: Sequence[Any]) -> list[Path]:
  """Writes <split>.jsonl (one record + prediction per line) and, for word-level tasks, <split>.conll
  (word, gold, predicted), atomically (temp file + rename)."""
  directory = Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  written = [_atomic_write(directory / f"{split}.jsonl", "".join(
      json.dumps({**record, "prediction": prediction}, ensure_ascii=False) + "\n"
      for record, prediction in zip(records, predictions)))]
  if task["name"] not in ("classification", "regression"):
    blocks = []
    for record, prediction in zip(records, predictions):
      gold, pred = gold_tags_of(task, record), tags_of(task, prediction, len(record["words"]))
      blocks.append("".join(f"{w} {g} {p}\n" for w, g, p in zip(record["words"], gold, pred)))
    written.append(_atomic_write(directory / f"{split}.conll", "\n".join(blocks)))
  return written


def _atomic_write(path: Path, text: str) -> Path:
  temporary = path.with_name(f".{path.name}.tmp")
  temporary.write_text(text, encoding="utf-8")
  os.replace(temporary, path)
  return path
