"""Word-sense disambiguation by 1-nearest-neighbour on SemCor sense embeddings, and the framework's scorer.

  python -m tasks.wsd --init hf:all-MiniLM-L6-v2 [--layers 4 last4_mean ...] [--pooling mean first]
                      [--extension none lmms] [--lambdas 0 0.03 ...] [--out DIR] [--cache-dir runs/wsd_cache]
  python -m tasks.wsd score --gold KEY --pred KEY

The first builds sense embeddings from SemCor (cached per init and pooling under --cache-dir), compares every
choice on SemEval-2007, predicts every dataset of Raganato et al. (2017) with the best one, writes the prediction
key files (`<dataset>.key.txt`, `ALL.key.txt`, `ALL.mfs.key.txt`), the table of choices (`choices.md`) and
`result.json` under --out, and prints P/R/F1 per dataset and per POS. `score` is the framework's Scorer.java (except
that an instance missing from gold is an error). Scores print as percentages; the last line is one JSON object.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from configs import paths
from tasks.embeddings import wsd
from tasks.readers import raganato


def score_command(args: argparse.Namespace) -> dict:
  """`score`: P, R and F1 of a prediction key file against a gold key file."""
  result = wsd.score_keys(raganato.read_key_file(args.gold), raganato.read_key_file(args.pred),
                          gold_name=args.gold, pred_name=args.pred)
  for name, short in (("precision", "P"), ("recall", "R"), ("f1", "F1")):
    print(f"{short}=\t{100 * result[name]:.1f}%")
  return result


def write_keys(path: Path, predictions: dict[str, str], prefix: str = "") -> None:
  """One `id key` line per instance whose id starts with `prefix` (removed)."""
  path.write_text("".join(f"{i[len(prefix):]} {key}\n" for i, key in predictions.items() if i.startswith(prefix)))


def predict_command(args: argparse.Namespace) -> dict:
  """Builds, chooses, predicts, writes and prints (module docstring)."""
  from tasks.embeddings.extract import Embedder  # Imported here: `score` needs no model code.
  data_dir = Path(args.data_dir) if args.data_dir else paths.data_dir()
  if data_dir is None:
    raise FileNotFoundError(f"no data directory: pass --data-dir or set ${paths.DATA_ENV}")
  embedder = Embedder.from_init(args.init, max_length=args.max_length, batch_size=args.batch_size)
  log = lambda message: print(message, file=sys.stderr, flush=True)
  result = wsd.evaluate_wsd(embedder, data_dir, cache_dir=None if args.no_cache else args.cache_dir,
                            cache_key=args.init, poolings=args.pooling, layers=args.layers,
                            extensions=args.extension, lambdas=args.lambdas, log=log)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  predictions = result.pop("predictions")
  write_keys(out / "ALL.key.txt", predictions)
  for name in raganato.DATASETS:
    write_keys(out / f"{name}.key.txt", predictions, f"{name}.")
    _, gold = raganato.dataset_paths(data_dir / "wsd_raganato2017", name)
    written = wsd.score_keys(raganato.read_key_file(gold), raganato.read_key_file(out / f"{name}.key.txt"))
    if abs(written["f1"] - result["scores"][raganato.SHORT_NAMES[name]]["f1"]) > 1e-12:
      raise RuntimeError(f"{out / f'{name}.key.txt'} scores {written['f1']} against {gold}, not the evaluated "
                         f"{result['scores'][raganato.SHORT_NAMES[name]]['f1']}")
  write_keys(out / "ALL.mfs.key.txt", result.pop("mfs_predictions"))
  (out / "choices.md").write_text(wsd.format_choices(result["table"]) + "\n")
  (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
  chosen = result["chosen"]
  print(f"chosen on SE07: pooling {chosen['pooling']}, layers {chosen['layers']}, extension {chosen['extension']}, "
        f"lambda {chosen['lambda']:g}; coverage {100 * result['coverage']:.1f}% of ALL instances have a candidate "
        "seen in SemCor")
  print(f"{'':<8}{'P':>7}{'R':>7}{'F1':>7}{'MFS F1':>8}{'n':>6}")
  for name, s in list(result["scores"].items()) + list(result["pos"].items()):
    print(f"{name:<8}{100 * s['precision']:>7.1f}{100 * s['recall']:>7.1f}{100 * s['f1']:>7.1f}"
          f"{100 * result['mfs'][name]:>8.1f}{s['instances']:>6}")
  print(f"wrote {out}/{{ALL,{','.join(raganato.DATASETS)}}}.key.txt, choices.md, result.json")
  return {k: result[k] for k in ("chosen", "all_f1", "se07_f1", "mfs_f1", "coverage", "plain_1nn_last_f1")}


def parser(score: bool) -> argparse.ArgumentParser:
  """The command line of `score` or of the main command (module docstring)."""
  if score:
    root = argparse.ArgumentParser(prog="python -m tasks.wsd score", description="the framework's Scorer.java")
    root.add_argument("--gold", required=True, help="gold key file: 'id key [key ...]' per line")
    root.add_argument("--pred", required=True, help="prediction key file, the same format")
    return root
  root = argparse.ArgumentParser(prog="python -m tasks.wsd", description=__doc__.split("\n")[0])
  root.add_argument("--init", required=True, help="checkpoint: hf:all-MiniLM-L6-v2, hf:/hf/dir or run:/workdir")
  root.add_argument("--layers", nargs="+", default=None,
                    help="layer specs to compare (default: every layer 0..L and last4_mean)")
  root.add_argument("--pooling", nargs="+", default=list(wsd.POOLINGS), choices=wsd.POOLINGS,
                    help="subword pooling of a word's vector")
  root.add_argument("--extension", nargs="+", default=list(wsd.EXTENSIONS), choices=wsd.EXTENSIONS,
                    help="none: plain 1-NN; lmms: cover unseen senses by synset, hypernyms, lexicographer file")
  root.add_argument("--lambdas", nargs="+", type=float, default=list(wsd.LAMBDAS),
                    help="weights of the sense-frequency prior log p(sense) (0: cosine only)")
  root.add_argument("--data-dir", default=None, help="shared data directory (default: $ENCODERLAB_DATA or "
                    "../shared/data)")
  root.add_argument("--cache-dir", default="runs/wsd_cache", help="where SemCor sense sums are cached")
  root.add_argument("--no-cache", action="store_true", help="encode SemCor again and write no cache")
  root.add_argument("--out", default="runs/wsd", help="directory for the key files and the table")
  root.add_argument("--max-length", type=int, default=128, help="subwords per window (longer sentences: windows)")
  root.add_argument("--batch-size", type=int, default=64, help="sentences per encoder batch")
  return root


def main(argv: Sequence[str] | None = None) -> None:
  argv = list(sys.argv[1:] if argv is None else argv)
  score = bool(argv) and argv[0] == "score"
  args = parser(score).parse_args(argv[1:] if score else argv)
  try:
    summary = score_command(args) if score else predict_command(args)
  except (OSError, ValueError) as err:
    sys.exit(f"python -m tasks.wsd: error: {err}")
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
