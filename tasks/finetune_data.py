"""Fine-tuning data: config.task -> records and encoded examples per split, and the batches of the training loop.

The batch of step s is a pure function of (config, s): epoch = s // steps_per_epoch, and the epoch's batch order is
`tasks.batching.length_bucketed_batches(lengths, B, seed, epoch)`; each batch is padded (dynamic padding to a few
length buckets) and filled to B rows with example_mask = 0, so shapes are few and fixed in the batch dimension, and a
resumed run sees exactly the batches it would have seen. Process p of P keeps rows [p*B/P, (p+1)*B/P) of each batch.
With config.data.pack, the training batches are drawn at random and packed into rows of task.max_length instead
(`tasks.batching.pack`, one or two shapes for the run: `tasks.batching.pack_shapes`); evaluation stays bucketed.

Data files are checked before tfds prepares them (`check_splits`), and prepared splits again when read: a malformed
line, a split without examples, a label outside the task's labels or a record the task's family cannot use (nested
spans without task.nested) is one error naming the file and line. Everything that depends on the kind of task goes
through its family (`tasks.family`).
"""

import difflib
import functools
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import grain
import jax
import ml_collections
import numpy as np

from configs import paths
from encoder import errors
from encoder.config import platform
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
  # Training batches packed into rows of task.max_length, in the first of these shapes that holds them
  # (config.data.pack); None: padded to `buckets`.
  pack: tuple[batching.PackShape, ...] | None = None


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


def split_of(name: str, family: TaskFamily, tokenizer, records: Sequence[dict]) -> Split:
  """A split's records and examples (a record the family encodes as several examples: every one, grouped)."""
  encoded = encode_records(family, tokenizer, records)
  if all(isinstance(e, dict) for e in encoded):
    return Split(name, list(records), encoded)
  examples, groups = [], []
  for windows in encoded:
    groups.append(list(range(len(examples), len(examples) + len(windows))))
    examples += windows
  return Split(name, list(records), examples, groups)


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
  return [family.encode(tokenizer, record, lookup(i)) for i, record in enumerate(records)]


def reader_options(columns: str) -> dict[str, Any]:
  """'text_a:sentence1,label:3,header:false' -> reader options (integers are column indices)."""
  options = {}
  for item in filter(None, columns.split(",")):
    key, _, value = item.partition(":")
    if value.lower() in ("true", "false"):
      options[key] = value.lower() == "true"
    else:
      options[key] = int(value) if value.lstrip("-").isdigit() else value
  return options


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
  if task.format not in readers.READERS:
    raise errors.ConfigError(f"config.task.format={task.format!r} is not one of {', '.join(readers.READERS)}")
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


def _records(dataset, split: str, cache_dir: str, key: str) -> list[dict]:
  """Every record of a (prepared) split; `key` names the config field that asked for it in an error."""
  try:
    source = tfds_builders.load_split(dataset, split, cache_dir=cache_dir or None)
  except tfds_builders.SplitError as err:
    raise errors.ConfigError(f"config.task.{key}={split!r}: {err}") from None
  return source.__getitems__(list(range(len(source)))) if len(source) else []


def data_format(dataset: str | tfds_builders.DatasetConfig) -> str:
  """The reader format of a dataset preset name or custom dataset."""
  return (tfds_builders.PRESETS[dataset] if isinstance(dataset, str) else dataset).format


def _labels_of(record: dict) -> list[str]:
  """A reader record's labels: its class label, tags or span labels."""
  if "tags" in record:
    return record["tags"]
  if "spans" in record:
    return [span["label"] for span in record["spans"]]
  return [] if record.get("label") is None else [record["label"]]


def _check_labels(dataset, split: str, records: Sequence[dict], allowed: Sequence[str] | None) -> None:
  """A label outside `allowed` (file terms) fails at its line: the split's files are read again, checking labels."""
  known = set(allowed or ())
  unknown = next((label for record in records for label in _labels_of(record) if label not in known), None)
  if allowed is None or unknown is None:
    return
  names = tfds_builders.split_names(split)
  for name in names:
    for _ in tfds_builders.read_file(dataset, name, label_names=allowed):  # Raises a ReaderError at the line.
      pass
  files = ", ".join(str(tfds_builders.split_file(dataset, name)) for name in names)
  raise errors.UserError(f"{files}: expected the task's labels ({', '.join(allowed)}), found {unknown!r}")


def _check_records(family: TaskFamily, dataset, split: str, records: Sequence[dict]) -> None:
  """A record the family cannot use fails at its line: the split's files are read again with the family's reader
  checks (`TaskFamily.reader_checks`), which raise a ReaderError there."""
  if family.usable(records):
    return
  for name in tfds_builders.split_names(split):
    for _ in tfds_builders.read_file(dataset, name, **family.reader_checks()):
      pass
  raise errors.UserError(f"{dataset}: split {split!r} holds a record that task {family.name!r} cannot use")


def check_splits(task: ml_collections.ConfigDict, dataset, splits: dict[str, str]) -> None:
  """Reads each split's files once, before tfds prepares them: a malformed line, a split without examples, a record
  the task cannot use or a label outside the task's labels (config.task.labels, else the training split's) fails
  naming the file and line."""
  records = {}
  for role, split in splits.items():
    records[role] = []
    for name in tfds_builders.split_names(split):
      try:
        found = list(tfds_builders.read_file(dataset, name))
      except tfds_builders.SplitError as err:
        raise errors.ConfigError(f"config.task.{role}_split={split!r}: {err}") from None
      if not found:
        raise errors.UserError(f"{tfds_builders.split_file(dataset, name)}: expected examples for the {role} split "
                            f"(config.task.{role}_split={split!r}), found none")
      records[role] += found
  family = registry.family(task_mapping(task, label_vocabulary(task, records["train"])))
  for role, split in splits.items():
    _check_records(family, dataset, split, records[role])
    _check_labels(dataset, split, records[role], family.file_labels(data_format(dataset)))


def load(config: ml_collections.ConfigDict) -> TaskData:
  """Reads and encodes the train, dev and (optional) test splits of config.task; checks the files first."""
  task = config.task
  dataset = dataset_of(task)
  splits = {"train": task.train_split, "eval": task.eval_split} | ({"test": task.test_split} if task.test_split else {})
  if not tfds_builders.is_prepared(dataset, cache_dir=config.data.cache_dir or None):
    check_splits(task, dataset, splits)
  tokenizer = load_tokenizer(config.data.tokenizer)
  read = lambda key: _records(dataset, task[key], config.data.cache_dir, key)
  train_records = read("train_split")
  if not train_records:
    raise errors.ConfigError(f"config.task.train_split={task.train_split!r} of {task.dataset or task.files} "
                             "has no records")
  family = registry.family(task_mapping(task, label_vocabulary(task, train_records)))
  family = registry.family(family.task | family.train_fields(train_records))
  allowed = family.file_labels(data_format(dataset))

  records = {"train": train_records, "dev": read("eval_split")} | (
      {"test": read("test_split")} if task.test_split else {})
  for name, split_string in zip(records, (task.train_split, task.eval_split, task.test_split)):
    _check_records(family, dataset, split_string, records[name])  # Prepared splits: checked again (the task may
    _check_labels(dataset, split_string, records[name], allowed)   # differ from the one that prepared them).
  train, dev, test = (split_of(name, family, tokenizer, records[name]) if name in records else None
                      for name in ("train", "dev", "test"))
  buckets = tuple(sorted({min(b, task.max_length) for b in config.data.buckets} | {task.max_length}))
  per_epoch = steps_per_epoch(len(train.examples), config.batch_size)
  epochs = -(-config.num_train_steps // per_epoch) if config.num_train_steps > 0 else config.epochs
  longest = [n for _, n in _longest_per_batch(train, config.batch_size, config.seed, range(max(epochs, 1)))]
  compile_cost = config.data.compile_cost  # -1: this backend's (launch.train records the choice at start-up).
  compile_cost = batching.compile_cost_on(platform()) if compile_cost < 0 else compile_cost
  buckets = batching.prune_buckets(longest, buckets, compile_cost)
  pack = None
  if config.data.pack:  # One or two shapes that hold every training batch of the run.
    lengths = batching.lengths_of(train.examples)
    pack = batching.pack_shapes([lengths[indices] for epoch in range(max(epochs, 1)) for indices in epoch_batches(
        lengths, config.batch_size, seed=config.seed, epoch=epoch, pack=True)], task.max_length,
        compile_cost, config.batch_size)
  return TaskData(family.task, family, tokenizer, train, dev, test, buckets, family.widths(), pack)


def epoch_batches(lengths: np.ndarray, batch_size: int, *, seed: int, epoch: int, pack: bool) -> list[list[int]]:
  """The training batches of an epoch: of similar lengths (`batching.length_bucketed_batches`), or, when they are
  packed, drawn at random (pools of one batch), so every batch holds about as many tokens and one or two shapes
  fit them all."""
  return batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch, pool=1 if pack else 50)


def _longest_per_batch(train: Split, batch_size: int, seed: int, epochs: range) -> Iterator[tuple[int, int]]:
  """(step, longest example) of every training batch of `epochs` (what bucket pruning and compile-ahead read)."""
  lengths = batching.lengths_of(train.examples)
  per_epoch = steps_per_epoch(len(lengths), batch_size)
  for epoch in epochs:
    for index, indices in enumerate(batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch)):
      yield epoch * per_epoch + index, int(lengths[indices].max())


def steps_per_epoch(examples: int, batch_size: int) -> int:
  """Batches in one pass over `examples` training examples (the last one may be short: it is padded)."""
  return -(-examples // batch_size)


def batch_schedule(data: TaskData, *, batch_size: int, seed: int) -> Callable[[int], dict[str, np.ndarray]]:
  """step -> the global batch of optimizer step `step` (0-based): a pure function of (data, batch_size, seed, step)."""
  lengths = batching.lengths_of(data.train.examples)
  per_epoch = steps_per_epoch(len(data.train.examples), batch_size)

  @functools.lru_cache(maxsize=2)
  def batches_of(epoch: int) -> list[list[int]]:
    return epoch_batches(lengths, batch_size, seed=seed, epoch=epoch, pack=data.pack is not None)

  def batch(step: int) -> dict[str, np.ndarray]:
    epoch, index = divmod(step, per_epoch)
    examples = [data.train.examples[i] for i in batches_of(epoch)[index]]
    if data.pack is not None:
      return batching.pack(examples, data.task["max_length"], data.pack, batch_size=batch_size, widths=data.widths)
    return batching.collate(examples, data.buckets, batch_size=batch_size, widths=data.widths)
  return batch


def first_batch_of_each_shape(data: TaskData, *, batch_size: int, seed: int, start_step: int, total_steps: int
                              ) -> list[dict[str, np.ndarray]]:
  """This process's rows of the first batch of each shape (length bucket) in the next two epochs from start_step, in
  the order the run first needs them (what `launch.compile_ahead` compiles; a rarer shape compiles when met); packed
  batches: of each packed shape."""
  batch = batch_schedule(data, batch_size=batch_size, seed=seed)
  first_epoch, first = start_step // steps_per_epoch(len(data.train.examples), batch_size), {}
  for step, longest in _longest_per_batch(data.train, batch_size, seed, range(first_epoch, first_epoch + 2)):
    if start_step <= step < total_steps:
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
  return batching.collate(data.train.examples[:1], data.buckets, widths=data.widths)


def train_batches(data: TaskData, *, batch_size: int, seed: int, start_step: int, total_steps: int,
                  prefetch: int) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of the batches of steps start_step .. total_steps - 1, prepared ahead by grain threads."""
  batch = batch_schedule(data, batch_size=batch_size, seed=seed)
  dataset = grain.MapDataset.range(start_step, max(total_steps, start_step)).map(lambda step: _local_rows(batch(step)))
  return iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=max(prefetch, 1),
                                                        prefetch_buffer_size=max(prefetch, 1))))


def eval_batches(split: Split, *, batch_size: int, buckets: Sequence[int], widths: dict[str, Callable[[int], int]]
                 ) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
  """(example indices, this process's rows of the padded batch) over the whole split, sorted by length."""
  lengths = batching.lengths_of(split.examples)
  for indices in batching.length_bucketed_batches(lengths, batch_size, seed=0, epoch=0, shuffle=False):
    yield indices, _local_rows(batching.collate([split.examples[i] for i in indices], buckets, widths=widths,
                                                batch_size=batch_size))
