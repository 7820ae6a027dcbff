"""Metrics equal seqeval (default and strict), scikit-learn and scipy to 1e-9, on random, ill-formed and real data."""

import random
import warnings

import numpy as np
import pytest
import scipy.stats
from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
from seqeval.scheme import IOB1, IOB2, IOBES, IOE2
from sklearn.metrics import accuracy_score as sk_accuracy, f1_score as sk_f1, precision_recall_fscore_support

from tasks.scoring import metrics
from tests.conftest import conll_tags

SEQEVAL = {"IOB1": IOB1, "IOB2": IOB2, "IOE": IOE2, "BIOES": IOBES}
PREFIXES = {"IOB1": "IB", "IOB2": "IB", "IOE": "IE", "BIOES": "BIES"}
TOL = 1e-9  # float64 both sides: ratios of counts, moments of 300 numbers (rounding <= 1e-13); one entity is >= 1e-5.


def random_corpus(rng: random.Random, pool: list[str], sentences: int = 12) -> list[list[str]]:
  return [[rng.choice(pool) for _ in range(rng.randint(0, 10))] for _ in range(sentences)]


def assert_equal_to_seqeval(gold, pred, mode=None, scheme=None):
  """Every number of our report against seqeval's classification_report and *_score functions."""
  ours = metrics.entity_scores(gold, pred, mode or "conlleval", scheme or "IOB2")
  kwargs = dict(mode="strict", scheme=SEQEVAL[scheme]) if mode == "strict" else {}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Undefined-metric and non-NE-tag warnings are part of the cases.
    report = classification_report(gold, pred, output_dict=True, **kwargs)
    micro = [precision_score(gold, pred, **kwargs), recall_score(gold, pred, **kwargs), f1_score(gold, pred, **kwargs)]
    accuracy = accuracy_score(gold, pred) if sum(map(len, gold)) else 0.0
  assert sorted(ours["per_type"]) == sorted(k for k in report if not k.endswith(" avg"))
  for kind, row in ours["per_type"].items():
    ref = report[kind]
    assert row["support"] == ref["support"]
    np.testing.assert_allclose([row["precision"], row["recall"], row["f1"]],
                               [ref["precision"], ref["recall"], ref["f1-score"]], atol=TOL, rtol=0)
  for average in ("micro", "macro", "weighted"):
    ref = report[f"{average} avg"]
    if average == "macro" and not ours["per_type"]:
      ref = {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0}  # seqeval: mean of nothing = nan.
    got = ours[average]
    np.testing.assert_allclose([got["precision"], got["recall"], got["f1"]],
                               [ref["precision"], ref["recall"], ref["f1-score"]], atol=TOL, rtol=0)
    assert got["support"] == ref["support"]
  np.testing.assert_allclose([ours["micro"][k] for k in ("precision", "recall", "f1")], micro, atol=TOL, rtol=0)
  assert abs(ours["accuracy"] - accuracy) < TOL
  return ours


def test_conlleval_mode_equals_seqeval_default_on_random_ill_formed_and_unknown_tags():
  rng = random.Random(0)
  pool = ["O"] * 6 + ["B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-PER", "I-ORG", "E-ORG", "MISC", "U-LOC"]
  for _ in range(250):  # 250 x 12 sentences.
    gold = random_corpus(rng, pool)
    pred = [[rng.choice(pool) if rng.random() < 0.3 else t for t in s] for s in gold]
    assert_equal_to_seqeval(gold, pred)


def test_typeless_tags_equal_seqeval_sentence_by_sentence():
  # seqeval flattens sentences with an 'O' between them. Tags without a type ('X', '.', a bare 'I' or 'B')
  # share the type '_' of that 'O', so at a sentence start they can close a chunk that never opened and
  # seqeval reuses a stale start from an earlier sentence (a chunk across sentences). We chunk every
  # sentence on its own, as seqeval does its first sentence; one-sentence corpora must match exactly.
  rng = random.Random(4)
  pool = ["O", "O", "B-PER", "I-PER", "I-LOC", "S-PER", "E-PER", "X", "B", "I", ".", "X-"]
  for _ in range(400):
    gold = random_corpus(rng, pool, sentences=1)
    pred = [[rng.choice(pool) if rng.random() < 0.4 else t for t in s] for s in gold]
    assert_equal_to_seqeval(gold, pred)


@pytest.mark.parametrize("scheme", sorted(SEQEVAL))
def test_strict_mode_equals_seqeval_strict(scheme):
  rng = random.Random(1)
  pool = ["O"] * 4 + [f"{p}-{t}" for p in PREFIXES[scheme] for t in ("PER", "LOC")]
  for _ in range(120):
    gold = random_corpus(rng, pool)
    pred = [[rng.choice(pool) if rng.random() < 0.3 else t for t in s] for s in gold]
    assert_equal_to_seqeval(gold, pred, "strict", scheme)


EDGE_CASES = [
    ([["O", "O"], ["O"]], [["B-PER", "I-PER"], ["O"]]),  # No gold entities: recall 0/0 = 0.
    ([["B-PER", "I-PER"], ["B-LOC"]], [["O", "O"], ["O"]]),  # No predicted entities: precision 0/0 = 0.
    ([["O", "O"], []], [["O", "O"], []]),  # No entities at all (and an empty sentence).
    ([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]]),  # Perfect.
    ([["I-PER", "I-PER", "B-LOC", "I-ORG"]], [["B-PER", "I-LOC", "O", "I-ORG"]]),  # Ill-formed.
]


@pytest.mark.parametrize("gold,pred", EDGE_CASES + [
    ([["I-PER", "X", "B-LOC", "I-ORG"]], [["B-PER", "X", "X", "MISC"]]),  # Unknown tags (conlleval mode only).
])
def test_edge_cases_equal_seqeval_default(gold, pred):
  ours = assert_equal_to_seqeval(gold, pred)
  assert 0.0 <= ours["micro"]["f1"] <= 1.0


@pytest.mark.parametrize("gold,pred", EDGE_CASES)
def test_edge_cases_equal_seqeval_strict(gold, pred):
  assert_equal_to_seqeval(gold, pred, "strict", "IOB2")


def test_counts_are_per_sentence_sufficient_statistics():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG"], ["O"]]
  pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG"], ["B-LOC"]]
  types, counts = metrics.entity_counts(gold, pred)
  assert types == ["LOC", "ORG", "PER"]
  np.testing.assert_array_equal(counts[0], [[0, 0, 1], [0, 1, 0], [1, 1, 1]])  # (tp, pred, gold) per type.
  np.testing.assert_array_equal(counts[2], [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
  p, r, f = metrics.prf(counts.sum(axis=(0, 1)))
  assert (p, r) == (2 / 4, 2 / 3) and abs(f - 2 * p * r / (p + r)) < 1e-15  # Float64, the same formula: ~2 ulps.
  assert metrics.micro_f1(np.zeros(3)) == 0.0


def test_user_errors_name_the_sentence():
  with pytest.raises(ValueError, match="sentence 1: gold has 2 tags but pred has 1"):
    metrics.entity_scores([["O"], ["O", "O"]], [["O"], ["O"]])
  with pytest.raises(ValueError, match="sentence 0: tag 'E-PER' at position 1"):
    metrics.entity_scores([["O", "E-PER"]], [["O", "O"]], mode="strict", scheme="IOB2")
  with pytest.raises(ValueError, match="unknown scoring mode"):
    metrics.entity_scores([["O"]], [["O"]], mode="lenient")


def test_label_scores_equal_scikit_learn():
  rng = random.Random(2)
  gold = [rng.choice("abcd") for _ in range(500)]
  pred = [g if rng.random() < 0.6 else rng.choice("abcde") for g in gold]  # 'e' is predicted, never gold.
  ours = metrics.label_scores(gold, pred)
  labels = sorted(set(gold) | set(pred))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    p, r, f, _ = precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    macro = precision_recall_fscore_support(gold, pred, average="macro", zero_division=0)[:3]
  np.testing.assert_allclose([[ours["per_type"][x][k] for k in ("precision", "recall", "f1")] for x in labels],
                             np.stack([p, r, f], axis=1), atol=TOL, rtol=0)
  np.testing.assert_allclose([ours["macro"][k] for k in ("precision", "recall", "f1")], macro, atol=TOL, rtol=0)
  assert abs(ours["accuracy"] - sk_accuracy(gold, pred)) < TOL
  _, counts = metrics.label_counts(gold, pred)
  assert abs(metrics.macro_f1(counts.sum(axis=0)) - macro[2]) < TOL


@pytest.mark.parametrize("seed", range(4))
def test_positive_class_f1_equals_scikit_learn(seed):
  rng = random.Random(seed)
  gold = [rng.choice("01") for _ in range(rng.randint(1, 300))]
  pred = [g if rng.random() < 0.7 else rng.choice("012") for g in gold]
  if seed == 3:
    pred = ["0"] * len(gold)  # The positive class never predicted: F1 0 (scikit-learn's zero_division=0).
  counts = metrics.positive_counts(gold, pred, "1")
  assert counts.shape == (len(gold), 3)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    expected = sk_f1(gold, pred, labels=["1"], average=None, zero_division=0)[0]  # Class "1"'s own F1.
  assert abs(float(metrics.micro_f1(counts.sum(axis=0))) - expected) < TOL


@pytest.fixture(scope="module")
def conll_valid_tags():
  return conll_tags("conll2003/bio/valid.txt")


@pytest.mark.parametrize("mode,scheme", [(None, None), ("strict", "IOB2")])
def test_real_conll_valid_against_a_corrupted_copy(conll_valid_tags, mode, scheme):
  gold = conll_valid_tags
  rng = random.Random(3)
  tags = sorted({t for s in gold for t in s})
  pred = [[rng.choice(tags) if rng.random() < 0.05 else t for t in s] for s in gold]
  ours = assert_equal_to_seqeval(gold, pred, mode, scheme)
  assert 0.5 < ours["micro"]["f1"] < 0.99
  assert metrics.entity_scores(gold, gold)["micro"]["f1"] == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_regression_scores_equal_scipy(seed):
  """Pearson from summed moments and Spearman from average ranks, against scipy, with many ties (SICK's scores
  have one decimal)."""
  rng = np.random.default_rng(seed)
  gold = np.round(rng.uniform(1, 5, size=300), 1)
  pred = gold + rng.normal(scale=0.3 + seed, size=300)
  if seed == 4:
    pred = np.round(pred)  # Ties on both sides.
  ours = metrics.regression_scores(list(gold), list(pred))
  assert abs(ours["pearson"] - scipy.stats.pearsonr(gold, pred).statistic) < TOL
  assert abs(ours["spearman"] - scipy.stats.spearmanr(gold, pred).statistic) < TOL
  assert abs(ours["mse"] - np.mean((gold - pred) ** 2)) < TOL
  np.testing.assert_array_equal(metrics.average_ranks(gold), scipy.stats.rankdata(gold))


def test_regression_edge_cases():
  assert metrics.regression_scores([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])["pearson"] == 0.0  # Constant: 0, not nan.
  assert metrics.regression_scores([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])["spearman"] == pytest.approx(-1.0, abs=TOL)
  with pytest.raises(ValueError, match="one number per example"):
    metrics.pearson_moments([1.0, 2.0], [1.0])
