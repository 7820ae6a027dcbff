"""Contextual embeddings of every word (or subword) of a text file, streamed to disk (tasks.embeddings.store).

  python -m tasks.embeddings.embed --init hf:all-MiniLM-L6-v2 --input text.txt [--words] --layers last4_mean \\
      --pooling mean --out DIR [--dtype float32|float16] [--lines-per-shard 4096]

One text per line; --words: the line is whitespace-separated pre-tokenized words (else raw text, split into words by
the tokenizer's pre-tokenizer). Layers: "last", a number (0 = embeddings), "3,4,5", "all", "last4_mean", "mean:3,4,5"
(tasks.embeddings.layers). Pooling: "mean" or "first" subword of each word, or "subword" (one row per subword).
Writes DIR/shard-00000.npy ... (rows in input order), DIR/index.jsonl (per row: shard, row, line, word, text) and
DIR/meta.json. Rerunning the same command after an interruption continues after the last complete shard and gives
byte-identical files. Progress goes to stderr; the last stdout line is a JSON summary.
"""

import argparse
import dataclasses
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import tqdm

from encoder import cli, errors
from tasks.embeddings import store
from tasks.embeddings.extract import TRANSFER_DTYPES, Embedder
from tasks.embeddings.layers import parse_layers
from tasks.readers.lines import ReaderError, numbered_lines


def scan_input(path: Path) -> tuple[int, str]:
  """(number of lines, sha256 of the bytes) of a UTF-8 text file with at least one non-blank line; else an error
  naming the file and line (ReaderError, FileNotFoundError)."""
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such file")
  digest = hashlib.sha256()
  with open(path, "rb") as handle:
    for block in iter(lambda: handle.read(1 << 20), b""):
      digest.update(block)
  count, usable = 0, False
  for count, line in numbered_lines(path):  # noqa: B007  (`count` is read after the loop)
    usable = usable or bool(line.strip())
  if count == 0:
    raise ReaderError(path, 1, "one text per line, found an empty file")
  if not usable:
    raise ReaderError(path, count, f"at least one line with text, found only blank lines ({count})")
  return count, digest.hexdigest()


@dataclasses.dataclass
class _Block:
  """The input lines of one shard, its writer and how many of its lines are still being encoded."""
  writer: store.ShardWriter
  offsets: np.ndarray  # First row of each line.
  entries: list[dict]  # Index entry of each row.
  remaining: int


def _rows(embedder: Embedder, numbers: Sequence[int], words: list[list[str]], pooling: str) -> list[list[dict]]:
  """Each line's index entries: its words, or with pooling "subword" its subwords (with their word)."""
  if pooling != "subword":
    return [[{"line": n, "word": i, "text": w} for i, w in enumerate(ws)] for n, ws in zip(numbers, words)]
  encodings = embedder.tokenizer.encode_batch(words, add_special_tokens=False)
  return [[{"line": n, "word": word, "subword": i, "text": token}
           for i, (word, token) in enumerate(zip(e.word_ids, embedder.tokenizer.ids_to_tokens(e.input_ids)))]
          for n, e in zip(numbers, encodings)]


def encode_file(args: argparse.Namespace) -> dict:
  """Encodes args.input into the store args.out (resuming it); returns the summary."""
  num_lines, digest = scan_input(args.input)
  spec = parse_layers(args.layers)
  settings = {"init": args.init, "input": str(args.input), "input_sha256": digest, "words": args.words,
              "layers": args.layers, "pooling": args.pooling, "dtype": args.dtype, "compute_dtype": args.compute_dtype,
              "max_length": args.max_length, "stride": args.stride, "batch_size": args.batch_size,
              "buckets": list(args.buckets), "lines_per_shard": args.lines_per_shard}
  embedder = Embedder.from_init(args.init, max_length=args.max_length, batch_size=args.batch_size,
                                buckets=args.buckets, dtype=args.compute_dtype, stride=args.stride,
                                transfer_dtype=args.dtype, chunk_size=args.lines_per_shard)
  feature_shape = embedder.feature_shape(spec)
  first = store.open_store(args.out, settings)
  num_shards = -(-num_lines // args.lines_per_shard)
  blocks: dict[int, _Block] = {}

  def sentences() -> Iterator[list[str]]:
    lines = itertools.islice(numbered_lines(args.input), first * args.lines_per_shard, None)
    for number in itertools.count(first):
      block = list(itertools.islice(lines, args.lines_per_shard))
      if not block:
        return
      numbers, texts = [n for n, _ in block], [text for _, text in block]
      words = [text.split() for text in texts] if args.words else embedder.split_words(texts)
      entries = _rows(embedder, numbers, words, args.pooling)
      offsets = np.cumsum([0] + [len(e) for e in entries])
      writer = store.ShardWriter(args.out, number, int(offsets[-1]), feature_shape, TRANSFER_DTYPES[args.dtype])
      blocks[number] = _Block(writer, offsets, [e for line in entries for e in line], len(block))
      yield from words

  start, committed, rows = time.perf_counter(), first, 0
  progress = tqdm.tqdm(total=num_lines - first * args.lines_per_shard, unit="line", file=sys.stderr,
                       disable=args.quiet)
  for index, vectors in embedder.iter_encode_words(sentences(), layers=spec, pooling=args.pooling):
    block = blocks[first + index // args.lines_per_shard]
    block.writer.put(int(block.offsets[index % args.lines_per_shard]), vectors)
    block.remaining -= 1
    rows += len(vectors)
    progress.update(1)
    while committed in blocks and not blocks[committed].remaining:  # Shards are committed in order.
      done = blocks.pop(committed)
      done.writer.commit(done.entries)
      committed += 1
  progress.close()
  seconds = time.perf_counter() - start
  shard_rows = [store.shard_rows(store.shard_path(args.out, k)) for k in range(num_shards)]
  summary = {"out": str(args.out), "lines": num_lines, "rows": sum(shard_rows), "shards": num_shards,
             "resumed_at_shard": first, "seconds": round(seconds, 2),
             "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None}
  store.write_meta(args.out, {"settings": settings, "complete": True, "feature_shape": list(feature_shape),
                              "num_layers": embedder.num_layers, "hidden_size": embedder.hidden_size,
                              "lines": num_lines, "rows": sum(shard_rows), "shard_rows": shard_rows})
  return summary


def parser() -> argparse.ArgumentParser:
  root = cli.ArgumentParser(prog="python -m tasks.embeddings.embed", description=__doc__.split("\n")[0])
  root.add_argument("--init", required=True, help='checkpoint: "hf:<name or dir>" or "run:<workdir>"')
  root.add_argument("--input", required=True, type=Path, help="UTF-8 text file, one text per line")
  root.add_argument("--out", required=True, type=Path, help="store directory (created; resumed if it holds one)")
  root.add_argument("--words", action="store_true", help="lines are whitespace-separated pre-tokenized words")
  root.add_argument("--layers", default="last4_mean", help="layer spec (tasks.embeddings.layers); default last4_mean")
  root.add_argument("--pooling", default="mean", choices=("mean", "first", "subword"))
  root.add_argument("--dtype", default="float32", choices=sorted(TRANSFER_DTYPES), help="stored dtype")
  root.add_argument("--compute-dtype", default="float32", choices=("float32", "bfloat16"))
  root.add_argument("--max-length", type=cli.integer(3), default=128, help="subwords per window incl. [CLS] and [SEP]")
  root.add_argument("--stride", type=cli.integer(1), default=None,
                    help="window stride for longer lines (default: half)")
  root.add_argument("--batch-size", type=cli.integer(1), default=64)
  root.add_argument("--buckets", type=cli.integers(1), default=(16, 32, 64, 128),
                    help="padded lengths, comma-separated (one jit shape each)")
  root.add_argument("--lines-per-shard", type=cli.integer(1), default=4096)
  root.add_argument("--quiet", action="store_true", help="no progress bar")
  return root


def main(argv: Sequence[str] | None = None) -> None:
  """Encodes the file (module docstring); prints the JSON summary last."""
  args = parser().parse_args(argv)
  if args.lines_per_shard < 1:
    raise errors.UserError(f"--lines-per-shard {args.lines_per_shard} must be positive")
  print(json.dumps(encode_file(args)))


if __name__ == "__main__":
  errors.run(main)
