"""Standardization (z-scoring) of contextual embeddings, fitted on a corpus (spec, "Contextual Embeddings and Word
Similarity"; Timkey & van Schijndel, 2021).

The per-dimension mean (eq. mu = 1/|C| sum x) and standard deviation (population, 1/|C|) are fitted on the word
vectors C of a corpus and saved as .npz, so the same transform applies to any later vector: z = (x - mu) / sigma.
Vectors may carry leading structure after the instance axis (e.g. [n, layers, H]): each (layer, dimension) gets its
own mean and std. A dimension that is constant in the corpus up to rounding (sigma below 1e-6 times the median sigma
of its layer) is only centred (divided by 1): z-scoring would blow its noise up to full weight. MiniLM's last layer
has two such dead dimensions (LayerNorm gain ~1e-32).
"""

import dataclasses
import os
from collections.abc import Iterable

import numpy as np

from encoder import errors
from encoder.array_files import load_npz

FIT_CHUNK = 16384  # Rows converted to float64 at a time.
DEAD_DIMENSION = 1e-6  # A std below this times its layer's median std is rounding noise: such a dimension is centred.


@dataclasses.dataclass(frozen=True)
class Standardizer:
  mean: np.ndarray  # [...]: the fitted vectors' shape without the instance axis, float32.
  std: np.ndarray  # [...], float32; 1 where the corpus is constant (a dead dimension).
  count: int  # |C|, the number of vectors fitted on.

  @classmethod
  def fit(cls, vectors: np.ndarray) -> "Standardizer":
    """Per-dimension mean and population std of `vectors` [n, ...] (accumulated in float64, a chunk at a time)."""
    vectors = np.asarray(vectors)
    if vectors.ndim < 2:
      raise errors.UserError(f"Standardizer.fit needs vectors [n, dims...], got shape {vectors.shape}")
    return cls.fit_batches(vectors[start:start + FIT_CHUNK] for start in range(0, len(vectors), FIT_CHUNK))

  @classmethod
  def fit_batches(cls, batches: Iterable[np.ndarray]) -> "Standardizer":
    """The same from batches [n_b, ...] of one corpus streamed once (Chan et al.'s pairwise merge of moments)."""
    count = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None  # Sum of squared deviations from the running mean.
    for batch in batches:
      x = np.asarray(batch, np.float64)
      if x.ndim < 2 or (mean is not None and x.shape[1:] != mean.shape):
        raise errors.UserError(f"Standardizer.fit needs batches [n, dims...] of one shape, got {x.shape}"
                               + ("" if mean is None else f" after {mean.shape}"))
      if len(x) == 0:
        continue
      batch_mean = x.mean(axis=0)
      batch_m2 = np.square(x - batch_mean).sum(axis=0)
      if mean is None:
        count, mean, m2 = len(x), batch_mean, batch_m2
        continue
      total = count + len(x)
      delta = batch_mean - mean
      mean = mean + delta * (len(x) / total)
      m2 = m2 + batch_m2 + np.square(delta) * (count * len(x) / total)
      count = total
    if mean is None:
      raise errors.UserError("Standardizer.fit needs at least one vector [n >= 1, dims...], got none")
    assert m2 is not None  # Set with mean.
    std = np.sqrt(m2 / count)  # Population std, 1/|C| (spec).
    alive = std > DEAD_DIMENSION * np.median(std, axis=-1, keepdims=True)
    return cls(mean.astype(np.float32), np.where(alive, std, 1.0).astype(np.float32), count)

  def apply(self, vectors: np.ndarray) -> np.ndarray:
    """z = (x - mu) / sigma for vectors [..., *mean.shape] (spec eq. for the standardized vector), float32."""
    vectors = np.asarray(vectors)
    if vectors.shape[vectors.ndim - self.mean.ndim:] != self.mean.shape:
      raise errors.UserError(f"vectors of shape {vectors.shape} do not end with the fitted shape {self.mean.shape}")
    return ((vectors - self.mean) / self.std).astype(np.float32)

  def save(self, path: str | os.PathLike) -> None:
    """Writes mean, std and count to an .npz file (reloaded bit-identically by `load`)."""
    with open(path, "wb") as f:
      np.savez(f, mean=self.mean, std=self.std, count=np.int64(self.count))

  @classmethod
  def load(cls, path: str | os.PathLike) -> "Standardizer":
    """Reads a file written by `save`; a file without mean/std/count, or not an array file, is a UserError."""
    data = load_npz(path, ("mean", "std", "count"))
    mean, std, count = data["mean"], data["std"], int(data["count"])
    if mean.shape != std.shape or mean.dtype != np.float32 or std.dtype != np.float32:
      raise errors.UserError(f"{path}: mean {mean.shape} {mean.dtype} and std {std.shape} {std.dtype} must be float32 "
                             f"arrays of one shape")
    return cls(mean, std, count)
