"""Where the real datasets live: `$ENCODERLAB_DATA`, else `../shared/data` if present, else the folder that
`python -m tasks.data fetch` fills by default (~/.cache/encoderlab/data, under $XDG_CACHE_HOME when set). On the
ground floor, beside encoder.files, so that the data readers of objectives/ and tasks/ need nothing above them."""

import os
from pathlib import Path

from encoder import files

DATA_ENV = "ENCODERLAB_DATA"
_REPO_ROOT = Path(__file__).resolve().parents[1]
FETCH_HINT = "python -m tasks.data fetch all"  # The one command that lays the presets' data out (docs/data.md).


def fetch_dir() -> Path:
  """Where the data is fetched to and looked for last: $ENCODERLAB_DATA, else ~/.cache/encoderlab/data (the cache
  folder is $XDG_CACHE_HOME when set)."""
  if os.environ.get(DATA_ENV):
    return Path(os.environ[DATA_ENV])
  return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "encoderlab" / "data"


def data_dir() -> Path | None:
  """The data directory, or None when it is not on this machine (a user's fresh clone before any fetch)."""
  if os.environ.get(DATA_ENV):
    return Path(os.environ[DATA_ENV])
  for candidate in (Path.cwd() / ".." / "shared" / "data", _REPO_ROOT / ".." / "shared" / "data", fetch_dir()):
    if candidate.is_dir():
      return candidate.resolve()
  return None


def data_file(relative: str) -> Path:
  """A file under the data directory; a clear error when the directory or file is absent."""
  root = data_dir()
  if root is None:
    raise FileNotFoundError(
        f"no data directory (needed: {relative}): run `{FETCH_HINT}` (to {fetch_dir()}), or set ${DATA_ENV} to a "
        "directory laid out as docs/data.md says")
  path = root / relative
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist (data directory {root}, from ${DATA_ENV}, ../shared/data or "
                            f"{fetch_dir()}; `{FETCH_HINT}` fetches it)")
  return path


def resolve_files(spec: str, what: str) -> list[files.Path]:
  """'a.txt,wikitext-2/raw/wiki.valid.raw' -> paths (absolute, gs:// or existing as given, else under the
  data dir)."""
  found = []
  for name in filter(None, (part.strip() for part in spec.split(","))):
    path = files.reachable(name)
    if path.is_absolute() or path.exists():
      if not path.is_file():
        raise FileNotFoundError(f"{what}: {path} does not exist (config.data.{what})")
      found.append(path)
    else:
      try:
        found.append(data_file(name))
      except FileNotFoundError as err:
        raise FileNotFoundError(f"{what}: {err} (config.data.{what})") from None
  return found


def resolve_prepared(spec: str) -> files.Path:
  """config.data.prepared -> the directory (absolute, gs://, relative to the working directory, else under the data
  directory: `tpu_pod --data gs://bucket/data` copies that folder's contents to every worker's $ENCODERLAB_DATA,
  where `corpus` names the copy of gs://bucket/data/corpus)."""
  path = files.reachable(spec)
  root = data_dir()
  if not (path.is_absolute() or files.is_remote(spec) or path.exists()) and root is not None:
    path = files.path(root / spec)
  if not path.is_dir():
    raise FileNotFoundError(f"prepared: {path} is not a directory written by objectives.prepare (config.data.prepared)")
  return path
