"""Arrays read from files that came from outside the process (.npy, .npz): never unpickled, and a file numpy cannot
read (objects, truncated, not an array file) is one `ArrayFileError` naming the file, not numpy's message without
it."""

import io
import os
import zipfile
from collections.abc import Sequence

import numpy as np

from encoder import errors, files

# What np.load raises for a file it cannot read: objects without allow_pickle, a short or empty file, a broken zip.
_UNREADABLE = (ValueError, EOFError, zipfile.BadZipFile)


class ArrayFileError(errors.UserError):
  """An .npy / .npz file that is not a readable array file of numbers or strings, or lacks an array."""


def _unreadable(path: str | os.PathLike, found: str) -> ArrayFileError:
  """The error for a file numpy cannot read (or of the other kind), with numpy's reason as what was found."""
  return ArrayFileError(f"{path}: expected a complete numpy array file without Python objects, found {found}; "
                        "write it again (or remove it, if it is a cache)")


def _reason(err: BaseException) -> str:
  """numpy's reason, on one line."""
  return f"{type(err).__name__}: {' '.join(str(err).split())}"


def load_npy(path: str | os.PathLike, *, mmap: bool = False) -> np.ndarray:
  """The array of an .npy file, local or gs:// (memory-mapped read-only with `mmap`, when local)."""
  try:
    if files.is_remote(path):
      array = np.load(io.BytesIO(files.path(path).read_bytes()), allow_pickle=False)
    else:
      array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
  except _UNREADABLE as err:
    raise _unreadable(path, _reason(err)) from None
  if not isinstance(array, np.ndarray):
    raise _unreadable(path, "an .npz archive (several arrays), not one .npy array")
  return array


def load_npz(path: str | os.PathLike, names: Sequence[str]) -> dict[str, np.ndarray]:
  """The named arrays of an .npz file, each read in full (so a damaged member fails here, naming the file)."""
  try:
    data = np.load(path, allow_pickle=False)
  except _UNREADABLE as err:
    raise _unreadable(path, _reason(err)) from None
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise _unreadable(path, "one .npy array, not an .npz archive")
  with data:
    missing = sorted(set(names) - set(data.files))
    if missing:
      raise ArrayFileError(f"{path}: expected an .npz archive with the arrays {sorted(names)}, found "
                           f"{sorted(data.files)} (without {missing})")
    try:
      return {name: data[name] for name in names}
    except _UNREADABLE as err:
      raise _unreadable(path, _reason(err)) from None
