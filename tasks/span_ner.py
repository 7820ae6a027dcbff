"""Span-based NER (spec, "Fine-tuning for Span-Based Applications").

Every word span (i, j) with j - i < L is classified over the entity types plus NULL:
  spanRep_ij = [s_i; e_j; g_ij],  s_i = FFN_start(z_i), e_j = FFN_end(z_j) (optional; else z_i, z_j),
  g_ij = mean(z_i..z_j) or SelfAttention(z_i:j),  y_ij = softmax(FFN(spanRep_ij)).
Decoding keeps a span when its best non-NULL probability reaches a threshold calibrated on dev (None: plain argmax),
then, for flat data, greedily drops overlaps by score; nested data keeps every accepted span.
"""

from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective
from tasks import word_shape
from tasks.alignment import first_subword_positions

NULL = 0  # Label index of "no entity"; entity types are 1..K.
POOLINGS = ("mean", "attention")


def enumerate_spans(num_words: int, max_width: int) -> list[tuple[int, int]]:
  """All word spans (start, end inclusive) with end - start < max_width: the set S(x)."""
  return [(i, j) for i in range(num_words) for j in range(i, min(num_words, i + max_width))]


def encode_spans(tokenizer, words: Sequence[str], spans: Sequence[tuple[int, int, int]], *, max_length: int,
                 max_width: int, case_features: bool = False) -> dict[str, np.ndarray]:
  """A span example: subword ids and every candidate span's subword boundaries, word boundaries and gold label.

  spans: gold (start, end_exclusive, label_index >= 1) in words. Words cut by truncation are never candidates.
  With `case_features`, `case_ids` holds each subword's word shape (tasks.word_shape).
  """
  encoding = tokenizer.encode(list(words), max_length=max_length)
  firsts = first_subword_positions(encoding.word_ids)
  lasts = {}
  for position, word in enumerate(encoding.word_ids):
    if word is not None:
      lasts[word] = position
  gold = {(start, end - 1): label for start, end, label in spans}
  candidates = enumerate_spans(len(firsts), max_width)
  example = {
      "input_ids": np.asarray(encoding.input_ids, np.int32),
      "type_ids": np.asarray(encoding.type_ids, np.int32),
      "span_starts": np.asarray([firsts[i] for i, _ in candidates], np.int32).reshape(-1),
      "span_ends": np.asarray([lasts[j] for _, j in candidates], np.int32).reshape(-1),
      "span_words": np.asarray(candidates, np.int32).reshape(-1, 2),
      "span_labels": np.asarray([gold.get(span, NULL) for span in candidates], np.int32).reshape(-1),
  }
  if case_features:
    example["case_ids"] = word_shape.case_ids(words, encoding.word_ids)
  return example


class SpanClassifierHead(nn.Module):
  """Span representations [s_i; e_j; g_ij] -> FFN -> logits over NULL + entity types."""
  num_labels: int  # Entity types, NULL excluded.
  pooling: str = "mean"
  boundary_ffn: bool = True
  hidden: int = 256
  dropout: float = 0.1
  case_features: int = 0  # Width of the word-shape embedding concatenated to each token (0 = none).
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> jax.Array:
    """-> logits [batch, spans, num_labels + 1]."""
    init = nn.initializers.normal(self.initializer_range)
    z = nn.Dropout(self.dropout)(outputs.last, deterministic=not train)
    z = word_shape.with_case_features(z, batch, self.case_features)  # [B, L, H (+ case width)]
    starts, ends = batch["span_starts"], batch["span_ends"]  # [B, S]
    start_rep, end_rep = z, z
    if self.boundary_ffn:
      start_rep = nn.gelu(per_token(nn.Dense(z.shape[-1], kernel_init=init, name="ffn_start"), z), approximate=False)
      end_rep = nn.gelu(per_token(nn.Dense(z.shape[-1], kernel_init=init, name="ffn_end"), z), approximate=False)
    positions = jnp.arange(z.shape[1])
    inside = (positions >= starts[..., None]) & (positions <= ends[..., None])  # [B, S, L]
    if self.pooling == "mean":
      weights = inside / jnp.maximum(inside.sum(-1, keepdims=True), 1)
    else:  # Self-attention pooling: a learned score per token, softmax inside the span.
      scores = per_token(nn.Dense(1, kernel_init=init, name="span_attention"), z)[..., 0]  # [B, L]
      weights = jax.nn.softmax(jnp.where(inside, scores[:, None, :], -1e9), axis=-1)
    summary = jnp.einsum("bsl,blh->bsh", weights.astype(z.dtype), z)
    rep = jnp.concatenate([layers.gather(start_rep, starts), layers.gather(end_rep, ends), summary], axis=-1)
    h = nn.gelu(per_token(nn.Dense(self.hidden, kernel_init=init, name="ffn"), rep), approximate=False)
    h = nn.Dropout(self.dropout)(h, deterministic=not train)
    return per_token(nn.Dense(self.num_labels + 1, kernel_init=init, name="classifier"), h).astype(jnp.float32)


def span_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over every real candidate span (labels >= 0), NULL included."""
  labels = batch["span_labels"]
  return layers.cross_entropy(logits, jnp.maximum(labels, 0), (labels >= 0).astype(jnp.float32), "span_ner")


def build(config: Mapping[str, Any]) -> Objective:
  """Task "span_ner": config keys num_labels (or labels), pooling, boundary_ffn, span_hidden, dropout,
  case_features."""
  num_labels = layers.option(config, "num_labels", 0) or len(config["labels"])
  pooling = layers.option(config, "pooling", "mean")
  if pooling not in POOLINGS:
    raise ValueError(f"task.pooling {pooling!r} is not one of {POOLINGS} for span_ner")
  head = SpanClassifierHead(num_labels, pooling=pooling, boundary_ffn=layers.option(config, "boundary_ffn", True),
                            hidden=layers.option(config, "span_hidden", 256),
                            dropout=layers.option(config, "dropout", 0.1),
                            case_features=layers.option(config, "case_features", 0))
  return Objective(name="span_ner", head=head, loss=span_loss)


def decode_spans(probs: np.ndarray, span_words: np.ndarray, *, threshold: float | None = None,
                 nested: bool = False) -> list[tuple[int, int, int]]:
  """probs [S, K+1], span_words [S, 2] -> [(start, end_exclusive, label >= 1)] sorted by start.

  A span is accepted when its best entity label beats NULL (threshold None) or reaches `threshold`;
  flat decoding then keeps the highest-scoring spans that do not overlap an already kept one.
  """
  labels = 1 + np.argmax(probs[:, 1:], axis=1)
  scores = probs[np.arange(len(probs)), labels]
  accepted = scores > probs[:, NULL] if threshold is None else scores >= threshold
  chosen, taken = [], np.zeros(int(span_words.max(initial=-1)) + 1, bool)
  for index in np.argsort(-scores, kind="stable"):
    if not accepted[index]:
      continue
    start, end = int(span_words[index, 0]), int(span_words[index, 1])
    if not nested:
      if taken[start:end + 1].any():
        continue
      taken[start:end + 1] = True
    chosen.append((start, end + 1, int(labels[index])))
  return sorted(chosen)


def span_f1(gold: Sequence[Sequence[tuple]], predicted: Sequence[Sequence[tuple]]) -> float:
  """Micro F1 of exact (start, end, label) matches over sentences."""
  true_positives = sum(len(set(g) & set(p)) for g, p in zip(gold, predicted))
  n_gold, n_pred = sum(map(len, gold)), sum(map(len, predicted))
  return 2 * true_positives / (n_gold + n_pred) if n_gold + n_pred else 0.0


def tune_threshold(probs: Sequence[np.ndarray], span_words: Sequence[np.ndarray], gold: Sequence[Sequence[tuple]], *,
                   nested: bool = False, grid: Sequence[float] = tuple(np.linspace(0.3, 0.95, 14))) -> float:
  """The non-NULL threshold with the best dev F1 (ties: the lowest), for `decode_spans(threshold=...)`."""
  def f1_at(threshold):
    return span_f1(gold, [decode_spans(p, w, threshold=threshold, nested=nested) for p, w in zip(probs, span_words)])
  return float(max(grid, key=lambda t: (f1_at(t), -t)))
