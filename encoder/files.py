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
import functools
import json
import os
import pathlib
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from etils import epath

from encoder import errors

Path = epath.Path  # The type every workdir and data path has (pathlib's API, gs:// included).
_LOST_SLASH = re.compile(r"^(gs|s3|az|hf):/(?!/)")
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"  # A GCS emulator's http://host:port (gcsfs reads it too).
PROBE_SECONDS = 20.0  # How long `reachable` waits for GCS before it gives up (gcsfs alone retries for ~70 s).
_REMEDY = ("check the network, the bucket name and the credentials (gcloud auth application-default login, or "
           f"GOOGLE_APPLICATION_CREDENTIALS); for a local emulator set {EMULATOR_ENV}=http://host:port")


def path(p: str | os.PathLike) -> epath.Path:
  """A local path or gs:// URL as a Path; `gs:/bucket/...` (a URL whose `//` pathlib collapsed) and `gs:///...` (no
  bucket) are UserErrors."""
  text = os.fspath(p)
  if is_remote(text):
    _bucket_of(text)  # epath would read gs:///runs/x (an unset $BUCKET) as the bucket "runs".
  if _LOST_SLASH.match(text):
    fixed = _LOST_SLASH.sub(r"\1://", text)
    raise errors.UserError(f"{text}: a gs:// URL that lost a slash (pathlib.Path('gs://...') makes that); "
                           f"expected {fixed}")
  return epath.Path(text)


def reachable(p: str | os.PathLike) -> epath.Path:
  """`path(p)`, after checking once per bucket that a gs:// URL names a bucket that answers (network, credentials,
  the bucket exists) within PROBE_SECONDS: else one UserError naming the URL and the remedy, instead of a minute of
  retries ending in a traceback. Commands call it on every path a user gives them, before reading or writing."""
  result = path(p)
  if is_remote(result):
    url = os.fspath(result)
    problem = _bucket_problem(_bucket_of(url), *_endpoint())
    if problem:
      raise errors.UserError(f"{url}: {problem}; {_REMEDY}")
  return result


def _bucket_of(url: str) -> str:
  """The bucket of a gs:// URL; a URL without one (gs:///runs/x: an unset $BUCKET) is a UserError."""
  parts = urlsplit(url)
  if parts.scheme != "gs":
    raise errors.UserError(f"{url}: expected a local path or a gs:// URL (other object stores are not supported)")
  if not parts.netloc:
    raise errors.UserError(f"{url}: expected gs://<bucket>/<path>, found no bucket name after gs:// (an unset "
                           "variable, such as $BUCKET?)")
  return parts.netloc


def _endpoint() -> tuple[str, int]:
  """(host, port) GCS requests go to: the emulator's, else Google's."""
  emulator = os.environ.get(EMULATOR_ENV)
  if not emulator:
    return "storage.googleapis.com", 443
  parts = urlsplit(emulator if "://" in emulator else f"http://{emulator}")
  return parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)


@functools.cache
def _bucket_problem(bucket: str, host: str, port: int) -> str | None:
  """What keeps gs://bucket from being used through host:port, or None (asked once per process)."""
  try:  # DNS and TCP first: without a network gcsfs would retry for about a minute.
    socket.create_connection((host, port), timeout=PROBE_SECONDS / 4).close()
  except OSError as err:
    return f"cannot connect to {host}:{port} ({err.strerror or err})"
  outcome: list[BaseException | None] = []

  def ask() -> None:
    try:
      fs, _ = _filesystem(f"gs://{bucket}")
      fs.ls(bucket, detail=False)  # A page of objects: the bucket exists and these credentials may read it.
      outcome.append(None)
    except BaseException as err:  # noqa: BLE001  (re-raised in the caller's thread)
      outcome.append(err)

  worker = threading.Thread(target=ask, daemon=True)
  worker.start()
  worker.join(PROBE_SECONDS)
  if not outcome:
    return f"GCS ({host}:{port}) gave no answer within {PROBE_SECONDS:.0f} s"
  if isinstance(outcome[0], FileNotFoundError):
    return f"the bucket gs://{bucket} does not exist (or these credentials cannot see it)"
  if outcome[0] is not None:
    refusal = outcome[0]
    return f"GCS refused to list gs://{bucket} ({type(refusal).__name__}: {' '.join(str(refusal).split())[:200]})"
  return None


def read_json(p: str | os.PathLike) -> Any:
  """A JSON file's value; a file that is not JSON is a UserError `path:line: expected JSON, ...`."""
  text = path(p).read_text(encoding="utf-8")
  try:
    return json.loads(text)
  except json.JSONDecodeError as err:
    raise errors.UserError(f"{p}:{err.lineno}: expected JSON, found an error at column {err.colno} ({err.msg}); "
                           "the file is damaged or not this project's") from None


def read_json_lines(p: str | os.PathLike) -> list:
  """The values of a JSON-lines file (blank lines skipped); a bad line is a UserError `path:line: ...`."""
  values = []
  for number, line in enumerate(path(p).read_text(encoding="utf-8").splitlines(), 1):
    if line.strip():
      try:
        values.append(json.loads(line))
      except json.JSONDecodeError as err:
        raise errors.UserError(f"{p}:{number}: expected a JSON value per line, found an error at column {err.colno} "
                               f"({err.msg}); the file is damaged or not this project's") from None
  return values


def is_remote(p: str | os.PathLike) -> bool:
  """Whether `p` is an object-store URL (gs://...) rather than a local path."""
  return "://" in os.fspath(p)


def absolute(p: str | os.PathLike) -> epath.Path:
  """`p` made absolute against the working directory when local; a URL as it is."""
  resolved = path(p)
  return resolved if is_remote(resolved) else resolved.absolute()


def _filesystem(url: str):
  """The fsspec filesystem of a URL and the URL's path in it."""
  import fsspec  # pylint: disable=import-outside-toplevel (only for URLs)
  return fsspec.core.url_to_fs(url)


def move(source: str | os.PathLike, destination: str | os.PathLike) -> None:
  """Moves a file or directory tree (on object storage: copies every object, then deletes the source)."""
  origin, goal = path(source), path(destination)
  if is_remote(origin) != is_remote(goal):
    raise ValueError(f"move: {origin} and {goal} must both be local or both remote")
  if not is_remote(origin):
    goal.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(os.fspath(origin), os.fspath(goal))
    return
  fs, source_path = _filesystem(os.fspath(origin))
  fs.copy(source_path, _filesystem(os.fspath(goal))[1], recursive=True)
  fs.rm(source_path, recursive=True)


def upload(local: str | os.PathLike, target: str | os.PathLike) -> None:
  """Copies a local file to a gs:// URL as one object (it appears complete or not at all)."""
  fs, remote = _filesystem(os.fspath(path(target)))
  fs.put_file(os.fspath(local), remote)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[pathlib.Path]:
  """A local temporary path to write `target`'s content to (by any writer); moved onto `target` (uploaded as one
  object, for a URL) when the block ends, removed if it fails."""
  destination = path(target)
  if is_remote(destination):
    with tempfile.TemporaryDirectory(prefix="encoderlab-upload-") as folder:
      temporary = pathlib.Path(folder) / destination.name
      yield temporary
      upload(temporary, destination)
    return
  temporary = pathlib.Path(destination.with_name(f"{destination.name}.{os.getpid()}.tmp"))
  try:
    yield temporary
    os.replace(temporary, destination)
  finally:
    temporary.unlink(missing_ok=True)


def atomic_write(target: str | os.PathLike, data: str | bytes) -> None:
  """Writes `data` (text as UTF-8, or bytes) to `target` atomically."""
  destination = path(target)
  payload = data.encode("utf-8") if isinstance(data, str) else data
  if is_remote(destination):  # One upload from memory: the object appears complete or not at all.
    destination.write_bytes(payload)
    return
  with atomic_path(destination) as temporary:
    temporary.write_bytes(payload)
