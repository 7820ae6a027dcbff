"""The files of a HuggingFace checkpoint directory: config.json and safetensors weights (one file or shards with an
index) read and written, pickles refused, and the errors every part of encoder.hf raises, each naming the file."""

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.numpy

from encoder import errors
from encoder.files import atomic_path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"  # Sharded checkpoints: {"weight_map": {tensor: shard file}}.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
IGNORED_TENSORS = ("embeddings.position_ids",)  # A constant buffer (0..max_positions-1) some exports include.
_CONVERT_HINT = ("convert it once with `transformers`: AutoModel.from_pretrained(dir).save_pretrained(dir, "
                 "safe_serialization=True) (use the class named in config.json's architectures to keep its heads)")


class CheckpointError(errors.UserError):
  """A HuggingFace checkpoint that cannot be imported or exported; the message names the file and tensor."""


class MissingConfigError(CheckpointError):
  """The directory has no (readable) config.json."""


class PickledCheckpointError(CheckpointError):
  """Only pickled weights (pytorch_model.bin, *.pt, ...) were found; they are never loaded."""


class CorruptCheckpointError(CheckpointError):
  """A truncated or otherwise unreadable safetensors or JSON file."""


class UnsupportedArchitectureError(CheckpointError):
  """Not a BERT/ELECTRA encoder we can represent (model_type, position embeddings, activation, decoder, untied
  head)."""


class MissingTensorError(CheckpointError):
  """A tensor our model needs is absent from the checkpoint."""


class UnexpectedTensorError(CheckpointError):
  """The checkpoint holds tensors we do not know how to use."""


class ShapeMismatchError(CheckpointError):
  """A tensor's shape disagrees with config.json."""


def checked_directory(directory: str | os.PathLike) -> Path:
  """`directory` as a Path once it is a directory; a file (pickled weights above all) or nothing there is refused."""
  directory = Path(directory)
  if directory.is_file():
    kind = PickledCheckpointError if directory.suffix in PICKLE_SUFFIXES else CheckpointError
    raise kind(f"{directory} is a file; pass the checkpoint directory holding {CONFIG_FILE} and {WEIGHTS_FILE}"
               + (f" ({_CONVERT_HINT})" if kind is PickledCheckpointError else ""))
  if not directory.is_dir():
    raise MissingConfigError(f"{directory} is not a directory: expected a HuggingFace checkpoint directory")
  return directory


def read_config(directory: Path) -> tuple[dict[str, Any], str]:
  """(directory's config.json as a dict, its path for messages)."""
  path = directory / CONFIG_FILE
  if not path.is_file():
    raise MissingConfigError(f"{path} not found: a HuggingFace checkpoint directory needs {CONFIG_FILE} beside "
                             f"{WEIGHTS_FILE}")
  try:
    hf_config = json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as err:
    raise CorruptCheckpointError(f"{path}:{err.lineno}: expected JSON, found an error at column {err.colno} "
                                 f"({err.msg})") from err
  except UnicodeDecodeError as err:
    raise CorruptCheckpointError(f"{path}: expected UTF-8 JSON, found byte {err.object[err.start]:#x} at offset "
                                 f"{err.start}") from err
  if not isinstance(hf_config, dict):
    raise CorruptCheckpointError(f"{path}: expected a JSON object, found a {type(hf_config).__name__}")
  return hf_config, str(path)


def weight_files(directory: Path) -> list[Path]:
  """The safetensors file(s) of a checkpoint; pickles are refused with the conversion recipe."""
  if (directory / WEIGHTS_FILE).is_file():
    return [directory / WEIGHTS_FILE]
  index = directory / INDEX_FILE
  if index.is_file():
    try:
      return [directory / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    except (json.JSONDecodeError, KeyError, AttributeError) as err:
      raise CorruptCheckpointError(f"{index}: not a safetensors index with a 'weight_map' ({err!r})") from err
  pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
  if pickles:
    raise PickledCheckpointError(
        f"{directory} has only pickled weights ({', '.join(pickles)}), which are never loaded (unpickling can run "
        f"arbitrary code); {WEIGHTS_FILE} is required: {_CONVERT_HINT}")
  raise MissingTensorError(f"{directory / WEIGHTS_FILE} not found (nor {INDEX_FILE}): no weights to import")


def source_of(directory: Path, files: list[Path]) -> str:
  """What messages name as the weights: the one file, or the shards' index."""
  return str(files[0]) if len(files) == 1 else str(directory / INDEX_FILE)


def read_tensors(files: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """{canonical name: array} and {canonical name: 'original name' in file} over all files."""
  found: dict[str, np.ndarray] = {}
  origin: dict[str, str] = {}
  for path in files:
    try:
      tensors = safetensors.numpy.load_file(path)
    except FileNotFoundError as err:
      raise MissingTensorError(f"{path} (listed in {INDEX_FILE}) not found") from err
    except (safetensors.SafetensorError, OSError) as err:
      raise CorruptCheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt: {err}); "
                                   "copy or export it again") from err
    for name, array in tensors.items():
      canonical = _canonical(name)
      if canonical in IGNORED_TENSORS:
        continue
      if canonical in found:
        raise UnexpectedTensorError(f"{path}: tensor {name!r} duplicates {origin[canonical]} (same weight with and "
                                    "without the 'bert.' prefix or as gamma/beta and weight/bias)")
      found[canonical], origin[canonical] = array, f"{name!r} in {path}"
  return found, origin


def _canonical(name: str) -> str:
  """Drop BertFor*'s "bert." (ModernBertFor*'s "model.", ElectraFor*'s "electra.") prefix and rename TF-era LayerNorm
  gamma/beta to weight/bias."""
  name = name.removeprefix("bert.").removeprefix("model.").removeprefix("electra.")
  stem, _, leaf = name.rpartition(".")
  if stem.endswith("LayerNorm") and leaf in ("gamma", "beta"):
    return f"{stem}.{'weight' if leaf == 'gamma' else 'bias'}"
  return name


def write(directory: Path, state: Mapping[str, np.ndarray], hf_config: Mapping[str, Any],
          tokenizer_files: Iterable[str | os.PathLike] | None, files: Mapping[str, str]) -> Path:
  """config.json, model.safetensors, copies of tokenizer_files and {name: text} files, each written to a temporary
  name first and renamed into place only once all are complete."""
  sources = [Path(source) for source in tokenizer_files or ()]
  own = (CONFIG_FILE, WEIGHTS_FILE, INDEX_FILE)
  clashes = [str(name) for name in [*(source.name for source in sources), *files] if name in own]
  if clashes:
    raise CheckpointError(f"tokenizer_files/files {clashes} would overwrite the checkpoint's own files; pass only "
                          "tokenizer files (vocab.txt, tokenizer.json, ...) and files beside them")
  directory.mkdir(parents=True, exist_ok=True)
  names = dict.fromkeys([CONFIG_FILE, WEIGHTS_FILE, *(source.name for source in sources), *files])
  with contextlib.ExitStack() as stack:  # Leaving it swaps the complete files in, config.json (entered first) last.
    staged = {name: stack.enter_context(atomic_path(directory / name)) for name in names}
    for source in sources:
      if source.name not in files:
        shutil.copyfile(source, staged[source.name])
    for name, text in files.items():
      staged[name].write_text(text, encoding="utf-8")
    safetensors.numpy.save_file(dict(state), staged[WEIGHTS_FILE], metadata={"format": "pt"})
    staged[CONFIG_FILE].write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    for temporary in staged.values():
      with open(temporary, "rb") as f:
        os.fsync(f.fileno())
  return directory
