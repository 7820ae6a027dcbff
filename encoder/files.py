"""Atomic file writes: a file is either its old self or completely written, never half (a killed run, a full disk).

The data goes to a temporary file beside the target (named after it and this process, ending in .tmp, so processes
sharing a directory never mix their writes) that replaces the target only once complete.
"""

import contextlib
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
  """A temporary path to write `path`'s content to (by any writer); moved onto `path` when the block ends, removed
  if it fails."""
  path = Path(path)
  temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
  try:
    yield temporary
    os.replace(temporary, path)
  finally:
    temporary.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
  """Writes `data` (text as UTF-8, or bytes) to `path` atomically."""
  with atomic_path(path) as temporary:
    if isinstance(data, str):
      temporary.write_text(data, encoding="utf-8")
    else:
      temporary.write_bytes(data)
