"""A prepared directory (objectives.prepare) as an EncodedCorpus-like view that reads documents on demand.

Opening reads only metadata.json and each shard's small index (sentences per document, token counts per sentence), which
is what packing needs (each file checked against the size and sha256 metadata.json records; a shard's array_record, too
large to hash at load, by its size then, by its sha256 when first opened); `tokens[a:b]` and `word_starts[a:b]` read the
documents holding that range from the array_record shards (random access, recently read documents cached), so a host
reads only the documents of its rows. Offsets are those of objectives.corpus.load_corpus on the same files and reading
options, so the packed rows are identical.
"""

import collections
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from array_record.python import array_record_module

from encoder import errors, files
from encoder.array_files import load_npy
from encoder.files import Path
from objectives import corpus as corpus_lib, prepare

_CACHED_DOCUMENTS = 256


class _TokenView:
  """tokens or word starts of a PreparedCorpus, sliced by corpus token offsets (a step-1 slice only)."""

  def __init__(self, corpus: "PreparedCorpus", field: int):
    self.corpus, self.field = corpus, field

  def __len__(self) -> int:
    return self.corpus.num_tokens

  def __getitem__(self, span: slice) -> np.ndarray:
    if not isinstance(span, slice) or span.step not in (None, 1):
      raise TypeError(f"a prepared corpus's tokens are read by contiguous slices, not {span!r}")
    start, stop, _ = span.indices(self.corpus.num_tokens)
    first, end, arrays = self.corpus.last  # Fast path: packing reads tokens then word starts of the same range.
    if first <= start and stop <= end:
      return arrays[self.field][start - first:stop - first]
    parts = []
    while start < stop:
      document = int(np.searchsorted(self.corpus.document_token_offsets, start, "right")) - 1
      first = int(self.corpus.document_token_offsets[document])
      end = min(stop, int(self.corpus.document_token_offsets[document + 1]))
      arrays = self.corpus.document(document)
      self.corpus.last = (first, first + len(arrays[0]), arrays)  # One tuple: threads see all of it or none.
      parts.append(arrays[self.field][start - first:end - first])
      start = end
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


class PreparedCorpus:
  """EncodedCorpus's fields over a prepared directory: offsets in memory, tokens/word_starts read on demand."""

  def __init__(self, directory: Path, metadata: dict[str, Any], records: np.ndarray, sentence_lengths: np.ndarray,
               document_sentences: np.ndarray, token_counts: np.ndarray):
    self.directory, self.metadata, self.records = directory, metadata, records  # records: [D, 2] (shard, record).
    self.sentence_offsets = np.concatenate([[0], np.cumsum(sentence_lengths)]).astype(np.int64)
    self.document_offsets = np.concatenate([[0], np.cumsum(document_sentences)]).astype(np.int64)
    self.document_token_offsets = self.sentence_offsets[self.document_offsets]
    self.num_tokens = int(self.sentence_offsets[-1])
    self.token_counts = token_counts
    self.tokens = _TokenView(self, 0)
    self.word_starts = _TokenView(self, 1)
    self._dtype = np.dtype(metadata["token_dtype"])
    self._open()

  def _open(self) -> None:
    """The per-process state: shard readers (opened on first use), the document cache and its lock."""
    self._readers: dict[int, Any] = {}
    self._cache: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()  # grain reads rows from several threads.
    self.last: tuple[int, int, tuple[np.ndarray, np.ndarray]] = (0, 0, (np.zeros(0, np.int32), np.zeros(0, np.int8)))

  def __getstate__(self) -> dict[str, Any]:  # grain's worker processes (config.data.workers) open their own readers.
    return {k: v for k, v in self.__dict__.items() if k not in ("_readers", "_cache", "_lock", "last")}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__dict__.update(state)
    self._open()

  def sentence(self, i: int) -> np.ndarray:
    return self.tokens[self.sentence_offsets[i]:self.sentence_offsets[i + 1]]

  def document(self, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids int32, word starts int8) of document `index` (of this view), read from its shard."""
    with self._lock:  # The cache and the opened readers; the read itself runs unlocked (the readers are thread-safe).
      if index in self._cache:
        self._cache.move_to_end(index)
        return self._cache[index]
      shard, record = (int(x) for x in self.records[index])
      if shard not in self._readers:
        self._readers[shard] = _reader(self.directory, self.metadata["shards"][shard])
    _, tokens, word_starts = prepare.decode_document(self._readers[shard].read([record])[0], self._dtype)
    with self._lock:
      self._cache[index] = (tokens, word_starts)
      if len(self._cache) > _CACHED_DOCUMENTS:
        self._cache.popitem(last=False)
    return tokens, word_starts

  def unigram_probs(self, vocab_size: int, special_ids: Sequence[int]) -> np.ndarray:
    """objectives.masking.unigram_probs of the view's tokens, from the shards' counts (no pass over the tokens)."""
    counts = np.zeros(vocab_size, np.float64)
    counts[:len(self.token_counts)] += self.token_counts[:vocab_size]
    counts[np.asarray(list(special_ids), np.int64)] = 0
    total = counts.sum()
    if total <= 0:
      raise errors.ConfigError("unigram_probs: the corpus has no non-special tokens; check the corpus files and "
                               "tokenizer")
    return counts / total


# What packing reads (objectives.pipeline, objectives.pairs): a corpus in memory, or a prepared directory's view.
Corpus = corpus_lib.EncodedCorpus | PreparedCorpus


def checked_file(directory: Path, shard: dict[str, Any], suffix: str, *, digest: bool = True) -> Path:
  """One file of a shard, checked against metadata.json before it is read: its size (when recorded) and, unless
  digest=False, its sha256; a missing, truncated or damaged file is a CorpusError naming it."""
  path = directory / f"{shard['name']}{suffix}"
  again = ("run python -m objectives.prepare again with the same --input, --tokenizer and --out: it rewrites the "
           "damaged shards")
  if not path.is_file():
    raise corpus_lib.CorpusError(f"{path}: missing, but {directory / 'metadata.json'} lists it; {again}")
  size, expected = shard.get("bytes", {}).get(suffix), shard["sha256"][suffix]
  found = path.stat().length
  if size is not None and found != size:
    raise corpus_lib.CorpusError(f"{path}: {found} bytes, metadata.json records {size}: the shard is "
                                 f"truncated or overwritten; {again}")
  if digest and prepare.sha256(path) != expected:
    raise corpus_lib.CorpusError(f"{path}: its sha256 differs from the one metadata.json records "
                                 f"({expected[:16]}...): the shard is damaged; {again}")
  return path


def _reader(directory: Path, shard: dict[str, Any]) -> Any:
  """A random-access reader of one shard (no read-ahead: rows are read in shuffled order), opened once its sha256
  matches metadata.json's (read once per shard and process: the shards are too large to hash all at load)."""
  return array_record_module.ArrayRecordReader(str(checked_file(directory, shard, ".array_record")),
                                               "readahead_buffer_size:0")


def _shard_index(directory: Path, shard: dict[str, Any]) -> tuple[np.ndarray, ...]:
  """(sentences per document, file number per document, first line per document, tokens per sentence)."""
  checked_file(directory, shard, ".array_record", digest=False)  # At load: its size only (a truncated shard).
  name = shard["name"]
  index = load_npy(checked_file(directory, shard, ".index.npy"))
  documents, sentences = int(index[0]), int(index[1])
  parts = np.split(index[2:], [documents, 2 * documents, 3 * documents])
  if len(parts[3]) != sentences:
    raise corpus_lib.CorpusError(f"{directory / name}.index.npy: {len(parts[3])} sentence lengths, expected "
                                 f"{sentences}; prepare the corpus again")
  return tuple(parts)


def open_prepared(directory: str | Path, tokenizer: Any = None, *, min_document_sentences: int = 1,
                  short_documents: str = "skip") -> PreparedCorpus:
  """The prepared corpus in `directory`, with load_corpus's document filter; checks the tokenizer's fingerprint."""
  if short_documents not in ("skip", "error"):
    raise errors.ConfigError(f"short_documents={short_documents!r} is not 'skip' or 'error'")
  directory = files.reachable(directory)  # Local or gs:// (array_record reads gs:// shards itself).
  meta_path = directory / "metadata.json"
  if not meta_path.is_file():
    raise corpus_lib.CorpusError(f"{directory}: no metadata.json: not a finished prepared corpus; run "
                                 f"python -m objectives.prepare --out {directory} (it resumes an unfinished one)")
  metadata = files.read_json(meta_path)
  if metadata.get("format") != prepare.FORMAT:
    raise corpus_lib.CorpusError(f"{meta_path}: format {metadata.get('format')!r}, expected {prepare.FORMAT!r}")
  if tokenizer is not None and corpus_lib.tokenizer_fingerprint(tokenizer) != metadata["tokenizer_fingerprint"]:
    raise corpus_lib.CorpusError(f"{meta_path}: prepared with the tokenizer {metadata['tokenizer']!r}, whose "
                                 f"vocabulary differs from {tokenizer!r}; prepare it again with the config's tokenizer")
  shard_counts, shard_inputs, shard_lines, shard_lengths, shard_records = [], [], [], [], []
  for number, shard in enumerate(metadata["shards"]):
    counts, file_numbers, first_lines, sentence_lengths = _shard_index(directory, shard)
    shard_counts.append(counts)
    shard_inputs.append(file_numbers)
    shard_lines.append(first_lines)
    shard_lengths.append(sentence_lengths)
    shard_records.append(np.stack([np.full(len(counts), number), np.arange(len(counts))], 1))
  sentence_counts, inputs, lines = (np.concatenate(x) for x in (shard_counts, shard_inputs, shard_lines))
  keep = sentence_counts >= min_document_sentences
  if not keep.all() and short_documents == "error":
    d = int(np.flatnonzero(~keep)[0])
    raise corpus_lib.CorpusError(
        f"{metadata['inputs'][inputs[d]]['path']}:{lines[d]}: document has {sentence_counts[d]} sentence(s), fewer "
        f"than min_document_sentences={min_document_sentences}; remove it or pass short_documents='skip'")
  records = np.concatenate(shard_records)
  first, *rest = metadata["shards"]  # At least one: np.concatenate above refuses none.
  token_counts = load_npy(checked_file(directory, first, ".counts.npy"))
  for shard in rest:
    token_counts = token_counts + load_npy(checked_file(directory, shard, ".counts.npy"))
  for shard, record in records[~keep]:  # Dropped documents' tokens leave the unigram law (only they are read).
    record_bytes = _reader(directory, metadata["shards"][int(shard)]).read([int(record)])[0]
    tokens = prepare.decode_document(record_bytes, np.dtype(metadata["token_dtype"]))[1]
    token_counts = token_counts - np.bincount(tokens, minlength=len(token_counts))
  lengths = np.concatenate(shard_lengths)[np.repeat(keep, sentence_counts)]
  corpus = PreparedCorpus(directory, metadata, records[keep], lengths, sentence_counts[keep], token_counts)
  if len(corpus.document_offsets) < 2:
    raise corpus_lib.CorpusError(f"empty corpus: no document with at least {min_document_sentences} sentence(s) in "
                                 f"{directory}")
  return corpus
