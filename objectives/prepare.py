"""Corpus preparation at scale: text files -> sharded array_record files of tokenized documents + metadata.json.

  python -m objectives.prepare --input 'corpus/*.txt' --tokenizer all-MiniLM-L6-v2 --out DIR --processes N
  python -m objectives.prepare --input tfds:wikipedia/20230601.en:train --tfds-data-dir ~/tensorflow_datasets ...

An input is a glob of text files or `tfds:NAME[:SPLIT]`, a tfds text dataset already prepared on disk in array_record
format (`tfds build NAME --file_format=array_record`; read without TensorFlow): each record is a document, the
non-blank lines of its text feature (--tfds-text-key) its paragraphs.

The files are streamed (objectives.corpus.stream_lines / paragraph_documents: the reading rules of load_corpus, never
a whole file in memory); worker processes split sentences and tokenize (objectives.corpus.tokenize_documents, so the
ids are those of the in-memory path). Shard i holds documents [i*K, (i+1)*K) (K = --shard-documents), so the bytes
are the same whatever the number of processes. Each finished shard gets a completion marker (written atomically after
its files); a rerun skips the shards whose marker and checksums match and rewrites any partial one. objectives.prepared
reads the directory. Layout of DIR:
  shard-00000.array_record   one record per document (encode_document)
  shard-00000.index.npy      int64 [2 + 3D + S]: D, S, sentences per document, file number and first line of each
                             document, token count of each sentence (what packing needs without reading tokens)
  shard-00000.counts.npy     int64 [vocab_size]: token id counts (the unigram law for random replacements)
  shard-00000.done.json      completion marker: the settings, counts, sizes and sha256 of the three files
  metadata.json              written last: settings, totals and the shard list (objectives.prepared checks each
                             file's size and sha256 against it before reading the file)
"""

import argparse
import collections
import glob
import hashlib
import itertools
import json
import multiprocessing
import multiprocessing.pool
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from array_record.python import array_record_module

from encoder import cli, errors, files
from encoder.files import Path, atomic_path, atomic_write
from encoder.tokenizer import load_tokenizer
from objectives import corpus as corpus_lib

FORMAT = "encoderlab-prepared-v1"
WRITER_OPTIONS = "group_size:1,uncompressed"  # One document per chunk: random access reads only that document.
SUFFIXES = (".array_record", ".index.npy", ".counts.npy")
_TOKENIZE_SENTENCES = 4096  # Sentences per encode_batch call in a worker (bounds its Python objects).
TFDS_PREFIX = "tfds:"
_worker_tokenizer: Any = None


def shard_name(index: int) -> str:
  """The file stem of shard `index`."""
  return f"shard-{index:05d}"


def token_dtype(vocab_size: int) -> np.dtype:
  """uint16 ids when the vocabulary fits, else int32."""
  return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def encode_document(sentence_lengths: np.ndarray, tokens: np.ndarray, word_starts: np.ndarray,
                    dtype: np.dtype) -> bytes:
  """One record: int32 sentence count S, int32 [S] sentence token counts, ids [T] (dtype), int8 word starts [T]."""
  return b"".join((np.int32(len(sentence_lengths)).tobytes(), sentence_lengths.astype(np.int32).tobytes(),
                   tokens.astype(dtype).tobytes(), word_starts.astype(np.int8).tobytes()))


def decode_document(record: bytes, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """encode_document's inverse: (sentence lengths int32 [S], ids int32 [T], word starts int8 [T])."""
  count = int(np.frombuffer(record, np.int32, 1)[0])
  at = 4 + 4 * count
  total = (len(record) - at) // (dtype.itemsize + 1)
  return (np.frombuffer(record, np.int32, count, 4), np.frombuffer(record, dtype, total, at).astype(np.int32),
          np.frombuffer(record, np.int8, total, at + total * dtype.itemsize))


def expand_inputs(patterns: Sequence[str]) -> list[Path | str]:
  """Files matching the glob patterns, each pattern's matches sorted, in pattern order (duplicates once); `tfds:`
  specs are kept as they are."""
  inputs: list[Path | str] = []
  for pattern in patterns:
    if pattern.startswith(TFDS_PREFIX):
      matches = [pattern]
    else:
      matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
    if not matches:
      raise corpus_lib.CorpusError(f"--input {pattern!r}: no file matches it; expected text files "
                                   "(e.g. 'corpus/*.txt') or tfds:NAME[:SPLIT]")
    inputs += [m for m in matches if m not in inputs]
  return inputs


def tfds_source(spec: str, data_dir: str | None) -> tuple[Any, dict[str, Any]]:
  """(random-access records, description) of a `tfds:NAME[:SPLIT]` input prepared on disk (split default train)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel  (only tfds inputs need it)
  name, _, split = spec[len(TFDS_PREFIX):].partition(":")
  try:
    builder = tfds.builder(name, data_dir=data_dir)
    source = builder.as_data_source(split=split or "train")
  except Exception as err:  # noqa: BLE001  (tfds raises many types: not found, not prepared, not array_record)
    raise corpus_lib.CorpusError(
        f"--input {spec!r}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}; expected a tfds "
        f"dataset prepared on disk in array_record format under --tfds-data-dir "
        f"({data_dir or 'tfds default'}): tfds build {name} --file_format=array_record") from None
  return source, {"tfds": name, "split": split or "train", "data_dir": str(builder.data_dir),
                  "version": str(builder.info.version), "examples": len(source)}


def _tfds_documents(spec: str, source: Any, text_key: str) -> Iterator[tuple[int, list[str]]]:
  """(record number, paragraphs) of each record with text, read in order."""
  for start in range(0, len(source), 256):
    for number, record in enumerate(source.__getitems__(range(start, min(start + 256, len(source)))), start):
      if text_key not in record:
        raise corpus_lib.CorpusError(f"--input {spec!r}: record {number} has no {text_key!r} feature (it has "
                                     f"{sorted(record)}); name the text feature with --tfds-text-key")
      text = record[text_key]
      text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
      paragraphs = [line for line in text.split("\n") if line.strip()]
      if paragraphs:
        yield number, paragraphs


def sha256(path: Path) -> str:
  """The hex sha256 of a file's bytes (the checksums in done.json and metadata.json)."""
  with path.open("rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def _documents(inputs: Sequence[Path | str], sources: dict[str, Any],
               text_key: str) -> Iterator[tuple[int, int, list[str]]]:
  """(input number, first line or record number, paragraphs) of every document of the inputs, streamed."""
  for number, item in enumerate(inputs):
    documents = (_tfds_documents(item, sources[item], text_key) if isinstance(item, str)
                 else corpus_lib.paragraph_documents(corpus_lib.stream_lines(item)))
    for line, paragraphs in documents:
      yield number, line, paragraphs


def _batches(items: Iterator, size: int) -> Iterator[list]:
  while batch := list(itertools.islice(items, size)):
    yield batch


def _init_worker(tokenizer: str | Path, single_threaded: bool) -> None:
  if single_threaded:  # N worker processes each tokenizing: HF tokenizers' thread pools would oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
  global _worker_tokenizer  # noqa: PLW0603  (one tokenizer per worker process, set by the pool's initializer)
  _worker_tokenizer = load_tokenizer(tokenizer)


def _save_npy(path: Path, array: np.ndarray) -> None:
  with path.open("wb") as f:
    np.save(f, array, allow_pickle=False)


def _encode(documents: list[corpus_lib.Document], tokenizer: Any) -> corpus_lib.EncodedCorpus:
  """corpus.tokenize_documents's arrays (the tests check it) from one native call, without per-sentence arrays."""
  # Tokenizer.encode_batch(add_special_tokens=False) returns the backend's segments unchanged.
  segments = tokenizer.backend.segments([s for document in documents for s in document], False)
  lengths = np.fromiter((len(ids) for ids, _ in segments), np.int64, len(segments))
  total = int(lengths.sum())
  tokens = np.fromiter(itertools.chain.from_iterable(ids for ids, _ in segments), np.int32, total)
  words = np.fromiter(itertools.chain.from_iterable(w for _, w in segments), np.int64, total)
  offsets = np.concatenate([[0], np.cumsum(lengths)])
  starts = np.ones(total, np.int8)
  starts[1:] = words[1:] != words[:-1]
  starts[offsets[:-1][lengths > 0]] = 1  # Each sentence's first token starts a word.
  document_offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])])
  return corpus_lib.EncodedCorpus(tokens, starts, offsets, document_offsets)


def _encode_paragraphs(documents: list[list[list[str]]], tokenizer: Any) -> corpus_lib.EncodedCorpus:
  """_encode's arrays for documents given as paragraphs of sentences: one encoding per paragraph, its sentences
  joined by [SEP] (WordPieceBackend.joined_segments), where the backend allows it and no sentence holds a literal
  [SEP]; else _encode."""
  paragraphs = [sentences for document in documents for sentences in document]
  sentences_of = [[s for p in document for s in p] for document in documents]
  joiner = getattr(tokenizer.backend, "joined_segments", None)
  encoded = joiner(paragraphs, tokenizer.backend.id_to_token(tokenizer.sep_id)) if joiner else None
  if encoded is None:
    return _encode(sentences_of, tokenizer)
  counts = np.fromiter(map(len, encoded), np.int64, len(encoded))
  flat = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, int(counts.sum()))
  markers = np.flatnonzero(flat == tokenizer.sep_id)
  paragraph_ends = np.cumsum(counts)
  expected = np.fromiter((len(p) - 1 for p in paragraphs), np.int64, len(paragraphs))
  if len(markers) != expected.sum() or not np.array_equal(np.diff(np.searchsorted(markers, np.concatenate(
      [[0], paragraph_ends]))), expected):  # A sentence holds a literal [SEP] (it encodes as the special token).
    return _encode(sentences_of, tokenizer)
  ends = np.sort(np.concatenate([markers, paragraph_ends]))  # Each sentence ends at a marker or at its paragraph's end.
  sentence_ends = ends - np.searchsorted(markers, ends)  # Positions once the markers are removed.
  tokens = np.delete(flat, markers)
  starts = (~tokenizer.backend.continuation[tokens]).astype(np.int8)
  offsets = np.concatenate([[0], sentence_ends])
  starts[offsets[:-1][np.diff(offsets) > 0]] = 1
  document_offsets = np.concatenate([[0], np.cumsum([len(d) for d in sentences_of])])
  return corpus_lib.EncodedCorpus(tokens, starts, offsets, document_offsets)


def _write_documents(writer: Any, split: list[list[list[str]]], tokenizer: Any
                     ) -> tuple[np.ndarray, np.ndarray, int]:
  """Tokenizes the documents (each a list of paragraphs' sentences) a group at a time and writes one record each;
  returns (token counts [vocab], sentence lengths, words)."""
  dtype = token_dtype(tokenizer.vocab_size)
  sentences = [[s for paragraph in document for s in paragraph] for document in split]
  counts = np.zeros(tokenizer.vocab_size, np.int64)
  lengths_all, words = [], 0
  batch_start = 0
  while batch_start < len(sentences):  # Groups of whole documents of about _TOKENIZE_SENTENCES sentences.
    batch_end, size = batch_start, 0
    while batch_end < len(sentences) and (
        batch_end == batch_start or size + len(sentences[batch_end]) <= _TOKENIZE_SENTENCES):
      size += len(sentences[batch_end])
      batch_end += 1
    encoded = _encode_paragraphs(split[batch_start:batch_end], tokenizer)
    counts += np.bincount(encoded.tokens, minlength=tokenizer.vocab_size)[:tokenizer.vocab_size]
    lengths = np.diff(encoded.sentence_offsets)
    for d in range(batch_end - batch_start):
      first, last = encoded.document_offsets[d], encoded.document_offsets[d + 1]
      start, end = encoded.sentence_offsets[first], encoded.sentence_offsets[last]
      writer.write(encode_document(lengths[first:last], encoded.tokens[start:end], encoded.word_starts[start:end],
                                   dtype))
    lengths_all.append(lengths)
    words += sum(len(s.split()) for document in sentences[batch_start:batch_end] for s in document)
    batch_start = batch_end
  return counts, np.concatenate(lengths_all) if lengths_all else np.zeros(0, np.int64), words


def _write_shard(out: str, index: int, documents: list[tuple[int, int, list[str]]]) -> dict[str, Any]:
  """Splits, tokenizes and writes one shard (in a worker); returns its counts and checksums."""
  tokenizer, directory, stem = _worker_tokenizer, files.path(out), shard_name(index)
  split = [[sentences for sentences in map(corpus_lib.split_sentences, paragraphs) if sentences]
           for _, _, paragraphs in documents]  # Per document, its paragraphs' sentences.
  sizes, digests = {}, {}  # Of the local files, before they are moved (or uploaded) into place.
  with atomic_path(directory / f"{stem}.array_record") as temporary:
    writer = array_record_module.ArrayRecordWriter(str(temporary), WRITER_OPTIONS)
    counts, sentence_lengths, words = _write_documents(writer, split, tokenizer)
    writer.close()
    sizes[".array_record"], digests[".array_record"] = temporary.stat().st_size, sha256(temporary)
  index_array = np.concatenate([[len(documents), len(sentence_lengths)], [sum(map(len, d)) for d in split],
                                [f for f, _, _ in documents], [line for _, line, _ in documents],
                                sentence_lengths]).astype(np.int64)
  for suffix, array in ((".index.npy", index_array), (".counts.npy", counts)):
    with atomic_path(directory / f"{stem}{suffix}") as temporary:
      _save_npy(temporary, array)
      sizes[suffix], digests[suffix] = temporary.stat().st_size, sha256(temporary)
  special = np.asarray(sorted(tokenizer.special_ids), np.int64)
  return {"name": stem, "documents": len(documents), "sentences": len(sentence_lengths),
          "tokens": int(sentence_lengths.sum()), "words": words,
          "usable_tokens": int(counts.sum() - counts[special].sum()),
          "bytes": {suffix: sizes[suffix] for suffix in SUFFIXES},
          "sha256": {suffix: digests[suffix] for suffix in SUFFIXES}}


def _finished(directory: Path, index: int, settings: dict[str, Any]) -> dict[str, Any] | None:
  """The recorded result of shard `index` if its marker and files are complete and match the settings."""
  marker = directory / f"{shard_name(index)}.done.json"
  if not marker.is_file():
    return None
  done = files.read_json(marker)
  if done["settings"] != settings:
    raise corpus_lib.CorpusError(f"{marker}: the shard was prepared with other settings ({done['settings']}), not "
                                 f"{settings}; give an empty --out directory")
  expected = {directory / f"{done['shard']['name']}{suffix}": digest
              for suffix, digest in done["shard"]["sha256"].items()}
  ok = all(path.is_file() and sha256(path) == digest for path, digest in expected.items())
  return done["shard"] if ok else None


def prepare(inputs: Sequence[str], tokenizer: str, out: str | Path, *, processes: int = 1,
            shard_documents: int = 1024, stop_after_shards: int | None = None, tfds_data_dir: str | None = None,
            tfds_text_key: str = "text") -> dict[str, Any]:
  """Prepares (or finishes preparing) `out` from the files matching `inputs` (and tfds: inputs); returns the metadata
  (also written to out/metadata.json). stop_after_shards (a debugging aid) stops after writing that many shards,
  before metadata.json."""
  if processes < 1 or shard_documents < 1:
    raise errors.UserError(f"--processes {processes} and --shard-documents {shard_documents} must be at least 1")
  found = expand_inputs(inputs)
  sources, described = {}, {}
  for spec in (f for f in found if isinstance(f, str)):
    sources[spec], described[spec] = tfds_source(spec, tfds_data_dir)
  vocab = load_tokenizer(tokenizer)
  directory = files.reachable(out)  # Local or gs:// (each file uploaded as one object).
  directory.mkdir(parents=True, exist_ok=True)
  inputs_meta = [described[f] | {"text_key": tfds_text_key} if isinstance(f, str)
                 else {"path": str(f), "bytes": f.stat().length, "sha256": sha256(f)} for f in found]
  settings = {"format": FORMAT, "tokenizer_fingerprint": corpus_lib.tokenizer_fingerprint(vocab),
              "vocab_size": vocab.vocab_size, "token_dtype": token_dtype(vocab.vocab_size).name,
              "shard_documents": shard_documents, "inputs": inputs_meta}
  for stale in directory.glob("*.tmp"):  # Left by an interrupted run: its shards are rewritten.
    stale.unlink()
  shards: list[dict[str, Any]] = []
  written, stopped = 0, False

  def record(index: int, shard: Any) -> None:
    shard = shard.get() if isinstance(shard, multiprocessing.pool.AsyncResult) else shard
    atomic_write(directory / f"{shard_name(index)}.done.json",
                       json.dumps({"settings": settings, "shard": shard}, indent=1))
    shards.append(shard)

  pool = None
  if processes > 1:
    pool = multiprocessing.get_context("spawn").Pool(processes, _init_worker, (tokenizer, True))
  else:  # In this process, whose environment is left as it is.
    _init_worker(tokenizer, False)
  try:
    pending: collections.deque = collections.deque()  # (index, shard or its AsyncResult), in shard order.
    for index, documents in enumerate(_batches(_documents(found, sources, tfds_text_key), shard_documents)):
      if stop_after_shards is not None and written >= stop_after_shards:
        stopped = True
        break
      shard: dict[str, Any] | multiprocessing.pool.AsyncResult | None = _finished(directory, index, settings)
      if shard is None:
        written += 1
        shard = (pool.apply_async(_write_shard, (str(directory), index, documents)) if pool
                 else _write_shard(str(directory), index, documents))
      pending.append((index, shard))
      while len(pending) > 2 * processes - 1:  # Bounded: at most 2N shards of text in flight.
        record(*pending.popleft())
    while pending:
      record(*pending.popleft())
  finally:
    if pool:
      pool.terminate()
  if stopped:
    return {"stopped_after_shards": written}
  totals = {key: sum(s[key] for s in shards) for key in ("documents", "sentences", "tokens", "words")}
  if not totals["documents"]:
    raise corpus_lib.CorpusError(f"empty corpus: no document in {[str(f) for f in found]}")
  if not sum(s["usable_tokens"] for s in shards):
    raise corpus_lib.CorpusError(f"{', '.join(map(str, found))}: no usable text: {vocab!r} maps all "
                                 f"{totals['tokens']} tokens of it to [UNK]; expected text in the tokenizer's "
                                 "vocabulary")
  metadata = {**settings, "tokenizer": tokenizer, **totals, "shards": shards}
  atomic_write(directory / "metadata.json", json.dumps(metadata, indent=1))
  return metadata


def main(argv: Sequence[str] | None = None) -> None:
  """The command line (module docstring)."""
  parser = cli.ArgumentParser(prog="python -m objectives.prepare", description=__doc__.split("\n")[0])
  parser.add_argument("--input", action="append", required=True,
                      help="glob of text files, or tfds:NAME[:SPLIT] (repeatable)")
  parser.add_argument("--tokenizer", required=True, help="packaged checkpoint name or tokenizer file/directory")
  parser.add_argument("--out", required=True, help="output directory (resumed when it holds finished shards)")
  parser.add_argument("--processes", type=cli.integer(1), default=os.cpu_count() or 1)
  parser.add_argument("--shard-documents", type=cli.integer(1), default=1024, help="documents per shard")
  parser.add_argument("--tfds-data-dir", default=None, help="where tfds: inputs are prepared (tfds's default)")
  parser.add_argument("--tfds-text-key", default="text", help="the text feature of tfds: inputs")
  parser.add_argument("--stop-after-shards", type=cli.integer(0), default=None,
                      help=argparse.SUPPRESS)  # Tests: interruption.
  args = parser.parse_args(argv)
  metadata = prepare(args.input, args.tokenizer, args.out, processes=args.processes,
                     shard_documents=args.shard_documents, stop_after_shards=args.stop_after_shards,
                     tfds_data_dir=args.tfds_data_dir, tfds_text_key=args.tfds_text_key)
  print(json.dumps({k: v for k, v in metadata.items() if k not in ("shards", "inputs")}))


if __name__ == "__main__":
  errors.run(main)
