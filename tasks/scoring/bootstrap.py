"""The paired bootstrap test (spec, "Evaluating Named Entity Recognition"; Berg-Kirkpatrick et al., 2012).

delta(x) = M(A, x) - M(B, x) on the test set x. Draw b test sets x(i) of the same size with replacement
(the same draw for both systems: paired) and count how often delta(x(i)) >= 2 delta(x): because the
resamples are centred near delta(x), not 0, this estimates how often a gain of delta(x) arises by chance,
so p-value(x) = that count / b. The test asks whether A beats B: it is meaningful only for delta(x) > 0;
identical systems give delta = 0 and p = 1. Metrics are functions of per-example counts summed over the
sample, so a resample is a weighted sum: counts of draws [chunk, N] @ statistics [N, D].
"""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from encoder import errors
from tasks.scoring import metrics, squad

Metric = Callable[[np.ndarray], np.ndarray]  # summed statistics [S, ...] -> metric values [S]
TIE_TOLERANCE = 1e-12  # delta(x(i)) = 2 delta(x) exactly is common (discrete counts): count it despite rounding.


@dataclasses.dataclass(frozen=True)
class BootstrapResult:
  metric_a: float  # M(A, x) on the whole test set.
  metric_b: float  # M(B, x).
  delta: float  # metric_a - metric_b.
  p_value: float  # Fraction of resamples with delta(x(i)) >= 2 delta(x).
  samples: int  # b.
  seed: int


def paired_bootstrap(stats_a: np.ndarray, stats_b: np.ndarray, metric: Metric, samples: int = 10_000,
                     seed: int = 0, chunk: int = 256) -> BootstrapResult:
  """Paired bootstrap p-value that A beats B, from per-example additive statistics [N, ...] of each system."""
  stats_a, stats_b = np.asarray(stats_a, np.float64), np.asarray(stats_b, np.float64)
  if len(stats_a) != len(stats_b) or len(stats_a) == 0:
    raise errors.UserError(f"systems A and B need statistics for the same non-empty test set, got {len(stats_a)} "
                           f"and {len(stats_b)} examples")
  if samples < 1:
    raise errors.UserError(f"samples must be at least 1, got {samples}")
  n = len(stats_a)
  flat = np.concatenate([stats_a.reshape(n, -1), stats_b.reshape(n, -1)], axis=1)  # [N, Da + Db]
  split = stats_a[0].size

  def delta(summed: np.ndarray) -> np.ndarray:  # summed: [S, Da + Db]
    s = len(summed)
    return (metric(summed[:, :split].reshape((s,) + stats_a.shape[1:]))
            - metric(summed[:, split:].reshape((s,) + stats_b.shape[1:])))

  full = flat.sum(axis=0, keepdims=True)
  observed = float(delta(full)[0])
  rng = np.random.default_rng(seed)
  hits = 0
  for start in range(0, samples, chunk):
    rows = min(chunk, samples - start)
    draws = rng.integers(0, n, size=(rows, n))  # x(i): n examples drawn with replacement.
    weights = np.bincount((draws + n * np.arange(rows)[:, None]).ravel(), minlength=rows * n).reshape(rows, n)
    hits += int(np.sum(delta(weights.astype(np.float64) @ flat) >= 2 * observed - TIE_TOLERANCE))
  a = float(metric(full[:, :split].reshape((1,) + stats_a.shape[1:]))[0])
  return BootstrapResult(metric_a=a, metric_b=a - observed, delta=observed, p_value=hits / samples,
                         samples=samples, seed=seed)


def entity_f1_bootstrap(gold: Sequence[Sequence[str]], pred_a: Sequence[Sequence[str]],
                        pred_b: Sequence[Sequence[str]], samples: int = 10_000, seed: int = 0,
                        mode: str = "conlleval", scheme: str = "IOB2") -> BootstrapResult:
  """Paired bootstrap on micro entity F1 over sentences (the spec's NER comparison)."""
  stats_a, stats_b = (metrics.entity_counts(gold, p, mode, scheme)[1].sum(axis=1) for p in (pred_a, pred_b))
  return paired_bootstrap(stats_a, stats_b, metrics.micro_f1, samples, seed)


def accuracy_bootstrap(gold: Sequence[Sequence[str]], pred_a: Sequence[Sequence[str]],
                       pred_b: Sequence[Sequence[str]], samples: int = 10_000, seed: int = 0) -> BootstrapResult:
  """Paired bootstrap on accuracy over examples (one label per example: pass [[label], ...])."""
  stats_a, stats_b = (metrics.accuracy_counts(gold, p) for p in (pred_a, pred_b))
  return paired_bootstrap(stats_a, stats_b, metrics.accuracy_from_counts, samples, seed)


def positive_f1_bootstrap(gold: Sequence[str], pred_a: Sequence[str], pred_b: Sequence[str], positive: str,
                          samples: int = 10_000, seed: int = 0) -> BootstrapResult:
  """Paired bootstrap on the positive class's F1 over examples (one label per example; GLUE's MRPC F1)."""
  stats_a, stats_b = (metrics.positive_counts(gold, p, positive) for p in (pred_a, pred_b))
  return paired_bootstrap(stats_a, stats_b, metrics.micro_f1, samples, seed)


def pearson_bootstrap(gold: Sequence[float], pred_a: Sequence[float], pred_b: Sequence[float],
                      samples: int = 10_000, seed: int = 0) -> BootstrapResult:
  """Paired bootstrap on Pearson's r over examples (regression: one number per example)."""
  stats_a, stats_b = (metrics.pearson_moments(gold, p) for p in (pred_a, pred_b))
  return paired_bootstrap(stats_a, stats_b, metrics.pearson_from_moments, samples, seed)


def squad_f1_bootstrap(golds: Sequence[Sequence[str]], pred_a: Sequence[str | None], pred_b: Sequence[str | None],
                       samples: int = 10_000, seed: int = 0, version2: bool = False) -> BootstrapResult:
  """Paired bootstrap on SQuAD's F1 (the mean of per-question F1) over questions."""
  stats_a, stats_b = (np.stack([squad.question_scores(golds, p, version2)[:, 1], np.ones(len(golds))], axis=1)
                      for p in (pred_a, pred_b))
  return paired_bootstrap(stats_a, stats_b, lambda summed: summed[:, 0] / summed[:, 1], samples, seed)


def median_over_seeds_bootstrap(stats_a: Sequence[np.ndarray], stats_b: Sequence[np.ndarray], metric: Metric,
                                samples: int = 10_000, seed: int = 0) -> BootstrapResult:
  """Paired bootstrap that system A beats B when each is trained with several seeds: the statistic is the median over
  A's seeds of the metric minus the median over B's, every seed's predictions scored on the same resampled test set
  (examples paired across seeds and systems; the seeds need not be the same, nor their number). `stats_a`: one
  [N, ...] array of per-example statistics per seed (`tasks.scoring.kinds.ScoringKind.statistics`)."""
  if not len(stats_a) or not len(stats_b):
    raise errors.UserError(f"each system needs at least one seed's statistics, got {len(stats_a)} and {len(stats_b)}")
  median = lambda summed: np.median(metric(summed), axis=1)  # summed: [S, seeds, ...] -> [S].
  return paired_bootstrap(np.stack(stats_a, axis=1), np.stack(stats_b, axis=1), median, samples, seed)
