"""One tfds builder for every reader format (`tasks.readers.FORMATS`), prepared as array_record (no TensorFlow), and
`load_split`.

`load_split("conll2003", "validation")` reads the shared data once through `tasks.readers`, writes array_record files
under a cache directory (never the data directory), and returns random access to the split's records in file order.
Named datasets are builder configs; `custom(...)` makes one for any files. Split strings follow tfds
("train", "validation", "test", "train[:10%]", ...). Bump `VERSION` when a reader's output changes. Preparing prints
one line per split ("prepared sick/train: 4,439 examples in 3.2 s") instead of tfds's progress bars; `read_file`
reads a split's file without tfds (what a check before preparation needs). What is stored of a record, and how it is
read back, is its format's record kind's (`tasks.readers.RecordKind`): nothing here knows a format.
"""

import contextlib
import dataclasses
import difflib
import fcntl
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tensorflow_datasets as tfds
from absl import logging as absl_logging

from encoder import errors, paths
from tasks import readers

DEFAULT_CACHE_DIR = Path("~/.cache/encoderlab/tfds")


class SplitError(errors.UserError):
  """A split the dataset does not have, or a slice beyond its examples; the message names the dataset's splits."""


@dataclasses.dataclass(eq=False)
class DatasetConfig(tfds.core.BuilderConfig):
  """A dataset: reader `format` (a key of `readers.FORMATS`), a file per split (relative to the data directory, or
  absolute), the reader's keyword `options`, and per-split overrides of them (`split_options`)."""
  format: str = "tsv"
  files: Mapping[str, str] = dataclasses.field(default_factory=dict)
  options: Mapping[str, object] = dataclasses.field(default_factory=dict)
  split_options: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)


def _ud(name: str, folder: str, prefix: str, tag_column: str = "upos") -> DatasetConfig:
  files = {split: f"{folder}/{prefix}-ud-{part}.conllu"
           for split, part in (("train", "train"), ("validation", "dev"), ("test", "test"))}
  return DatasetConfig(name=name, format="conllu", files=files, options={"tag_column": tag_column},
                       description=f"{folder} {tag_column.upper()} tagging")


_SICK_OPTIONS = {"text_a": "sentence_A", "text_b": "sentence_B", "label": "entailment_judgment",
                 "score": "relatedness_score", "label_names": ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")}
# Split names are train / validation / test: SST-2 dev, SICK trial and CoNLL testa are "validation".
PRESETS: dict[str, DatasetConfig] = {c.name: c for c in (
    DatasetConfig(name="conll2003", format="conll", options={"tag_column": "ner"}, description="CoNLL-2003 NER, IOB2",
                  files={"train": "conll2003/bio/train.txt", "validation": "conll2003/bio/valid.txt",
                         "test": "conll2003/bio/test.txt"}),
    DatasetConfig(name="conll2003_iob1", format="conll", options={"tag_column": "ner"},
                  description="CoNLL-2003 NER, original IOB1 tags (convert with tasks.scoring.tag_schemes)",
                  files={"train": "conll2003/iob1/eng.train", "validation": "conll2003/iob1/eng.testa",
                         "test": "conll2003/iob1/eng.testb"}),
    DatasetConfig(name="sst2", format="tsv", description="GLUE SST-2 sentiment; test has no labels (label None)",
                  files={"train": "sst2/train.tsv", "validation": "sst2/dev.tsv", "test": "sst2/test.tsv"},
                  options={"text_a": "sentence", "label": "label", "label_names": ("0", "1")},
                  split_options={"test": {"label": None, "label_names": None}}),
    DatasetConfig(name="sick", format="tsv", options=_SICK_OPTIONS,
                  description="SICK 3-way entailment (label) and 1-5 relatedness (score)",
                  files={"train": "sick/SICK_train.txt", "validation": "sick/SICK_trial.txt",
                         "test": "sick/SICK_test_annotated.txt"}),
    # SQuAD v1.1: 44 train articles, the last 4 held out as the dev split (recipe choice); the official dev set is
    # the test split, as in every SQuAD paper.
    DatasetConfig(name="squad", format="squad", description="SQuAD v1.1 extractive QA (44 train articles)",
                  files={"train": "squad_v1.1/train-44-articles.json",
                         "validation": "squad_v1.1/train-44-articles.json", "test": "squad_v1.1/dev-v1.1.json"},
                  split_options={"train": {"articles": ":40"}, "validation": {"articles": "40:"}}),
    DatasetConfig(name="mrpc", format="tsv", description="MRPC paraphrase pairs (GLUE train/dev, the corpus's test)",
                  files={"train": "mrpc/train.tsv", "validation": "mrpc/dev.tsv", "test": "mrpc/test.tsv"},
                  options={"text_a": "#1 String", "text_b": "#2 String", "label": "Quality",
                           "label_names": ("0", "1")}),
    # GENIA's biomedical entities, nested (genia_nested/SOURCE.md): a 1,400 / 227 sample, no test split; genia_outer
    # keeps the outermost entities only (flat: what a BIO tagger can learn).
    DatasetConfig(name="genia_nested", format="spans", description="GENIA nested NER sample (spans nest)",
                  files={"train": "genia_nested/train.jsonl", "validation": "genia_nested/dev.jsonl"}),
    DatasetConfig(name="genia_outer", format="spans", options={"outermost": True},
                  description="GENIA nested NER sample, outermost entities only (flat)",
                  files={"train": "genia_nested/train.jsonl", "validation": "genia_nested/dev.jsonl"}),
    _ud("ud_ewt_upos", "ud_english_ewt", "en_ewt"),
    _ud("ud_ewt_xpos", "ud_english_ewt", "en_ewt", "xpos"),
    _ud("ud_vi_vtb_upos", "ud_multilingual/UD_Vietnamese-VTB", "vi_vtb"),
    _ud("ud_fr_sequoia_upos", "ud_multilingual/UD_French-Sequoia", "fr_sequoia"),
    _ud("ud_tr_imst_upos", "ud_multilingual/UD_Turkish-IMST", "tr_imst"),
)}


def custom(format: str, files: Mapping[str, str | os.PathLike],  # noqa: A002  (DatasetConfig's field name)
           **options) -> DatasetConfig:
  """A config for arbitrary files, e.g. `custom("tsv", {"train": "rte/train.tsv"}, text_a=1, text_b=2, label=3)`.

  Paths are made absolute; the name hashes format, paths, options and each file's size and mtime, so editing a
  file prepares it again instead of reading a stale cache.
  """
  if format not in readers.FORMATS:
    raise errors.ConfigError(f"format {format!r} is not one of {sorted(readers.FORMATS)}")
  absolute = {split: str(Path(path).expanduser().resolve()) for split, path in files.items()}
  stamp = {split: (os.stat(path).st_size, os.stat(path).st_mtime_ns) for split, path in absolute.items()}
  key = json.dumps([format, absolute, options, stamp], sort_keys=True, default=str)
  return DatasetConfig(name=f"custom_{hashlib.sha1(key.encode()).hexdigest()[:16]}", format=format, files=absolute,
                       options=options, description=f"{format} files {absolute}")


def _feature(feature: Any) -> Any:
  """A record kind's plain feature (`tasks.readers.record_format`) as tfds's."""
  if isinstance(feature, dict):
    return {key: _feature(inner) for key, inner in feature.items()}
  if isinstance(feature, list):
    return tfds.features.Sequence(_feature(feature[0]))
  return {str: tfds.features.Text(), int: np.int32, bool: np.bool_}[feature]


def _plain(feature: Any, value: Any) -> Any:
  """A data-source value (bytes, numpy) as the stored field it was (str, int, bool, lists, dicts), by its feature."""
  if isinstance(feature, dict):
    return {key: _plain(inner, value[key]) for key, inner in feature.items()}
  if isinstance(feature, list) and isinstance(feature[0], dict):  # tfds gives a sequence of dicts as a dict of lists.
    columns = [_plain([inner], value[key]) for key, inner in feature[0].items()]
    return [dict(zip(feature[0], row)) for row in zip(*columns)]
  if isinstance(feature, list):
    return [_plain(feature[0], item) for item in value]
  return value.decode() if feature is str else feature(value)


def _decode(kind: readers.RecordKind, example: dict) -> dict:
  """A data-source example back to the reader's record (str, int, float, None)."""
  return kind.restore(_plain(kind.features, example))


class EncoderlabTasks(tfds.core.GeneratorBasedBuilder):
  """Reader records of a `DatasetConfig`'s files, one tfds split per file, in file order (no shuffling)."""
  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES: ClassVar[dict[str, str]] = {
      "1.0.0": "First version.", "1.1.0": "Classification records keep a score column (SICK relatedness)."}
  BUILDER_CONFIGS: ClassVar[list[DatasetConfig]] = list(PRESETS.values())
  # Nothing is downloaded, so no checksums file: without this, tfds 4.9.10 looks for one via `importlib_resources`,
  # which it imports but does not install on Python >= 3.9 (tensorflow/datasets#11212).
  code_path = None
  MANUAL_DOWNLOAD_INSTRUCTIONS = (f"Files are read from the data directory: ${paths.DATA_ENV}, ../shared/data, "
                                  "or `download_config.manual_dir`.")

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, description=self.builder_config.description,
                                 features=tfds.features.FeaturesDict(_feature(self._kind().features)),
                                 disable_shuffling=True)

  def _kind(self) -> readers.RecordKind:
    return readers.FORMATS[self.builder_config.format].records

  def _split_generators(self, dl_manager):
    root = dl_manager.manual_dir
    return {split: self._generate_examples(root / path, split) for split, path in self.builder_config.files.items()}

  def _generate_examples(self, path, split):
    config, started, count = self.builder_config, time.perf_counter(), 0
    store = self._kind().store
    for count, record in enumerate(readers.FORMATS[config.format].read(path, **_options(config, split)), start=1):
      yield count - 1, store(record)
    where = f"{config.name}/{split}" if config.name in PRESETS else f"{path} ({split})"
    # stderr: a command's stdout may be its data (predictions, JSON lines).
    print(f"prepared {where}: {count:,} examples in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)

  def _log_download_bytes(self) -> None:  # tfds's "Downloading and preparing dataset Unknown size ..." line.
    pass

  def _log_download_done(self) -> None:  # tfds's "... Subsequent calls will reuse this data." line.
    pass


def _options(config: DatasetConfig, split: str) -> dict[str, object]:
  """The reader's keyword options for one split's file."""
  return {**config.options, **config.split_options.get(split, {})}


class RecordSource:
  """Random access (len, [i]) to one prepared split as reader records; a grain `RandomAccessDataSource`.

  `config` is the dataset's `DatasetConfig` (e.g. `config.options["label_names"]` for the TSV presets).
  """

  def __init__(self, source, config: DatasetConfig):
    self._source, self.config, self._kind = source, config, readers.FORMATS[config.format].records

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index: int) -> dict:
    return _decode(self._kind, self._source[index])

  def __getitems__(self, indices) -> list[dict]:
    return [_decode(self._kind, example) for example in self._source.__getitems__(indices)]

  def __repr__(self) -> str:
    return f"RecordSource({self.config.name}, {self._source!r})"


def _config(dataset: str | DatasetConfig) -> DatasetConfig:
  if isinstance(dataset, DatasetConfig):
    return dataset
  if dataset not in PRESETS:
    close = difflib.get_close_matches(dataset, list(PRESETS), n=3)
    raise errors.ConfigError(f"unknown dataset {dataset!r}{f' (did you mean {close}?)' if close else ''}; known: "
                             f"{sorted(PRESETS)}, or a tasks.tfds_builders.custom(...) config")
  return PRESETS[dataset]


def _data_root(config: DatasetConfig, data_dir: str | os.PathLike | None) -> Path | None:
  """The directory relative file names are read from (None when every file is absolute: the data directory is then
  not read, and an empty one, such as a new fetch folder, is not handed to tfds, which refuses an empty manual_dir)."""
  if all(Path(path).is_absolute() for path in config.files.values()):
    return None
  root = Path(data_dir) if data_dir is not None else paths.data_dir()
  if root is None:
    raise FileNotFoundError(f"dataset {config.name!r} reads {dict(config.files)} under the data directory: set "
                            f"${paths.DATA_ENV} or pass data_dir=")
  return root


def record_kind(dataset: str | DatasetConfig) -> readers.RecordKind:
  """The kind of the records `dataset` holds (its format's): their fields and labels."""
  return readers.FORMATS[_config(dataset).format].records


def split_names(split: str) -> list[str]:
  """The named splits of a tfds split string: 'train[:64]+validation' -> ['train', 'validation']."""
  return [part.split("[")[0].strip() for part in split.split("+")]


def split_file(dataset: str | DatasetConfig, name: str, *, data_dir: str | os.PathLike | None = None) -> Path:
  """The file of one named split ('validation'; no slicing)."""
  config = _config(dataset)
  if name not in config.files:
    raise SplitError(f"split {name!r} is not a split of the data: expected one of {', '.join(config.files)} "
                     f"({', '.join(f'{split}: {path}' for split, path in config.files.items())})")
  root = _data_root(config, data_dir)
  return Path(config.files[name]) if root is None else root / config.files[name]


def read_file(dataset: str | DatasetConfig, name: str, *, data_dir: str | os.PathLike | None = None,
              label_names: Sequence[str] | None = None, **checks) -> Iterator[dict]:
  """The reader's records of one named split's file, read directly (no tfds): what preparing it would store. With
  `label_names` (labels, tags or span labels as the file writes them) another one is a ReaderError at its line; so
  is a record that fails the reader's `checks` (e.g. flat=True: overlapping spans)."""
  config = _config(dataset)
  data_format, options = readers.FORMATS[config.format], _options(config, name) | checks
  if label_names is not None and data_format.takes_label_names(options):
    options["label_names"] = tuple(label_names)
  return data_format.read(split_file(config, name, data_dir=data_dir), **options)


class _ExpectedWarnings(logging.Filter):
  """Drops tfds's warnings about what this module does on purpose: "Using custom data configuration:
  DatasetConfig(...)" (every custom dataset) and "Variant folder ... has no dataset_info.json" (while preparing)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(("Using custom data configuration", "Variant folder"))


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
  """tfds logs through absl; other warnings (real problems) still show."""
  logger, expected = absl_logging.get_absl_logger(), _ExpectedWarnings()
  logger.addFilter(expected)
  try:
    yield
  finally:
    logger.removeFilter(expected)


def _builder(config: DatasetConfig, cache_dir: str | os.PathLike | None) -> EncoderlabTasks:
  cache = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser().resolve()
  # A preset goes by name, so that a pickled data source (grain workers) rebuilds the builder with the class's config.
  with _quiet_absl():
    return EncoderlabTasks(config=config.name if PRESETS.get(config.name) is config else config, data_dir=cache,
                           file_format="array_record")


def is_prepared(dataset: str | DatasetConfig, *, cache_dir: str | os.PathLike | None = None) -> bool:
  """Whether `dataset`'s array_record files already exist under `cache_dir` (load_split will not read the data)."""
  builder = _builder(_config(dataset), cache_dir)
  with _quiet_absl():
    return builder.is_prepared()


def prepare(dataset: str | DatasetConfig, *, data_dir: str | os.PathLike | None = None,
            cache_dir: str | os.PathLike | None = None) -> EncoderlabTasks:
  """The builder for `dataset` with its array_record files prepared under `cache_dir` (a no-op when they exist)."""
  config = _config(dataset)
  root = _data_root(config, data_dir)
  cache = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser().resolve()
  if root is not None and cache.is_relative_to(root.resolve()):
    raise errors.ConfigError(f"cache_dir {cache} is inside the data directory {root}: choose another cache_dir")
  manual_dir = root if root is not None else Path(next(iter(config.files.values()))).parent
  with _quiet_absl(), _locked(cache / f"{config.name}.lock"):  # The builder reads what is prepared when made.
    builder = _builder(config, cache)
    if not builder.is_prepared():
      tfds.disable_progress_bar()  # One line per split instead (EncoderlabTasks._generate_examples).
      builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  return builder


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
  """An exclusive lock on `path` (created) while the block runs: two processes sharing a cache (two jobs, two test
  workers) prepare a dataset once, the second waiting, instead of racing to rename the same tfds directory."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)


def load_split(dataset: str | DatasetConfig, split: str, *, data_dir: str | os.PathLike | None = None,
               cache_dir: str | os.PathLike | None = None) -> RecordSource:
  """Random access to one split's records, e.g. `load_split("sick", "validation")`; prepares on first use."""
  builder = prepare(dataset, data_dir=data_dir, cache_dir=cache_dir)
  try:
    source = builder.as_data_source(split=split)
  except (KeyError, ValueError) as err:  # tfds: an unknown split name, or a slice beyond the split's examples.
    config = builder.builder_config
    files = [config.files[name] for name in split_names(split) if name in config.files]
    where = f"dataset {config.name!r}" if config.name in PRESETS or not files else ", ".join(files)
    sizes = ", ".join(f"{name} {info.num_examples:,}" for name, info in builder.info.splits.items())
    raise SplitError(f"split {split!r} of {where}: {str(err).strip(chr(39)).rstrip('.')} (its splits: {sizes})"
                     ) from None
  return RecordSource(source, builder.builder_config)
