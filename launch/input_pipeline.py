"""The host side of pretraining's input: objectives.data's rows -> batches -> this process's part -> prefetched.

objectives.data says which rows a step reads and how they are masked (the batch of step s is a pure function of
(config, s)); here they are batched, process p of P keeps rows [s*B + p*B/P, s*B + (p+1)*B/P) of global batch s only,
and batches are prepared ahead by grain's threads, or by worker processes (config.data.workers: masking is Python per
row, about 300 us, so threads alone cannot feed a GPU; -1, the default, chooses them for the host: `worker_count`).
So the step is the whole iterator state (resume = start at the restored step), and batches are identical for any
number of devices or hosts.
"""

import os
from collections.abc import Iterator
from typing import Any

import grain
import jax
import numpy as np
from absl import flags

from encoder.errors import ConfigError
from launch import stopping
from objectives import data as pretraining_data

CORES_PER_TPU_WORKER = 8  # config.data.workers=-1 on a TPU host: a worker process per this many of its cores,
MAX_TPU_WORKERS = 32  # at most this many (docs/pretraining.md#input-at-pod-speed sizes them).


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


def train_batches(rows: pretraining_data.Rows, options: dict[str, Any], *, global_batch: int, seed: int,
                  start_step: int, prefetch: int, workers: int = 0) -> Iterator[dict[str, np.ndarray]]:
  """This process's rows of the batches of steps start_step, start_step + 1, ... (endless). workers > 0: that many
  processes mask and batch (grain's mp_prefetch; the same batches in the same order); -1: `worker_count`'s choice."""
  dataset = pretraining_data.train_rows(rows, options, seed=seed).batch(_local_batch(global_batch),
                                                                         drop_remainder=True)
  workers = worker_count(workers)
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


def eval_batches(rows: pretraining_data.Rows, options: dict[str, Any], *, global_batch: int, seed: int,
                 max_batches: int) -> tuple[int, Iterator[dict[str, np.ndarray]]]:
  """(number of batches, iterator) over the first whole batches of the split (in order, fixed masks)."""
  count = len(rows) // global_batch
  if max_batches >= 0:
    count = min(count, max_batches)
  dataset = pretraining_data.eval_rows(rows, options, seed=seed).batch(_local_batch(global_batch),
                                                                        drop_remainder=True)
  dataset = _this_process(dataset)[:count]
  return count, iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=2)))
