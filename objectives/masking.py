"""Host-side MLM corruption in numpy: token, whole-word and span masking (spec, "Masking Words", "Masking Spans").

Masking is a pure function of (seed, global example index) through `example_rng`, so it is deterministic, resumable
and independent of the number of devices or hosts. Predictions are sparse and fixed-width: `masked_positions`,
`masked_ids`, `masked_weights` [max_predictions], so the vocabulary projection runs only on those positions.
"""

from collections.abc import Iterable, Sequence

import numpy as np

from encoder import errors

MODES = ("token", "whole_word", "span")
REPLACEMENTS = ("unigram", "uniform")


def example_rng(seed: int, index: int) -> np.random.Generator:
  """The generator for one example: seeded by (seed, global example index), never by position in a batch."""
  return np.random.default_rng([seed, index])


def unigram_probs(token_id_arrays: Iterable[np.ndarray], vocab_size: int, special_ids: Sequence[int]) -> np.ndarray:
  """Corpus unigram distribution [vocab_size] with special tokens zeroed (the random-replacement distribution)."""
  counts = np.zeros(vocab_size, np.float64)
  for ids in token_id_arrays:
    counts += np.bincount(np.asarray(ids, np.int64).ravel(), minlength=vocab_size)[:vocab_size]
  counts[np.asarray(list(special_ids), np.int64)] = 0
  total = counts.sum()
  if total <= 0:
    raise errors.ConfigError("unigram_probs: the corpus has no non-special tokens; check the corpus files and "
                             "tokenizer")
  return counts / total


def span_length_probs(p: float = 0.2, max_len: int = 10) -> np.ndarray:
  """SpanBERT's span-length distribution over 1..max_len words: Geometric(p) truncated and renormalized.

  Renormalizing (SpanBERT's `len_distrib`) gives mean 3.80 words for p=0.2, max 10; clipping would give 4.46.
  """
  if not 0 < p <= 1 or max_len < 1:
    raise errors.ConfigError(f"span length law needs 0 < span_p <= 1 and span_max >= 1, got span_p={p}, "
                             f"span_max={max_len}")
  lengths = np.arange(1, max_len + 1)
  probs = p * (1 - p) ** (lengths - 1)
  return probs / probs.sum()


def _candidates(example: dict[str, np.ndarray], special_ids: np.ndarray) -> np.ndarray:
  """[L] bool: tokens that may be selected (not special, not pad, inside a sequence when packed)."""
  ids = example["input_ids"]
  ok = ~np.isin(ids, special_ids)
  if "attention_segments" in example:
    ok &= example["attention_segments"] > 0
  return ok


def _word_starts(example: dict[str, np.ndarray], word_ids: np.ndarray | None, candidates: np.ndarray) -> np.ndarray:
  """[L] bool: first token of each word among the candidates (from word_ids, or the example's word_starts)."""
  if word_ids is not None:
    word_ids = np.asarray(word_ids)
    starts = np.ones(len(word_ids), bool)
    starts[1:] = word_ids[1:] != word_ids[:-1]
  elif "word_starts" in example:
    starts = np.asarray(example["word_starts"]).astype(bool)
  else:
    raise ValueError("whole_word and span masking need word boundaries: pass word_ids=... or give the example a "
                     "'word_starts' array (objectives.pipeline emits it)")
  # A token right after a non-candidate (special, pad) always starts a word; non-candidates start nothing.
  previous_ok = np.concatenate([[False], candidates[:-1]])
  return candidates & (starts | ~previous_ok)


def _words(starts: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(begins, ends) [W] token ranges of each word: a start plus its following candidate continuation tokens."""
  begins = np.flatnonzero(starts)
  boundaries = np.append(np.flatnonzero(starts | ~candidates), len(candidates))
  return begins, boundaries[np.searchsorted(boundaries, begins, side="right")]


def _select_tokens(rng, candidates, budget):
  """BERT: `budget` distinct tokens uniformly; each decided independently."""
  chosen = np.sort(rng.choice(np.flatnonzero(candidates), size=budget, replace=False))
  return chosen, chosen + 1


def _select_whole_words(rng, begins, ends, budget):
  """BERT whole-word masking: shuffle words, add whole words while they fit in the budget."""
  chosen, total = [], 0
  for w in rng.permutation(len(begins)):
    size = ends[w] - begins[w]
    if total + size <= budget:
      chosen.append(w)
      total += size
    if total >= budget:
      break
  words = np.sort(np.asarray(chosen, np.int64))
  return begins[words], ends[words]


def _select_spans(rng, begins, ends, length, budget, span_probs, max_attempts=200):
  """SpanBERT (spec, "Masking Spans"): length in words ~ truncated geometric, start uniform among the starts where
  the whole span fits inside one sequence (never across a special token) without overlapping earlier spans; stop at
  the budget (the last span is cut at a word boundary to stay within it)."""
  num_words = len(begins)
  # Words are contiguous within a run of candidate tokens; a new run starts after a special/pad token.
  run = np.cumsum(np.concatenate([[1], begins[1:] != ends[:-1]]))
  # The boundary tokens s-1 and e+1 must exist inside the row (SBO reads them).
  usable = (begins > 0) & (ends < length)
  taken = np.zeros(num_words, bool)
  cdf = np.cumsum(span_probs)
  spans, total = [], 0
  for _ in range(max_attempts):
    if total >= budget or num_words == 0:
      break
    n = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(cdf) - 1) + 1
    if n > num_words:
      continue
    # Start w is valid when words w..w+n-1 are usable, free and in the same run.
    free = np.concatenate([[0], np.cumsum(usable & ~taken)])
    valid = np.flatnonzero((free[n:] - free[:-n] == n) & (run[n - 1:] == run[:num_words - n + 1]))
    if len(valid) == 0:
      continue
    w = int(valid[rng.integers(len(valid))])
    fits = np.flatnonzero(total + ends[w:w + n] - begins[w] <= budget)  # Whole words within the budget.
    if len(fits) == 0:
      taken[w] = True  # Its first word alone overflows the budget: never try it again.
      continue
    last = w + int(fits[-1])
    taken[w:last + 1] = True
    spans.append((begins[w], ends[last]))
    total += ends[last] - begins[w]
  spans.sort()
  return (np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64))


def mask_example(example: dict[str, np.ndarray], rng: np.random.Generator, *, mask_id: int, vocab_size: int,
                 special_ids: Sequence[int], max_predictions: int, rate: float = 0.15, mask_prob: float = 0.8,
                 random_prob: float = 0.1, replacement: str = "unigram", unigram_probs: np.ndarray | None = None,
                 mode: str = "token", word_ids: np.ndarray | None = None, span_p: float = 0.2,
                 span_max: int = 10) -> dict[str, np.ndarray]:
  """Corrupts `input_ids` for MLM (spec, "Masking Words": 15% selected; 80% [MASK], 10% random, 10% unchanged).

  Returns a new dict with the corrupted input_ids and masked_positions/masked_ids [P] int32, masked_weights [P]
  float32 (1 real, 0 padding), plus for mode="span" span_left/span_right/span_offset [P] int32 (SBO's s-1, e+1, i-s).
  The number selected is min(max_predictions, max(1, round(n * rate))) of the n selectable tokens (BERT); whole
  words/spans are chosen as units; in span mode one 80/10/10 decision covers the whole span (SpanBERT).
  """
  if mode not in MODES:
    raise errors.ConfigError(f"masking mode {mode!r} is not one of {MODES}")
  if replacement not in REPLACEMENTS:
    raise errors.ConfigError(f"replacement {replacement!r} is not one of {REPLACEMENTS}")
  if mask_id is None or not 0 <= mask_id < vocab_size:
    raise errors.ConfigError(f"mask_id {mask_id} is not a token of the vocabulary (size {vocab_size}): the vocabulary "
                             "needs a [MASK] token for MLM")
  if replacement == "unigram" and unigram_probs is None:
    raise errors.ConfigError("replacement='unigram' needs unigram_probs (objectives.masking.unigram_probs over the "
                             "corpus)")
  if not 0 <= mask_prob + random_prob <= 1:
    raise errors.ConfigError(f"mask_prob {mask_prob} + random_prob {random_prob} must lie in [0, 1]")
  special = np.asarray(list(special_ids), np.int64)
  ids = np.asarray(example["input_ids"])
  candidates = _candidates(example, special)
  n = int(candidates.sum())
  budget = min(max_predictions, max(1, round(n * rate))) if n else 0

  if mode == "token":
    begins, ends = _select_tokens(rng, candidates, budget)
  else:
    words = _words(_word_starts(example, word_ids, candidates), candidates)
    if mode == "whole_word":
      begins, ends = _select_whole_words(rng, *words, budget)
    else:
      begins, ends = _select_spans(rng, *words, len(ids), budget, span_length_probs(span_p, span_max))

  # Units are token ranges [begin, end): single tokens, whole words or spans, in position order.
  sizes = ends - begins
  offsets = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # Position within its unit.
  positions = np.repeat(begins, sizes) + offsets
  # One 80/10/10 decision per token (token, whole_word: as BERT) or per span (span: as SpanBERT).
  draws = np.repeat(rng.random(len(sizes)), sizes) if mode == "span" else rng.random(len(positions))
  replace_mask = draws < mask_prob
  replace_random = (draws >= mask_prob) & (draws < mask_prob + random_prob)

  corrupted = ids.copy()
  corrupted[positions[replace_mask]] = mask_id
  corrupted[positions[replace_random]] = _random_tokens(rng, int(replace_random.sum()), vocab_size, special,
                                                        replacement, unigram_probs)
  k = len(positions)
  out = dict(example)
  out["input_ids"] = corrupted.astype(ids.dtype)
  out["masked_positions"] = _pad(positions, max_predictions)
  out["masked_ids"] = _pad(ids[positions], max_predictions)
  out["masked_weights"] = np.concatenate([np.ones(k), np.zeros(max_predictions - k)]).astype(np.float32)
  if mode == "span":
    out["span_left"] = _pad(np.repeat(begins - 1, sizes), max_predictions)
    out["span_right"] = _pad(np.repeat(ends, sizes), max_predictions)
    out["span_offset"] = _pad(offsets, max_predictions)
  return out


def _random_tokens(rng, count, vocab_size, special, replacement, probs):
  """`count` replacement ids: from the corpus unigram distribution (spec) or uniform; never a special token."""
  if count == 0:
    return np.zeros(0, np.int64)
  if replacement == "unigram":  # Inverse CDF: zero-probability ids (specials) can never be drawn.
    cdf = np.cumsum(probs)
    return np.minimum(np.searchsorted(cdf, rng.random(count) * cdf[-1], side="right"), vocab_size - 1)
  drawn = rng.integers(0, vocab_size, size=count)
  while np.isin(drawn, special).any():  # Rejection keeps the uniform law over the non-special ids.
    bad = np.isin(drawn, special)
    drawn[bad] = rng.integers(0, vocab_size, size=int(bad.sum()))
  return drawn


def _pad(values: np.ndarray, width: int) -> np.ndarray:
  out = np.zeros(width, np.int32)
  out[:len(values)] = values
  return out
