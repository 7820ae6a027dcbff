"""Input throughput of pretraining from a prepared corpus in a bucket, per number of input worker processes.

Prepares WikiText-2 train (objectives.prepare, all-MiniLM-L6-v2's vocabulary, shards of --shard-documents
documents) into --prepared (a gs:// URL; with --emulator, a bucket of the local GCS emulator,
tests/gcs_emulator.py, started here), and the same corpus into a local directory; then, for each count of
--workers (config.data.workers: 0 = grain's threads), times launch.input_pipeline.train_batches over it as a run
does (configs/pretrain.py, rows of --length tokens, nsp_pairs packing, unigram masking, batches of --batch rows, every
row read from the shards, document by document), after 1 + 2 x workers warm-up batches, the median of --rounds rounds of
--batches batches: tokens_per_s (per wall second), tokens_per_cpu_s (per CPU-second of this process and its worker
processes: what the pipeline costs, which other processes sharing the cores do not change) and, with --emulator,
emulator_cpu_s_per_million_tokens (the emulator's CPU, a Python HTTP server on the same cores, which real GCS does not
spend here). The local directory gives the same figures without the bucket. The load average is recorded with them:
on a shared machine the wall figures are those of a contended host, not a TPU host's.

  python -m benchmarks.prepared_read --emulator [--workers 0,1,2,4] [--length 128] [--batch 64]
  python -m benchmarks.prepared_read --prepared gs://my-bucket/corpus-bench   # a real bucket (credentials needed)
Last line: one JSON object ({"gs": {workers: tokens/s}, "local": {...}, "load_average": [...], ...}).
"""

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from encoder import cli, errors, paths

TRAIN = "wikitext-2/raw/wiki.train.raw"


@contextlib.contextmanager
def bucket(emulator: bool, prepared: str | None) -> Iterator[str]:
  """The gs:// URL to prepare into: --prepared, or a directory of the local emulator's bucket (started here)."""
  if not emulator:
    if prepared is None:
      raise errors.UserError("expected --emulator or --prepared gs://bucket/path (one of them)")
    yield prepared
    return
  from tests import gcs_emulator  # pylint: disable=import-outside-toplevel  (a test helper: only with --emulator)
  with gcs_emulator.running():
    yield f"gs://{gcs_emulator.BUCKET}/corpus"


def cpu_seconds() -> tuple[float, float]:
  """(CPU seconds of this process and its descendants but the emulator, CPU seconds of the emulator) so far;
  descendants that exited are not counted, so a timed window must end before the workers are closed."""
  import psutil  # pylint: disable=import-outside-toplevel
  me = psutil.Process()
  pipeline = emulator = 0.0
  for process in [me, *me.children(recursive=True)]:
    try:
      times = process.cpu_times()
      used = times.user + times.system
      if "tests.gcs_emulator" in " ".join(process.cmdline()):
        emulator += used
      else:
        pipeline += used
    except psutil.Error:  # Exited in between.
      pass
  return pipeline, emulator


def throughput(prepared: str, workers: int, length: int, batch: int, batches: int, rounds: int) -> dict[str, float]:
  """Median over rounds of the pretraining input pipeline reading `prepared` with `workers` processes: tokens per
  wall second, tokens per CPU-second of the pipeline's processes, and the emulator's CPU-seconds per million tokens."""
  # pylint: disable=import-outside-toplevel  (JAX and grain only for this part)
  from configs import pretrain
  from launch import input_pipeline
  from objectives import data as pretraining_data
  config = pretrain.get_config("objectives=mlm+nsp")
  config.data.prepared, config.data.max_length, config.data.eval_files = prepared, length, ""
  with tempfile.TemporaryDirectory(prefix="prepared_read_") as cache:
    data = pretraining_data.load(config, cache_dir=Path(cache))
  wall, cpu, server = [], [], []
  for r in range(rounds):
    iterator = input_pipeline.train_batches(data.train, data.mask_options, global_batch=batch, seed=r, start_step=0,
                                            prefetch=config.data.prefetch, workers=workers)
    for _ in range(1 + 2 * workers):  # Warm-up: every worker starts and opens the shards (its one-time sha256 check
      next(iterator)  # of each, objectives/prepared.py), which a long run pays once; the window measures the rest.
    start, (pipeline, emulator) = time.perf_counter(), cpu_seconds()
    for _ in range(batches):
      next(iterator)
    seconds, (pipeline_end, emulator_end) = time.perf_counter() - start, cpu_seconds()
    tokens = batches * batch * length
    wall.append(tokens / seconds)
    cpu.append(tokens / (pipeline_end - pipeline))
    server.append((emulator_end - emulator) / tokens * 1e6)
    if hasattr(iterator, "close"):
      iterator.close()
  return {"tokens_per_s": round(statistics.median(wall)), "tokens_per_cpu_s": round(statistics.median(cpu)),
          "emulator_cpu_s_per_million_tokens": round(statistics.median(server), 2)}


def main() -> None:
  """Command line: module docstring."""
  parser = cli.ArgumentParser(prog="python -m benchmarks.prepared_read", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--emulator", action="store_true", help="prepare into the local GCS emulator's bucket")
  parser.add_argument("--prepared", help="a gs:// URL to prepare into (without --emulator)")
  parser.add_argument("--workers", type=cli.integers(0), default="0,1,2,4",
                      help="comma-separated config.data.workers values")
  parser.add_argument("--length", type=cli.integer(8), default=128, help="tokens per row")
  parser.add_argument("--batch", type=cli.integer(1), default=64, help="rows per batch")
  parser.add_argument("--batches", type=cli.integer(1), default=10, help="batches timed per round")
  parser.add_argument("--rounds", type=cli.integer(1), default=3,
                      help="rounds per workers count (the median is reported)")
  parser.add_argument("--shard-documents", type=cli.integer(1), default=64, help="documents per shard")
  args = parser.parse_args()
  if args.emulator == bool(args.prepared):
    raise errors.UserError("expected --emulator or --prepared gs://bucket/path (one of them)")
  from objectives import prepare  # pylint: disable=import-outside-toplevel
  counts = list(args.workers)
  text = str(paths.data_file(TRAIN))
  result = {"length": args.length, "batch": args.batch, "batches": args.batches, "rounds": args.rounds,
            "cores": len(os.sched_getaffinity(0)), "emulator": args.emulator}
  with tempfile.TemporaryDirectory(prefix="prepared_read_") as tmp, bucket(args.emulator, args.prepared) as url:
    sources = {"gs": url, "local": str(Path(tmp) / "corpus")}
    for where, target in sources.items():
      metadata = prepare.prepare([text], "all-MiniLM-L6-v2", target, shard_documents=args.shard_documents)
      result[f"{where}_shards"] = len(metadata["shards"])
    result["tokens"] = metadata["tokens"]
    for where, target in sources.items():
      result[where] = {}
      for workers in counts:
        result[where][workers] = throughput(target, workers, args.length, args.batch, args.batches, args.rounds)
        print(f"{where} workers={workers}: {result[where][workers]}", flush=True)
  result["load_average"] = [round(x, 2) for x in os.getloadavg()]  # Other processes on this machine's cores.
  print(json.dumps(result))


if __name__ == "__main__":
  errors.run(main)
