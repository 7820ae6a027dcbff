"""grain input pipelines: rows -> shuffle(seed) -> repeat -> mask(seed, global index) -> batch -> this process's part.

The batch of step s is a pure function of (config, s): it holds global examples [s*B, (s+1)*B) of the shuffled,
repeated corpus, each masked by objectives.masking.example_rng(seed, global index). Process p of P reads rows
[s*B + p*B/P, s*B + (p+1)*B/P) only. So the step is the whole iterator state (resume = start at the restored step),
and batches are identical for any number of devices or hosts. Batches are prepared ahead by grain's threads, or
by worker processes (config.data.workers: masking is Python per row, about 300 us, so threads alone cannot feed a GPU;
-1, the default, chooses them for the host: `worker_count`).
"""

import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import grain
import jax
import ml_collections
import numpy as np
from absl import flags

from encoder import paths
from encoder.errors import ConfigError
from encoder.files import Path
from encoder.tokenizer import load_tokenizer
from launch import stopping
from objectives import masking, pipeline

DEVICE_KEYS_DROPPED = ("word_starts",)  # Host-only fields of the pipeline rows (used by masking).
CORES_PER_TPU_WORKER = 8  # config.data.workers=-1 on a TPU host: a worker process per this many of its cores,
MAX_TPU_WORKERS = 32  # at most this many (docs/pretraining.md#input-at-pod-speed sizes them).
EVAL_SEED_OFFSET = 1  # Evaluation masks use seed + 1, fixed across evaluations.


class Data(NamedTuple):
  """The tokenizer, the unmasked rows of each split and the masking options shared by them."""
  tokenizer: Any
  train: Any  # Random-access rows (objectives.pipeline.PackedExamples).
  eval: Any | None
  mask_options: dict[str, Any]


def load_data(config: ml_collections.ConfigDict, cache_dir: Path) -> Data:
  """Tokenizes (or reads from the cache) the train and eval corpora and prepares the masking options."""
  data = config.data
  names = config.objectives.split("+")
  pipeline.validate(names, data.packing, config.masking.mode)
  tokenizer = load_tokenizer(data.tokenizer)
  rows = lambda files, prepared=None: pipeline.pretraining_examples(
      files=files, tokenizer=tokenizer, max_length=data.max_length, packing=data.packing, cache_dir=cache_dir,
      seed=config.seed, prepared=prepared)
  if data.get("prepared"):  # A directory of objectives.prepare replaces train_files: no tokenizing or token pass.
    train = rows((), paths.resolve_prepared(data.prepared))
  else:
    train = rows(paths.resolve_files(data.train_files, "train_files"))
  eval_files = paths.resolve_files(data.eval_files, "eval_files")
  m = config.masking
  options = pipeline.mask_options(tokenizer, max_predictions=m.max_predictions, rate=m.rate, mode=m.mode,
                                  replacement=m.replacement, mask_prob=m.mask_prob, random_prob=m.random_prob)
  if m.replacement == "unigram":
    options["unigram_probs"] = pipeline.corpus_unigram_probs(train, tokenizer)
  return Data(tokenizer, train, rows(eval_files) if eval_files else None, options)


def _masker(options: dict[str, Any], seed: int):
  def mask(index: int, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    masked = masking.mask_example(row, masking.example_rng(seed, index), **options)
    return {k: v for k, v in masked.items() if k not in DEVICE_KEYS_DROPPED}
  return mask


class Rows(Protocol):
  """Random-access example rows: a list, objectives.pipeline.PackedExamples, or rows read from prepared shards."""

  def __len__(self) -> int: ...

  def __getitem__(self, index: int) -> Mapping[str, Any]: ...


def example_batch(rows: Rows, options: dict[str, Any]) -> dict[str, np.ndarray]:
  """A batch of one masked row: the shapes and dtypes the model is initialized and traced with."""
  return {k: np.asarray(v)[None] for k, v in _masker(options, 0)(0, rows[0]).items()}


def _local_batch(global_batch: int) -> int:
  if global_batch % jax.process_count():
    raise ConfigError(f"batch size {global_batch} is not divisible by the {jax.process_count()} processes")
  return global_batch // jax.process_count()


def _this_process(batched: grain.MapDataset) -> grain.MapDataset:
  """Batches of B/P rows -> every P-th one, from this process's offset: its part of each global batch."""
  return batched[jax.process_index()::jax.process_count()]


def worker_count(configured: int, backend: str | None = None, cores: int | None = None) -> int:
  """config.data.workers -> worker processes: as configured when >= 0; -1 (the default) on a TPU host one per
  CORES_PER_TPU_WORKER of its cores, at most MAX_TPU_WORKERS (a v4 host's 240 vCPUs: 30, a v5e host's 112: 14; one
  process reads and masks ~65k tokens of 128-token rows per CPU-second from a bucket, a v4-32 host needs ~1.1M at
  50% MFU: docs/pretraining.md), elsewhere 0 (threads; a GPU host sets its own, docs/gpu.md)."""
  if configured >= 0:
    return configured
  if configured != -1:
    raise ConfigError(f"config.data.workers={configured}: expected -1 (chosen for the host), 0 (threads) or a number "
                      "of worker processes")
  if (backend or jax.default_backend()) != "tpu":
    return 0
  cores = cores or len(os.sched_getaffinity(0))
  return max(1, min(MAX_TPU_WORKERS, cores // CORES_PER_TPU_WORKER))


def train_batches(rows: Rows, options: dict[str, Any], *, global_batch: int, seed: int, start_step: int,
                  prefetch: int, workers: int = 0) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of the batches of steps start_step, start_step + 1, ... (endless). workers > 0: that many
  processes mask and batch (grain's mp_prefetch; the same batches in the same order); -1: `worker_count`'s choice."""
  if len(rows) == 0:
    raise ConfigError("the training corpus produced no rows; check config.data.train_files")
  workers = worker_count(workers)
  dataset = (grain.MapDataset.source(rows).shuffle(seed=seed).repeat().map_with_index(_masker(options, seed))
             .batch(_local_batch(global_batch), drop_remainder=True))
  dataset = _this_process(dataset)[start_step:].to_iter_dataset(
      grain.ReadOptions(num_threads=max(prefetch, 1), prefetch_buffer_size=max(prefetch, 1)))
  if workers > 0:
    if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; a caller outside an absl app has not parsed.
      flags.FLAGS.mark_as_parsed()
    # The workers ignore SIGTERM: a stop signalled to the whole process group must reach the loop, which saves and
    # then stops them (launch/stopping.py).
    dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers,
                                                               per_worker_buffer_size=max(prefetch, 1)),
                                  worker_init_fn=stopping.ignore_sigterm)
    # Copied out of grain's shared memory: arrays a device buffer aliases would keep its segments past the exit.
    dataset = dataset.map(lambda batch: {k: np.array(v) for k, v in batch.items()})
  return iter(dataset)


def eval_batches(rows: Rows, options: dict[str, Any], *, global_batch: int, seed: int,
                 max_batches: int) -> tuple[int, Iterator[dict[str, np.ndarray]]]:
  """(number of batches, iterator) over the first whole batches of the split (in order, fixed masks)."""
  count = len(rows) // global_batch
  if max_batches >= 0:
    count = min(count, max_batches)
  dataset = (grain.MapDataset.source(rows).map_with_index(_masker(options, seed + EVAL_SEED_OFFSET))
             .batch(_local_batch(global_batch), drop_remainder=True))
  dataset = _this_process(dataset)[:count]
  return count, iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=2)))
