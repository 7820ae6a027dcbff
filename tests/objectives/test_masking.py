"""Statistical and exact checks of MLM masking: rates, 80/10/10, unigram replacement, words, spans, determinism.

Tolerances are 5 binomial/sample standard deviations unless stated; every statistical check also has a
counter-check that the same test rejects a wrong distribution, so none of them can pass vacuously.
"""

import numpy as np
import pytest
from scipy import stats

from objectives import masking

CLS, SEP, PAD, MASK, UNK = 101, 102, 0, 103, 100
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 400
# Replacement tokens live in 1000.. never: the unigram table covers 200..299 while inputs use 300..399, so a random
# replacement can never coincide with the original and the three outcomes are distinguishable.
UNIGRAM = np.zeros(VOCAB)
UNIGRAM[200:300] = np.arange(1, 101, dtype=float)
UNIGRAM /= UNIGRAM.sum()


def _row(rng, length=128, n_real=None, segments=False):
  """[CLS] x.. [SEP] pad..; ids 300..399; word_starts with words of 1-3 tokens."""
  n_real = n_real or length
  ids = np.full(length, PAD, np.int32)
  body = rng.integers(300, 400, n_real - 2)
  ids[0], ids[1:n_real - 1], ids[n_real - 1] = CLS, body, SEP
  starts = np.zeros(length, np.int8)
  pos = 1
  while pos < n_real - 1:
    starts[pos] = 1
    pos += int(rng.integers(1, 4))
  example = {"input_ids": ids, "word_starts": starts}
  if segments:
    example["attention_segments"] = (ids != PAD).astype(np.int32)
  return example


def _mask(example, seed, index, **kw):
  options = dict(mask_id=MASK, vocab_size=VOCAB, special_ids=SPECIALS, max_predictions=40, unigram_probs=UNIGRAM)
  options.update(kw)
  return masking.mask_example(example, masking.example_rng(seed, index), **options)


@pytest.fixture(scope="module")
def token_runs():
  """2000 masked rows of 128 tokens (126 real, budget 19): 38,000 predictions."""
  rng = np.random.default_rng(0)
  rows = [_row(rng) for _ in range(2000)]
  return rows, [_mask(r, 7, i) for i, r in enumerate(rows)]


def test_selection_count_is_bert_rule_and_never_special(token_runs):
  rows, outs = token_runs
  for row, out in zip(rows[:200], outs[:200]):
    k = int(out["masked_weights"].sum())
    assert k == min(40, max(1, round(126 * 0.15)))  # = 19
    pos = out["masked_positions"][:k]
    assert len(set(pos.tolist())) == k and np.all(np.diff(pos) > 0)
    assert not np.isin(row["input_ids"][pos], SPECIALS).any()
    np.testing.assert_array_equal(out["masked_ids"][:k], row["input_ids"][pos])
    assert np.all(out["masked_positions"][k:] == 0) and np.all(out["masked_weights"][k:] == 0)
    untouched = np.setdiff1d(np.arange(128), pos)
    np.testing.assert_array_equal(out["input_ids"][untouched], row["input_ids"][untouched])


def test_each_position_selected_at_rate(token_runs):
  """Every real position is selected with probability 19/126 (uniform choice); chi-square over positions."""
  _, outs = token_runs
  counts = np.zeros(128)
  for out in outs:
    counts[out["masked_positions"][out["masked_weights"] > 0]] += 1
  assert counts[0] == 0 and counts[127] == 0
  real = counts[1:127]
  rate = real.sum() / (len(outs) * 126)
  assert abs(rate - 0.15) < 0.001  # 19/126 = 0.1508 exactly.
  assert stats.chisquare(real).pvalue > 1e-4


def test_80_10_10_split(token_runs):
  _, outs = token_runs
  kinds = np.zeros(3)
  for out in outs:
    k = int(out["masked_weights"].sum())
    new = out["input_ids"][out["masked_positions"][:k]]
    orig = out["masked_ids"][:k]
    kinds += [(new == MASK).sum(), ((new != MASK) & (new != orig)).sum(), (new == orig).sum()]
  n = kinds.sum()
  for observed, p in zip(kinds / n, (0.8, 0.1, 0.1)):
    assert abs(observed - p) < 5 * np.sqrt(p * (1 - p) / n), (kinds / n)
  print(f"80/10/10 measured over {int(n)} predictions: {np.round(kinds / n, 4)}")


def test_random_replacements_follow_unigram(token_runs):
  _, outs = token_runs
  replaced = []
  for out in outs:
    k = int(out["masked_weights"].sum())
    new = out["input_ids"][out["masked_positions"][:k]]
    replaced.append(new[(new != MASK) & (new != out["masked_ids"][:k])])
  replaced = np.concatenate(replaced)
  assert replaced.min() >= 200 and replaced.max() < 300
  observed = np.bincount(replaced - 200, minlength=100)
  expected = UNIGRAM[200:300] * len(replaced)
  assert stats.chisquare(observed, expected).pvalue > 1e-4
  # Counter-check: the same test rejects a uniform distribution over those ids.
  assert stats.chisquare(observed, np.full(100, len(replaced) / 100)).pvalue < 1e-6


def test_uniform_replacement_never_special():
  rng = np.random.default_rng(1)
  seen = []
  for i in range(300):
    out = _mask(_row(rng), 3, i, replacement="uniform", unigram_probs=None, mask_prob=0.0, random_prob=1.0,
                vocab_size=110)  # 5 of 110 ids are special: rejection sampling must avoid them.
    k = int(out["masked_weights"].sum())
    seen.append(out["input_ids"][out["masked_positions"][:k]])
  seen = np.concatenate(seen)
  assert not np.isin(seen, SPECIALS).any()
  allowed = np.setdiff1d(np.arange(110), SPECIALS)
  assert set(np.unique(seen).tolist()) == set(allowed.tolist())
  assert stats.chisquare(np.bincount(seen, minlength=110)[allowed]).pvalue > 1e-4


def test_deterministic_per_seed_and_index():
  row = _row(np.random.default_rng(2), segments=True)
  a, b = _mask(row, 11, 5), _mask(row, 11, 5)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])
  c = _mask(row, 11, 6)
  assert not np.array_equal(a["masked_positions"], c["masked_positions"])


def test_padding_and_packed_pad_never_selected():
  rng = np.random.default_rng(3)
  for i in range(200):
    row = _row(rng, length=64, n_real=int(rng.integers(3, 64)), segments=True)
    out = _mask(row, 0, i)
    k = int(out["masked_weights"].sum())
    assert k == max(1, round((row["attention_segments"].sum() - 2) * 0.15))
    assert np.all(row["attention_segments"][out["masked_positions"][:k]] > 0)
    assert not np.isin(row["input_ids"][out["masked_positions"][:k]], SPECIALS).any()


def test_max_predictions_caps():
  out = _mask(_row(np.random.default_rng(4), length=512), 0, 0, max_predictions=20)
  assert out["masked_weights"].sum() == 20 and out["masked_positions"].shape == (20,)


def test_whole_word_masks_all_subwords_together():
  rng = np.random.default_rng(5)
  for i in range(200):
    row = _row(rng)
    out = _mask(row, 1, i, mode="whole_word")
    k = int(out["masked_weights"].sum())
    assert 0 < k <= 19
    selected = np.zeros(128, bool)
    selected[out["masked_positions"][:k]] = True
    word = np.cumsum(row["word_starts"])
    for w in np.unique(word[selected]):
      members = (word == w) & (row["input_ids"] != SEP) & (row["input_ids"] != PAD)
      assert selected[members].all()  # A word is selected whole or not at all.


def _geometric_by_rejection(rng, p, max_len):
  """Geometric(p) redrawn while > max_len: an independent way to get the truncated, renormalized law."""
  def draw(n):
    out = rng.geometric(p, n)
    while (out > max_len).any():
      out[out > max_len] = rng.geometric(p, int((out > max_len).sum()))
    return out
  return draw


def test_span_length_distribution_matches_truncated_geometric():
  probs = masking.span_length_probs(0.2, 10)
  mean = (np.arange(1, 11) * probs).sum()
  assert abs(mean - 3.797) < 0.001  # SpanBERT's "mean span length 3.8".
  lengths = []
  rng = np.random.default_rng(6)
  for i in range(600):
    # Single-token words over 1000 tokens: budget 150 tokens, about 40 spans per row.
    row = {"input_ids": np.concatenate([[CLS], rng.integers(300, 400, 998), [SEP]]).astype(np.int32),
           "word_starts": np.ones(1000, np.int8)}
    out = _mask(row, 2, i, mode="span", max_predictions=150)
    k = int(out["masked_weights"].sum())
    assert k == 150
    left = out["span_left"][:k]
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], left])) != 0)
    lens = np.diff(np.concatenate([starts, [k]]))
    lengths.append(lens)
  lengths = np.concatenate(lengths)
  # The span that crosses the budget is cut and its position in the row is unknown, so compare the whole
  # histogram (all spans) with a simulation of the same stopping rule from an independent sampler.
  ref_rng = np.random.default_rng(60)
  draw = _geometric_by_rejection(ref_rng, 0.2, 10)
  reference = _simulate_rows(draw, 20000, 150)
  observed = np.bincount(lengths, minlength=11)[1:11]
  expected = np.bincount(reference, minlength=11)[1:11] / len(reference) * len(lengths)
  sigma = reference.std() / np.sqrt(len(lengths))
  print(f"span lengths: {len(lengths)} spans, mean {lengths.mean():.3f} (reference {reference.mean():.3f} "
        f"+- {sigma:.3f}; untruncated law mean {mean:.3f})")
  assert abs(lengths.mean() - reference.mean()) < 5 * sigma
  assert stats.chisquare(observed, expected).pvalue > 1e-4
  # Counter-check: clipping at 10 instead of renormalizing (mean 4.46) is rejected.
  clipped = _simulate_rows(lambda n: np.minimum(ref_rng.geometric(0.2, n), 10), 20000, 150)
  expected_clipped = np.bincount(clipped, minlength=11)[1:11] / len(clipped) * len(lengths)
  assert stats.chisquare(observed, expected_clipped).pvalue < 1e-6


def _simulate_rows(draw, rows, budget):
  """Realized span lengths of `rows` rows: draws until the budget, the crossing span cut to the remainder."""
  lengths = draw(rows * budget).reshape(rows, budget)  # Each length >= 1, so `budget` draws always suffice.
  ends = np.cumsum(lengths, axis=1)
  begins = ends - lengths
  cut = np.minimum(ends, budget) - begins
  return cut[begins < budget]


def test_span_masking_structure_and_sbo_targets():
  rng = np.random.default_rng(8)
  decisions = []
  for i in range(300):
    row = _row(rng, length=96)
    row["input_ids"][40] = SEP  # A special token in the middle: spans must not cross it.
    out = _mask(row, 4, i, mode="span")
    k = int(out["masked_weights"].sum())
    assert 0 < k <= round(93 * 0.15)
    pos = out["masked_positions"][:k]
    left, right, offset = out["span_left"][:k], out["span_right"][:k], out["span_offset"][:k]
    np.testing.assert_array_equal(offset, pos - (left + 1))
    for s in np.unique(left):
      members = pos[left == s]
      e = right[left == s][0] - 1
      np.testing.assert_array_equal(members, np.arange(s + 1, e + 1))  # Contiguous s..e.
      assert not np.isin(row["input_ids"][members], SPECIALS).any()
      starts_word = lambda t: row["word_starts"][t] == 1 or row["input_ids"][t - 1] in SPECIALS  # noqa: B023  (called within the iteration)
      assert starts_word(s + 1) and (row["input_ids"][e + 1] in SPECIALS or starts_word(e + 1))  # Whole words.
      new = out["input_ids"][members]
      kinds = {"mask" if t == MASK else "same" if t == o else "random"
               for t, o in zip(new, row["input_ids"][members])}
      if len(members) > 1 and "random" not in kinds:
        assert len(kinds) == 1  # One decision per span.
      decisions.append("mask" if kinds == {"mask"} else "same" if kinds == {"same"} else "random")
  freq = {kind: decisions.count(kind) / len(decisions) for kind in ("mask", "random", "same")}
  n = len(decisions)
  for kind, p in (("mask", 0.8), ("random", 0.1), ("same", 0.1)):
    assert abs(freq[kind] - p) < 5 * np.sqrt(p * (1 - p) / n), freq


def test_unigram_probs_zero_specials():
  probs = masking.unigram_probs([np.array([CLS, 5, 5, 6, SEP]), np.array([6, 7, PAD])], 10 + 400, SPECIALS)
  # Float64 ratios of counts: rounding only.
  assert probs[5] == pytest.approx(0.4) and probs[6] == pytest.approx(0.4) and probs[7] == pytest.approx(0.2)
  assert probs[list(SPECIALS)].sum() == 0
  with pytest.raises(ValueError, match="no non-special tokens"):
    masking.unigram_probs([np.array([CLS, SEP])], 410, SPECIALS)


def test_bad_inputs():
  row = _row(np.random.default_rng(9))
  with pytest.raises(ValueError, match=r"\[MASK\]"):
    _mask(row, 0, 0, mask_id=None)
  with pytest.raises(ValueError, match="masking mode"):
    _mask(row, 0, 0, mode="words")
  with pytest.raises(ValueError, match="unigram_probs"):
    _mask(row, 0, 0, unigram_probs=None)
  with pytest.raises(ValueError, match="word_starts"):
    _mask({"input_ids": row["input_ids"]}, 0, 0, mode="span")
