"""Scoring kinds: one registry of what `python -m tasks.scoring.score <kind>` scores, what `score bootstrap --task
<kind>` tests, and how the reports (launch.experiments.report, suite_report) read a run's prediction files of that
kind. A task family names its kind (`TaskFamily.scoring`); nothing else names one, so adding a kind is one
`register` call (tests/tasks/scoring/test_kinds.py adds one from a test file).

  conll   CoNLL tag columns: entity P/R/F1 per type (conlleval or strict chunking); bootstrap on micro entity F1
  labels  a label per line: per-label P/R/F1 and accuracy; bootstrap on accuracy
  scores  a number per line (regression): Pearson, Spearman, MSE; bootstrap on Pearson's r
  squad   SQuAD gold JSON and {question id: answer} predictions: exact match and F1; bootstrap on the mean F1
  spans   nested span gold (JSON lines) and a word task's predictions/<split>.jsonl: exact-match span P/R/F1 (no
          bootstrap)

A kind's `statistics` gives per-example additive statistics for a metric, so that `bootstrap.paired_bootstrap` (and
its median-over-seeds form) can test any pair of systems; None where the metric has none (Spearman's rho, macro-F1).
"""

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from encoder import files
from tasks.readers.spans import read_spans_jsonl
from tasks.scoring import bootstrap, columns, metrics, squad, tag_schemes
from tasks.scoring.bootstrap import BootstrapResult, Metric

Statistics = tuple[np.ndarray, Metric]  # (per-example statistics [N, ...], the metric of their sums)


def _none(metric: str, gold: Sequence, pred: Sequence, **options) -> Statistics | None:
  return None


@dataclasses.dataclass(frozen=True)
class ScoringKind:
  name: str  # The score subcommand, `bootstrap --task` value and TaskFamily.scoring.
  score: Callable[[argparse.Namespace], dict[str, Any]]  # `score <name>`: prints its table, returns the summary.
  options: tuple[str, ...] = ()  # Command-line options it reads besides --gold and --pred: "mode", "scheme".
  # `score bootstrap --task <name>` (--gold, --pred-a, --pred-b, --samples, --seed) -> (result, the metric's name);
  # None: no bootstrap.
  bootstrap: Callable[[argparse.Namespace], tuple[BootstrapResult, str]] | None = None
  suffix: str = ""  # The run's prediction file of this kind: predictions/<split>.<suffix> (tasks.evaluation).
  gold_beside: bool = False  # That file also holds the gold (.conll); else the gold is predictions/<split>.jsonl.
  gold_suffix: str = "txt"  # The file `gold_text` makes.
  # The run's gold source (the prediction file or the split's .jsonl) -> the --gold file `bootstrap` reads.
  gold_text: Callable[[Path], str] | None = None
  # (the run's predictions directory, split) -> (gold, predicted) per example as `statistics` reads them; None when
  # the run has no such file.
  run_columns: Callable[[Path, str], tuple[list, list] | None] | None = None
  # (metric name, gold, predicted, positive=, mode=, scheme=, version2=) -> per-example statistics, or None.
  statistics: Callable[..., Statistics | None] = _none
  tested: Callable[[Mapping[str, Any]], bool] = lambda task: True  # Whether a run of `task` can be bootstrapped.


KINDS: dict[str, ScoringKind] = {}


def register(kind: ScoringKind) -> ScoringKind:
  """Adds `kind` to the registry (the score command, its bootstrap and the reports take it from there)."""
  KINDS[kind.name] = kind
  return kind


def bootstrapped() -> tuple[str, ...]:
  """The kinds `score bootstrap --task` takes."""
  return tuple(name for name, kind in KINDS.items() if kind.bootstrap is not None)


# conll: tag columns.

def _score_conll(args: argparse.Namespace) -> dict[str, Any]:
  gold, (pred,) = columns.load_tags(args.gold, [args.pred], args.scheme, args.mode)
  scores = metrics.entity_scores(gold, pred, args.mode, args.scheme)
  average = scores["micro"]
  print(columns.format_table(scores, "type"))
  return dict(task="conll", precision=average["precision"], recall=average["recall"], f1=average["f1"],
              accuracy=scores["accuracy"], mode=args.mode, scheme=tag_schemes.canonical_scheme(args.scheme),
              sentences=len(gold), tokens=sum(map(len, gold)))


def _bootstrap_conll(args: argparse.Namespace) -> tuple[BootstrapResult, str]:
  gold, (a, b) = columns.load_tags(args.gold, [args.pred_a, args.pred_b], args.scheme, args.mode)
  return bootstrap.entity_f1_bootstrap(gold, a, b, args.samples, args.seed, args.mode, args.scheme), "f1"


def _conll_gold(source: Path) -> str:
  """word gold predicted -> word gold."""
  lines = source.read_text(encoding="utf-8").split("\n")
  return "\n".join(" ".join(line.split()[:-1]) for line in lines)


def _conll_columns(directory: Path, split: str) -> tuple[list, list] | None:
  path = directory / f"{split}.conll"
  return columns.read_run_conll(path) if path.is_file() else None


def _conll_statistics(metric: str, gold: Sequence, pred: Sequence, *, mode: str = "conlleval",
                      scheme: str | None = "IOB2", **_) -> Statistics | None:
  """f1: entity micro F1 in `mode`/`scheme` (tags of a scheme only); accuracy: of tags."""
  if metric == "f1" and scheme:
    return metrics.entity_counts(gold, pred, mode, scheme)[1].sum(axis=1), metrics.micro_f1
  if metric == "accuracy":
    return metrics.accuracy_counts(gold, pred), metrics.accuracy_from_counts
  return None


CONLL = register(ScoringKind(
    "conll", _score_conll, ("mode", "scheme"), _bootstrap_conll, suffix="conll", gold_beside=True,
    gold_suffix="conll", gold_text=_conll_gold, run_columns=_conll_columns, statistics=_conll_statistics,
    tested=lambda task: bool(task.get("scheme"))))  # Tags without a scheme (UD POS): no entities to bootstrap.


# labels and scores: a value per line.

def _score_labels(args: argparse.Namespace) -> dict[str, Any]:
  gold, (pred,) = columns.load_labels(args.gold, [args.pred])
  scores = metrics.label_scores([g[0] for g in gold], [p[0] for p in pred])
  average = scores["macro"]
  print(columns.format_table(scores, "label"))
  return dict(task="labels", precision=average["precision"], recall=average["recall"], f1=average["f1"],
              accuracy=scores["accuracy"], examples=len(gold))


def _bootstrap_labels(args: argparse.Namespace) -> tuple[BootstrapResult, str]:
  gold, (a, b) = columns.load_labels(args.gold, [args.pred_a, args.pred_b])
  return bootstrap.accuracy_bootstrap(gold, a, b, args.samples, args.seed), "accuracy"


def _field_lines(key: str) -> Callable[[Path], str]:
  """A run's split .jsonl -> its records' `key` a line."""
  return lambda source: "".join(f"{r[key]}\n" for r in files.read_json_lines(source))


def _field_columns(key: str) -> Callable[[Path, str], tuple[list, list]]:
  """(the records' `key`, their predictions) of a run's split .jsonl."""
  def read(directory: Path, split: str) -> tuple[list, list]:
    rows = files.read_json_lines(directory / f"{split}.jsonl")
    return [r[key] for r in rows], [r["prediction"] for r in rows]
  return read


def _labels_statistics(metric: str, gold: Sequence, pred: Sequence, *, positive: str | None = None,
                       **_) -> Statistics | None:
  """accuracy; f1 of the positive label's class when one is given."""
  if metric == "accuracy":
    return metrics.accuracy_counts([[g] for g in gold], [[p] for p in pred]), metrics.accuracy_from_counts
  if metric == "f1" and positive:
    return metrics.positive_counts(gold, pred, positive), metrics.micro_f1
  return None


LABELS = register(ScoringKind(
    "labels", _score_labels, (), _bootstrap_labels, suffix="labels", gold_text=_field_lines("label"),
    run_columns=_field_columns("label"), statistics=_labels_statistics))


def _score_scores(args: argparse.Namespace) -> dict[str, Any]:
  gold, (pred,) = columns.load_scores(args.gold, [args.pred])
  scores = metrics.regression_scores(gold, pred)
  print("  ".join(f"{name} {value:.4f}" for name, value in scores.items()))
  return dict(task="scores", **scores, examples=len(gold))


def _bootstrap_scores(args: argparse.Namespace) -> tuple[BootstrapResult, str]:
  gold, (a, b) = columns.load_scores(args.gold, [args.pred_a, args.pred_b])
  return bootstrap.pearson_bootstrap(gold, a, b, args.samples, args.seed), "pearson"


def _scores_statistics(metric: str, gold: Sequence, pred: Sequence, **_) -> Statistics | None:
  """pearson (Spearman's rho has no additive statistics)."""
  return (metrics.pearson_moments(gold, pred), metrics.pearson_from_moments) if metric == "pearson" else None


SCORES = register(ScoringKind(
    "scores", _score_scores, (), _bootstrap_scores, suffix="labels", gold_text=_field_lines("score"),
    run_columns=_field_columns("score"), statistics=_scores_statistics))


# squad: questions and answer texts.

def _score_squad(args: argparse.Namespace) -> dict[str, Any]:
  ids, golds, version2 = squad.read_gold(args.gold)
  result = squad.scores(golds, squad.read_predictions(args.pred, ids), version2)
  print(f"exact_match {result['exact_match']:.4f}  f1 {result['f1']:.4f}")
  return dict(task="squad", **result, questions=len(ids), version="2.0" if version2 else "1.1")


def _bootstrap_squad(args: argparse.Namespace) -> tuple[BootstrapResult, str]:
  ids, golds, version2 = squad.read_gold(args.gold)
  a, b = (squad.read_predictions(path, ids) for path in (args.pred_a, args.pred_b))
  return bootstrap.squad_f1_bootstrap(golds, a, b, args.samples, args.seed, version2), "f1"


def _squad_gold(source: Path) -> str:
  """Questions as JSON lines of id and answers, what `score squad --gold` reads."""
  return "".join(json.dumps({"id": r["id"], "answers": r["answers"]}, ensure_ascii=False) + "\n"
                 for r in files.read_json_lines(source))


def _squad_columns(directory: Path, split: str) -> tuple[list, list]:
  """Gold answer texts; the predicted answer is the context's characters start:end."""
  rows = files.read_json_lines(directory / f"{split}.jsonl")
  return ([[a["text"] for a in r["answers"]] for r in rows],
          [r["context"][r["prediction"]["start"]:r["prediction"]["end"]] for r in rows])


def _squad_statistics(metric: str, gold: Sequence, pred: Sequence, *, version2: bool = False,
                      **_) -> Statistics | None:
  """exact_match or f1: the mean per-question score (SQuAD 2.0 scoring with `version2`)."""
  if metric not in ("exact_match", "f1"):
    return None
  column = squad.question_scores(gold, pred, version2)[:, int(metric == "f1")]
  return np.stack([column, np.ones(len(column))], axis=1), metrics.accuracy_from_counts


SQUAD = register(ScoringKind(
    "squad", _score_squad, (), _bootstrap_squad, suffix="json", gold_suffix="txt", gold_text=_squad_gold,
    run_columns=_squad_columns, statistics=_squad_statistics))


# spans: nested span sets (scored, not bootstrapped).

def _score_spans(args: argparse.Namespace) -> dict[str, Any]:
  """Exact-match span P/R/F1 per type and micro, and the outer and inner entities apart."""
  gold_records = list(read_spans_jsonl(args.gold))
  gold = [{(s["label"], s["start"], s["end"]) for s in r["spans"]} for r in gold_records]
  pairs = list(zip(gold, columns.read_predicted_spans(args.pred, gold_records, args.gold, args.scheme)))
  types, counts = metrics.span_counts(pairs)
  scores = metrics.scores_from_counts(types, counts.sum(axis=0))
  nesting = metrics.nesting_scores(pairs)
  print(columns.format_table(scores, "type"))
  print("  ".join(f"{name} {value:.4f}" for name, value in nesting.items()))
  average = scores["micro"]
  return dict(task="spans", precision=average["precision"], recall=average["recall"], f1=average["f1"], **nesting,
              sentences=len(gold))


SPANS = register(ScoringKind("spans", _score_spans, ("scheme",)))
