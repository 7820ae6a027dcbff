"""Paths and atomic writes for local files and gs:// objects alike (so a run directory can live in a bucket).

`path(p)` is the one way a workdir, corpus or output location becomes a path object: an `etils.epath.Path`, which
is pathlib for local paths and gcsfs for `gs://` URLs (no TensorFlow). `pathlib.Path("gs://b/x")` would silently
make the local folder `gs:/b/x`; `path` refuses that form, and `absolute` leaves URLs alone (epath's `absolute()`
prefixes them with the working directory).

Atomic writes: a file is either its old self or completely written, never half (a killed run, a full disk).
Locally the data goes to a temporary file beside the target (named after it and this process, ending in .tmp, so
processes sharing a directory never mix their writes) that replaces the target once complete. On object storage an
upload is atomic by itself (an object appears only once its upload completes), so the data is written to a local
temporary file and uploaded as one object.
"""

import contextlib
import os
import pathlib
import re
import shutil
import tempfile
from typing import Iterator

from etils import epath

from encoder import errors

Path = epath.Path  # The type every workdir and data path has (pathlib's API, gs:// included).
_LOST_SLASH = re.compile(r"^(gs|s3|az|hf):/(?!/)")


def path(p: str | os.PathLike) -> epath.Path:
  """A local path or gs:// URL as a Path; `gs:/bucket/...` (a URL whose `//` pathlib collapsed) is a UserError."""
  text = os.fspath(p)
  if _LOST_SLASH.match(text):
    fixed = _LOST_SLASH.sub(r"\1://", text)
    raise errors.UserError(f"{text}: a gs:// URL that lost a slash (pathlib.Path('gs://...') makes that); "
                           f"expected {fixed}")
  return epath.Path(text)


def is_remote(p: str | os.PathLike) -> bool:
  """Whether `p` is an object-store URL (gs://...) rather than a local path."""
  return "://" in os.fspath(p)


def absolute(p: str | os.PathLike) -> epath.Path:
  """`p` made absolute against the working directory when local; a URL as it is."""
  p = path(p)
  return p if is_remote(p) else p.absolute()


def _filesystem(url: str):
  """The fsspec filesystem of a URL and the URL's path in it."""
  import fsspec  # pylint: disable=import-outside-toplevel (only for URLs)
  return fsspec.core.url_to_fs(url)


def move(source: str | os.PathLike, destination: str | os.PathLike) -> None:
  """Moves a file or directory tree (on object storage: copies every object, then deletes the source)."""
  source, destination = path(source), path(destination)
  if is_remote(source) != is_remote(destination):
    raise ValueError(f"move: {source} and {destination} must both be local or both remote")
  if not is_remote(source):
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(os.fspath(source), os.fspath(destination))
    return
  fs, source_path = _filesystem(os.fspath(source))
  fs.copy(source_path, _filesystem(os.fspath(destination))[1], recursive=True)
  fs.rm(source_path, recursive=True)


def upload(local: str | os.PathLike, target: str | os.PathLike) -> None:
  """Copies a local file to a gs:// URL as one object (it appears complete or not at all)."""
  fs, remote = _filesystem(os.fspath(path(target)))
  fs.put_file(os.fspath(local), remote)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[pathlib.Path]:
  """A local temporary path to write `target`'s content to (by any writer); moved onto `target` (uploaded as one
  object, for a URL) when the block ends, removed if it fails."""
  target = path(target)
  if is_remote(target):
    with tempfile.TemporaryDirectory(prefix="encoderlab-upload-") as folder:
      temporary = pathlib.Path(folder) / target.name
      yield temporary
      upload(temporary, target)
    return
  temporary = pathlib.Path(target.with_name(f"{target.name}.{os.getpid()}.tmp"))
  try:
    yield temporary
    os.replace(temporary, target)
  finally:
    temporary.unlink(missing_ok=True)


def atomic_write(target: str | os.PathLike, data: str | bytes) -> None:
  """Writes `data` (text as UTF-8, or bytes) to `target` atomically."""
  target = path(target)
  payload = data.encode("utf-8") if isinstance(data, str) else data
  if is_remote(target):  # One upload from memory: the object appears complete or not at all.
    target.write_bytes(payload)
    return
  with atomic_path(target) as temporary:
    temporary.write_bytes(payload)
