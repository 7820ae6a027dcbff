"""Sequence and sequence-pair classification (spec, "Sequence Classification", "Pair-Wise Sequence Classification").

y = softmax(h_CLS W_C): one linear layer on the final [CLS] vector (or BERT's pooled [CLS], or the mean of the
tokens), trained with cross-entropy. Pairs are encoded [CLS] A [SEP] B [SEP] with segment ids 0/1 (NLI, paraphrase).
"""

from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from objectives import layers, objective
from objectives.objective import Objective

POOLINGS = ("cls", "pooled", "mean")


class ClassificationHead(nn.Module):
  """dropout -> W_C [H, num_labels] on the [CLS] representation."""
  num_labels: int
  pooling: str = "cls"
  dropout: float = 0.1
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> jax.Array:
    """-> logits [batch, num_labels]."""
    if self.pooling == "cls":
      sentence = outputs.cls
    elif self.pooling == "pooled":
      sentence = outputs.pooled
    else:
      mask = (batch["attention_segments"] > 0).astype(outputs.last.dtype)[..., None]
      sentence = (outputs.last * mask).sum(1) / jnp.maximum(mask.sum(1), 1.0)
    sentence = nn.Dropout(self.dropout)(sentence, deterministic=not train)
    return nn.Dense(self.num_labels, kernel_init=nn.initializers.normal(self.initializer_range),
                    name="classifier")(sentence).astype(jnp.float32)


def classification_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over real examples (`example_mask`), with loss/accuracy metrics."""
  weights = batch.get("example_mask", jnp.ones(logits.shape[:1]))
  return layers.cross_entropy(logits, batch["label"], weights, "classification")


def rdrop_loss(alpha: float) -> Callable:
  """R-Drop (Liang et al., 2021): cross-entropy of both dropout samples of each example (adjacent rows, see
  Objective.train_copies) plus alpha * their symmetric KL divergence, (KL(p1||p2) + KL(p2||p1)) / 2, per pair.
  Evaluation batches hold each example once and get the plain cross-entropy."""

  def loss(logits: jax.Array, batch: dict[str, jax.Array]):
    mean, metrics = classification_loss(logits, batch)
    if "train_copy" not in batch:
      return mean, metrics
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(-1, 2, logits.shape[-1])
    difference = log_p[:, 0] - log_p[:, 1]
    kl = 0.5 * ((jnp.exp(log_p[:, 0]) - jnp.exp(log_p[:, 1])) * difference).sum(-1)  # (KL12 + KL21) / 2.
    weights = batch.get("example_mask", jnp.ones(logits.shape[:1])).astype(jnp.float32)[::2]
    kl_sum = (kl * weights).sum()
    total, count = metrics["classification_loss"]
    total = total + alpha * kl_sum
    return total / jnp.maximum(count, 1.0), metrics | {"classification_loss": (total, count),
                                                       "classification_rdrop_kl": (kl_sum, weights.sum())}

  return loss


def build(config: Mapping[str, Any]) -> Objective:
  """Task "classification": config keys num_labels (or labels), pooling, dropout, rdrop (R-Drop's alpha; 0: off)."""
  num_labels = layers.option(config, "num_labels", 0) or len(config["labels"])
  pooling = layers.option(config, "pooling", "cls")
  if pooling not in POOLINGS:
    raise ValueError(f"task.pooling {pooling!r} is not one of {POOLINGS}")
  head = ClassificationHead(num_labels, pooling=pooling, dropout=layers.option(config, "dropout", 0.1))
  alpha = float(layers.option(config, "rdrop", 0.0))
  return Objective(name="classification", head=head, loss=rdrop_loss(alpha) if alpha > 0 else classification_loss,
                   reads=None if pooling == "mean" else objective.cls_only, train_copies=2 if alpha > 0 else 1)


def encode_example(tokenizer, text_a: str, text_b: str | None, label: int, *, max_length: int) -> dict[str, np.ndarray]:
  """One example: [CLS] A [SEP] (B [SEP]) ids, segment ids, and the label index."""
  encoding = tokenizer.encode(text_a, text_b, max_length=max_length)
  return {"input_ids": np.asarray(encoding.input_ids, np.int32), "type_ids": np.asarray(encoding.type_ids, np.int32),
          "label": np.asarray(label, np.int32)}


def label_index(labels: Sequence[str]) -> dict[str, int]:
  """Label name -> class index, in the configured order (the order predictions are written in)."""
  return {name: index for index, name in enumerate(labels)}
