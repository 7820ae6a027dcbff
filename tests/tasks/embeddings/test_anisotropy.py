"""Anisotropy (expected cosine of distinct pairs) and rogue dimensions against brute-force numpy."""

import json
import re

import numpy as np
import pytest

from encoder import errors
from tasks.embeddings import anisotropy as command
from tasks.embeddings.anisotropy import anisotropy, dimension_contributions, rogue_dimensions, sample_pairs
from tasks.embeddings.standardize import Standardizer
from tests.tolerances import U64, gamma


def _brute_force_cosines(x):
  """cos(x_i, x_j) for every pair i != j, as a flat array."""
  x = np.asarray(x, np.float64)
  u = x / np.linalg.norm(x, axis=1, keepdims=True)
  gram = u @ u.T
  return gram[~np.eye(len(x), dtype=bool)]


def test_all_pairs_equals_brute_force_mean():
  x = np.random.default_rng(0).normal(size=(30, 6)) + 0.7
  result = anisotropy(x, pairs="all", bootstrap=0)
  # Float64 both sides: means of 870 cosines in [-1, 1] (each a few roundings from the vectors), summed in other
  # orders: each side within gamma(870 + 8) (tests/tolerances.py).
  np.testing.assert_allclose(result["mean"], _brute_force_cosines(x).mean(), rtol=0, atol=2 * gamma(878, U64))
  assert result["pairs"] == 30 * 29 and result["instances"] == 30


def test_isotropic_gaussian_is_about_zero_within_its_ci():
  x = np.random.default_rng(1).normal(size=(2000, 64))
  for pairs in (20_000, "all"):
    result = anisotropy(x, pairs=pairs, bootstrap=200)
    assert result["ci_low"] <= 0.0 <= result["ci_high"], result
    assert result["ci_high"] - result["ci_low"] < 0.02


def test_shared_offset_is_clearly_positive_and_close_to_the_exact_value():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(2000, 64)) + 1.0  # every vector shares the offset (1, ..., 1): E cos ~ 64 / (64 + 64) = 0.5
  sampled = anisotropy(x, pairs=50_000, bootstrap=200)
  exact = anisotropy(x, pairs="all", bootstrap=200)
  assert sampled["ci_low"] > 0.4 and exact["ci_low"] > 0.4
  assert sampled["ci_low"] <= exact["mean"] <= sampled["ci_high"]
  assert abs(exact["mean"] - 0.5) < 0.03


def test_standardizing_removes_the_offset():
  x = np.random.default_rng(3).normal(size=(1000, 32)) * np.linspace(0.1, 5, 32) + 4.0
  z = Standardizer.fit(x).apply(x)
  assert anisotropy(x, pairs="all", bootstrap=0)["mean"] > 0.3
  assert abs(anisotropy(z, pairs="all", bootstrap=0)["mean"]) < 0.01


def test_sampled_pairs_are_distinct_and_cover_both_orders():
  i, j = sample_pairs(4, 20_000, seed=0)
  assert np.all(i != j)
  counts = np.bincount(i * 4 + j, minlength=16).reshape(4, 4)
  assert np.all(np.diag(counts) == 0)
  off = counts[~np.eye(4, dtype=bool)]
  assert off.min() > 0.8 * off.mean()  # 12 ordered pairs, about equally likely


def test_group_bootstrap_is_wider_when_groups_are_correlated():
  rng = np.random.default_rng(4)
  groups = np.repeat(np.arange(40), 25)  # 40 "sentences" of 25 words sharing a sentence direction
  x = rng.normal(size=(1000, 32)) + 3 * rng.normal(size=(40, 32))[groups]
  by_instance = anisotropy(x, pairs="all", bootstrap=300)
  by_group = anisotropy(x, pairs="all", bootstrap=300, groups=groups)
  assert by_group["mean"] == by_instance["mean"]
  assert by_group["ci_high"] - by_group["ci_low"] > 2 * (by_instance["ci_high"] - by_instance["ci_low"])


def test_dimension_contributions_sum_to_anisotropy_and_match_brute_force():
  rng = np.random.default_rng(5)
  x = rng.normal(size=(25, 5))
  x[:, 3] += 10.0  # a rogue dimension
  u = x / np.linalg.norm(x, axis=1, keepdims=True)
  off = ~np.eye(25, dtype=bool)
  brute = np.array([np.outer(u[:, k], u[:, k])[off].mean() for k in range(5)])
  contributions = dimension_contributions(x, pairs="all")
  np.testing.assert_allclose(contributions, brute, atol=2 * gamma(608, U64))  # As above, 600 terms per dimension.
  np.testing.assert_allclose(contributions.sum(), anisotropy(x, pairs="all", bootstrap=0)["mean"],
                             atol=2 * gamma(608, U64))
  sampled = dimension_contributions(x, pairs=5000, seed=1)
  i, j = sample_pairs(25, 5000, seed=1)
  np.testing.assert_allclose(sampled.sum(), np.mean(np.sum(u[i] * u[j], axis=1)), atol=2 * gamma(5008, U64))  # 5000.


def test_rogue_dimensions_finds_the_offset_dimension_and_standardizing_removes_it():
  rng = np.random.default_rng(6)
  x = rng.normal(size=(500, 16))
  x[:, 7] = 30.0 + 5 * rng.normal(size=500)
  top = rogue_dimensions(x, top=3)
  assert top[0]["dimension"] == 7 and top[0]["share"] > 0.9 and abs(top[0]["mean"] - 30) < 1
  after = rogue_dimensions(Standardizer.fit(x).apply(x), top=3)
  assert after[0]["contribution"] < 0.01


def test_bad_input_errors():
  with pytest.raises(ValueError, match="all zeros"):
    anisotropy(np.array([[1.0, 0.0], [0.0, 0.0]]), pairs="all")
  with pytest.raises(ValueError, match="positive number or 'all'"):
    anisotropy(np.ones((3, 2)), pairs="some")
  with pytest.raises(ValueError, match=r"\[n >= 2"):
    anisotropy(np.ones((1, 2)))


class StandIn:
  """Word vectors with a shared offset (anisotropic) in layer 1, isotropic noise in layer 0."""
  num_layers = 1

  def feature_shape(self, layers):
    return (16,) if layers == "last" else (2, 16)

  def iter_encode_words(self, sentences, *, layers):
    rng = np.random.default_rng(len(sentences))
    for index in reversed(range(len(sentences))):
      n = len(sentences[index])
      both = np.stack([rng.normal(size=(n, 16)), rng.normal(size=(n, 16)) + 2.0], axis=1)
      yield index, both[:, -1] if layers == "last" else both


def test_command_reports_raw_and_standardized_per_layer(tmp_path, monkeypatch, capsys):
  text = tmp_path / "text.txt"
  text.write_text(" \n = Heading = \n" + "".join(f"w{i} x{i} y z .\n" for i in range(60)) + "\n")
  assert len(command.read_word_lines(text)) == 60 and command.read_word_lines(text, limit=2)[1][0] == "w1"
  monkeypatch.setattr(command.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  stats = tmp_path / "stats.npz"
  command.main(["--init", "hf:x", "--input", str(text), "--layers", "all", "--pairs", "all", "--bootstrap", "50",
                "--fit-out", str(stats)])
  out = capsys.readouterr().out
  result = json.loads(out.strip().splitlines()[-1])
  assert set(result["by_layer"]) == {"0", "1"} and result["words"] == 300
  assert abs(result["by_layer"]["0"]["raw"]["mean"]) < 0.05 and result["anisotropy_raw"] > 0.5
  assert abs(result["anisotropy_standardized"]) < 0.05 and "rogue dimensions, layer 1, standardized" in out
  assert Standardizer.load(stats).mean.shape == (2, 16)
  command.main(["--init", "hf:x", "--input", str(text), "--standardizer", str(stats), "--layers", "all",
                "--bootstrap", "10"])
  assert abs(json.loads(capsys.readouterr().out.strip().splitlines()[-1])
             ["anisotropy_standardized"]) < 0.05


@pytest.mark.parametrize("extra, message", [
    (["--pairs", "many"], "argument --pairs: expected a number of pairs >= 1 or 'all', got 'many'"),
    (["--layers", "last", "--standardizer", "STATS"], r"fitted on vectors of shape \(2, 16\), --layers last gives"),
])
def test_command_errors_are_one_line(tmp_path, monkeypatch, capsys, extra, message):
  text = tmp_path / "text.txt"
  text.write_text("a b c\nd e f\n")
  stats = tmp_path / "stats.npz"
  Standardizer.fit(np.ones((3, 2, 16))).save(stats)
  monkeypatch.setattr(command.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  with pytest.raises(SystemExit) as info:
    errors.run(command.main,
               ["--init", "hf:x", "--input", str(text)] + [str(stats) if e == "STATS" else e for e in extra])
  assert str(info.value).startswith("error: ") and "\n" not in str(info.value)
  assert re.search(message, str(info.value)), info.value


def test_command_input_without_text_names_the_file(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n = Only a heading = \n")
  with pytest.raises(ValueError, match=r"empty\.txt:1: expected at least one non-blank line"):
    command.read_word_lines(empty)


@pytest.mark.parametrize("damage", ["objects", "truncated", "not an archive"])
def test_an_untrusted_standardizer_file_is_one_line_naming_it(tmp_path, monkeypatch, damage):
  """--standardizer holding Python objects, cut short or a bare .npy: one line naming the file, nothing unpickled."""
  text, stats = tmp_path / "text.txt", tmp_path / "stats.npz"
  text.write_text("a b c\nd e f\n")
  if damage == "objects":
    np.savez(stats, mean=np.array([{"x": 1}], dtype=object), std=np.ones(16, np.float32), count=3)
  elif damage == "truncated":
    Standardizer.fit(np.ones((3, 16))).save(stats)
    stats.write_bytes(stats.read_bytes()[:100])
  else:
    with open(stats, "wb") as f:
      np.save(f, np.ones(16, np.float32))
  monkeypatch.setattr(command.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  with pytest.raises(SystemExit) as info:
    errors.run(command.main, ["--init", "hf:x", "--input", str(text), "--standardizer", str(stats)])
  assert str(info.value).startswith(f"error: {stats}: expected a complete numpy array file")
  assert "\n" not in str(info.value)
