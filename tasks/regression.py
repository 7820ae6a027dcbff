"""Sentence(-pair) regression: a real-valued score from the [CLS] vector, e.g. SICK relatedness or STS-B similarity.

score = h_CLS w_s + b: the classification head with one linear output instead of softmax (spec, "Sequence
Classification"; GLUE's STS-B and SemEval-2014 Task 1's relatedness subtask), trained with the mean squared error
on the raw scale of the data (1-5 for SICK; the output's bias starts at the training mean), scored by Pearson's r
and Spearman's rho (`tasks.scoring.metrics`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from objectives.objective import Objective
from tasks import classification
from tasks.family import labels_config
from tasks.scoring import metrics


def regression_loss(predictions, batch):
  """Mean squared error over real examples; `regression_loss` = (sum, count) is what the engine trains on."""
  mean, metrics = classification.squared_error(predictions, batch, "regression")
  return mean, {"regression_loss": metrics["regression_mse"]}


def build(config: Mapping[str, Any]) -> Objective:
  """Task "regression": config keys score_mean (the initial bias; `SentenceFamily.train_fields`) and Regression's
  fields (those missing at their defaults): pooling (cls, pooled or mean), dropout."""
  config = Regression.complete(config)
  pooling = classification.pooling_of(config)
  head = classification.ClassificationHead(0, pooling=pooling, dropout=config["dropout"], score=True,
                                           score_bias=float(config.get("score_mean", 0.0)))
  return Objective(name="regression", head=head, loss=regression_loss, reads=classification.reads(pooling))


class Regression(classification.SentenceFamily):
  """A real-valued score per example, scored by Pearson, Spearman and the mean squared error."""
  name = "regression"
  scoring = "scores"

  def uses_scores(self) -> bool:
    """Always: the score is the target."""
    return True

  def objective(self) -> Objective:
    return build(self.task)

  def hf_output(self) -> tuple[str, dict[str, Any]]:
    """The score output, as BertForSequenceClassification's one-label regression (num_labels 1, mean squared error)."""
    return "score", labels_config(["score"]) | {"problem_type": "regression"}

  def outputs(self, predictions: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    return predictions["score"]

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> float:
    return float(raw)

  def has_labels(self, records: Sequence[dict]) -> bool:
    return all(r.get("score") is not None for r in records)

  def metric_names(self) -> tuple[str, ...]:
    return ("pearson", "spearman", "mse")

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    return metrics.regression_scores([r["score"] for r in records], list(predictions))

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    return classification.texts(record) | {"score": prediction}
