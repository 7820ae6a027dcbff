"""Fine-tuning evaluation: predict a whole split on device, decode on the host, score, write prediction files.

Every step goes through the task's family (`tasks.family`): its device `outputs` (jitted with the model), `tune` (a
decoding threshold chosen on dev and used on test: choices are made on dev, never on test), `decode` and `score`.
Predictions are written to `workdir/predictions/<split>.jsonl` (one record + prediction a line) and the family's
files beside it (`.conll` columns for word tasks, `.labels` lines for sentence tasks), so that any result can be
re-scored independently with `python -m tasks.scoring.score`.
"""

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from encoder.files import Path, atomic_write
from tasks import finetune_data
from tasks.family import TaskFamily


def device_outputs(model, family: TaskFamily) -> Callable[[Any, dict[str, jax.Array]], jax.Array]:
  """(params, batch) -> the family's decodable outputs for every row (jit it)."""
  def outputs(params, batch):
    return family.outputs(model.apply({"params": params}, batch, train=False)[family.name], batch)
  return outputs


def raw_predictions(predict: Callable, params: Any, split: finetune_data.Split, *, batch_size: int,
                    buckets: Sequence[int], widths: dict[str, Callable[[int], int]], to_device: Callable
                    ) -> list[np.ndarray]:
  """Per-example device outputs of a whole split, in split order (padding rows and widths cut off). Each batch is
  dispatched before the previous one is fetched (jax dispatch is asynchronous), so the host's collating and copying
  overlap the device's forward pass."""
  out: list[Any] = [None] * len(split.examples)

  def collect(indices: list[int], outputs: jax.Array) -> None:
    values = np.asarray(jax.device_get(outputs))
    for row, i in enumerate(indices):
      width = next((len(split.examples[i][field]) for field in widths), None)  # Word / span rows: cut the padding.
      out[i] = values[row] if width is None else values[row, :width]

  pending = None
  for indices, local in finetune_data.eval_batches(split, batch_size=batch_size, buckets=buckets, widths=widths):
    outputs = predict(params, to_device(local))
    if pending is not None:
      collect(*pending)
    pending = indices, outputs
  if pending is not None:
    collect(*pending)
  return out


def per_record(split: finetune_data.Split, values: Sequence[Any]) -> list[Any]:
  """Per-example values (examples, raw outputs) as the family reads them per record: as they are, or the list of a
  record's examples' values when a record is several examples (`Split.groups`)."""
  return list(values) if split.groups is None else [[values[i] for i in group] for group in split.groups]


def tune(family: TaskFamily, split: finetune_data.Split, raw: Sequence[np.ndarray]) -> float | None:
  """The family's decoding threshold chosen on this (dev) split."""
  return family.tune(split.records, per_record(split, split.examples), per_record(split, raw))


def decode(family: TaskFamily, split: finetune_data.Split, raw: Sequence[np.ndarray],
           threshold: float | None = None) -> list[Any]:
  """Raw outputs -> one prediction per record, as the scorer reads them."""
  return [family.decode(r, example, threshold)
          for r, example in zip(per_record(split, raw), per_record(split, split.examples))]


def score_split(family: TaskFamily, split: finetune_data.Split, predictions: Sequence[Any]) -> dict[str, float]:
  """The family's scores of a split (fractions), {} when it has no labels."""
  return family.score(split.records, predictions) if family.has_labels(split.records) else {}


def write_predictions(directory: Path, family: TaskFamily, split: finetune_data.Split,
                      predictions: Sequence[Any]) -> list[Path]:
  """predictions/<split>.jsonl and the family's files beside it, each written atomically."""
  directory.mkdir(parents=True, exist_ok=True)
  files = {"jsonl": "".join(json.dumps({**record, "prediction": prediction}, ensure_ascii=False) + "\n"
                            for record, prediction in zip(split.records, predictions))}
  files |= family.prediction_files(split.records, predictions)
  paths = [directory / f"{split.name}.{suffix}" for suffix in files]
  for path, text in zip(paths, files.values()):
    atomic_write(path, text)
  return paths


def make_evaluator(data: finetune_data.TaskData, predict: Callable, *, batch_size: int, to_device: Callable):
  """(evaluate_dev(params) -> {"eval/<metric>": value}, final(params, workdir) -> {"dev", "test", ...,
  "examples_per_second": {split: examples (QA: windows) per second of forward passes and decoding}})."""
  family = data.family
  run = lambda params, split: raw_predictions(predict, params, split, batch_size=batch_size, buckets=data.buckets,
                                              widths=data.widths, to_device=to_device)

  def evaluate_dev(params) -> dict[str, float]:
    raw = run(params, data.eval)
    threshold = tune(family, data.eval, raw)
    scores = score_split(family, data.eval, decode(family, data.eval, raw, threshold))
    return {f"eval/{k}": float(v) for k, v in scores.items()} | (
        {} if threshold is None else {"eval/threshold": threshold})

  def final(params, workdir: Path, write_files: bool) -> dict[str, Any]:
    started = time.perf_counter()
    raw = run(params, data.eval)
    threshold = tune(family, data.eval, raw)
    results: dict[str, Any] = {"threshold": threshold} if threshold is not None else {}
    results["examples_per_second"] = {}
    for split, split_raw in ((data.eval, raw), (data.test, None)):
      if split is None:
        continue
      started = started if split_raw is not None else time.perf_counter()
      predictions = decode(family, split, split_raw if split_raw is not None else run(params, split), threshold)
      results["examples_per_second"][split.name] = len(split.examples) / (time.perf_counter() - started)
      results[split.name] = score_split(family, split, predictions)
      if write_files:
        write_predictions(workdir / "predictions", family, split, predictions)
    return results
  return evaluate_dev, final


def write_results(workdir: Path, results: dict[str, Any]) -> None:
  """workdir/results.json (process 0 only), replaced atomically so a kill never leaves half a file."""
  if jax.process_index() == 0:
    atomic_write(workdir / "results.json", json.dumps(results, indent=2) + "\n")


