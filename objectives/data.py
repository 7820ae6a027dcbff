"""Pretraining data in one pass: corpus files -> rows -> masked rows (the mirror of tasks.finetune_data).

`load(config)` runs the stages below, each one function called once, in this order (what follows reads no config):
`check` (the objectives against config.data.packing and config.masking.mode: what each needs, `Objective.packing`,
`masking`, `excludes`), the tokenizer, `sources_of` (config.data -> the train files or prepared directory and the
eval files), `rows_of` (each split's unmasked rows of the packing, `objectives.pipeline`), `masking_of`
(config.masking -> `masking.mask_example`'s options, with the corpus unigram law) and `plan` (the training
schedule). A run's start-up has checked the config and resolved its files already (configs.checks.check_config):
`load(config, sources=...)` then trusts them and neither checks nor resolves again. What comes out,
`PretrainingData`, holds everything batching needs: `train_rows`, `eval_rows` and `example_batch` read nothing else,
and launch.input_pipeline only batches their rows, keeps this process's part and prefetches.

The batch of step s is a pure function of (config, s): it holds global examples [s*B, (s+1)*B) of the shuffled,
repeated corpus (`train_rows`), each masked by objectives.masking.example_rng(seed, global index). So the step is the
whole iterator state (resume = start at the restored step), and batches are identical for any number of devices or
hosts. Evaluation rows are the split in order, masked with seed + EVAL_SEED_OFFSET (fixed across evaluations).
"""

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import grain
import ml_collections
import numpy as np

from encoder import errors, paths
from encoder.files import Path
from encoder.tokenizer import load_tokenizer
from objectives import masking, pipeline, registry
from objectives.objective import Objective

DEVICE_KEYS_DROPPED = ("word_starts",)  # Host-only fields of the pipeline rows (used by masking).
EVAL_SEED_OFFSET = 1  # Evaluation masks use seed + 1, fixed across evaluations.


class Rows(Protocol):
  """Random-access example rows: a list, objectives.pipeline.PackedExamples, or rows read from prepared shards."""

  def __len__(self) -> int: ...

  def __getitem__(self, index: int) -> Mapping[str, Any]: ...


class Schedule(NamedTuple):
  """The training batches of a run: `total_steps` batches of `batch_size` rows of the corpus shuffled by `seed`
  (repeated as often as it takes)."""
  batch_size: int
  seed: int
  total_steps: int


class Sources(NamedTuple):
  """config.data's corpus files resolved against the data directory (`sources_of`)."""
  train_files: list[Path]  # Empty when `prepared` replaces them.
  prepared: Path | None  # A directory of objectives.prepare, or None.
  eval_files: list[Path]  # Empty: no evaluation.


class PretrainingData(NamedTuple):
  """The tokenizer, the unmasked rows of each split, the masking options shared by them and the schedule."""
  tokenizer: Any
  train: Any  # Random-access rows (objectives.pipeline.PackedExamples).
  eval: Any | None  # None: no evaluation files.
  mask_options: dict[str, Any]  # masking.mask_example's keyword arguments.
  schedule: Schedule


def load(config: ml_collections.ConfigDict, *, cache_dir: str | Path | None = None, sources: Sources | None = None
         ) -> PretrainingData:
  """config's train and eval corpora as unmasked rows (tokenized, or read from the cache: `cache_dir`, else
  config.data.cache_dir, else none), their masking options and the schedule: the stages below, in order, each once.
  `sources`: config.data's files as configs.checks.check_config resolved them, the config checked (the objectives
  and files are trusted, not checked again); None: checked and resolved here."""
  data = config.data
  if sources is None:
    check(config.objectives.split("+"), data.packing, config.masking.mode)
  tokenizer = load_tokenizer(data.tokenizer)
  train_files, prepared, eval_files = sources or sources_of(data)
  cache = cache_dir or data.cache_dir or None
  rows = lambda files, prepared=None: rows_of(data, tokenizer, files, prepared, cache_dir=cache, seed=config.seed)
  train = rows(train_files, prepared)
  options = masking_of(config.masking, tokenizer, train)
  return PretrainingData(tokenizer, train, rows(eval_files) if eval_files else None, options, plan(config))


def objectives_of(names: Sequence[str]) -> list[Objective]:
  """The registered objectives `names` (built with their defaults: what they need of the data, not their heads)."""
  return [registry.build(name) for name in names]


def check(names: Sequence[str], packing: str, masking_mode: str | None = None) -> None:
  """Errors early when the objectives cannot be trained from this packing / masking mode (e.g. nsp without pairs),
  or together: what each objective declares it needs (`Objective.packing`, `masking`, `excludes`)."""
  built = objectives_of(names)
  if packing not in pipeline.PACKINGS:
    raise errors.ConfigError(f"packing {packing!r} is not one of {tuple(pipeline.PACKINGS)}")
  for objective in built:
    name = objective.name
    if objective.excludes:
      clash = sorted(set(objective.excludes.value) & set(names))
      if clash:
        raise errors.ConfigError(f"config.objectives: {name!r} cannot be combined with {clash}: "
                                 f"{objective.excludes.why}; drop {clash}")
    if objective.packing and packing != objective.packing.value:
      needed = objective.packing.value
      raise errors.ConfigError(f"config.data.packing={packing!r}: objective {name!r} needs {needed!r} "
                               f"({objective.packing.why}); set it to {needed!r} or drop {name!r} from "
                               "config.objectives")
    if objective.masking and masking_mode is not None and masking_mode != objective.masking.value:
      needed = objective.masking.value
      raise errors.ConfigError(f"config.masking.mode={masking_mode!r}: objective {name!r} needs {needed!r} "
                               f"({objective.masking.why}); set it to {needed!r} or drop {name!r} from "
                               "config.objectives")


def defaults(names: Sequence[str]) -> dict[str, Any]:
  """What the objectives set of the data by default, by config field ("data.packing", "masking.mode", "masking.
  <field>"): the packing and masking mode they need and the masking defaults each owns (`Objective.mask_defaults`);
  the first objective's value wins. An unknown name is skipped (config.objectives' rule reports it)."""
  found: dict[str, Any] = {}
  for objective in objectives_of([name for name in names if name in registry.OBJECTIVES]):
    own = {"data.packing": objective.packing, "masking.mode": objective.masking}
    for key, requirement in own.items():
      if requirement:
        found.setdefault(key, requirement.value)
    for field, value in (objective.mask_defaults or {}).items():
      found.setdefault(f"masking.{field}", value)
  return found


def sources_of(data: ml_collections.ConfigDict) -> Sources:
  """The files of config.data, resolved against the data directory (a ConfigError names a missing one); a prepared
  directory (objectives.prepare) replaces train_files: no tokenizing or token pass."""
  prepared = paths.resolve_prepared(data.prepared) if data.get("prepared") else None
  train_files = [] if prepared else paths.resolve_files(data.train_files, "train_files")
  return Sources(train_files, prepared, paths.resolve_files(data.eval_files, "eval_files"))


def rows_of(data: ml_collections.ConfigDict, tokenizer: Any, files: Sequence[Path], prepared: Path | None = None, *,
            cache_dir: str | Path | None, seed: int) -> pipeline.PackedExamples:
  """A split's unmasked rows of config.data.packing and max_length (`seed`: the packing's random choices)."""
  return pipeline.pretraining_examples(files=files, tokenizer=tokenizer, max_length=data.max_length,
                                       packing=data.packing, cache_dir=cache_dir, seed=seed, prepared=prepared)


def masking_of(config: ml_collections.ConfigDict, tokenizer: Any, train: pipeline.PackedExamples) -> dict[str, Any]:
  """config.masking -> masking.mask_example's keyword arguments (replacement "unigram": the training corpus's law)."""
  options = pipeline.mask_options(tokenizer, max_predictions=config.max_predictions, rate=config.rate,
                                  mode=config.mode, replacement=config.replacement, mask_prob=config.mask_prob,
                                  random_prob=config.random_prob)
  if config.replacement == "unigram":
    options["unigram_probs"] = pipeline.corpus_unigram_probs(train, tokenizer)
  return options


def plan(config: ml_collections.ConfigDict) -> Schedule:
  """The run's training schedule: config.num_train_steps batches of config.batch_size rows, shuffled by config.seed."""
  return Schedule(config.batch_size, config.seed, config.num_train_steps)


def _masker(options: dict[str, Any], seed: int):
  def mask(index: int, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    masked = masking.mask_example(row, masking.example_rng(seed, index), **options)
    return {k: v for k, v in masked.items() if k not in DEVICE_KEYS_DROPPED}
  return mask


def train_rows(rows: Rows, options: dict[str, Any], *, seed: int) -> grain.MapDataset:
  """The training rows in the order the run reads them, endless: shuffled by `seed`, repeated, row i masked by
  example_rng(seed, i) (batch s holds rows [s*B, (s+1)*B))."""
  if len(rows) == 0:
    raise errors.ConfigError("the training corpus produced no rows; check config.data.train_files")
  return grain.MapDataset.source(rows).shuffle(seed=seed).repeat().map_with_index(_masker(options, seed))


def eval_rows(rows: Rows, options: dict[str, Any], *, seed: int) -> grain.MapDataset:
  """The evaluation rows in order, with fixed masks (example_rng(seed + EVAL_SEED_OFFSET, i))."""
  return grain.MapDataset.source(rows).map_with_index(_masker(options, seed + EVAL_SEED_OFFSET))


def example_batch(rows: Rows, options: dict[str, Any]) -> dict[str, np.ndarray]:
  """A batch of one masked row: the shapes and dtypes the model is initialized and traced with."""
  return {k: np.asarray(v)[None] for k, v in _masker(options, 0)(0, rows[0]).items()}
