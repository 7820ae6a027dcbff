"""Word <-> subword alignment for tagging (spec, "Tokenization and NER"; slides: first sub-token, `X` for the rest).

Training labels either every subword with its word's tag ("all") or only the first subword, ignoring the rest
("first", the slides' `X`). Decoding always reads the tag at each word's first subword (the spec's rule).
"""

from collections.abc import Sequence

import numpy as np

from encoder import errors
from tasks import word_shape

IGNORE = -1  # A subword without a training label (the slides' `X`, and specials/padding).
ALIGNMENTS = ("first", "all")


def first_subword_positions(word_ids: Sequence[int | None]) -> list[int]:
  """Position of each word's first subword, in word order: [None, 0, 0, 1, None] -> [1, 3]."""
  positions, previous = [], None
  for position, word in enumerate(word_ids):
    if word is not None and word != previous:
      positions.append(position)
    previous = word
  return positions


def subword_labels(word_ids: Sequence[int | None], word_labels: Sequence[int], alignment: str = "first") -> np.ndarray:
  """[len(word_ids)] int32 training labels: each word's label on its first subword, and on the rest for "all"."""
  if alignment not in ALIGNMENTS:
    raise errors.ConfigError(f"alignment {alignment!r} is not one of {ALIGNMENTS}")
  labels = np.full(len(word_ids), IGNORE, np.int32)
  previous = None
  for position, word in enumerate(word_ids):
    if word is not None and (word != previous or alignment == "all"):
      labels[position] = word_labels[word]
    previous = word
  return labels


def last_subword_positions(word_ids: Sequence[int | None]) -> np.ndarray:
  """[len(word_ids)] int32: for each subword, the position of its word's last subword (specials: themselves)."""
  last = {word: position for position, word in enumerate(word_ids) if word is not None}
  return np.asarray([position if word is None else last[word] for position, word in enumerate(word_ids)], np.int32)


def encode_words(tokenizer, words: Sequence[str], word_labels: Sequence[int], *, max_length: int,
                 alignment: str = "first", case_features: bool = False, last_subword: bool = False
                 ) -> dict[str, np.ndarray]:
  """A tagging example: subword ids and labels, plus word-level positions/labels for CRF, decoding and scoring.

  Words whose first subword falls past `max_length` are dropped from `word_positions` (and so from the prediction);
  `num_words` keeps the original count so the writer can pad them with "O" and the scorer sees every gold word.
  With `case_features`, `case_ids` holds each subword's word shape (tasks.word_shape); with `last_subword`,
  `last_positions` the position of each subword's word-final subword (`last_subword_positions`).
  """
  encoding = tokenizer.encode(list(words), max_length=max_length)
  positions = first_subword_positions(encoding.word_ids)
  kept = len(positions)
  example = {
      "input_ids": np.asarray(encoding.input_ids, np.int32),
      "type_ids": np.asarray(encoding.type_ids, np.int32),
      "label_ids": subword_labels(encoding.word_ids, word_labels, alignment),
      "word_positions": np.asarray(positions, np.int32),
      "word_labels": np.asarray(word_labels[:kept], np.int32),
      "num_words": np.asarray(len(words), np.int32),
  }
  if case_features:
    example["case_ids"] = word_shape.case_ids(words, encoding.word_ids)
  if last_subword:
    example["last_positions"] = last_subword_positions(encoding.word_ids)
  return example
