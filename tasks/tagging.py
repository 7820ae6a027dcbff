"""Sequence labelling (spec, "Sequence Labeling", "BIO Tagging"): a per-token head W_K, greedy or CRF decoding.

y_i = softmax(h_i W_K) for every subword (optionally [h_i; h_last(i)] with the hidden state of the word's last subword,
so a word read at its first subword also sees its ending: "walk ##ing"); training labels come from `tasks.alignment` (first subword only, or every
subword). Words are read at their first subword (`word_positions`), so decoding is word-level: argmax per word, or
Viterbi under a linear-chain CRF whose transitions forbid moves the tag scheme does not allow (e.g. O -> I-X in BIO).
With a CRF the loss is the word-level sequence negative log-likelihood (forward algorithm).
"""

from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective
from tasks import crf as crf_lib
from tasks import word_shape


class TaggingHead(nn.Module):
  """dropout -> (+ word-final subword, + word-shape embedding) -> W_K per subword; word-level emissions at first
  subwords; optional CRF parameters."""
  tags: Sequence[str]
  use_crf: bool = False
  scheme: str | None = "IOB2"  # Constrains CRF transitions; None allows every move (e.g. UPOS tags).
  dropout: float = 0.1
  case_features: int = 0  # Width of the word-shape embedding concatenated to each token (0 = none).
  last_subword: bool = False  # Concatenate the hidden state of each subword's word-final subword (`last_positions`).
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> dict[str, Any]:
    """-> {"logits" [B, L, K], "word_logits" [B, W, K], and "crf": (transitions, start, end) with a CRF}."""
    hidden = nn.Dropout(self.dropout)(outputs.last, deterministic=not train)
    if self.last_subword:
      hidden = jnp.concatenate([hidden, layers.gather(hidden, batch["last_positions"])], axis=-1)
    hidden = word_shape.with_case_features(hidden, batch, self.case_features)
    classifier = nn.Dense(len(self.tags), kernel_init=nn.initializers.normal(self.initializer_range),
                          name="classifier")
    logits = per_token(classifier, hidden).astype(jnp.float32)
    predictions = {"logits": logits, "word_logits": layers.gather(logits, batch["word_positions"])}
    if self.use_crf:
      predictions["crf"] = crf_lib.LinearChainCRF(tuple(self.tags), self.scheme, name="crf").constrained()
    return predictions


def word_mask(batch: dict[str, jax.Array]) -> jax.Array:
  """[B, W] bool: real words (padding word labels are -1)."""
  return batch["word_labels"] >= 0


def tagging_loss(predictions: dict[str, Any], batch: dict[str, jax.Array]):
  """Token cross-entropy over labelled subwords, or CRF NLL per sentence; plus word-level emission accuracy."""
  mask = word_mask(batch)
  word_labels = jnp.maximum(batch["word_labels"], 0)
  correct = ((jnp.argmax(predictions["word_logits"], -1) == word_labels) & mask).sum().astype(jnp.float32)
  words = mask.sum().astype(jnp.float32)
  if "crf" in predictions:
    nll = crf_lib.negative_log_likelihood(predictions["word_logits"], word_labels, mask, *predictions["crf"])
    sentences = mask.any(axis=1).astype(jnp.float32)
    total, count = (nll * sentences).sum(), sentences.sum()
    loss = total / jnp.maximum(count, 1.0)
    return loss, {"tagging_loss": (total, count), "tagging_accuracy": (correct, words)}
  labels = batch["label_ids"]
  loss, metrics = layers.cross_entropy(predictions["logits"], jnp.maximum(labels, 0), labels >= 0, "tagging")
  return loss, {"tagging_loss": metrics["tagging_loss"], "tagging_accuracy": (correct, words)}


def decode(predictions: dict[str, Any], batch: dict[str, jax.Array]) -> jax.Array:
  """Word-level tag ids [B, W] (first-subword rule): Viterbi with a CRF, else argmax; -1 at padding."""
  mask = word_mask(batch)
  if "crf" in predictions:
    paths, _ = crf_lib.viterbi(predictions["word_logits"], mask, *predictions["crf"])
  else:
    paths = jnp.argmax(predictions["word_logits"], axis=-1)
  return jnp.where(mask, paths, -1)


def build(config: Mapping[str, Any]) -> Objective:
  """Task "tagging": config keys tags (the tag vocabulary, index order), crf, scheme (or None), dropout,
  case_features, last_subword."""
  head = TaggingHead(tuple(config["tags"]), use_crf=layers.option(config, "crf", False),
                     scheme=layers.option(config, "scheme", "IOB2"), dropout=layers.option(config, "dropout", 0.1),
                     case_features=layers.option(config, "case_features", 0),
                     last_subword=layers.option(config, "last_subword", False))
  return Objective(name="tagging", head=head, loss=tagging_loss)
