"""Anisotropy and rogue dimensions of contextual embeddings (spec, "Contextual Embeddings and Word Similarity").

Anisotropy (Ethayarajh, 2019) = the expected cosine of two distinct word instances drawn at random from a corpus:
either estimated from `pairs` random pairs (i != j) or computed exactly over all n(n-1) ordered pairs with the unit
vectors' sum s: sum_{i != j} <u_i, u_j> = |s|^2 - n. Its confidence interval is a percentile bootstrap over the
instances (or over `groups`, e.g. sentences, whose words are not independent): a resample weights instance i by how
often it (its group) was drawn, w_i, and weights a pair by w_i w_j, so the same-instance pairs stay excluded.

Rogue dimensions (Timkey & van Schijndel, 2021): dimension k contributes CC_k = E[u_k v_k / (|u| |v|)] to the
expected cosine, and sum_k CC_k is the anisotropy; a few dimensions with a large mean and variance dominate it.

The command:

  python -m tasks.embeddings.anisotropy --init hf:all-MiniLM-L6-v2 \\
      --input ../shared/data/wikitext-2/raw/wiki.valid.raw [--layers last|all|0,3,6] [--pairs 100000|all] \\
      [--bootstrap 1000] [--seed 0] [--top 5] [--limit N] [--fit-out stats.npz | --standardizer stats.npz]

One text per line, words separated by whitespace (WikiText's tokenization); blank lines and WikiText headings
(` = Title = `) are skipped, long lines are embedded whole (windows). Anisotropy is the expected cosine of two
distinct word instances (`anisotropy` above) with a 95% bootstrap interval over lines (words of one line
are not independent). Standardization fits each dimension's mean and std on the same vectors (saved with
--fit-out), or applies a saved fit (--standardizer). The rogue-dimension report lists the dimensions that contribute
most to the expected cosine before and after. Several layers ("all", "0,3,6") are reported one by one, each
standardized with its own statistics. The last printed line is one JSON object (anisotropy_raw and
anisotropy_standardized of the last layer listed, everything per layer under by_layer).
"""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from encoder import cli, errors
from tasks.embeddings.extract import Embedder
from tasks.embeddings.layers import parse_layers
from tasks.embeddings.standardize import Standardizer
from tasks.readers.lines import ReaderError, numbered_lines

Pairs = int | str  # a number of random pairs, or "all"


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
  """Rows scaled to length 1 (float64); a zero row is an error, as its cosine is undefined."""
  x = np.asarray(vectors, np.float64)
  if x.ndim != 2 or len(x) < 2:
    raise errors.UserError(f"anisotropy needs vectors [n >= 2, H], got shape {x.shape}")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  if not np.all(norms > 0):
    raise errors.UserError(f"vector {int(np.argmin(norms[:, 0]))} is all zeros: its cosine is undefined")
  return x / norms


def sample_pairs(n: int, pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """`pairs` uniform random ordered pairs (i, j) of distinct indices below n."""
  if pairs < 1:
    raise errors.UserError(f"pairs must be a positive number or 'all', got {pairs}")
  rng = np.random.default_rng(seed)
  i = rng.integers(0, n, size=pairs)
  j = rng.integers(0, n - 1, size=pairs)
  return i, j + (j >= i)  # Skip i itself: j is uniform over the other n - 1.


def _resample_weights(rng: np.random.Generator, groups: np.ndarray, rows: int) -> np.ndarray:
  """[rows, n] instance weights: how often each instance's group was drawn in `rows` bootstrap resamples."""
  count = int(groups.max()) + 1
  draws = rng.integers(0, count, size=(rows, count))
  drawn = np.bincount((draws + count * np.arange(rows)[:, None]).ravel(), minlength=rows * count)
  return drawn.reshape(rows, count)[:, groups].astype(np.float64)


def _check_groups(groups, n: int) -> np.ndarray:
  """Group ids 0..G-1 per instance (each instance its own group when None)."""
  if groups is None:
    return np.arange(n)
  groups = np.asarray(groups)
  if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer) or groups.min() < 0:
    raise errors.UserError(f"groups must be {n} non-negative integer ids (one per vector), got {groups.shape} "
                           f"{groups.dtype}")
  return np.unique(groups, return_inverse=True)[1]


def anisotropy(vectors: np.ndarray, *, pairs: Pairs = 100_000, seed: int = 0, bootstrap: int = 1000,
               groups: np.ndarray | None = None, level: float = 0.95, chunk: int = 64) -> dict:
  """Expected cosine of distinct instance pairs: {"mean", "ci_low", "ci_high", "pairs", "instances"}."""
  u = unit_vectors(vectors)
  n = len(u)
  groups = _check_groups(groups, n)
  rng = np.random.default_rng(seed + 1)
  if pairs == "all":
    total = u.sum(axis=0)
    mean, count = (total @ total - n) / (n * (n - 1)), n * (n - 1)

    def stat(w):  # w: [rows, n]; weighted mean over i != j: (|sum w_i u_i|^2 - sum w_i^2) / ((sum w)^2 - sum w^2)
      squares = np.square(w).sum(axis=1)
      return (np.sum(np.square(w @ u), axis=1) - squares) / (np.square(w.sum(axis=1)) - squares)
  elif isinstance(pairs, int) and not isinstance(pairs, bool):
    i, j = sample_pairs(n, pairs, seed)
    cosines = np.einsum("ph,ph->p", u[i], u[j])  # [pairs]
    mean, count = cosines.mean(), pairs

    def stat(w):  # w: [rows, n]; pair p weighs w_i w_j.
      pair_weights = w[:, i] * w[:, j]
      return pair_weights @ cosines / pair_weights.sum(axis=1)
  else:
    raise errors.UserError(f"pairs must be a positive number or 'all', got {pairs!r}")
  samples = np.concatenate([stat(_resample_weights(rng, groups, min(chunk, bootstrap - start)))
                            for start in range(0, bootstrap, chunk)]) if bootstrap > 0 else np.array([mean])
  low, high = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
  return {"mean": float(mean), "ci_low": float(low), "ci_high": float(high), "pairs": count, "instances": n}


def dimension_contributions(vectors: np.ndarray, *, pairs: Pairs = "all", seed: int = 0) -> np.ndarray:
  """CC_k = E[u_k v_k / (|u| |v|)] over distinct pairs, per dimension [H]; they sum to the anisotropy."""
  u = unit_vectors(vectors)
  n = len(u)
  if pairs == "all":
    return (np.square(u.sum(axis=0)) - np.square(u).sum(axis=0)) / (n * (n - 1))
  if isinstance(pairs, str):
    raise errors.UserError(f"pairs must be a positive number or 'all', got {pairs!r}")
  i, j = sample_pairs(n, pairs, seed)
  return np.mean(u[i] * u[j], axis=0)


def rogue_dimensions(vectors: np.ndarray, *, top: int = 5, pairs: Pairs = "all", seed: int = 0) -> list[dict]:
  """The `top` dimensions by contribution to the expected cosine: {"dimension", "contribution", "share" (of the
  summed absolute contributions), "mean", "std"} (the dimension's mean and std over the instances)."""
  contributions = dimension_contributions(vectors, pairs=pairs, seed=seed)
  scale = np.abs(contributions).sum()
  order = np.argsort(-contributions, kind="stable")[:top]
  columns = np.asarray(vectors)[:, order].astype(np.float64)  # [n, top]
  return [{"dimension": int(k), "contribution": float(contributions[k]), "share": float(contributions[k] / scale),
           "mean": float(columns[:, c].mean()), "std": float(columns[:, c].std())} for c, k in enumerate(order)]


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
  out: dict[str, dict[str, dict]] = {}  # layer name -> "raw" | "standardized" -> its anisotropy result.
  for k, name in enumerate(names):
    out[name] = {}
    layer = standardizer if standardizer.mean.ndim == 1 else Standardizer(standardizer.mean[k], standardizer.std[k],
                                                                          standardizer.count)
    for kind in ("raw", "standardized"):
      x = vectors[:, k] if kind == "raw" else layer.apply(vectors[:, k])
      result = anisotropy(x, pairs=args.pairs, seed=args.seed, bootstrap=args.bootstrap, groups=lines)
      out[name][kind] = result | {"rogue_dimensions": rogue_dimensions(x, top=args.top)}
  return out


def print_report(result: dict, count: int, lines: int, args: argparse.Namespace) -> None:
  """The table per layer, then each layer's rogue dimensions raw and standardized."""
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


def _pairs(text: str) -> int | str:
  """--pairs: 'all', or a count >= 1."""
  if text != "all" and not (text.isdigit() and int(text) >= 1):
    raise errors.UserError(f"expected a number of pairs >= 1 or 'all', got {text!r}")
  return text if text == "all" else int(text)


PAIRS = cli.Parsed(_pairs, bad=("0", "some"))


def parser() -> argparse.ArgumentParser:
  """The command line (module docstring)."""
  p = cli.ArgumentParser(prog="python -m tasks.embeddings.anisotropy", description=__doc__.split("\n")[0])
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--input", required=True, help="text file, one text per line, whitespace-separated words")
  p.add_argument("--layers", default="last", help='a layer or mix ("last", "3", "last4_mean", "mean:2,3"), or '
                 'several reported one by one ("0,3,6", "all")')
  p.add_argument("--pairs", type=PAIRS, default="100000", help='random distinct pairs, or "all" (exact, every pair)')
  p.add_argument("--bootstrap", type=cli.integer(1), default=1000,
                 help="bootstrap resamples (over lines) for the 95%% CI")
  p.add_argument("--seed", type=cli.integer(0), default=0)
  p.add_argument("--top", type=cli.integer(1), default=5, help="rogue dimensions to list")
  p.add_argument("--limit", type=cli.integer(1), default=None, help="first N lines only")
  fit = p.add_mutually_exclusive_group()
  fit.add_argument("--fit-out", help="save the standardizer fitted on these vectors (.npz)")
  fit.add_argument("--standardizer", help="apply this saved standardizer instead of fitting one")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  """Measures and prints (module docstring); the last line is one JSON object."""
  args = parser().parse_args(argv)
  lines = read_word_lines(args.input, args.limit)
  embedder = Embedder.from_init(args.init)
  vectors, line_of, names = word_vectors(embedder, lines, args.layers)
  # One layer: a standardizer [H] (usable on any vectors of that layer); several: [k, H].
  standardizer = (Standardizer.load(args.standardizer) if args.standardizer
                  else Standardizer.fit(vectors[:, 0] if len(names) == 1 else vectors))
  if vectors.shape[1:][vectors.ndim - 1 - standardizer.mean.ndim:] != standardizer.mean.shape:
    raise errors.UserError(f"{args.standardizer}: fitted on vectors of shape {standardizer.mean.shape}, --layers "
                                 f"{args.layers} gives {vectors.shape[1:]}")
  if args.fit_out:
    standardizer.save(args.fit_out)
  result = report(vectors, line_of, standardizer, names, args)
  print_report(result, len(vectors), len(lines), args)
  last = result[names[-1]]
  print(json.dumps({"anisotropy_raw": last["raw"]["mean"], "anisotropy_standardized": last["standardized"]["mean"],
                    "words": len(vectors), "lines": len(lines), "layers": args.layers,
                    "standardizer": args.standardizer or "fitted on these vectors", "by_layer": result}))


if __name__ == "__main__":
  errors.run(main)
