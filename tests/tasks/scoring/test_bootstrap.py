"""Paired bootstrap: the spec's p-value against a loop over seqeval, an exact binomial case, sanity, speed.

Deltas and metrics are float64 on both sides (ratios of counts, moments of 60 numbers): 1e-12 leaves rounding only.
"""

import random
import time
import warnings

import numpy as np
import pytest
import scipy.stats
from seqeval.metrics import f1_score
from sklearn.metrics import f1_score as sk_f1

from tasks.scoring import bootstrap, kinds, metrics
from tests.conftest import conll_tags
from tests.tasks.scoring.test_squad import (
  official_exact_match_score,
  official_f1_score,
  official_metric_max_over_ground_truths,
)


def corrupt(sentences, rate, seed):
  rng = random.Random(seed)
  tags = sorted({t for s in sentences for t in s})
  return [[rng.choice(tags) if rng.random() < rate else t for t in s] for s in sentences]


@pytest.fixture(scope="module")
def small_corpus():
  rng = random.Random(0)
  gold = [[rng.choice(["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]) for _ in range(rng.randint(1, 9))]
          for _ in range(40)]
  return gold, corrupt(gold, 0.15, 1), corrupt(gold, 0.2, 2)


def test_p_value_equals_a_plain_loop_over_seqeval_with_the_same_draws(small_corpus):
  gold, a, b = small_corpus
  samples, n = 300, len(gold)
  draws = np.random.default_rng(7).integers(0, n, size=(samples, n))  # The draws paired_bootstrap makes.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    f1 = lambda pred, idx: f1_score([gold[i] for i in idx], [pred[i] for i in idx])
    observed = f1(a, range(n)) - f1(b, range(n))
    deltas = np.array([f1(a, idx) - f1(b, idx) for idx in draws])
  stats = [metrics.entity_counts(gold, p)[1].sum(axis=1) for p in (a, b)]
  result = bootstrap.paired_bootstrap(*stats, metrics.micro_f1, samples=samples, seed=7, chunk=samples)
  assert abs(result.delta - observed) < 1e-12
  assert result.p_value == np.mean(deltas >= 2 * observed - 1e-12)  # Spec: count delta(x(i)) >= 2 delta(x).
  assert 0 < result.p_value < 1


def test_pearson_p_value_equals_a_plain_loop_over_scipy_with_the_same_draws():
  rng = np.random.default_rng(0)
  gold = np.round(rng.uniform(1, 5, size=60), 1)
  a, b = gold + rng.normal(scale=0.8, size=60), gold + rng.normal(scale=1.0, size=60)
  samples, n = 300, len(gold)
  draws = np.random.default_rng(7).integers(0, n, size=(samples, n))
  r = lambda pred, idx: scipy.stats.pearsonr(gold[idx], pred[idx]).statistic
  observed = r(a, np.arange(n)) - r(b, np.arange(n))
  deltas = np.array([r(a, idx) - r(b, idx) for idx in draws])
  result = bootstrap.pearson_bootstrap(gold, a, b, samples=samples, seed=7)
  assert abs(result.delta - observed) < 1e-12
  assert result.p_value == np.mean(deltas >= 2 * observed - 1e-12)
  assert 0 < result.p_value < 1


def test_positive_f1_p_value_equals_a_plain_loop_over_scikit_learn_with_the_same_draws():
  rng = random.Random(3)
  gold = [rng.choice("0111") for _ in range(80)]
  a = [g if rng.random() < 0.85 else rng.choice("01") for g in gold]
  b = [g if rng.random() < 0.75 else rng.choice("01") for g in gold]
  samples, n = 300, len(gold)
  draws = np.random.default_rng(7).integers(0, n, size=(samples, n))
  f1 = lambda pred, idx: sk_f1([gold[i] for i in idx], [pred[i] for i in idx], pos_label="1", zero_division=0)
  observed = f1(a, range(n)) - f1(b, range(n))
  deltas = np.array([f1(a, idx) - f1(b, idx) for idx in draws])
  result = bootstrap.positive_f1_bootstrap(gold, a, b, "1", samples=samples, seed=7)
  assert abs(result.delta - observed) < 1e-12
  assert result.p_value == np.mean(deltas >= 2 * observed - 1e-12)
  assert 0 < result.p_value < 1


def test_one_extra_correct_example_gives_the_binomial_p_value():
  # A is right on exactly one more of n examples: delta(x(i)) = k/n with k ~ Binomial(n, 1/n) draws of that
  # example, so p = P(k >= 2) = 1 - (1 - 1/n)^n - (1 - 1/n)^(n - 1).
  n = 100
  gold = [["yes"]] * n
  a = [["yes"]] * 60 + [["no"]] * 40
  b = [["yes"]] * 59 + [["no"]] * 41
  result = bootstrap.accuracy_bootstrap(gold, a, b, samples=20_000, seed=1)
  expected = 1 - (1 - 1 / n) ** n - (1 - 1 / n) ** (n - 1)
  assert abs(result.delta - 0.01) < 1e-12
  assert abs(result.p_value - expected) < 0.015, (result.p_value, expected)  # 5 standard errors.


def test_identical_systems_give_p_one_and_results_are_seeded(small_corpus):
  gold, a, b = small_corpus
  same = bootstrap.entity_f1_bootstrap(gold, a, a, samples=500, seed=0)
  assert same.delta == 0.0 and same.p_value == 1.0
  first = bootstrap.entity_f1_bootstrap(gold, a, b, samples=500, seed=3)
  assert first == bootstrap.entity_f1_bootstrap(gold, a, b, samples=500, seed=3)
  assert first.p_value != bootstrap.entity_f1_bootstrap(gold, a, b, samples=500, seed=4).p_value


def test_input_errors():
  with pytest.raises(ValueError, match="same non-empty test set"):
    bootstrap.paired_bootstrap(np.ones((3, 2)), np.ones((4, 2)), metrics.accuracy_from_counts)
  with pytest.raises(ValueError, match="samples must be at least 1"):
    bootstrap.paired_bootstrap(np.ones((3, 2)), np.ones((3, 2)), metrics.accuracy_from_counts, samples=0)


def test_real_conll_clearly_better_system_is_significant_and_fast():
  gold = conll_tags("conll2003/bio/test.txt")
  assert len(gold) == 3453
  better, worse = corrupt(gold, 0.02, 5), corrupt(gold, 0.04, 6)
  stats = [metrics.entity_counts(gold, p)[1].sum(axis=1) for p in (better, worse)]
  start = time.perf_counter()
  result = bootstrap.paired_bootstrap(*stats, metrics.micro_f1, samples=10_000, seed=0)
  seconds = time.perf_counter() - start
  print(f"paired bootstrap, 10,000 samples x 3,453 sentences: {seconds:.2f} s; {result}")
  assert result.delta > 0.02 and result.p_value < 0.01
  assert seconds < 10  # ~0.2 s on 2 shared cores; generous for a loaded machine.
  reverse = bootstrap.paired_bootstrap(*stats[::-1], metrics.micro_f1, samples=2_000, seed=0)
  assert reverse.delta == -result.delta and reverse.p_value > 0.99  # B does not beat A.


def test_each_kinds_statistics_score_what_the_metrics_score():
  gold, pred = ["1", "0", "1", "1"], ["1", "1", "0", "1"]
  stats, metric = kinds.KINDS["labels"].statistics("accuracy", gold, pred)
  assert stats.shape == (4, 2) and metric(stats.sum(axis=0)) == 0.5
  stats, metric = kinds.KINDS["labels"].statistics("f1", gold, pred, positive="1")
  assert stats.shape == (4, 3) and abs(metric(stats.sum(axis=0)) - sk_f1(gold, pred, pos_label="1")) < 1e-12
  tags = ([["B-PER", "I-PER", "O"], ["O"]], [["B-PER", "O", "O"], ["B-LOC"]])
  stats, metric = kinds.KINDS["conll"].statistics("f1", *tags)
  assert stats.shape == (2, 3) and abs(metric(stats.sum(axis=0)) - f1_score(*tags)) < 1e-12
  stats, metric = kinds.KINDS["conll"].statistics("accuracy", *tags)
  assert metric(stats.sum(axis=0)) == 0.5  # 2 of 4 tags.
  stats, metric = kinds.KINDS["scores"].statistics("pearson", [1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
  assert abs(metric(stats.sum(axis=0)) - 0.5) < 1e-12
  golds, answers = [["Paris", "in Paris"], ["1889"], ["an iron tower"]], ["Paris!", "1890", "iron tower"]
  for name, column in (("exact_match", 0), ("f1", 1)):  # The mean over questions of SQuAD's per-question score.
    stats, metric = kinds.KINDS["squad"].statistics(name, golds, answers)
    expected = np.mean([official_metric_max_over_ground_truths(
        official_exact_match_score if column == 0 else official_f1_score, a, g) for g, a in zip(golds, answers)])
    assert stats.shape == (3, 2) and abs(metric(stats.sum(axis=0)) - expected) < 1e-12
  for kind, name in (("scores", "spearman"), ("labels", "macro_f1"), ("labels", "f1"), ("squad", "precision")):
    assert kinds.KINDS[kind].statistics(name, gold, pred) is None  # No additive statistics: no p-value.
