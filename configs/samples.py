"""The data that ships with the package, so that the demo, the runlocal presets and their tests need no data
directory: objectives/sample_corpus (whole WikiText-2 articles, CC BY-SA 3.0) and tasks/sample_ud (UD English-EWT
sentences, CC BY-SA 4.0)."""

from pathlib import Path

from encoder import errors

_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = _ROOT / "objectives" / "sample_corpus"
SAMPLE_FILES = {"train": "wiki.train.txt", "heldout": "wiki.heldout.txt"}
UD_SAMPLE_DIR = _ROOT / "tasks" / "sample_ud"
UD_SAMPLE_FILES = {"train": "en_ewt-sample-train.conllu", "heldout": "en_ewt-sample-test.conllu"}


def _sample(directory: Path, files: dict[str, str], split: str, package: str) -> Path:
  if split not in files:
    raise errors.ConfigError(f"unknown sample split {split!r}; choose one of {sorted(files)}")
  path = directory / files[split]
  if not path.is_file():
    raise FileNotFoundError(f"{path} is missing: the sample ships with the package (the package {package}); "
                            "reinstall with `pip install -e .`")
  return path


def sample_file(split: str) -> Path:
  """The packaged sample corpus file of `split` ("train" or "heldout"); a clear error when the install lacks it."""
  return _sample(SAMPLE_DIR, SAMPLE_FILES, split, "objectives.sample_corpus")


def ud_sample_file(split: str) -> Path:
  """The packaged UD English-EWT sample of `split` ("train" or "heldout"); a clear error when the install lacks it."""
  return _sample(UD_SAMPLE_DIR, UD_SAMPLE_FILES, split, "tasks.sample_ud")
