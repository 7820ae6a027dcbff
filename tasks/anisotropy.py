"""Anisotropy of a checkpoint's word vectors on a text file, raw and standardized, with the rogue dimensions.

  python -m tasks.anisotropy --init hf:all-MiniLM-L6-v2 --input ../shared/data/wikitext-2/raw/wiki.valid.raw \\
      [--layers last|all|0,3,6] [--pairs 100000|all] [--bootstrap 1000] [--seed 0] [--top 5] [--limit N] \\
      [--fit-out stats.npz | --standardizer stats.npz]

One text per line, words separated by whitespace (WikiText's tokenization); blank lines and WikiText headings
(` = Title = `) are skipped, long lines are embedded whole (windows). Anisotropy is the expected cosine of two
distinct word instances (tasks.embeddings.anisotropy) with a 95% bootstrap interval over lines (words of one line
are not independent). Standardization fits each dimension's mean and std on the same vectors (saved with
--fit-out), or applies a saved fit (--standardizer). The rogue-dimension report lists the dimensions that contribute
most to the expected cosine before and after. Several layers ("all", "0,3,6") are reported one by one, each
standardized with its own statistics. The last printed line is one JSON object (anisotropy_raw and
anisotropy_standardized of the last layer listed, everything per layer under by_layer).
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from encoder.hf_checkpoint import CheckpointError
from tasks.embeddings import anisotropy as aniso
from tasks.embeddings.extract import Embedder
from tasks.embeddings.layers import parse_layers
from tasks.embeddings.standardize import Standardizer
from tasks.readers.lines import ReaderError, numbered_lines


def read_word_lines(path: str | Path, limit: int | None = None) -> list[list[str]]:
  """Whitespace-separated words of each non-blank, non-heading line (at most `limit` lines)."""
  if not Path(path).is_file():
    raise FileNotFoundError(f"{path}: no such file")
  out = []
  for _, line in numbered_lines(path):
    text = line.strip()
    if text and not (text.startswith("= ") and text.endswith(" =")):
      out.append(text.split())
      if limit is not None and len(out) == limit:
        break
  if not out:
    raise ReaderError(path, 1, "at least one non-blank line that is not a ' = Heading = ' line, found none")
  return out


def word_vectors(embedder: Embedder, lines: list[list[str]], layers: str) -> tuple[np.ndarray, np.ndarray, list]:
  """(vectors [words, k, H] in line order, the line of each word, the name of each of the k layers or mixes);
  filled in place as the sentences stream in, so the corpus is held once."""
  counts = np.array([len(words) for words in lines])
  offsets = np.concatenate([[0], np.cumsum(counts)])
  shape = embedder.feature_shape(layers)
  names = [layers] if len(shape) == 1 else [str(i) for i in parse_layers(layers).indices(embedder.num_layers)]
  vectors = np.empty((offsets[-1], len(names), shape[-1]), np.float32)
  for index, array in embedder.iter_encode_words(lines, layers=layers):
    vectors[offsets[index]:offsets[index + 1]] = array.reshape(len(array), len(names), shape[-1])
  return vectors, np.repeat(np.arange(len(lines)), counts), names


def report(vectors: np.ndarray, lines: np.ndarray, standardizer: Standardizer, names: list[str],
           args: argparse.Namespace) -> dict:
  """Per layer: anisotropy and rogue dimensions of the raw and standardized vectors [words, k, H]."""
  out = {}
  for k, name in enumerate(names):
    out[name] = {}
    layer = standardizer if standardizer.mean.ndim == 1 else Standardizer(standardizer.mean[k], standardizer.std[k],
                                                                          standardizer.count)
    for kind in ("raw", "standardized"):
      x = vectors[:, k] if kind == "raw" else layer.apply(vectors[:, k])
      result = aniso.anisotropy(x, pairs=args.pairs, seed=args.seed, bootstrap=args.bootstrap, groups=lines)
      out[name][kind] = result | {"rogue_dimensions": aniso.rogue_dimensions(x, top=args.top)}
  return out


def print_report(result: dict, count: int, lines: int, args: argparse.Namespace) -> None:
  first = next(iter(result.values()))["raw"]
  print(f"{count} word vectors of {lines} lines, layers {args.layers}, {first['pairs']} pairs, "
        f"{args.bootstrap} bootstrap resamples over lines")
  print(f"{'layer':12}{'raw':>9}  {'95% CI':18}{'standardized':>13}  {'95% CI':18}top raw dimension (share)")
  for name, r in result.items():
    raw, z, top = r["raw"], r["standardized"], r["raw"]["rogue_dimensions"][0]
    print(f"{name:12}{raw['mean']:9.4f}  [{raw['ci_low']:.4f}, {raw['ci_high']:.4f}]  {z['mean']:11.4f}  "
          f"[{z['ci_low']:.4f}, {z['ci_high']:.4f}]  {top['dimension']} ({top['share']:.1%})")
  for name, r in result.items():
    for kind in ("raw", "standardized"):
      print(f"rogue dimensions, layer {name}, {kind} (contribution to the expected cosine; share of the sum of "
            f"|contributions|):")
      for d in r[kind]["rogue_dimensions"]:
        print(f"  dim {d['dimension']:4d}  contribution {d['contribution']:8.4f}  share {d['share']:6.1%}  "
              f"mean {d['mean']:8.3f}  std {d['std']:7.3f}")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m tasks.anisotropy", description=__doc__.split("\n")[0])
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--input", required=True, help="text file, one text per line, whitespace-separated words")
  p.add_argument("--layers", default="last", help='a layer or mix ("last", "3", "last4_mean", "mean:2,3"), or '
                 'several reported one by one ("0,3,6", "all")')
  p.add_argument("--pairs", default="100000", help='random distinct pairs, or "all" (exact, every pair)')
  p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (over lines) for the 95%% CI")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--top", type=int, default=5, help="rogue dimensions to list")
  p.add_argument("--limit", type=int, default=None, help="first N lines only")
  fit = p.add_mutually_exclusive_group()
  fit.add_argument("--fit-out", help="save the standardizer fitted on these vectors (.npz)")
  fit.add_argument("--standardizer", help="apply this saved standardizer instead of fitting one")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  args = parser().parse_args(argv)
  try:
    if args.pairs != "all":
      if not args.pairs.isdigit() or int(args.pairs) < 1:
        raise ValueError(f"--pairs must be a positive number or 'all', got {args.pairs!r}")
      args.pairs = int(args.pairs)
    lines = read_word_lines(args.input, args.limit)
    embedder = Embedder.from_init(args.init)
    vectors, line_of, names = word_vectors(embedder, lines, args.layers)
    # One layer: a standardizer [H] (usable on any vectors of that layer); several: [k, H].
    standardizer = (Standardizer.load(args.standardizer) if args.standardizer
                    else Standardizer.fit(vectors[:, 0] if len(names) == 1 else vectors))
    if vectors.shape[1:][vectors.ndim - 1 - standardizer.mean.ndim:] != standardizer.mean.shape:
      raise ValueError(f"{args.standardizer}: fitted on vectors of shape {standardizer.mean.shape}, --layers "
                       f"{args.layers} gives {vectors.shape[1:]}")
    if args.fit_out:
      standardizer.save(args.fit_out)
    result = report(vectors, line_of, standardizer, names, args)
  except (ReaderError, FileNotFoundError, CheckpointError, ValueError) as err:
    sys.exit(f"error: {err}")
  print_report(result, len(vectors), len(lines), args)
  last = result[names[-1]]
  print(json.dumps({"anisotropy_raw": last["raw"]["mean"], "anisotropy_standardized": last["standardized"]["mean"],
                    "words": len(vectors), "lines": len(lines), "layers": args.layers,
                    "standardizer": args.standardizer or "fitted on these vectors", "by_layer": result}))


if __name__ == "__main__":
  main()
