"""Fine-tuning data in one pass: files -> records -> checked -> encoded -> batched.

`load(config)` runs the stages below, each one function called once, in this order (what follows reads no config):
`source_of` (config.task -> the dataset and the split of each role), `read` (the splits' records: the files are
parsed and checked before tfds prepares them, `check_files`, then the prepared splits are read), `family_of` (the
task's family with what it learns from the training records: its labels), `check` (every record against the task:
a record the family cannot use or a label outside its labels is one error naming the file and line), `split_of`
(records -> encoded examples) and `plan` (the training schedule and the batch shapes). What comes out, `TaskData`,
holds everything batching needs: `train_batches`, `first_batch_of_each_shape` and `eval_batches` read nothing else.

The batch of step s is a pure function of (data, s): epoch = s // steps_per_epoch, and the epoch's batch order is
`tasks.batching.length_bucketed_batches(lengths, B, seed, epoch)`; each batch is padded (dynamic padding to a few
length buckets) and filled to B rows with example_mask = 0, so shapes are few and fixed in the batch dimension, and a
resumed run sees exactly the batches it would have seen. Process p of P keeps rows [p*B/P, (p+1)*B/P) of each batch.
With config.data.pack, the training batches are drawn at random and packed into rows of task.max_length instead
(`tasks.batching.pack`, one or two shapes for the run: `tasks.batching.pack_shapes`); evaluation stays bucketed.
Everything that depends on the kind of task goes through its family (`tasks.family`).
"""

import difflib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grain
import jax
import ml_collections
import numpy as np

from encoder import errors, paths
from encoder.tokenizer import load_tokenizer
from tasks import batching, readers, registry, tfds_builders
from tasks.family import TaskFamily


class Split(NamedTuple):
  """One split: reader records (plain dicts, file order) and their encoded examples; `groups` holds the examples of
  each record (indices into `examples`) when a record is several examples (QA windows), None when it is one."""
  name: str
  records: list[dict]
  examples: list[dict]
  groups: list[list[int]] | None = None
  layout: batching.Layout = batching.PLAIN  # How its examples pad into batches (its family's `layout`).


class TaskData(NamedTuple):
  """Everything the engine needs from a task's data."""
  task: dict[str, Any]  # The config.task fields as the tasks/ modules read them, plus "labels" (and train_fields).
  family: TaskFamily  # The task's family, built from `task`.
  tokenizer: Any
  train: Split
  eval: Split
  test: Split | None
  buckets: tuple[int, ...]  # Padded token lengths (jit shapes).
  widths: dict[str, Callable[[int], int]]  # Word / span field -> its padded width at a bucket (TaskFamily.widths).
  schedule: "Schedule"  # The training run's batches: their size, seed and number.
  # Training batches packed into rows of task.max_length, in the first of these shapes that holds them
  # (config.data.pack); None: padded to `buckets`.
  pack: tuple[batching.PackShape, ...] | None = None


class Schedule(NamedTuple):
  """The training batches of a run: `total_steps` batches of `batch_size` examples, `steps_per_epoch` to a pass over
  the training split, shuffled by `seed`."""
  batch_size: int
  seed: int
  steps_per_epoch: int
  total_steps: int


ROLES = {"train": "train_split", "dev": "eval_split", "test": "test_split"}  # A split's role -> its config field.


def load(config: ml_collections.ConfigDict, dataset: str | tfds_builders.DatasetConfig | None = None) -> TaskData:
  """config.task's train, dev and (optional) test splits as encoded examples, and the run's training batches: the
  stages below, in order, each once. `dataset`: config.task's as configs.checks.check_config resolved it (None:
  resolved here)."""
  dataset, splits = source_of(config.task, dataset)
  records = read(config.task, dataset, splits, cache_dir=config.data.cache_dir or None)
  family = family_of(config.task, records["train"])
  check(family, dataset, splits, records)
  tokenizer = load_tokenizer(config.data.tokenizer)
  train, dev = (split_of(role, family, tokenizer, records[role]) for role in ("train", "dev"))  # Always read.
  test = split_of("test", family, tokenizer, records["test"]) if "test" in records else None
  schedule, buckets, pack = plan(config, train)
  return TaskData(family.task, family, tokenizer, train, dev, test, buckets, family.widths(), schedule, pack)


def source_of(task: ml_collections.ConfigDict, dataset: str | tfds_builders.DatasetConfig | None = None
              ) -> tuple[str | tfds_builders.DatasetConfig, dict[str, str]]:
  """The dataset (a tfds_builders preset name, or custom files from task.format/files/columns; `dataset` when
  already resolved) and the tfds split string of each role ("train", "dev", "test" when task.test_split is set)."""
  return (dataset_of(task) if dataset is None else dataset,
          {role: task[key] for role, key in ROLES.items() if task[key] or role != "test"})


def dataset_of(task: ml_collections.ConfigDict) -> str | tfds_builders.DatasetConfig:
  """A tfds_builders preset name, or a custom dataset from task.format/files/columns."""
  if task.dataset:
    if task.dataset not in tfds_builders.PRESETS:
      close = difflib.get_close_matches(task.dataset, tfds_builders.PRESETS, n=1)
      raise errors.ConfigError(
          f"config.task.dataset={task.dataset!r} is not a dataset{f'; did you mean {close[0]!r}?' if close else ''} "
          f"(known: {', '.join(sorted(tfds_builders.PRESETS))}; or set it to '' and give config.task.files)")
    return task.dataset
  if not task.files:
    raise errors.ConfigError("config.task.dataset is empty and config.task.files is too: name a dataset of "
                                    f"tasks.tfds_builders.PRESETS {sorted(tfds_builders.PRESETS)} or give files")
  if task.format not in readers.FORMATS:
    raise errors.ConfigError(f"config.task.format={task.format!r} is not one of {', '.join(readers.FORMATS)}")
  files = {}
  for item in task.files.split(","):
    split, colon, path = item.partition(":")
    if not colon or not split or not path:
      raise errors.ConfigError(f"config.task.files={task.files!r}: expected split:path items such as "
                                      f"train:a.tsv,validation:b.tsv, got {item!r}")
    if Path(path).is_absolute() and not Path(path).is_file():
      raise errors.ConfigError(f"config.task.files: the {split} file {path} does not exist")
    files[split] = path if Path(path).is_absolute() or Path(path).exists() else str(paths.data_file(path))
  options = reader_options(task.columns)
  if task.labels and task.format == "tsv":
    options.setdefault("label_names", tuple(task.labels))
  return tfds_builders.custom(task.format, files, **options)


def reader_options(columns: str) -> dict[str, Any]:
  """'text_a:sentence1,label:3,header:false' -> reader options (integers are column indices)."""
  options: dict[str, Any] = {}
  for item in filter(None, columns.split(",")):
    key, _, value = item.partition(":")
    if value.lower() in ("true", "false"):
      options[key] = value.lower() == "true"
    else:
      options[key] = int(value) if value.lstrip("-").isdigit() else value
  return options


def data_format(dataset: str | tfds_builders.DatasetConfig) -> str:
  """The reader format of a dataset preset name or custom dataset."""
  return (tfds_builders.PRESETS[dataset] if isinstance(dataset, str) else dataset).format


def read(task: ml_collections.ConfigDict, dataset, splits: dict[str, str], *, cache_dir: str | None
         ) -> dict[str, list[dict]]:
  """Every record of each role's split, read from the prepared tfds splits; a dataset not prepared yet has its files
  parsed and checked first (`check_files`), so a bad file fails at its line before tfds stores anything."""
  if not tfds_builders.is_prepared(dataset, cache_dir=cache_dir):
    check_files(task, dataset, splits)
  records = {}
  for role, split in splits.items():
    try:
      source = tfds_builders.load_split(dataset, split, cache_dir=cache_dir)
    except tfds_builders.SplitError as err:
      raise errors.ConfigError(f"config.task.{ROLES[role]}={split!r}: {err}") from None
    records[role] = source.__getitems__(list(range(len(source)))) if len(source) else []
  if not records["train"]:
    raise errors.ConfigError(f"config.task.train_split={task.train_split!r} of {task.dataset or task.files} "
                             "has no records")
  return records


def check_files(task: ml_collections.ConfigDict, dataset, splits: dict[str, str]) -> None:
  """Parses each split's files once, before tfds prepares them: a malformed line or a split without examples fails
  naming the file (and line), then the records go through `check` (with the labels of config.task.labels, else of
  the training files)."""
  records: dict[str, list[dict]] = {}
  for role, split in splits.items():
    records[role] = []
    for name in tfds_builders.split_names(split):
      try:
        found = list(tfds_builders.read_file(dataset, name))
      except tfds_builders.SplitError as err:
        raise errors.ConfigError(f"config.task.{ROLES[role]}={split!r}: {err}") from None
      if not found:
        raise errors.UserError(f"{tfds_builders.split_file(dataset, name)}: expected examples for the {role} split "
                               f"(config.task.{ROLES[role]}={split!r}), found none")
      records[role] += found
  check(family_of(task, records["train"], train_fields=False), dataset, splits, records)


def family_of(task: ml_collections.ConfigDict, train_records: Sequence[dict], *, train_fields: bool = True
              ) -> TaskFamily:
  """The task's family: its labels (config.task.labels, else the training records') and, with `train_fields`, what
  it computes from the training records (`TaskFamily.train_fields`: a score output's initial bias, span priors)."""
  family = registry.family(task_mapping(task, label_vocabulary(task, train_records)))
  return registry.family(family.task | family.train_fields(train_records)) if train_fields else family


def task_mapping(task: ml_collections.ConfigDict, labels: Sequence[str]) -> dict[str, Any]:
  """config.task -> the plain mapping tasks/ reads ("" scheme -> None, the label vocabulary under its key)."""
  mapping = task.to_dict()
  mapping["labels"] = list(labels)
  mapping["scheme"] = task.scheme or None
  mapping["source_scheme"] = task.source_scheme or None
  return mapping


def label_vocabulary(task: ml_collections.ConfigDict, train_records: Sequence[dict]) -> list[str]:
  """The task's labels / tags / entity types in index order: the config's, else derived from the training records."""
  return list(task.labels) or registry.family(task_mapping(task, ())).label_vocabulary(train_records)


def check(family: TaskFamily, dataset, splits: dict[str, str], records: Mapping[str, Sequence[dict]]) -> None:
  """Every role's records against the task: a record its family cannot use (`TaskFamily.usable`) or a label outside
  its labels (`TaskFamily.file_labels`, as the files write them) fails at its line. Prepared splits are checked too:
  the task may differ from the one that prepared them."""
  allowed = family.file_labels(data_format(dataset))
  for role, split in splits.items():
    _check_records(family, dataset, split, records[role])
    _check_labels(dataset, split, records[role], allowed)


def _check_records(family: TaskFamily, dataset, split: str, records: Sequence[dict]) -> None:
  """A record the family cannot use fails at its line: the split's files are read again with the family's reader
  checks (`TaskFamily.reader_checks`), which raise a ReaderError there."""
  if family.usable(records):
    return
  for name in tfds_builders.split_names(split):
    for _ in tfds_builders.read_file(dataset, name, **family.reader_checks()):
      pass
  raise errors.UserError(f"{dataset}: split {split!r} holds a record that task {family.name!r} cannot use")


def _check_labels(dataset, split: str, records: Sequence[dict], allowed: Sequence[str] | None) -> None:
  """A label outside `allowed` (file terms) fails at its line: the split's files are read again, checking labels."""
  known = set(allowed or ())
  labels = tfds_builders.record_kind(dataset).labels
  unknown = next((label for record in records for label in labels(record) if label not in known), None)
  if allowed is None or unknown is None:
    return
  names = tfds_builders.split_names(split)
  for name in names:
    for _ in tfds_builders.read_file(dataset, name, label_names=allowed):  # Raises a ReaderError at the line.
      pass
  files = ", ".join(str(tfds_builders.split_file(dataset, name)) for name in names)
  raise errors.UserError(f"{files}: expected the task's labels ({', '.join(allowed)}), found {unknown!r}")


def split_of(name: str, family: TaskFamily, tokenizer, records: Sequence[dict]) -> Split:
  """A split's records and examples (a record the family encodes as several examples: every one, grouped)."""
  encoded = encode_records(family, tokenizer, records)
  singles = [e for e in encoded if isinstance(e, dict)]
  if len(singles) == len(encoded):
    return Split(name, list(records), singles, layout=family.layout())
  examples: list[dict] = []
  groups: list[list[int]] = []
  for windows in encoded:
    groups.append(list(range(len(examples), len(examples) + len(windows))))
    examples += windows
  return Split(name, list(records), examples, groups, family.layout())


def encode(family: TaskFamily, tokenizer, records: Sequence[dict]) -> list[dict]:
  """Every record of a split as its example(s), in order (a record's several examples one after the other)."""
  return split_of("", family, tokenizer, records).examples


def encode_records(family: TaskFamily, tokenizer, records: Sequence[dict]) -> list[dict | list[dict]]:
  """Every record of a split as an example (or a list of them); a label outside the task's labels is an error naming
  the record."""
  labels = family.task["labels"]
  index = {label: i for i, label in enumerate(labels)}

  def lookup(where: int) -> Callable[[str], int]:
    def find(label: str) -> int:
      if label not in index:
        raise errors.UserError(f"record {where}: label {label!r} is not in the task's labels {list(labels)[:20]}")
      return index[label]
    return find
  with tokenizer.batched(text for record in records for text in family.texts(record)):
    return [family.encode(tokenizer, record, lookup(i)) for i, record in enumerate(records)]


def plan(config: ml_collections.ConfigDict, train: Split
         ) -> tuple[Schedule, tuple[int, ...], tuple[batching.PackShape, ...] | None]:
  """The run's training schedule (config.epochs passes, or config.num_train_steps when positive) and its batch
  shapes: the length buckets worth a compilation over the run's batches (`batching.prune_buckets`), and with
  config.data.pack the one or two packed shapes that hold every training batch."""
  per_epoch = steps_per_epoch(len(train.examples), config.batch_size)
  total = config.num_train_steps if config.num_train_steps > 0 else config.epochs * per_epoch
  if total < 1:
    raise errors.ConfigError(f"config.epochs={config.epochs} gives no training steps: set it to at least 1")
  schedule = Schedule(config.batch_size, config.seed, per_epoch, total)
  epochs = range(-(-total // per_epoch))
  max_length = config.task.max_length
  buckets = tuple(sorted({min(b, max_length) for b in config.data.buckets} | {max_length}))
  # The figure a run made concrete at start-up (launch.startup.compile_cost, the one resolution of auto), used as given;
  # auto (-1) from a caller outside a run (a test, a tool) prunes nothing: every bucket kept, as with 0.
  compile_cost = max(config.data.compile_cost, 0.0)
  longest = [n for _, n in _longest_per_batch(train, schedule, epochs)]
  buckets = batching.prune_buckets(longest, buckets, compile_cost)
  if not config.data.pack:
    return schedule, buckets, None
  if np.ndim(train.examples[0]["input_ids"]) > 1:
    raise errors.ConfigError(f"config.data.pack=True: task {config.task.name!r} makes examples of several rows of "
                             "tokens (its family's layout), which do not pack; set config.data.pack=False")
  lengths = batching.lengths_of(train.examples)  # One or two shapes that hold every training batch of the run.
  return schedule, buckets, batching.pack_shapes(
      [lengths[indices] for epoch in epochs for indices in epoch_batches(
          lengths, schedule.batch_size, seed=schedule.seed, epoch=epoch, pack=True)],
      max_length, compile_cost, schedule.batch_size)


def epoch_batches(lengths: np.ndarray, batch_size: int, *, seed: int, epoch: int, pack: bool) -> list[list[int]]:
  """The training batches of an epoch: of similar lengths (`batching.length_bucketed_batches`), or, when they are
  packed, drawn at random (pools of one batch), so every batch holds about as many tokens and one or two shapes
  fit them all."""
  return batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch, pool=1 if pack else 50)


def _longest_per_batch(train: Split, schedule: Schedule, epochs: range) -> Iterator[tuple[int, int]]:
  """(step, longest example) of every training batch of `epochs` (what bucket pruning and compile-ahead read)."""
  lengths = batching.lengths_of(train.examples)
  for epoch in epochs:
    for index, indices in enumerate(batching.length_bucketed_batches(lengths, schedule.batch_size, seed=schedule.seed,
                                                                     epoch=epoch)):
      yield epoch * schedule.steps_per_epoch + index, int(lengths[indices].max())


def steps_per_epoch(examples: int, batch_size: int) -> int:
  """Batches in one pass over `examples` training examples (the last one may be short: it is padded)."""
  return -(-examples // batch_size)


def batch_schedule(data: TaskData) -> Callable[[int], dict[str, np.ndarray]]:
  """step -> the global batch of optimizer step `step` (0-based): a pure function of (data, step)."""
  lengths, schedule = batching.lengths_of(data.train.examples), data.schedule

  @functools.lru_cache(maxsize=2)
  def batches_of(epoch: int) -> list[list[int]]:
    return epoch_batches(lengths, schedule.batch_size, seed=schedule.seed, epoch=epoch, pack=data.pack is not None)

  def batch(step: int) -> dict[str, np.ndarray]:
    epoch, index = divmod(step, schedule.steps_per_epoch)
    examples = [data.train.examples[i] for i in batches_of(epoch)[index]]
    if data.pack is not None:
      return batching.pack(examples, data.task["max_length"], data.pack, batch_size=schedule.batch_size,
                           widths=data.widths, layout=data.train.layout)
    return batching.collate(examples, data.buckets, batch_size=schedule.batch_size, widths=data.widths,
                            layout=data.train.layout)
  return batch


def first_batch_of_each_shape(data: TaskData, *, start_step: int) -> list[dict[str, np.ndarray]]:
  """This process's rows of the first batch of each shape (length bucket) in the next two epochs from start_step, in
  the order the run first needs them (what `launch.compile_ahead` compiles; a rarer shape compiles when met); packed
  batches: of each packed shape."""
  batch, schedule = batch_schedule(data), data.schedule
  first_epoch = start_step // schedule.steps_per_epoch
  first: dict[tuple[int, ...] | int, int] = {}  # A batch shape (packed) or length bucket -> its first step.
  for step, longest in _longest_per_batch(data.train, schedule, range(first_epoch, first_epoch + 2)):
    if start_step <= step < schedule.total_steps:
      first.setdefault(batch(step)["packed_input_ids"].shape if data.pack else
                       batching.bucket_length(longest, data.buckets), step)
  return [_local_rows(batch(step)) for step in sorted(first.values())]


def first_eval_batch_of_each_shape(splits: Sequence[Split | None], *, batch_size: int, buckets: Sequence[int],
                                   widths: dict[str, Callable[[int], int]]) -> list[dict[str, np.ndarray]]:
  """This process's rows of the first `eval_batches` batch of each shape over `splits` (None: a split the run does
  not have): what `launch.compile_ahead` compiles the evaluation program for."""
  first: dict[tuple, dict[str, np.ndarray]] = {}
  for split in filter(None, splits):
    for _, batch in eval_batches(split, batch_size=batch_size, buckets=buckets, widths=widths):
      first.setdefault(tuple(sorted((k, v.shape) for k, v in batch.items())), batch)
  return list(first.values())


def _local_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """This process's rows of a global batch."""
  rows = len(batch["example_mask"]) // jax.process_count()
  start = jax.process_index() * rows
  return {k: v[start:start + rows] for k, v in batch.items()}


def example_batch(data: TaskData) -> dict[str, np.ndarray]:
  """A one-row batch: the shapes and dtypes the model is initialized with."""
  return batching.collate(data.train.examples[:1], data.buckets, widths=data.widths, layout=data.train.layout)


def train_batches(data: TaskData, *, start_step: int, prefetch: int) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of the batches of steps start_step .. the schedule's last, prepared ahead by grain threads."""
  batch, total = batch_schedule(data), data.schedule.total_steps
  dataset = grain.MapDataset.range(start_step, max(total, start_step)).map(lambda step: _local_rows(batch(step)))
  return iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=max(prefetch, 1),
                                                        prefetch_buffer_size=max(prefetch, 1))))


def eval_batches(split: Split, *, batch_size: int, buckets: Sequence[int], widths: dict[str, Callable[[int], int]]
                 ) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
  """(example indices, this process's rows of the padded batch) over the whole split, sorted by length."""
  lengths = batching.lengths_of(split.examples)
  for indices in batching.length_bucketed_batches(lengths, batch_size, seed=0, epoch=0, shuffle=False):
    yield indices, _local_rows(batching.collate([split.examples[i] for i in indices], buckets, widths=widths,
                                                batch_size=batch_size, layout=split.layout))
