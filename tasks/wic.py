"""Word similarity in context on WiC: every choice's train and dev accuracy, and the dev accuracy of the choice
made on train (tasks.embeddings.wic).

  python -m tasks.wic --init hf:all-MiniLM-L6-v2 [--data DIR] [--pooling mean|first] [--folds 5] [--seed 0]

DIR holds train/train.{data,gold}.txt and dev/dev.{data,gold}.txt (default: the data directory's wic/). Choices:
a cosine threshold on one layer (0 = embeddings .. L, or the mean of the last four), raw or z-scored with the WiC
train sentences' statistics, or a logistic regression on the cosines of every layer; the one with the best
cross-validated train accuracy (folds by lemma) is refitted on train and reported on dev. The last printed line is
one JSON object.
"""

import argparse
import json
import sys
from collections.abc import Sequence

from configs import paths
from encoder.hf_checkpoint import CheckpointError
from tasks.embeddings import wic
from tasks.embeddings.extract import Embedder
from tasks.readers.lines import ReaderError


def print_table(result: dict) -> None:
  """Every choice: train accuracy (fitted on all of train), cross-validated train accuracy, dev accuracy."""
  print(f"{'choice':58}{'train':>7}{'train cv':>10}{'dev':>7}  threshold")
  for row in result["table"]:
    mark = " <- chosen" if row["method"] == result["method"] else ""
    threshold = f"  {row['threshold']:.4f}" if "threshold" in row else ""
    print(f"{row['method']:58}{row['train']:7.1f}{row['train_cv']:10.1f}{row['dev']:7.1f}{threshold}{mark}")
  single = result["single_cosine"]
  print(f"chosen on train: {result['method']} -> dev accuracy {result['dev_accuracy']:.1f} "
        f"({result['dev_pairs']} pairs); best single cosine on train: {single['method']} "
        f"(threshold {single['threshold']:.4f}) -> dev {single['dev']:.1f}")
  target = result["target_only"]
  print(f"best on train with the target words' vectors only: {target['method']} -> dev {target['dev']:.1f}")
  print(f"standardizer: {result['standardizer']}")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m tasks.wic", description=__doc__.split("\n")[0])
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--data", help="the WiC directory (default: the data directory's wic/)")
  p.add_argument("--pooling", default="mean", choices=("mean", "first"), help="subwords -> word vector")
  p.add_argument("--folds", type=int, default=wic.FOLDS, help="cross-validation folds on train (split by lemma)")
  p.add_argument("--seed", type=int, default=0, help="assignment of lemmas to folds")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  args = parser().parse_args(argv)
  if args.folds < 2:
    sys.exit(f"error: --folds {args.folds} must be at least 2")
  try:
    data = args.data or paths.data_file("wic")
    result = wic.evaluate_wic(Embedder.from_init(args.init), data, pooling=args.pooling, folds=args.folds,
                              seed=args.seed, log=lambda message: print(message, file=sys.stderr, flush=True))
  except (ReaderError, FileNotFoundError, CheckpointError, ValueError) as err:
    sys.exit(f"error: {err}")
  print_table(result)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
