"""WiC method: thresholds and logistic regression against brute force / scikit-learn, vectors against a stand-in
embedder, and every choice made on train only (dev labels never change it)."""

import json
import re

import jax
import numpy as np
import pytest

from encoder import errors
from encoder.config import EncoderConfig
from encoder.model import Encoder
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from tasks.embeddings import wic
from tasks.embeddings.extract import Embedder
from tasks.embeddings.standardize import Standardizer
from tests.conftest import require_package

LAYERS = 4  # The stand-in has 4 layers + embeddings.


class StandIn:
  """An embedder that gives word w at position p the vector f(w) + 0.1 p per layer, yielded in reverse order."""
  num_layers, hidden_size = LAYERS, 8

  def __init__(self):
    self.calls = []

  def vector(self, word: str, position: int) -> np.ndarray:
    seed = sum(ord(c) * 31 ** i for i, c in enumerate(word.lower())) % 2**32
    base = np.random.default_rng(seed).normal(size=(LAYERS + 1, 8))
    return (base + 0.1 * position + np.arange(LAYERS + 1)[:, None]).astype(np.float32)

  def iter_encode_words(self, sentences, *, layers, pooling):
    assert layers == "all" and pooling == "mean"
    self.calls.append(list(sentences))
    for index in reversed(range(len(sentences))):
      yield index, np.stack([self.vector(w, p) for p, w in enumerate(sentences[index])])


def _records():
  return [
      {"lemma": "bank", "pos": "N", "words_a": ["the", "bank", "rose"], "index_a": 1,
       "words_b": ["river", "bank"], "index_b": 1, "label": False, "line": 1},
      {"lemma": "bank", "pos": "N", "words_a": ["river", "bank"], "index_a": 1,
       "words_b": ["bank"], "index_b": 0, "label": True, "line": 2},
      {"lemma": "run", "pos": "V", "words_a": ["the", "bank", "rose"], "index_a": 2,
       "words_b": ["they", "run"], "index_b": 1, "label": True, "line": 3},
  ]


def test_embed_pairs_takes_targets_and_context_means_and_fits_on_distinct_sentences():
  embedder = StandIn()
  pairs, standardizer = wic.embed_pairs(embedder, _records())
  (encoded,) = embedder.calls
  assert sorted(map(tuple, encoded)) == sorted({("the", "bank", "rose"), ("river", "bank"), ("bank",),
                                                ("they", "run")})  # Each distinct sentence once.
  v = embedder.vector
  np.testing.assert_allclose(pairs.target_a[0], v("bank", 1))  # Copies: exact (the default rtol, 1e-7).
  np.testing.assert_allclose(pairs.target_b[2], v("run", 1))
  # float32 means of two vectors (values ~1-5): two roundings, u = 6e-8 each (rtol 1e-6).
  np.testing.assert_allclose(pairs.context_a[0], (v("the", 0) + v("rose", 2)) / 2, rtol=1e-6)
  np.testing.assert_allclose(pairs.context_a[2], (v("the", 0) + v("bank", 1)) / 2, rtol=1e-6)
  np.testing.assert_array_equal(pairs.context_b[1], 0.0)  # A one-word sentence has no context.
  assert pairs.labels.tolist() == [False, True, True] and pairs.lemmas == ["bank", "bank", "run"]
  words = np.concatenate([np.stack([v(w, p) for p, w in enumerate(s)]) for s in encoded])
  reference = Standardizer.fit(words)
  # Both fits accumulate the same 8 vectors in float64 and round to float32: within one float32 ulp (u = 6e-8).
  np.testing.assert_allclose(standardizer.mean, reference.mean, rtol=1e-6)
  np.testing.assert_allclose(standardizer.std, reference.std, rtol=1e-6)
  assert standardizer.count == 2 + 3 + 1 + 2


def test_pair_features_are_cosines_of_each_view():
  pairs, standardizer = wic.embed_pairs(StandIn(), _records())
  features = wic.pair_features(pairs, standardizer)
  assert len(features) == 2 * 2 * (LAYERS + 2)
  assert wic.views(3) == ["0", "1", "2", "3"]  # No last4_mean without four blocks.
  a, b = pairs.target_a[:, 1], pairs.target_b[:, 1]
  # float32 cosines of 8-dim vectors (all entries ~1-5: no cancellation), against numpy float32: sum_bound(8) ~ 1e-6
  # relative on each side at worst; measured 1.2e-7.
  np.testing.assert_allclose(features["target 1 raw"],
                             np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), rtol=1e-6)
  za, zb = standardizer.apply(pairs.target_a), standardizer.apply(pairs.target_b)
  mix_a, mix_b = za[:, 1:].mean(1), zb[:, 1:].mean(1)  # The last four of 0..4.
  np.testing.assert_allclose(features["target last4_mean z"], wic.cosine(mix_a, mix_b), rtol=1e-6)


def test_best_threshold_equals_brute_force_and_never_splits_ties():
  rng = np.random.default_rng(0)
  for _ in range(20):
    scores = np.round(rng.normal(size=30), 1)  # Many ties.
    labels = rng.random(30) < 0.5
    threshold, accuracy = wic.best_threshold(scores, labels)
    candidates = np.concatenate([[-np.inf, np.inf], scores])
    brute = max(np.mean((scores >= t) == labels) for t in candidates)
    # Float64 means of booleans over 30 pairs: exact multiples of 1/30 up to rounding.
    assert accuracy == pytest.approx(brute) == pytest.approx(np.mean((scores >= threshold) == labels))
  assert wic.best_threshold(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1], bool)) == (0.5, 1.0)


def test_logistic_regression_equals_scikit_learn():
  linear_model = require_package("sklearn.linear_model")
  rng = np.random.default_rng(1)
  x = rng.normal(size=(400, 5)) * [1, 10, 0.1, 3, 1] + [0, 5, 0, -2, 1]
  y = (x @ [1, 0.1, 5, -0.3, 0] + rng.normal(size=400)) > 0
  model = wic.fit_logistic(x, y, l2=2.0)
  z = (x - model.mean) / model.std
  reference = linear_model.LogisticRegression(C=1 / 2.0, tol=1e-12, max_iter=10_000).fit(z, y)
  # Float64 both sides, the same strictly convex (L2) optimum: Newton's steps stop below 1e-10, scikit-learn's lbfgs at
  # tol 1e-12 on the gradient; the weights are O(1), so 1e-5 relative is the solvers' agreement, not rounding
  # (measured 1.3e-7).
  np.testing.assert_allclose(model.weights[:-1], reference.coef_[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(model.weights[-1], reference.intercept_[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(model.predict(x), reference.predict(z))


def test_lemma_folds_keep_a_lemma_in_one_fold():
  lemmas = [f"w{i % 37}" for i in range(500)]
  folds = wic.lemma_folds(lemmas, 5, seed=3)
  assert set(folds) == set(range(5))
  for lemma in set(lemmas):
    assert len({f for f, other in zip(folds, lemmas) if other == lemma}) == 1


def _synthetic(n, seed, layers=LAYERS):
  """Features where "target 1 z" separates the classes a little and others are noise."""
  rng = np.random.default_rng(seed)
  labels = rng.random(n) < 0.5
  features = {name: rng.normal(size=n) for name in
              (f"{part} {view} {scale}" for part in ("target", "context") for scale in ("raw", "z")
               for view in wic.views(layers))}
  features["target 1 z"] = labels + rng.normal(size=n)
  return features, labels


def test_choices_are_made_on_train_only():
  train, train_labels = _synthetic(2000, 0)
  dev, dev_labels = _synthetic(1000, 1)
  folds = wic.lemma_folds([str(i % 40) for i in range(2000)])
  table = wic.compare(train, train_labels, dev, dev_labels, folds, wic.methods(LAYERS))
  flipped = wic.compare(train, train_labels, dev, ~dev_labels, folds, wic.methods(LAYERS))
  assert [row["method"] for row in table] == [m.name for m in wic.methods(LAYERS)]
  for row, other in zip(table, flipped):  # Dev labels change only the dev column.
    assert {k: v for k, v in row.items() if k != "dev"} == {k: v for k, v in other.items() if k != "dev"}
    assert row["dev"] == pytest.approx(100 - other["dev"])  # Float64 percents of counts: rounding only.
  best = max(table, key=lambda row: row["train_cv"])
  assert best["method"] in ("cos 1 z", "logreg: target cosines (every layer, raw + z)") and best["dev"] > 60


def _write_wic(root):
  """A tiny WiC directory (train = dev = 12 pairs) in the package layout."""
  records = _records() * 4
  for split in ("train", "dev"):
    (root / split).mkdir()
    (root / split / f"{split}.data.txt").write_text("".join(
        f"{r['lemma']}{i}\t{r['pos']}\t{r['index_a']}-{r['index_b']}\t{' '.join(r['words_a'])}\t"
        f"{' '.join(r['words_b'])}\n" for i, r in enumerate(records)))
    (root / split / f"{split}.gold.txt").write_text("".join("TF"[not r["label"]] + "\n" for r in records))


def test_evaluate_wic_end_to_end_with_the_stand_in(tmp_path):
  """Every threshold row's dev accuracy equals the one recomputed from its threshold, the dev cosines and the gold
  labels; dev = train here (the same pairs, z-scored with train's statistics), so every row's dev equals its train
  accuracy; the reported accuracy is the first row of best cross-validated train accuracy."""
  _write_wic(tmp_path)
  result = wic.evaluate_wic(StandIn(), tmp_path, folds=3)
  table = result["table"]
  assert len(table) == len(wic.methods(LAYERS))
  assert result["train_pairs"] == result["dev_pairs"] == 12
  gold = np.array([line == "T" for line in (tmp_path / "dev" / "dev.gold.txt").read_text().split()])
  train_pairs, standardizer = wic.embed_pairs(StandIn(), wic.read_wic_split(tmp_path, "train"))
  dev = wic.pair_features(wic.embed_pairs(StandIn(), wic.read_wic_split(tmp_path, "dev"))[0], standardizer)
  for row in table:
    assert row["dev"] == pytest.approx(row["train"])  # Float64 percents of the same counts.
    if "threshold" in row:
      cosines = dev[row["method"].replace("cos ", "target ", 1)]
      assert row["dev"] == pytest.approx(100 * np.mean((cosines >= row["threshold"]) == gold))
  chosen = next(row for row in table if row["train_cv"] == max(r["train_cv"] for r in table))
  assert (result["method"], result["dev_accuracy"], result["train_cv_accuracy"]) == (
      chosen["method"], chosen["dev"], chosen["train_cv"])
  assert 0 < result["dev_accuracy"] <= 100 and len(train_pairs.labels) == 12
  assert result["single_cosine"]["method"].startswith("cos ")
  assert "context" not in result["target_only"]["method"]


@pytest.mark.slow
def test_embed_pairs_with_a_tiny_real_embedder_equals_encode_words():
  tokenizer = load_tokenizer(minilm_path())
  cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_layers=2, num_heads=2,
                      intermediate_size=32, max_positions=64)
  params = Encoder(cfg).init(jax.random.PRNGKey(0), np.zeros((1, 8), np.int32))["params"]
  embedder = Embedder(cfg, params, tokenizer, batch_size=4, buckets=(16,), max_length=16)
  records = _records()
  pairs, _ = wic.embed_pairs(embedder, records)
  for i, r in enumerate(records):
    a, b = embedder.encode_words([r["words_a"], r["words_b"]], layers="all")
    # The same tiny encoder on other batches: summation order only (measured equal on Zen 3).
    np.testing.assert_allclose(pairs.target_a[i], a[r["index_a"]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pairs.target_b[i], b[r["index_b"]], rtol=1e-5, atol=1e-6)
  assert pairs.target_a.shape == (3, 3, 16)


def test_command_prints_every_choice_and_fails_in_one_line(tmp_path, monkeypatch, capsys):
  _write_wic(tmp_path)
  monkeypatch.setattr(wic.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  args = ["--init", "hf:x", "--data", str(tmp_path), "--folds", "3"]
  errors.run(wic.main, args)
  lines = capsys.readouterr().out.strip().splitlines()
  assert sum("<- chosen" in line for line in lines) == 1 and lines[0].startswith("choice")
  assert json.loads(lines[-1])["dev_pairs"] == 12
  (tmp_path / "dev" / "dev.gold.txt").write_text("T\n")
  with pytest.raises(SystemExit) as info:
    errors.run(wic.main, args)
  assert re.fullmatch(r"error: .*dev\.gold\.txt:2: expected a T/F label for .*dev\.data\.txt line 2, .*",
                      str(info.value))


@pytest.mark.parametrize("gold", [None, "T\nF\nmaybe\n"])
def test_no_dev_accuracy_without_gold_labels(tmp_path, monkeypatch, capsys, gold):
  """A missing or malformed dev gold file: one line naming it, exit status 1, no accuracy printed."""
  _write_wic(tmp_path)
  path = tmp_path / "dev" / "dev.gold.txt"
  if gold is None:
    path.unlink()
  else:
    path.write_text(gold)
  monkeypatch.setattr(wic.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  with pytest.raises(SystemExit) as info:
    errors.run(wic.main, ["--init", "hf:x", "--data", str(tmp_path), "--folds", "3"])
  assert str(info.value).startswith(f"error: {path}") and "\n" not in str(info.value)
  assert capsys.readouterr().out == ""
