"""What the training loop trains on: pretraining objectives over a text corpus, or one fine-tuning task over its
splits. Both give the same things (objectives, an example batch, the step count, batches from a start step), so
`launch.train` runs one loop for either; a config with a `task` block is fine-tuning."""

from typing import Any, Callable, Iterator, NamedTuple

import ml_collections
import numpy as np

from configs.checks import is_finetuning
from encoder import errors, files
from encoder.files import Path
from launch import input_pipeline
from objectives import registry
from objectives.objective import Objective
from tasks import finetune_data


class Workload(NamedTuple):
  objectives: tuple[Objective, ...]
  weights: dict[str, float]  # Loss weight per objective name.
  vocab_size: int  # The tokenizer's (config.model.vocab_size 0 takes it).
  example: dict[str, np.ndarray]  # A batch of one row: init and tracing shapes.
  total_steps: int  # Optimizer steps of the run.
  steps_per_epoch: int  # Fine-tuning: batches per pass over the training split (0 for pretraining).
  tokens_per_example: int  # For the tokens/s and FLOPs estimates (padded length).
  train_batches: Callable[[int], Iterator[dict[str, np.ndarray]]]  # start step -> this process's batches.
  # start step -> a batch of each shape the run will need, in order of first use (for launch.compile_ahead).
  batch_shapes: Callable[[int], list[dict[str, np.ndarray]]]
  data: Any  # input_pipeline.Data (pretraining) or finetune_data.TaskData (fine-tuning).
  description: str  # For the start-up line.


def objective_options(config: ml_collections.ConfigDict, name: str) -> dict[str, Any]:
  """What objective `name` is built from: config.model's fields, and those of a config block named after it (e.g.
  config.electra) when the config has one."""
  block = config.get(name)
  return config.model.to_dict() | (block.to_dict() if isinstance(block, ml_collections.ConfigDict) else {})


def pretraining(config: ml_collections.ConfigDict, workdir: Path) -> Workload:
  """Pretraining (MLM, NSP, SBO, ELECTRA) on config.data's corpus."""
  data = input_pipeline.load_data(config, files.path(config.data.cache_dir or workdir / "cache"))
  objectives = tuple(registry.build(name, objective_options(config, name)) for name in config.objectives.split("+"))
  batches = lambda start: input_pipeline.train_batches(data.train, data.mask_options, global_batch=config.batch_size,
                                                       seed=config.seed, start_step=start,
                                                       prefetch=config.data.prefetch,
                                                       workers=config.data.workers)
  return Workload(objectives, dict(config.objective_weights), data.tokenizer.vocab_size,
                  input_pipeline.example_batch(data.train, data.mask_options), config.num_train_steps, 0,
                  config.data.max_length, batches, lambda start: [], data,
                  f"objectives {config.objectives}, init {config.init or 'random'}")


def finetuning(config: ml_collections.ConfigDict) -> Workload:
  """config.task on its dataset: config.epochs passes (or config.num_train_steps when positive)."""
  data = finetune_data.load(config)
  objective = data.family.objective()
  per_epoch = finetune_data.steps_per_epoch(len(data.train.examples), config.batch_size)
  total = config.num_train_steps if config.num_train_steps > 0 else config.epochs * per_epoch
  if total < 1:
    raise errors.ConfigError(f"config.epochs={config.epochs} gives no training steps: set it to at least 1")
  batches = lambda start: finetune_data.train_batches(data, batch_size=config.batch_size, seed=config.seed,
                                                      start_step=start, total_steps=total,
                                                      prefetch=config.data.prefetch)
  shapes = lambda start: finetune_data.first_batch_of_each_shape(data, batch_size=config.batch_size, seed=config.seed,
                                                                 start_step=start, total_steps=total)
  mean_length = float(np.mean([len(e["input_ids"]) for e in data.train.examples]))
  return Workload((objective,), {objective.name: 1.0}, data.tokenizer.vocab_size, finetune_data.example_batch(data),
                  total, per_epoch, round(mean_length), batches, shapes, data,
                  f"task {config.task.name} on {config.task.dataset or config.task.files} ({len(data.train.examples)} "
                  f"train examples, {per_epoch} steps/epoch), init {config.init or 'random'}, regime {config.regime}")


def build(config: ml_collections.ConfigDict, workdir: Path) -> Workload:
  """The workload of `config`."""
  return finetuning(config) if is_finetuning(config) else pretraining(config, workdir)
