"""Embeddings on disk for corpora larger than memory: `.npy` shards, an index of what each row is, and metadata.

A store directory holds `shard-00000.npy`, `shard-00001.npy`, ... (rows [n, ...] float32 or float16, in input
order), `index.jsonl` (one JSON object per row, in row order: shard, row within the shard, input line, word index,
word) and `meta.json` (how the vectors were made, and the counts once complete). Shard k covers a fixed block of
input lines, so a run interrupted at any point resumes after its last complete shard: a shard is written under a
temporary name and renamed only once complete, its index lines written just before the rename (a resume cuts the
index back to the rows of the complete shards).
"""

import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from encoder import errors, files
from encoder.array_files import load_npy
from encoder.files import atomic_write

INDEX = "index.jsonl"
META = "meta.json"
PARTIAL = ".partial"


def shard_path(directory: str | os.PathLike, number: int) -> Path:
  """The path of shard `number`."""
  return Path(directory) / f"shard-{number:05d}.npy"


def complete_shards(directory: str | os.PathLike) -> int:
  """How many shards 0, 1, ... exist in a row (those a resume keeps)."""
  count = 0
  while shard_path(directory, count).is_file():
    count += 1
  return count


def read_meta(directory: str | os.PathLike) -> dict:
  """The store's meta.json."""
  return files.read_json(Path(directory) / META)


def write_meta(directory: str | os.PathLike, meta: dict) -> None:
  """Writes meta.json (atomically: a temporary file renamed)."""
  atomic_write(Path(directory) / META, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def open_store(directory: str | os.PathLike, settings: dict) -> int:
  """Prepares `directory` for writing with these settings; returns the first shard to write (0 for a new store).

  A directory already holding a store made with the same settings is resumed: shards after the complete ones and
  partial files are removed, the index is cut back to the complete shards' rows. Other settings, or a path that
  is not a directory, raise UserError.
  """
  if files.is_remote(directory):  # Not through pathlib, which would make gs://b a local gs:/b.
    raise errors.UserError(f"--out {directory}: the store is written locally (its shards are appended to); give a "
                           "local --out and copy it to the bucket afterwards, e.g. gcloud storage cp -r")
  directory = Path(directory)
  if directory.exists() and not directory.is_dir():
    raise errors.UserError(f"{directory}: --out must be a directory for the store, found a file; give another --out")
  if (directory / META).is_file():
    found = read_meta(directory).get("settings")
    if found != settings:
      changed = sorted(k for k in set(found or {}) | set(settings) if (found or {}).get(k) != settings.get(k))
      raise errors.UserError(f"{directory / META}: the store there was made with other settings ({', '.join(changed)} "
                       "differ); give the same options to resume it, or another --out")
  elif directory.is_dir() and any(directory.iterdir()):
    raise errors.UserError(f"{directory}: the directory exists, is not empty and holds no {META}; give a new or "
                           "empty --out")
  directory.mkdir(parents=True, exist_ok=True)
  keep = complete_shards(directory)
  for path in directory.iterdir():
    shard = re.fullmatch(r"shard-(\d+)\.npy", path.name)
    if path.name.endswith(PARTIAL) or (shard and int(shard.group(1)) >= keep):
      path.unlink()
  rows = sum(shard_rows(shard_path(directory, k)) for k in range(keep))
  _truncate_lines(directory / INDEX, rows)
  if keep == 0:
    write_meta(directory, {"settings": settings, "complete": False})
  return keep


def _truncate_lines(path: Path, lines: int) -> None:
  """Keeps the first `lines` lines of a text file (creating it empty if absent)."""
  if not path.exists():
    path.write_bytes(b"")
    return
  with open(path, "rb+") as handle:
    for _ in range(lines):
      if not handle.readline():
        raise errors.UserError(f"{path}: has fewer lines than the complete shards have rows ({lines}); the store is "
                         "damaged: remove the directory and start again")
    handle.truncate()


def shard_rows(path: str | os.PathLike) -> int:
  """The number of rows of a .npy shard (its header only)."""
  return int(load_npy(path, mmap=True).shape[0])


class ShardWriter:
  """One shard being filled: rows at known offsets in any order, then committed (index lines, then the rename)."""

  def __init__(self, directory: str | os.PathLike, number: int, rows: int, feature_shape: Sequence[int], dtype):
    self.directory, self.number = Path(directory), number
    self.path = shard_path(directory, number)
    self.partial = self.path.with_suffix(".npy" + PARTIAL)
    self.array = np.lib.format.open_memmap(self.partial, mode="w+", dtype=dtype, shape=(rows, *feature_shape))

  def put(self, offset: int, vectors: np.ndarray) -> None:
    """Writes vectors [n, ...] at rows offset..offset+n."""
    self.array[offset:offset + len(vectors)] = vectors

  def commit(self, entries: Sequence[dict]) -> None:
    """Appends the rows' index entries (one per row, in row order) and moves the shard into place."""
    if len(entries) != len(self.array):
      raise ValueError(f"shard {self.number}: {len(entries)} index entries for {len(self.array)} rows")
    self.array.flush()
    del self.array
    lines = "".join(json.dumps({"shard": self.number, "row": row, **entry}, ensure_ascii=False) + "\n"
                    for row, entry in enumerate(entries))
    with open(self.directory / INDEX, "a", encoding="utf-8") as index:
      index.write(lines)
    os.replace(self.partial, self.path)


def read_index(directory: str | os.PathLike) -> Iterator[dict]:
  """The index entries of a store, one per row in row order."""
  with open(Path(directory) / INDEX, encoding="utf-8") as index:
    for line in index:
      yield json.loads(line)


def iter_shards(directory: str | os.PathLike) -> Iterator[np.ndarray]:
  """Each complete shard, memory-mapped read-only, in order."""
  for number in range(complete_shards(directory)):
    yield load_npy(shard_path(directory, number), mmap=True)


def load_vectors(directory: str | os.PathLike) -> np.ndarray:
  """Every row of a store in one array in memory (for stores that fit)."""
  shards = list(iter_shards(directory))
  if not shards:
    raise FileNotFoundError(f"{directory}: no shard-00000.npy; not an embeddings store (python -m "
                            "tasks.embeddings.embed)")
  return np.concatenate(shards)
