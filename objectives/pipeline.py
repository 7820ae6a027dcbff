"""Corpus -> fixed-length unmasked pretraining rows, random access (the engine shuffles, masks and batches them).

Packings (spec, "Training Regimes"), the registry `PACKINGS` (a layout function and a line there adds one):
- "full_sentences" (RoBERTa FULL-SENTENCES): [CLS] then contiguous full sentences, crossing documents with an
  extra [SEP], filling each row up to max_length; a sentence longer than a row is cut (at word starts).
- "nsp_pairs" (BERT): [CLS] A [SEP] B [SEP] with type ids 0/1 and nsp_label (0 = IsNext, 1 = random), built by
  BERT's create_instances_from_document (see objectives.pairs).
- "segments": each sentence is its own sequence [CLS] s [SEP]; several are packed per row (best-fit decreasing)
  with attention_segments 1..k and positions restarting at 0, so attention never crosses a sequence.
Every row has input_ids, type_ids, positions, attention_segments (0 = pad), word_starts [max_length], and the
per-row fields of its packing (NSP pairs: the scalar nsp_label).
"""

import bisect
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from encoder import errors
from objectives import corpus as corpus_lib, masking, pairs, prepared as prepared_lib

# Chunks: [C, 4] rows (token start, token end, type id, sequence number in the row 1..k); each chunk is followed
# by [SEP] and a new sequence number starts with [CLS].
START, END, TYPE, SEQUENCE = range(4)


class PackedExamples:
  """Random-access rows (len, getitem -> dict of numpy [max_length]) over a corpus and a chunk layout."""

  def __init__(self, corpus: prepared_lib.Corpus, chunks: np.ndarray, row_offsets: np.ndarray,
               max_length: int, cls_id: int, sep_id: int, pad_id: int,
               row_fields: Mapping[str, np.ndarray] | None = None):
    self.corpus, self.chunks, self.row_offsets = corpus, chunks, row_offsets
    self.max_length, self.cls_id, self.sep_id, self.pad_id = max_length, cls_id, sep_id, pad_id
    self.row_fields = dict(row_fields or {})  # Field -> one value per row (a packing's labels: NSP's nsp_label).

  def __len__(self) -> int:
    return len(self.row_offsets) - 1

  def __getitem__(self, index: int) -> dict[str, np.ndarray | np.int32]:
    """Row `index`: [max_length] arrays, and the packing's per-row fields as scalars (NSP pairs: "nsp_label")."""
    if not -len(self) <= index < len(self):
      raise IndexError(f"row {index} out of range for {len(self)} rows")
    index %= len(self)
    length = self.max_length
    ids = np.full(length, self.pad_id, np.int32)
    types, segments, positions = (np.zeros(length, np.int32) for _ in range(3))
    word_starts = np.zeros(length, np.int8)
    at, sequence, sequence_start = 0, 0, 0
    for start, end, type_id, number in self.chunks[self.row_offsets[index]:self.row_offsets[index + 1]]:
      if number != sequence:
        sequence, sequence_start = number, at
        ids[at], segments[at] = self.cls_id, number
        at += 1
      n = end - start
      ids[at:at + n] = self.corpus.tokens[start:end]
      word_starts[at:at + n] = self.corpus.word_starts[start:end]
      ids[at + n] = self.sep_id
      types[at:at + n + 1] = type_id
      segments[at:at + n + 1] = number
      at += n + 1
      positions[sequence_start:at] = np.arange(at - sequence_start)
    row: dict[str, np.ndarray | np.int32] = {"input_ids": ids, "type_ids": types, "positions": positions,
                                             "attention_segments": segments, "word_starts": word_starts}
    row |= {name: values[index] for name, values in self.row_fields.items()}
    return row

  def padding_waste(self) -> float:
    """Fraction of the rows' tokens that are padding."""
    real = (self.chunks[:, END] - self.chunks[:, START]).sum() + len(self.chunks)  # Tokens + one [SEP] each.
    starts = np.concatenate([[True], np.diff(self.chunks[:, SEQUENCE]) != 0])
    starts[self.row_offsets[:-1][self.row_offsets[:-1] < len(self.chunks)]] = True
    real += starts.sum()  # One [CLS] per sequence.
    return float(1 - real / (len(self) * self.max_length))


def sentence_pieces(corpus: prepared_lib.Corpus, max_tokens: int) -> np.ndarray:
  """[N, 3] (token start, token end, document) of every non-empty sentence; a sentence longer than max_tokens is
  cut into pieces of <= max_tokens, at word starts where possible (so no row begins inside a word)."""
  offsets = corpus.sentence_offsets
  documents = np.repeat(np.arange(len(corpus.document_offsets) - 1), np.diff(corpus.document_offsets))
  pieces = []
  for sentence in np.flatnonzero(np.diff(offsets) > 0):
    start, end = int(offsets[sentence]), int(offsets[sentence + 1])
    while end - start > max_tokens:
      heads = np.flatnonzero(corpus.word_starts[start + 1:start + max_tokens + 1])
      cut = start + 1 + int(heads[-1]) if len(heads) else start + max_tokens
      pieces.append((start, cut, documents[sentence]))
      start = cut
    pieces.append((start, end, documents[sentence]))
  return np.asarray(pieces, np.int64).reshape(-1, 3)


def full_sentence_layout(corpus: prepared_lib.Corpus, max_length: int, rng: np.random.Generator | None = None
                         ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
  """RoBERTa FULL-SENTENCES (spec, "Training Regimes"): greedy fill; a new document in a row adds a [SEP]."""
  pieces = sentence_pieces(corpus, max_length - 2)
  chunks: list[list[int]] = []
  row_offsets = [0]
  used = max_length  # Forces a new row at the first piece.
  for start, end, document in pieces:
    continues = len(chunks) > row_offsets[-1] and chunks[-1][4] == document and chunks[-1][1] == start
    cost = end - start + (0 if continues else 1)  # A new chunk brings its closing [SEP].
    if used + cost > max_length:
      row_offsets.append(len(chunks))
      used, continues, cost = 1, False, end - start + 1  # [CLS].
    if continues:
      chunks[-1][1] = end
    else:
      chunks.append([start, end, 0, 1, document])
    used += cost
  row_offsets.append(len(chunks))
  return np.asarray(chunks, np.int64).reshape(-1, 5)[:, :4], np.asarray(row_offsets[1:], np.int64), {}


def segment_layout(corpus: prepared_lib.Corpus, max_length: int, rng: np.random.Generator | None = None
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
  """Each sentence piece is a sequence [CLS] s [SEP]; rows are filled by best-fit decreasing (few pad tokens)."""
  pieces = sentence_pieces(corpus, max_length - 2)
  sizes = pieces[:, 1] - pieces[:, 0] + 2
  order = np.argsort(-sizes, kind="stable")
  open_rows: list[tuple[int, int]] = []  # (free space, row id), sorted.
  rows: list[list[int]] = []
  for piece in order:
    size = int(sizes[piece])
    slot = bisect.bisect_left(open_rows, (size, -1))
    if slot == len(open_rows):
      rows.append([piece])
      free, row = max_length - size, len(rows) - 1
    else:
      free, row = open_rows.pop(slot)
      rows[row].append(piece)
      free -= size
    if free >= 3:  # The shortest possible sequence is [CLS] x [SEP].
      bisect.insort(open_rows, (free, row))
  chunks = [[pieces[p, 0], pieces[p, 1], 0, k + 1] for row in rows for k, p in enumerate(sorted(row))]
  row_offsets = np.concatenate([[0], np.cumsum([len(row) for row in rows])])
  return np.asarray(chunks, np.int64).reshape(-1, 4), row_offsets.astype(np.int64), {}


# (corpus, max_length, rng) -> (chunks [C, 4], row offsets [R+1], {field: [R] one value per row}).
Layout = Callable[[prepared_lib.Corpus, int, np.random.Generator], tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]


class Packing(NamedTuple):
  """A row layout: `layout` lays the corpus out in rows (`rng`, seeded by config.seed, drives any random choice, e.g.
  which sentences pair); its documents hold at least `min_document_sentences` sentences (more than 1: a shorter
  document is an error or skipped, as `pretraining_examples`' short_documents says; 1: empty ones are skipped)."""
  layout: Layout
  min_document_sentences: int = 1


# Packing name (config.data.packing) -> its layout. Adding one: a layout function (in an objective's module, as NSP's
# pairs are in objectives/pairs.py) and a line here; an objective that needs it says so (`Objective.packing`).
PACKINGS: dict[str, Packing] = {
    "full_sentences": Packing(full_sentence_layout),
    "nsp_pairs": Packing(functools.partial(pairs.nsp_rows, short_seq_prob=0.1), min_document_sentences=2),
    "segments": Packing(segment_layout),
}


def pretraining_examples(*, files: Sequence[str | Path], tokenizer: Any, max_length: int,
                         packing: str = "full_sentences", cache_dir: str | Path | None = None, seed: int = 0,
                         short_documents: str = "error",
                         prepared: str | Path | None = None) -> PackedExamples:
  """Fixed-length unmasked rows from text files (WikiText or plain text; see objectives.corpus), tokenized once.

  `seed` drives only the packing's random choices (NSP: which sentences pair, truncation sides); masking is seeded
  separately per example (objectives.masking.example_rng). short_documents applies to a packing that needs >= 2
  sentences per document (nsp_pairs).
  `prepared`: a directory of objectives.prepare read instead of `files` (documents read on demand, same rows).
  """
  if packing not in PACKINGS:
    raise errors.ConfigError(f"packing {packing!r} is not one of {tuple(PACKINGS)}")
  if max_length < 8:
    raise errors.ConfigError(f"max_length {max_length} is too small for pretraining rows (at least 8)")
  minimum = PACKINGS[packing].min_document_sentences
  short = short_documents if minimum > 1 else "skip"
  corpus: prepared_lib.Corpus
  if prepared:  # A prepared directory (objectives.prepare): offsets in memory, tokens read from its shards.
    corpus = prepared_lib.open_prepared(prepared, tokenizer, min_document_sentences=minimum, short_documents=short)
    files = [prepared]
  else:
    corpus = corpus_lib.load_corpus(files, tokenizer, cache_dir, min_document_sentences=minimum,
                                    short_documents=short)
  chunks, row_offsets, row_fields = PACKINGS[packing].layout(corpus, max_length, np.random.default_rng(seed))
  if len(row_offsets) < 2:
    raise errors.ConfigError(f"the corpus {[str(f) for f in files]} produced no {packing} rows of max_length "
                             f"{max_length}; give more text")
  return PackedExamples(corpus, chunks, row_offsets, max_length, tokenizer.cls_id, tokenizer.sep_id,
                        tokenizer.pad_id, row_fields)


def mask_options(tokenizer: Any, **overrides) -> dict[str, Any]:
  """The tokenizer-dependent keyword arguments of masking.mask_example; a vocabulary without [MASK] is an error."""
  if getattr(tokenizer, "mask_id", None) is None:
    source = getattr(tokenizer, "source", type(tokenizer).__name__)
    raise errors.ConfigError(f"the tokenizer's vocabulary ({source}) has no [MASK] token, which MLM needs; use a BERT "
                             "vocabulary or train one with the special tokens")
  options = dict(mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
                 special_ids=tuple(tokenizer.special_ids))
  options.update(overrides)
  return options


def corpus_unigram_probs(examples: PackedExamples, tokenizer: Any) -> np.ndarray:
  """The unigram distribution of the corpus's tokens (spec's random-replacement distribution), specials zeroed."""
  if isinstance(examples.corpus, prepared_lib.PreparedCorpus):  # From the shards' counts, not a pass over tokens.
    return examples.corpus.unigram_probs(tokenizer.vocab_size, tokenizer.special_ids)
  return masking.unigram_probs([examples.corpus.tokens], tokenizer.vocab_size, tokenizer.special_ids)
