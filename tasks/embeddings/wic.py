"""Word similarity in context, evaluated on WiC (spec, "Contextual Embeddings and Word Similarity").

A pair's similarity is the cosine of the two target words' contextual vectors (each the mean of its subwords), raw or
standardized (z-scored per layer with the mean and std of every word vector of the WiC train sentences, spec eq.
z = (x - mu) / sigma; a layer mix of z-scored vectors mixes the z-scored layers), from one layer (0 = embeddings ..
L) or the mean of the last four. "Same sense" is predicted when the cosine reaches a threshold that maximizes train
accuracy. Besides these single cosines, logistic regressions fitted on train combine the cosines of every layer
(raw and z-scored), optionally with the cosines of the two contexts (the mean vector of each sentence's other words:
how similar the two sentences are, which WiC's same-sense pairs also tend to be); the context-only regression is
listed to show how much of a score comes from the sentences rather than the target words.

Every choice is made on TRAIN, never on dev: the method (feature and threshold, or regression) with the best 5-fold
cross-validated train accuracy, folds split by lemma (most dev lemmas never occur in train), is refitted on all of
train and reported on dev. The table shows every choice's train accuracy (fitted on all of train), its
cross-validated train accuracy and its dev accuracy.

The command:

  python -m tasks.embeddings.wic --init hf:all-MiniLM-L6-v2 [--data DIR] [--pooling mean|first] [--folds 5] [--seed 0]

DIR holds train/train.{data,gold}.txt and dev/dev.{data,gold}.txt (default: the data directory's wic/). Choices:
a cosine threshold on one layer (0 = embeddings .. L, or the mean of the last four), raw or z-scored with the WiC
train sentences' statistics, or a logistic regression on the cosines of every layer; the one with the best
cross-validated train accuracy (folds by lemma) is refitted on train and reported on dev. The last printed line is
one JSON object.
"""

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from encoder import cli, errors, paths
from tasks.embeddings.extract import Embedder
from tasks.embeddings.layers import select_layers
from tasks.embeddings.standardize import Standardizer
from tasks.readers.wic import read_wic_split

FOLDS = 5
L2 = 1.0  # Logistic-regression penalty on standardized features (weak: 5,428 examples, at most 32 features).
Log = Callable[[str], None] | None


@dataclasses.dataclass
class PairVectors:
  """Every layer's vectors of the WiC pairs' target words and contexts."""
  target_a: np.ndarray  # [pairs, num_layers + 1, hidden]: the target word in sentence 1.
  target_b: np.ndarray  # [pairs, num_layers + 1, hidden]
  context_a: np.ndarray  # [pairs, num_layers + 1, hidden]: the mean of sentence 1's other words (0 if none).
  context_b: np.ndarray
  labels: np.ndarray  # [pairs] bool: same sense.
  lemmas: list[str]


def embed_pairs(embedder, records: Sequence[dict], *, pooling: str = "mean") -> tuple[PairVectors, Standardizer]:
  """Encodes each distinct sentence once (every layer); returns the pairs' vectors and a standardizer fitted on
  every word vector of these sentences (each distinct sentence counted once)."""
  sentences: dict[tuple[str, ...], int] = {}
  for record in records:
    for side in "ab":
      sentences.setdefault(tuple(record[f"words_{side}"]), len(sentences))
  wanted: dict[int, set[int]] = {}  # sentence -> target word indices
  for record in records:
    for side in "ab":
      wanted.setdefault(sentences[tuple(record[f"words_{side}"])], set()).add(record[f"index_{side}"])
  rows: dict[tuple[int, int], np.ndarray] = {}  # (sentence, index) -> (target [L + 1, H], context [L + 1, H])

  def stream() -> Iterable[np.ndarray]:
    for sentence, vectors in embedder.iter_encode_words(list(sentences), layers="all", pooling=pooling):
      vectors = np.asarray(vectors, np.float32)  # [words, L + 1, H]
      total = vectors.sum(axis=0, dtype=np.float64)
      for index in wanted[sentence]:
        others = max(len(vectors) - 1, 1)
        rows[sentence, index] = np.stack([vectors[index], ((total - vectors[index]) / others).astype(np.float32)])
      yield vectors

  standardizer = Standardizer.fit_batches(stream())

  def take(side: str, part: int) -> np.ndarray:  # part 0: target, 1: context
    return np.stack([rows[sentences[tuple(r[f"words_{side}"])], r[f"index_{side}"]][part] for r in records])

  pairs = PairVectors(take("a", 0), take("b", 0), take("a", 1), take("b", 1),
                      np.array([bool(r["label"]) for r in records]), [r["lemma"] for r in records])
  return pairs, standardizer


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Cosine of matching rows [..., H] (0 where a vector is all zeros)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
  return np.sum(a * b, axis=-1) / np.where(norms > 0, norms, 1.0)


def views(num_layers: int) -> list[str]:
  """The layer choices: every single layer (0 = embedding output .. L) and the mean of the last four blocks."""
  return [str(layer) for layer in range(num_layers + 1)] + (["last4_mean"] if num_layers >= 4 else [])


def pair_features(pairs: PairVectors, standardizer: Standardizer) -> dict[str, np.ndarray]:
  """Cosine features [pairs] by name: "target|context <view> raw|z" for every view."""
  features = {}
  num_layers = pairs.target_a.shape[1] - 1
  for part, (a, b) in {"target": (pairs.target_a, pairs.target_b), "context": (pairs.context_a,
                                                                                pairs.context_b)}.items():
    for scale, (x, y) in {"raw": (a, b), "z": (standardizer.apply(a), standardizer.apply(b))}.items():
      for view in views(num_layers):
        features[f"{part} {view} {scale}"] = cosine(select_layers(x, view), select_layers(y, view))
  return features


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
  """(threshold, accuracy) maximizing the accuracy of predicting "same" when score >= threshold; the threshold lies
  halfway between two distinct scores (first of equally good ones)."""
  order = np.argsort(scores, kind="stable")
  s, y = np.asarray(scores)[order], np.asarray(labels, bool)[order]
  n = len(s)
  # Cut before position k (0..n): positions < k predicted "different", >= k "same".
  correct = np.concatenate([[0], np.cumsum(~y)]) + (y.sum() - np.concatenate([[0], np.cumsum(y)]))
  allowed = np.concatenate([[True], s[1:] > s[:-1], [True]])  # Never cut between equal scores.
  k = int(np.argmax(np.where(allowed, correct, -1)))
  threshold = -np.inf if k == 0 else np.inf if k == n else (s[k - 1] + s[k]) / 2
  return float(threshold), float(correct[k] / n)


@dataclasses.dataclass(frozen=True)
class Logistic:
  """Logistic regression on standardized features: p(same) = sigmoid(((x - mean) / std) . w + b)."""
  mean: np.ndarray
  std: np.ndarray
  weights: np.ndarray  # [features + 1], the bias last.

  def predict(self, x: np.ndarray) -> np.ndarray:
    """True ("same sense") where p(same) > 0.5."""
    return _design(x, self.mean, self.std) @ self.weights > 0


def _design(x, mean, std) -> np.ndarray:
  return np.concatenate([(x - mean) / std, np.ones((len(x), 1))], axis=1)


def fit_logistic(x: np.ndarray, labels: np.ndarray, *, l2: float = L2, steps: int = 50) -> Logistic:
  """Newton's method on the L2-penalized log loss (the bias unpenalized) until the step is negligible."""
  x = np.asarray(x, np.float64)
  mean, std = x.mean(axis=0), x.std(axis=0)
  std = np.where(std > 0, std, 1.0)
  design, y = _design(x, mean, std), np.asarray(labels, np.float64)
  penalty = l2 * np.eye(design.shape[1])
  penalty[-1, -1] = 0.0
  w = np.zeros(design.shape[1])
  for _ in range(steps):
    p = 1 / (1 + np.exp(-design @ w))
    step = np.linalg.solve((design * (p * (1 - p))[:, None]).T @ design + penalty,
                           design.T @ (p - y) + penalty @ w)
    w -= step
    if np.max(np.abs(step)) < 1e-10:
      break
  return Logistic(mean, std, w)


def lemma_folds(lemmas: Sequence[str], folds: int = FOLDS, seed: int = 0) -> np.ndarray:
  """A fold id per pair, all pairs of one lemma in the same fold (lemmas shuffled with `seed`, dealt round-robin)."""
  names = sorted(set(lemmas))
  shuffled = np.random.default_rng(seed).permutation(len(names))
  fold_of = {names[i]: position % folds for position, i in enumerate(shuffled)}
  return np.array([fold_of[lemma] for lemma in lemmas])


@dataclasses.dataclass(frozen=True)
class Method:
  """One choice: a threshold on one cosine feature, or a logistic regression on several."""
  name: str
  features: tuple[str, ...]
  kind: str  # "threshold" or "logistic"

  def fit(self, features: dict[str, np.ndarray], labels: np.ndarray) -> tuple[Callable[[dict], np.ndarray], float]:
    """Fitted on these pairs: (predictor of "same sense" from another set's features, threshold or NaN)."""
    if self.kind == "threshold":
      (name,) = self.features
      threshold, _ = best_threshold(features[name], labels)
      return (lambda other: other[name] >= threshold), threshold
    model = fit_logistic(self.matrix(features), labels)
    return (lambda other: model.predict(self.matrix(other))), float("nan")

  def matrix(self, features: dict[str, np.ndarray]) -> np.ndarray:
    return np.stack([features[name] for name in self.features], axis=1)


def methods(num_layers: int) -> list[Method]:
  """Every choice compared: a threshold on each target cosine (view x raw/z) and the logistic regressions."""
  out = [Method(f"cos {view} {scale}", (f"target {view} {scale}",), "threshold")
         for scale in ("raw", "z") for view in views(num_layers)]
  layers = [str(layer) for layer in range(num_layers + 1)]
  target = tuple(f"target {layer} {scale}" for scale in ("raw", "z") for layer in layers)
  context = tuple(f"context {layer} {scale}" for scale in ("raw", "z") for layer in layers)
  out.append(Method("logreg: target cosines (every layer, raw + z)", target, "logistic"))
  out.append(Method("logreg: context cosines only (every layer, raw + z)", context, "logistic"))
  out.append(Method("logreg: target + context cosines (every layer, raw + z)", target + context, "logistic"))
  return out


def compare(train: dict[str, np.ndarray], train_labels: np.ndarray, dev: dict[str, np.ndarray],
            dev_labels: np.ndarray, folds: np.ndarray, candidates: Sequence[Method]) -> list[dict]:
  """A row per method: {"method", "train", "train_cv", "dev", "threshold" (threshold methods)}, accuracies in %."""
  table = []
  for method in candidates:
    correct = 0
    for fold in np.unique(folds):
      held = folds == fold
      predict, _ = method.fit({k: v[~held] for k, v in train.items()}, train_labels[~held])
      correct += int(np.sum(predict({k: v[held] for k, v in train.items()}) == train_labels[held]))
    predict, threshold = method.fit(train, train_labels)
    row = {"method": method.name, "train": 100 * float(np.mean(predict(train) == train_labels)),
           "train_cv": 100 * correct / len(train_labels), "dev": 100 * float(np.mean(predict(dev) == dev_labels))}
    if method.kind == "threshold":
      row["threshold"] = threshold
    table.append(row)
  return table


def evaluate_wic(embedder, data_dir: str | os.PathLike, *, pooling: str = "mean", folds: int = FOLDS,
                 seed: int = 0, log: Log = None) -> dict:
  """WiC dev accuracy of the method chosen on train (best cross-validated train accuracy), with the table of every
  choice (train, train_cv, dev accuracy in %), the best single cosine (layer, raw/z, train threshold) and the best
  method that uses the target words' vectors only (no context cosines), each chosen the same way."""
  log = log or (lambda message: None)
  train_records, dev_records = read_wic_split(data_dir, "train"), read_wic_split(data_dir, "dev")
  log(f"encoding WiC train ({len(train_records)} pairs) and dev ({len(dev_records)} pairs)")
  train_pairs, standardizer = embed_pairs(embedder, train_records, pooling=pooling)
  dev_pairs, _ = embed_pairs(embedder, dev_records, pooling=pooling)  # z-scored with TRAIN's statistics.
  train, dev = pair_features(train_pairs, standardizer), pair_features(dev_pairs, standardizer)
  table = compare(train, train_pairs.labels, dev, dev_pairs.labels,
                  lemma_folds(train_pairs.lemmas, folds, seed), methods(embedder.num_layers))
  chosen = max(table, key=lambda row: row["train_cv"])  # First of equals: the simplest listed first.
  single = max((row for row in table if "threshold" in row), key=lambda row: row["train_cv"])
  target_only = max((row for row in table if "context" not in row["method"]), key=lambda row: row["train_cv"])
  return {"dev_accuracy": chosen["dev"], "method": chosen["method"], "train_cv_accuracy": chosen["train_cv"],
          "single_cosine": single, "target_only": target_only,
          "standardizer": f"fitted on the {standardizer.count} word vectors of the distinct WiC train sentences",
          "pooling": pooling, "train_pairs": len(train_records), "dev_pairs": len(dev_records), "table": table}


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
  """The command line (module docstring)."""
  p = cli.ArgumentParser(prog="python -m tasks.embeddings.wic", description="Word similarity in context on WiC")
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--data", help="the WiC directory (default: the data directory's wic/)")
  p.add_argument("--pooling", default="mean", choices=("mean", "first"), help="subwords -> word vector")
  p.add_argument("--folds", type=cli.integer(2), default=FOLDS, help="cross-validation folds on train (split by lemma)")
  p.add_argument("--seed", type=cli.integer(0), default=0, help="assignment of lemmas to folds")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  """Evaluates on WiC (module docstring): the table of choices, then one JSON line."""
  args = parser().parse_args(argv)

  log = lambda message: print(message, file=sys.stderr, flush=True)
  result = evaluate_wic(Embedder.from_init(args.init), args.data or paths.data_file("wic"), pooling=args.pooling,
                        folds=args.folds, seed=args.seed, log=log)
  print_table(result)
  print(json.dumps(result))


if __name__ == "__main__":
  errors.run(main)
