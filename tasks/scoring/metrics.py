"""Evaluation metrics (spec, "Evaluating Named Entity Recognition"): accuracy, macro-F1, entity-level P/R/F1, and
Pearson / Spearman correlations for regression.

Every metric but Spearman's is computed from additive per-example counts (`entity_counts`, `label_counts`,
`accuracy_counts`, `pearson_moments`) so the paired bootstrap can resample examples and re-score cheaply. Entity
scores equal seqeval's: mode 'conlleval' = seqeval's default (conlleval.pl chunking), mode 'strict' = seqeval's
mode='strict' with the scheme. Scores are fractions in [0, 1] (correlations in [-1, 1]); 0/0 is 0, as seqeval and
scikit-learn do.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from encoder import errors
from tasks.scoring import tag_schemes

TP, PRED, GOLD = 0, 1, 2  # Columns of the count arrays: true positives, predicted, gold.


def check_paired(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> None:
  """Raises ValueError naming the first sentence where gold and pred disagree in length."""
  if len(gold) != len(pred):
    raise errors.UserError(f"gold has {len(gold)} sentences but pred has {len(pred)}: score the same sentences")
  for i, (g, p) in enumerate(zip(gold, pred)):
    if len(g) != len(p):
      raise errors.UserError(f"sentence {i}: gold has {len(g)} tags but pred has {len(p)}: tag every token once")


def sentence_spans(tags: Sequence[str], mode: str = "conlleval", scheme: str = "IOB2") -> set[tag_schemes.Span]:
  """Entity spans of one sentence under a scoring mode: 'conlleval' (any tags) or 'strict' (in `scheme`)."""
  if mode == "conlleval":
    return set(tag_schemes.conlleval_spans(tags))
  if mode == "strict":
    return set(tag_schemes.strict_spans(tags, scheme))
  raise errors.UserError(f"unknown scoring mode {mode!r}: use 'conlleval' or 'strict'")


def entity_counts(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], mode: str = "conlleval",
                  scheme: str = "IOB2") -> tuple[list[str], np.ndarray]:
  """Per-sentence sufficient statistics: (sorted entity types, counts [sentences, types, (tp, pred, gold)])."""
  check_paired(gold, pred)
  pairs = []
  for i, (g, p) in enumerate(zip(gold, pred)):
    try:
      pairs.append((sentence_spans(g, mode, scheme), sentence_spans(p, mode, scheme)))
    except ValueError as err:
      raise errors.UserError(f"sentence {i}: {err}") from err
  return span_counts(pairs)


def span_counts(pairs: Sequence[tuple[set, set]]) -> tuple[list[str], np.ndarray]:
  """(sorted types, counts [examples, types, (tp, pred, gold)]) of exact matches between (gold, predicted) sets of
  (type, start, end) spans, one pair per example: nested or overlapping spans are scored as they are."""
  types = sorted({s[0] for g, p in pairs for s in g | p})
  index = {t: j for j, t in enumerate(types)}
  counts = np.zeros((len(pairs), len(types), 3), np.int64)
  for i, (g, p) in enumerate(pairs):
    for column, spans in ((TP, g & p), (PRED, p), (GOLD, g)):
      for span in spans:
        counts[i, index[span[0]], column] += 1
  return types, counts


def nesting_parts(spans: set[tuple[str, int, int]]) -> tuple[set, set]:
  """(outer, inner) of a set of (type, start, end) spans: those inside no other span of the set (one with other
  offsets that covers them), and the rest."""
  inner = {s for s in spans if any(o[1] <= s[1] and s[2] <= o[2] and o[1:] != s[1:] for o in spans)}
  return spans - inner, inner


def nesting_scores(pairs: Sequence[tuple[set, set]]) -> dict[str, float]:
  """Nested entities apart, from (gold, predicted) sets of (type, start, end) spans: micro F1 of the outer spans
  (`outer_f1`: comparable with a flat tagger of the outermost entities) and of the inner ones (`inner_f1`), gold and
  predictions each split by their own nesting (`nesting_parts`); and `inner_recall`, the share of gold inner spans
  predicted, whatever the prediction's nesting."""
  parts = [(nesting_parts(gold), nesting_parts(predicted)) for gold, predicted in pairs]
  micro_f1 = lambda side: float(prf(span_counts([(g[side], p[side]) for g, p in parts])[1].sum(axis=(0, 1)))[2])
  found = sum(len(g[1] & predicted) for (g, _), (_, predicted) in zip(parts, pairs))
  return {"outer_f1": micro_f1(0), "inner_f1": micro_f1(1),
          "inner_recall": found / max(sum(len(g[1]) for g, _ in parts), 1)}


def prf(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Precision, recall, F1 from counts [..., (tp, pred, gold)], vectorised; 0/0 gives 0 (seqeval's default)."""
  counts = np.asarray(counts, np.float64)
  tp, n_pred, n_gold = counts[..., TP], counts[..., PRED], counts[..., GOLD]
  precision = np.where(n_pred > 0, tp / np.maximum(n_pred, 1), 0.0)
  recall = np.where(n_gold > 0, tp / np.maximum(n_gold, 1), 0.0)
  denom = precision + recall
  f1 = np.where(denom > 0, 2 * precision * recall / np.where(denom > 0, denom, 1), 0.0)
  return precision, recall, f1


def micro_f1(counts: np.ndarray) -> np.ndarray:
  """Micro-averaged F1 from counts [..., (tp, pred, gold)] already summed over types (the bootstrap metric)."""
  return prf(counts)[2]


def accuracy_from_counts(counts: np.ndarray) -> np.ndarray:
  """Accuracy from counts [..., (correct, total)]; 0 where total is 0."""
  counts = np.asarray(counts, np.float64)
  return np.where(counts[..., 1] > 0, counts[..., 0] / np.maximum(counts[..., 1], 1), 0.0)


def accuracy_counts(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> np.ndarray:
  """Per-example [N, (correct, total)] token counts for sequences (pass [[label]] rows for classification)."""
  check_paired(gold, pred)
  return np.array([[sum(a == b for a, b in zip(g, p)), len(g)] for g, p in zip(gold, pred)], np.int64).reshape(-1, 2)


def _row(counts: np.ndarray) -> dict[str, Any]:
  p, r, f = prf(counts)
  return dict(precision=float(p), recall=float(r), f1=float(f), support=int(counts[GOLD]), tp=int(counts[TP]),
              pred=int(counts[PRED]), gold=int(counts[GOLD]))


def scores_from_counts(names: Sequence[str], counts: np.ndarray) -> dict[str, Any]:
  """Per-class rows plus micro, macro and support-weighted averages (seqeval's report) from counts [C, 3]."""
  counts = np.asarray(counts, np.int64).reshape(len(names), 3)
  p, r, f = prf(counts)
  support = counts[:, GOLD]
  # Support-weighted mean; with no gold items seqeval gives 0.
  weighted = [float(np.average(x, weights=support)) if support.sum() > 0 else 0.0 for x in (p, r, f)]
  mean = lambda x: float(x.mean()) if len(x) else 0.0  # No classes at all: 0 (seqeval would give nan).
  total = int(support.sum())
  return {
      "per_type": {n: _row(c) for n, c in zip(names, counts)},
      "micro": _row(counts.sum(axis=0)),
      "macro": dict(precision=mean(p), recall=mean(r), f1=mean(f), support=total),
      "weighted": dict(precision=weighted[0], recall=weighted[1], f1=weighted[2], support=total),
  }


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], mode: str = "conlleval",
                  scheme: str = "IOB2") -> dict[str, Any]:
  """Entity-level P/R/F1 per type and averaged, plus token accuracy, for tagged sentences (seqeval-equal)."""
  types, counts = entity_counts(gold, pred, mode, scheme)
  scores = scores_from_counts(types, counts.sum(axis=0))
  scores["accuracy"] = float(accuracy_from_counts(accuracy_counts(gold, pred).sum(axis=0)))
  return scores


def label_counts(gold: Sequence[str], pred: Sequence[str]) -> tuple[list[str], np.ndarray]:
  """Per-example one-hot counts for classification: (sorted labels, [N, labels, (tp, pred, gold)])."""
  check_paired([gold], [pred])
  labels = sorted(set(gold) | set(pred))
  index = {label: j for j, label in enumerate(labels)}
  counts = np.zeros((len(gold), len(labels), 3), np.int64)
  rows = np.arange(len(gold))
  pred_columns, gold_columns = [index[p] for p in pred], [index[g] for g in gold]
  hits = [int(g == p) for g, p in zip(gold, pred)]
  np.add.at(counts, (rows, pred_columns, PRED), 1)  # type: ignore[arg-type]  # numpy stubs lack per-axis index tuples
  np.add.at(counts, (rows, gold_columns, GOLD), 1)  # type: ignore[arg-type]  # numpy stubs lack per-axis index tuples
  np.add.at(counts, (rows, gold_columns, TP), hits)  # type: ignore[arg-type]  # numpy stubs lack per-axis index tuples
  return labels, counts


def positive_counts(gold: Sequence[str], pred: Sequence[str], positive: str) -> np.ndarray:
  """Per-example [N, (tp, pred, gold)] counts of one label, the positive class: `micro_f1` of their sum is its F1
  (scikit-learn's f1_score(average='binary', pos_label=positive); GLUE's MRPC/QQP F1)."""
  check_paired([gold], [pred])
  gold_is, pred_is = np.asarray(gold) == positive, np.asarray(pred) == positive
  return np.stack([gold_is & pred_is, pred_is, gold_is], axis=-1).astype(np.int64).reshape(-1, 3)


def macro_f1(counts: np.ndarray) -> np.ndarray:
  """Unweighted mean over labels of per-label F1, from counts [..., labels, 3] (scikit-learn's average='macro')."""
  return prf(counts)[2].mean(axis=-1)


def label_scores(gold: Sequence[str], pred: Sequence[str]) -> dict[str, Any]:
  """Accuracy, per-label P/R/F1 and macro/micro/weighted averages for single-label classification."""
  labels, counts = label_counts(gold, pred)
  scores = scores_from_counts(labels, counts.sum(axis=0))
  scores["accuracy"] = float(accuracy_from_counts(np.array([sum(g == p for g, p in zip(gold, pred)), len(gold)])))
  return scores


# Regression (SICK relatedness, STS-B): Pearson's r from additive per-example moments, so the bootstrap resamples it.
def pearson_moments(gold: Sequence[float] | np.ndarray, pred: Sequence[float] | np.ndarray) -> np.ndarray:
  """Per-example [N, (1, x, y, x^2, y^2, xy)] with x = gold, y = pred: Pearson's r of any sample is a function of
  their sums (`pearson_from_moments`)."""
  x, y = np.asarray(gold, np.float64), np.asarray(pred, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise errors.UserError(f"gold and pred need one number per example, got shapes {x.shape} and {y.shape}")
  return np.stack([np.ones_like(x), x, y, x * x, y * y, x * y], axis=-1)


def pearson_from_moments(moments: np.ndarray) -> np.ndarray:
  """Pearson's r from summed moments [..., 6]; 0 where either side is constant."""
  n, x, y, xx, yy, xy = np.moveaxis(np.asarray(moments, np.float64), -1, 0)
  covariance, var_x, var_y = n * xy - x * y, n * xx - x * x, n * yy - y * y
  denominator = np.sqrt(np.maximum(var_x, 0.0) * np.maximum(var_y, 0.0))
  return np.where(denominator > 0, covariance / np.where(denominator > 0, denominator, 1.0), 0.0)


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
  """1-based ranks, ties sharing their average rank (what Spearman's rho correlates)."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  ends = np.r_[starts[1:], len(values)]
  ranks = np.empty(len(values))
  ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
  return ranks


def regression_scores(gold: Sequence[float], pred: Sequence[float]) -> dict[str, float]:
  """Pearson's r, Spearman's rho (Pearson of average ranks) and the mean squared error."""
  pearson = float(pearson_from_moments(pearson_moments(gold, pred).sum(axis=0)))
  spearman = float(pearson_from_moments(pearson_moments(average_ranks(gold), average_ranks(pred)).sum(axis=0)))
  mse = float(np.mean((np.asarray(gold, np.float64) - np.asarray(pred, np.float64)) ** 2)) if len(gold) else 0.0
  return {"pearson": pearson, "spearman": spearman, "mse": mse}
