"""Where the shared real datasets live: `$ENCODERLAB_DATA`, else `../shared/data` if present."""

import os
from pathlib import Path

DATA_ENV = "ENCODERLAB_DATA"
_REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path | None:
  """The data directory, or None when it is not on this machine (a user's fresh clone)."""
  if os.environ.get(DATA_ENV):
    return Path(os.environ[DATA_ENV])
  for candidate in (Path.cwd() / ".." / "shared" / "data", _REPO_ROOT / ".." / "shared" / "data"):
    if candidate.is_dir():
      return candidate.resolve()
  return None


def data_file(relative: str) -> Path:
  """A file under the data directory; a clear error when the directory or file is absent."""
  root = data_dir()
  if root is None:
    raise FileNotFoundError(
        f"no data directory: set ${DATA_ENV} or place the shared data at ../shared/data (needed: {relative})")
  path = root / relative
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist (data directory {root}, set by ${DATA_ENV} or ../shared/data)")
  return path
