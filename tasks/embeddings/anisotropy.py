"""Anisotropy and rogue dimensions of contextual embeddings (spec, "Contextual Embeddings and Word Similarity").

Anisotropy (Ethayarajh, 2019) = the expected cosine of two distinct word instances drawn at random from a corpus:
either estimated from `pairs` random pairs (i != j) or computed exactly over all n(n-1) ordered pairs with the unit
vectors' sum s: sum_{i != j} <u_i, u_j> = |s|^2 - n. Its confidence interval is a percentile bootstrap over the
instances (or over `groups`, e.g. sentences, whose words are not independent): a resample weights instance i by how
often it (its group) was drawn, w_i, and weights a pair by w_i w_j, so the same-instance pairs stay excluded.

Rogue dimensions (Timkey & van Schijndel, 2021): dimension k contributes CC_k = E[u_k v_k / (|u| |v|)] to the
expected cosine, and sum_k CC_k is the anisotropy; a few dimensions with a large mean and variance dominate it.
"""

import numpy as np

Pairs = int | str  # a number of random pairs, or "all"


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
  """Rows scaled to length 1 (float64); a zero row is an error, as its cosine is undefined."""
  x = np.asarray(vectors, np.float64)
  if x.ndim != 2 or len(x) < 2:
    raise ValueError(f"anisotropy needs vectors [n >= 2, H], got shape {x.shape}")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  if not np.all(norms > 0):
    raise ValueError(f"vector {int(np.argmin(norms[:, 0]))} is all zeros: its cosine is undefined")
  return x / norms


def sample_pairs(n: int, pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """`pairs` uniform random ordered pairs (i, j) of distinct indices below n."""
  if pairs < 1:
    raise ValueError(f"pairs must be a positive number or 'all', got {pairs}")
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
    raise ValueError(f"groups must be {n} non-negative integer ids (one per vector), got {groups.shape} "
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
    raise ValueError(f"pairs must be a positive number or 'all', got {pairs!r}")
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
