"""Standardization: mean 0 / std 1 per dimension on the fitting data, bit-identical reload, errors."""

import numpy as np
import pytest

from tasks.embeddings import standardize
from tasks.embeddings.standardize import Standardizer
from tests.tolerances import U32, assert_within, sum_bound


def _corpus(seed=0, shape=(500, 3, 16)):
  rng = np.random.default_rng(seed)
  scale = rng.uniform(0.1, 20.0, size=shape[1:])
  return (rng.normal(size=shape) * scale + rng.normal(scale=50.0, size=shape[1:])).astype(np.float32)


def test_fitting_data_becomes_mean_0_std_1_per_layer_and_dimension():
  x = _corpus()
  standardizer = Standardizer.fit(x)
  z = standardizer.apply(x)
  assert z.dtype == np.float32 and z.shape == x.shape
  # Derived: the mean stored in float32 is off by u |mean| and x - mean rounds once more, which shifts every z by up
  # to 2 u |mean| / std (|mean| ~ 150 against std 0.1-20 here: up to 4e-5); numpy's float32 mean over 500 rows adds
  # sum_bound(500) of mean |z| (measured: 27% of the bound on Zen 3). The std's stored rounding and the division cost
  # 2u, numpy's float32 variance two sums over 500 rows; a std with 1/(n - 1) is off by 1e-3, 60 times that bound.
  mean_bound = 2 * U32 * np.abs(standardizer.mean) / standardizer.std + sum_bound(500) * np.abs(z).mean(axis=0)
  assert_within(z.mean(axis=0), 0.0, 1.0, mean_bound, "mean")
  assert_within(z.std(axis=0), 1.0, 4 * U32 + 2 * sum_bound(500), 1.0, "std")


def test_matches_numpy_formula_of_the_spec():
  x = _corpus(seed=1, shape=(200, 8))
  s = Standardizer.fit(x)
  mu = x.astype(np.float64).mean(0)
  sigma = np.sqrt(((x - mu) ** 2).mean(0))  # population std, 1/|C|
  # numpy's elementwise float32 ops are correctly rounded, so this is the same on every CPU: measured 3.9e-7 (4%).
  np.testing.assert_allclose(s.apply(x[:5]), (x[:5] - mu) / sigma, rtol=1e-5, atol=1e-5)
  assert s.count == 200


def test_streamed_batches_equal_one_fit():
  x = _corpus(seed=4)
  whole = Standardizer.fit(x)
  streamed = Standardizer.fit_batches([x[:1], x[1:130], x[130:130], x[130:]])
  # Both accumulate in float64 and round to float32 once: within an ulp (measured equal).
  np.testing.assert_allclose(streamed.mean, whole.mean, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(streamed.std, whole.std, rtol=1e-6)
  assert streamed.count == whole.count == 500


def test_save_and_load_are_bit_identical(tmp_path):
  x = _corpus(seed=2)
  s = Standardizer.fit(x)
  path = tmp_path / "stats.npz"
  s.save(path)
  t = Standardizer.load(path)
  assert t.mean.tobytes() == s.mean.tobytes() and t.std.tobytes() == s.std.tobytes() and t.count == s.count
  probe = _corpus(seed=3, shape=(7, 3, 16))
  assert t.apply(probe).tobytes() == s.apply(probe).tobytes()


def test_constant_and_dead_dimensions_are_only_centred():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(10, 6)).astype(np.float32)
  x[:, 4] = 3.0
  x[:, 5] = rng.normal(size=10) * 1e-32  # As MiniLM's last layer: LayerNorm gain ~1e-32.
  s = Standardizer.fit(x)
  z = s.apply(x)
  np.testing.assert_array_equal(s.std[4:], 1.0)
  np.testing.assert_array_equal(z[:, 4], 0.0)
  assert np.abs(z[:, 5]).max() < 1e-30 and np.abs(z[:, :4]).max() > 1  # A dead dimension keeps its ~1e-32 values.


def test_errors_name_the_problem(tmp_path):
  with pytest.raises(ValueError, match="do not end with the fitted shape"):
    Standardizer.fit(np.ones((4, 3))).apply(np.ones((2, 5)))
  with pytest.raises(ValueError, match=r"vectors \[n, dims...\]"):
    Standardizer.fit(np.ones(3))
  with pytest.raises(ValueError, match="at least one vector"):
    Standardizer.fit(np.ones((0, 3)))
  path = tmp_path / "other.npz"
  np.savez(path, weights=np.ones(3))
  with pytest.raises(ValueError, match=r"other\.npz: expected an \.npz archive with the arrays \['count',"):
    Standardizer.load(path)


def test_fit_in_chunks_equals_float64_numpy(monkeypatch):
  monkeypatch.setattr(standardize, "FIT_CHUNK", 7)
  x = _corpus(seed=5, shape=(100, 2, 5))
  s = Standardizer.fit(x)
  # Accumulated in float64 in chunks, rounded to float32 once: within u = 6e-8 relative (measured 4e-8).
  np.testing.assert_allclose(s.mean, x.astype(np.float64).mean(0), rtol=1e-6)
  np.testing.assert_allclose(s.std, x.astype(np.float64).std(0), rtol=1e-5)
