"""Pretraining text: files -> documents of sentences -> token ids, tokenized once and cached as .npy files.

Reading rules. WikiText raw files: a line ` = Title = ` (one '=' each side) starts a new document; section headings
(` = = Sub = = ` and deeper) are dropped, as BERT's Wikipedia extraction drops them; WikiText's ` @-@ `, ` @,@ `,
` @.@ ` are joined back to `-`, `,`, `.`. Plain text files: blank lines separate documents. In both, each line is a
paragraph, split into sentences by `split_sentences`. A file without usable text (empty, whitespace only, binary,
not UTF-8) or a corpus the tokenizer maps entirely to [UNK] is a CorpusError naming the file (and line).
"""

import hashlib
import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from encoder import errors, files
from encoder.array_files import load_npy
from encoder.files import Path, atomic_path

Document = list[str]  # Sentences in order.


class CorpusError(errors.UserError):
  """Pretraining text without usable content; the message names the file (and line) and what was found."""


_TITLE = re.compile(r"^ ?= ([^=].*) = ?$")
_HEADING = re.compile(r"^ ?(= ){2,}.*(= )*=? ?$")
_WIKITEXT_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e no vol fig gen col lt sgt capt rev inc ltd co corp jan feb mar apr "
    "jun jul aug sep sept oct nov dec u.s u.k a.m p.m approx".split())
_CLOSERS = "\"')]}»”’"
_OPENERS = "\"'([{«“‘"


def split_sentences(paragraph: str) -> list[str]:
  """Rule-based splitter: a token ending in . ! or ? (then optional closing quotes/brackets, attached or, as in
  WikiText, separate tokens) ends a sentence when the next token starts with an uppercase letter, a digit or an
  opening quote, unless it is a known abbreviation (Mr., e.g., U.S., ...) or a single-letter initial (H.)."""
  tokens = paragraph.split()
  sentences, current, i = [], [], 0
  while i < len(tokens):
    token = tokens[i]
    current.append(token)
    i += 1
    core = token.rstrip(_CLOSERS)
    if not core or core[-1] not in ".!?":
      continue
    word = core.rstrip(".!?").lower()
    if core[-1] == "." and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())):
      continue
    # Separate closers: a bracket always closes; a straight quote closes only when the sentence has an open one.
    while i < len(tokens) and not tokens[i].strip(_CLOSERS) and (
        '"' not in tokens[i] or sum(t.count('"') for t in current) % 2 == 1):
      current.append(tokens[i])
      i += 1
    if i == len(tokens):
      break
    following = tokens[i].lstrip(_OPENERS)
    if tokens[i][0] in _OPENERS or (following and (following[0].isupper() or following[0].isdigit())):
      sentences.append(" ".join(current))
      current = []
  if current:
    sentences.append(" ".join(current))
  return sentences


def stream_lines(path: Path) -> Iterator[str]:
  """The lines of a UTF-8 file read one at a time (never the whole file); a NUL byte (a binary file), a non-UTF-8
  byte or a file without text is a CorpusError naming the file (and line)."""
  path = files.path(path)
  if not path.is_file():
    raise FileNotFoundError(f"corpus file {path} does not exist")
  size, has_text = 0, False
  with path.open("rb") as f:
    for number, raw in enumerate(f, 1):  # Split at b"\n" only: UTF-8 never has 0x0A inside a character.
      if b"\0" in raw:
        raise CorpusError(f"{path}:{number}: a NUL byte: expected UTF-8 text, found a binary file")
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError as err:
        raise CorpusError(f"{path}:{number}: not valid UTF-8 (byte {raw[err.start]:#04x}: {err.reason}); "
                          "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
      size += len(raw)
      has_text = has_text or bool(text.strip())
      yield from text.splitlines()
  if not has_text:
    raise CorpusError(f"{path}: empty corpus file: expected text, found "
                      + (f"only whitespace ({size} bytes)" if size else "no bytes"))


def paragraph_documents(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
  """(first line number, paragraphs) of each document of a file's lines, read as a stream (one line of lookahead);
  split_sentences of the paragraphs gives the document's sentences."""
  lines = iter(lines)
  leading = []
  for text in lines:
    leading.append(text)
    if text.strip():
      break
  wikitext = bool(leading) and bool(_TITLE.match(leading[-1]))
  stream = itertools.chain(leading, lines)
  current: list[str] = []
  start, previous, line = 1, "", next(stream, None)
  number = 1
  while line is not None:
    following = next(stream, None)
    # WikiText headings stand between blank lines; a table row such as " = Goals ; A = " is text.
    alone = not previous.strip() and (following is None or not following.strip())
    if wikitext and alone and _TITLE.match(line):
      if current:
        yield start, current
      current, start = [], number
    elif wikitext and alone and _HEADING.match(line):
      pass
    elif not line.strip():
      if not wikitext and current:  # Plain text: a blank line ends the document.
        yield start, current
        current = []
    else:
      if not current and not wikitext:
        start = number
      if wikitext:
        for old, new in _WIKITEXT_JOINS:
          line = line.replace(old, new)
      current.append(line)
    previous, line, number = line, following, number + 1
  if current:
    yield start, current


def _documents_of(path: Path) -> list[tuple[int, Document]]:
  """(first line number, sentences) for each document of one file."""
  return [(line, [s for paragraph in paragraphs for s in split_sentences(paragraph)])
          for line, paragraphs in paragraph_documents(stream_lines(path))]


def read_documents(paths: Sequence[str | Path], *, min_document_sentences: int = 1,
                   short_documents: str = "skip") -> list[Document]:
  """Documents (lists of sentences) of the files, in order (rules in the module docstring).

  Documents with fewer than `min_document_sentences` sentences are skipped and counted (short_documents="skip")
  or are an error naming the file and line (short_documents="error", what NSP pairs need).
  """
  if short_documents not in ("skip", "error"):
    raise errors.ConfigError(f"short_documents={short_documents!r} is not 'skip' or 'error'")
  if not paths:
    raise errors.ConfigError("no corpus files given")
  documents, skipped = [], 0
  for path in map(files.path, paths):
    for line, document in _documents_of(path):
      if len(document) >= min_document_sentences:
        documents.append(document)
      elif short_documents == "error":
        raise CorpusError(f"{path}:{line}: document {document[0][:60]!r} has {len(document)} sentence(s), fewer than "
                         f"min_document_sentences={min_document_sentences}; remove it or pass short_documents='skip'")
      else:
        skipped += 1
  if skipped:
    logging.info("read_documents: skipped %d documents shorter than %d sentences", skipped,  # noqa: LOG015  (root: where absl puts its handler)
                 min_document_sentences)
  if not documents:
    raise CorpusError(f"empty corpus: no document with at least {min_document_sentences} sentence(s) in "
                     f"{[str(p) for p in paths]}")
  return documents


class EncodedCorpus(NamedTuple):
  """Flat token ids of every sentence; sentence i is tokens[sentence_offsets[i]:sentence_offsets[i+1]]; document d
  has sentences document_offsets[d]:document_offsets[d+1]; word_starts marks each word's first subword."""
  tokens: np.ndarray  # [T] int32
  word_starts: np.ndarray  # [T] int8
  sentence_offsets: np.ndarray  # [S+1] int64, token offsets
  document_offsets: np.ndarray  # [D+1] int64, sentence offsets

  def sentence(self, i: int) -> np.ndarray:
    return self.tokens[self.sentence_offsets[i]:self.sentence_offsets[i + 1]]


_FIELDS = EncodedCorpus._fields


_PROBE = "Héllo WORLD, naïve café 123 ##x [MASK] 東京 straße"  # Exposes casing/accent/CJK normalization.


def tokenizer_fingerprint(tokenizer: Any) -> str:
  """A hash of the tokenizer's vocabulary (ids -> pieces) and of how it segments a probe text, for cache keys."""
  digest = hashlib.sha256(type(tokenizer).__name__.encode())
  for piece in tokenizer.ids_to_tokens(range(tokenizer.vocab_size)):
    digest.update(piece.encode("utf-8", "surrogatepass") + b"\0")
  digest.update(" ".join(tokenizer.tokenize(_PROBE)).encode("utf-8", "surrogatepass"))
  return digest.hexdigest()


def documents_fingerprint(documents: Sequence[Document]) -> str:
  """A hash of the documents' sentences (the text actually tokenized)."""
  digest = hashlib.sha256()
  for document in documents:
    for sentence in document:
      digest.update(sentence.encode("utf-8") + b"\n")
    digest.update(b"\f")
  return digest.hexdigest()


def tokenize_documents(documents: Sequence[Document], tokenizer: Any) -> EncodedCorpus:
  """Token ids and word starts of every sentence (no special tokens), unchecked and uncached."""
  sentences = [s for document in documents for s in document]
  encoded = tokenizer.encode_batch(sentences, add_special_tokens=False)
  ids = [np.asarray(e.input_ids, np.int32) for e in encoded]
  starts = []
  for e in encoded:
    words = np.asarray(e.word_ids, np.int64)
    start = np.ones(len(words), np.int8)
    start[1:] = words[1:] != words[:-1]
    starts.append(start)
  lengths = np.array([len(x) for x in ids], np.int64)
  doc_lengths = np.array([len(d) for d in documents], np.int64)
  return EncodedCorpus(
      tokens=np.concatenate(ids) if ids else np.zeros(0, np.int32),
      word_starts=np.concatenate(starts) if starts else np.zeros(0, np.int8),
      sentence_offsets=np.concatenate([[0], np.cumsum(lengths)]),
      document_offsets=np.concatenate([[0], np.cumsum(doc_lengths)]))


def _check_usable(corpus: EncodedCorpus, tokenizer: Any, source: str) -> None:
  """A corpus whose tokens are all [UNK] (or none) teaches nothing: a CorpusError naming `source`."""
  special = np.asarray(sorted(getattr(tokenizer, "special_ids", ())), np.int32)
  if not np.count_nonzero(~np.isin(corpus.tokens, special)):
    raise CorpusError(f"{source}: no usable text: {tokenizer!r} maps all {len(corpus.tokens)} tokens of it to [UNK]; "
                      "expected text in the tokenizer's vocabulary")


def encode_documents(documents: Sequence[Document], tokenizer: Any, cache_dir: str | Path | None = None,
                     key: str | None = None, source: str = "the corpus") -> EncodedCorpus:
  """Tokenizes every sentence once (no special tokens); cached in cache_dir/<key>/*.npy (np.save, no pickle).

  key defaults to a hash of (the documents' text, the tokenizer's vocabulary); a second call reloads the arrays.
  Text that tokenizes to nothing but [UNK] is a CorpusError naming `source` (the files, for load_corpus).
  """
  if cache_dir is None:
    corpus = tokenize_documents(documents, tokenizer)
    _check_usable(corpus, tokenizer, source)
    return corpus
  key = key or hashlib.sha256(
      (documents_fingerprint(documents) + tokenizer_fingerprint(tokenizer)).encode()).hexdigest()[:32]
  folder = files.path(cache_dir) / key
  if all((folder / f"{name}.npy").is_file() for name in _FIELDS):
    return EncodedCorpus(*(load_npy(folder / f"{name}.npy") for name in _FIELDS))
  corpus = tokenize_documents(documents, tokenizer)
  _check_usable(corpus, tokenizer, source)
  folder.mkdir(parents=True, exist_ok=True)
  for name, array in zip(_FIELDS, corpus):  # Atomic: a killed run never leaves a half-written cache.
    with atomic_path(folder / f"{name}.npy") as temporary, temporary.open("wb") as handle:
      np.save(handle, array, allow_pickle=False)
  return corpus


_CACHE_VERSION = "corpus-v2"  # Bump when the reading or tokenizing rules change: old caches are then ignored.


def files_fingerprint(paths: Sequence[str | Path]) -> str:
  """A hash of the files' bytes (not their names or times)."""
  digest = hashlib.sha256(_CACHE_VERSION.encode())
  for path in map(files.path, paths):
    if not path.is_file():
      raise FileNotFoundError(f"corpus file {path} does not exist")
    digest.update(hashlib.sha256(path.read_bytes()).digest())
  return digest.hexdigest()


def load_corpus(paths: Sequence[str | Path], tokenizer: Any, cache_dir: str | Path | None = None, *,
                min_document_sentences: int = 1, short_documents: str = "skip") -> EncodedCorpus:
  """read_documents + encode_documents, keyed by (files' content, reading options, tokenizer vocabulary): a second
  call with the same inputs loads the cached arrays without reading or tokenizing."""
  source = ", ".join(map(str, paths))
  if cache_dir is None:
    documents = read_documents(paths, min_document_sentences=min_document_sentences, short_documents=short_documents)
    return encode_documents(documents, tokenizer, source=source)
  key = hashlib.sha256(f"{files_fingerprint(paths)}|{min_document_sentences}|{short_documents}|"
                       f"{tokenizer_fingerprint(tokenizer)}".encode()).hexdigest()[:32]
  folder = files.path(cache_dir) / key
  if all((folder / f"{name}.npy").is_file() for name in _FIELDS):
    return EncodedCorpus(*(load_npy(folder / f"{name}.npy") for name in _FIELDS))
  documents = read_documents(paths, min_document_sentences=min_document_sentences, short_documents=short_documents)
  return encode_documents(documents, tokenizer, cache_dir, key, source)
