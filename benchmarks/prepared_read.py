"""Input throughput of pretraining from a prepared corpus in a bucket, per number of input worker processes.

Prepares WikiText-2 train (objectives.prepare, all-MiniLM-L6-v2's vocabulary, shards of --shard-documents
documents) into --prepared (a gs:// URL; with --emulator, a bucket of the local GCS emulator,
tests/gcs_emulator.py, started here), and the same corpus into a local directory; then, for each count of
--workers (config.data.workers: 0 = grain's threads), times launch.input_pipeline.train_batches over it as a run
does (configs/pretrain.py, rows of --length tokens, nsp_pairs packing, unigram masking, batches of --batch rows, every
row read from the shards, document by document), after one warm-up batch: tokens/s = batches x batch x length /
seconds, the median of --rounds rounds of --batches batches. The local directory gives the same figures without the
bucket. The machine's load average is recorded with them: on a shared machine the processes compete for its cores
(with --emulator the emulator, a Python HTTP server, runs on them too), so the figures are the lower bounds of a
contended host, not a TPU host's.

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
from pathlib import Path
from typing import Iterator

from configs import paths
from encoder import errors

TRAIN = "wikitext-2/raw/wiki.train.raw"


@contextlib.contextmanager
def bucket(emulator: bool, prepared: str | None) -> Iterator[str]:
  """The gs:// URL to prepare into: --prepared, or a directory of the local emulator's bucket (started here)."""
  if not emulator:
    yield prepared
    return
  from tests import gcs_emulator  # pylint: disable=import-outside-toplevel  (a test helper: only with --emulator)
  with gcs_emulator.running():
    yield f"gs://{gcs_emulator.BUCKET}/corpus"


def tokens_per_second(prepared: str, workers: int, length: int, batch: int, batches: int, rounds: int) -> float:
  """Median tokens/s of the pretraining input pipeline reading `prepared` with `workers` processes."""
  # pylint: disable=import-outside-toplevel  (JAX and grain only for this part)
  from configs import pretrain
  from launch import input_pipeline
  config = pretrain.get_config("objectives=mlm+nsp")
  config.data.prepared, config.data.max_length, config.data.eval_files = prepared, length, ""
  with tempfile.TemporaryDirectory(prefix="prepared_read_") as cache:
    data = input_pipeline.load_data(config, Path(cache))
  rates = []
  for r in range(rounds):
    iterator = input_pipeline.train_batches(data.train, data.mask_options, global_batch=batch, seed=r, start_step=0,
                                            prefetch=config.data.prefetch, workers=workers)
    next(iterator)  # Warm-up: worker processes start, shard readers open.
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    rates.append(batches * batch * length / (time.perf_counter() - start))
    if hasattr(iterator, "close"):
      iterator.close()
  return statistics.median(rates)


def main() -> None:
  """Command line: module docstring."""
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--emulator", action="store_true", help="prepare into the local GCS emulator's bucket")
  parser.add_argument("--prepared", help="a gs:// URL to prepare into (without --emulator)")
  parser.add_argument("--workers", default="0,1,2,4", help="comma-separated config.data.workers values")
  parser.add_argument("--length", type=int, default=128, help="tokens per row")
  parser.add_argument("--batch", type=int, default=64, help="rows per batch")
  parser.add_argument("--batches", type=int, default=10, help="batches timed per round")
  parser.add_argument("--rounds", type=int, default=3, help="rounds per workers count (the median is reported)")
  parser.add_argument("--shard-documents", type=int, default=64, help="documents per shard")
  args = parser.parse_args()
  if args.emulator == bool(args.prepared):
    raise errors.UserError("expected --emulator or --prepared gs://bucket/path (one of them)")
  from objectives import prepare  # pylint: disable=import-outside-toplevel
  counts = [int(w) for w in args.workers.split(",")]
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
        result[where][workers] = round(tokens_per_second(target, workers, args.length, args.batch, args.batches,
                                                         args.rounds))
        print(f"{where} workers={workers}: {result[where][workers]:,} tokens/s", flush=True)
  result["load_average"] = [round(x, 2) for x in os.getloadavg()]
  print(json.dumps(result))


if __name__ == "__main__":
  errors.run(main)
