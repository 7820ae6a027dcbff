"""Word-shape (casing) features for tagging and span heads on uncased encoders.

An uncased vocabulary cannot tell "May" from "may" or "Bush" from "bush", which costs NER points. The head can get
the casing back from the original words: each subword carries its word's shape id, embedded (a small learned table)
and concatenated to the encoder output before the classifier (task.case_features = embedding width, 0 = off).
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

SHAPES = ("none", "lower", "title", "upper", "mixed", "numeric", "other")  # "none": specials and padding.


def word_shape(word: str) -> int:
  """Index into SHAPES: numeric if any digit, other without letters, else by the casing of the letters."""
  if any(c.isdigit() for c in word):
    return SHAPES.index("numeric")
  letters = [c for c in word if c.isalpha()]
  if not letters:
    return SHAPES.index("other")
  if all(c.islower() for c in letters):
    return SHAPES.index("lower")
  if letters[0].isupper() and all(c.islower() for c in letters[1:]):
    return SHAPES.index("title")  # Includes one-letter capitals ("I", "A").
  if all(c.isupper() for c in letters):
    return SHAPES.index("upper")
  return SHAPES.index("mixed")


def case_ids(words: Sequence[str], word_ids: Sequence[int | None]) -> np.ndarray:
  """[len(word_ids)] int32: every subword gets its word's shape; specials get "none" (0)."""
  return np.asarray([0 if w is None else word_shape(words[w]) for w in word_ids], np.int32)


def with_case_features(hidden: jax.Array, batch: dict[str, jax.Array], width: int) -> jax.Array:
  """[B, L, H] -> [B, L, H + width] with the shape embedding of each token (unchanged when width is 0).
  Call inside a compact module: the table is that module's `case_embeddings` parameter."""
  if not width:
    return hidden
  if "case_ids" not in batch:
    raise ValueError("task.case_features > 0 needs 'case_ids' in the batch (encode with case_features on)")
  table = nn.Embed(len(SHAPES), width, embedding_init=nn.initializers.normal(0.02), name="case_embeddings")
  return jnp.concatenate([hidden, table(batch["case_ids"]).astype(hidden.dtype)], axis=-1)
