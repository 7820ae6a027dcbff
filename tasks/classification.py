"""Sequence and sequence-pair classification (spec, "Sequence Classification", "Pair-Wise Sequence Classification").

y = softmax(h_CLS W_C): one linear layer on the final [CLS] vector (or BERT's pooled [CLS], or the mean of the
tokens), trained with cross-entropy. Pairs are encoded [CLS] A [SEP] B [SEP] with segment ids 0/1 (NLI, paraphrase).
The same head can also regress a real-valued score from that vector (`tasks.regression`; SICK's relatedness as an
auxiliary target of its entailment labels: `score_weight`).
"""

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from encoder import errors, hf
from encoder.fields import NON_NEGATIVE, Anything, Choice, Field
from objectives import layers, objective
from objectives.objective import Objective
from tasks.family import HfHead, TaskFamily, labels_config
from tasks.scoring import metrics

POOLINGS = ("cls", "pooled", "mean")


class ClassificationHead(nn.Module):
  """dropout -> W_C [H, num_labels] on the [CLS] representation; with `score`, also w_s [H, 1] (a regression output
  from the same vector)."""
  num_labels: int  # 0: no classifier (regression only).
  pooling: str = "cls"
  dropout: float = 0.1
  initializer_range: float = 0.02
  score: bool = False
  score_bias: float = 0.0  # Initial bias of the score output: the training scores' mean, so training starts centred.

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> dict[str, jax.Array]:
    """-> {"logits": [batch, num_labels]} (num_labels > 0) and {"score": [batch]} (with `score`)."""
    if self.pooling == "cls":
      sentence = outputs.cls
    elif self.pooling == "pooled":
      sentence = outputs.pooled
    else:
      mask = (batch["attention_segments"] > 0).astype(outputs.last.dtype)[..., None]
      sentence = (outputs.last * mask).sum(1) / jnp.maximum(mask.sum(1), 1.0)
    sentence = nn.Dropout(self.dropout)(sentence, deterministic=not train)
    dense = lambda features, name, bias=0.0: nn.Dense(
        features, kernel_init=nn.initializers.normal(self.initializer_range),
        bias_init=nn.initializers.constant(bias), name=name)(sentence).astype(jnp.float32)
    predictions = {"logits": dense(self.num_labels, "classifier")} if self.num_labels else {}
    return predictions | ({"score": dense(1, "score", self.score_bias)[:, 0]} if self.score else {})


def classification_loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
  """Mean cross-entropy over real examples (`example_mask`), with loss/accuracy metrics."""
  logits = predictions["logits"]
  weights = batch.get("example_mask", jnp.ones(logits.shape[:1]))
  return layers.cross_entropy(logits, batch["label"], weights, "classification")


def squared_error(predictions: dict[str, jax.Array], batch: dict[str, jax.Array], name: str):
  """Mean squared error of the score over real examples, with metric `<name>_mse` = (sum, count)."""
  weights = batch.get("example_mask", jnp.ones(predictions["score"].shape)).astype(jnp.float32)
  total = (jnp.square(predictions["score"] - batch["score"]) * weights).sum()
  count = weights.sum()
  return total / jnp.maximum(count, 1.0), {f"{name}_mse": (total, count)}


def with_score(loss_fn: Callable, weight: float) -> Callable:
  """`loss_fn` + weight * the squared error of the auxiliary score (per example, e.g. SICK relatedness beside its
  entailment label): multi-task learning from one [CLS] vector."""

  def loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
    _, metrics = loss_fn(predictions, batch)
    _, score_metrics = squared_error(predictions, batch, "classification_score")
    (total, count), (squares, _) = metrics["classification_loss"], score_metrics["classification_score_mse"]
    total = total + weight * squares
    return total / jnp.maximum(count, 1.0), metrics | score_metrics | {"classification_loss": (total, count)}

  return loss


def rdrop_loss(alpha: float) -> Callable:
  """R-Drop (Liang et al., 2021): cross-entropy of both dropout samples of each example (adjacent rows, see
  Objective.train_copies) plus alpha * their symmetric KL divergence, (KL(p1||p2) + KL(p2||p1)) / 2, per pair.
  Evaluation batches hold each example once and get the plain cross-entropy."""

  def loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
    mean, metrics = classification_loss(predictions, batch)
    if "train_copy" not in batch:
      return mean, metrics
    logits = predictions["logits"]
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


def pooling_of(config: Mapping[str, Any]) -> str:
  """config's sentence pooling, checked."""
  pooling = config["pooling"]
  if pooling not in POOLINGS:
    raise errors.ConfigError(f"config.task.pooling={pooling!r}: expected one of {', '.join(map(repr, POOLINGS))} "
                             "for a sentence task")
  return pooling


def reads(pooling: str) -> Callable | None:
  """The head's `Objective.reads`: [CLS] only, unless it pools every token."""
  return None if pooling == "mean" else objective.cls_only


def build(config: Mapping[str, Any]) -> Objective:
  """Task "classification": config keys num_labels (or labels), score_mean (the training scores' mean, the score
  output's initial bias; `SentenceFamily.train_fields`) and Classification's fields (those missing at their
  defaults): pooling, dropout, rdrop (R-Drop's alpha; 0: off), score_weight (> 0: also regress each example's score,
  weighted so in the loss; 0: off)."""
  config = Classification.complete(config)
  num_labels = config.get("num_labels") or len(config["labels"])
  pooling = pooling_of(config)
  weight = float(config["score_weight"])
  head = ClassificationHead(num_labels, pooling=pooling, dropout=config["dropout"], score=weight > 0,
                            score_bias=float(config.get("score_mean", 0.0)))
  alpha = float(config["rdrop"])
  loss = rdrop_loss(alpha) if alpha > 0 else classification_loss
  return Objective(name="classification", head=head, loss=with_score(loss, weight) if weight > 0 else loss,
                   reads=reads(pooling), train_copies=2 if alpha > 0 else 1)


def encode_example(tokenizer, text_a: str, text_b: str | None, label: int, *, max_length: int,
                   score: float | None = None) -> dict[str, np.ndarray]:
  """One example: [CLS] A [SEP] (B [SEP]) ids, segment ids, the label index (and the score, when given)."""
  encoding = tokenizer.encode(text_a, text_b, max_length=max_length)
  return {"input_ids": np.asarray(encoding.input_ids, np.int32), "type_ids": np.asarray(encoding.type_ids, np.int32),
          "label": np.asarray(label, np.int32)} | ({} if score is None else {"score": np.asarray(score, np.float32)})


def texts(record: dict) -> dict:
  """The input texts of a record, as predictions echo them."""
  return {"text_a": record["text_a"]} | ({"text_b": record["text_b"]} if record.get("text_b") else {})


class SentenceFamily(TaskFamily):
  """What sentence(-pair) families share: [CLS] A [SEP] (B [SEP]) examples, one row of outputs per example, scores
  from real-valued `score` columns, `.labels` prediction files (one prediction a line)."""
  formats = ("tsv",)
  config_fields: tuple[Field, ...] = (
      Field("pooling", "cls", Choice(POOLINGS),
            "the sentence vector: the final [CLS] (cls), BERT's pooled [CLS] (pooled) or the tokens' mean (mean)."),)

  @abc.abstractmethod
  def uses_scores(self) -> bool:
    """Whether the task trains on the records' real-valued scores."""

  @abc.abstractmethod
  def hf_output(self) -> tuple[str, dict[str, Any]]:
    """(the head's output layer that is BertForSequenceClassification's classifier, that class's config fields)."""

  def train_fields(self, train_records: Sequence[dict]) -> dict[str, Any]:
    """score_mean (the score output's initial bias) when the task trains on scores; an error when a record has none."""
    if not self.uses_scores():
      return {}
    if any(r.get("score") is None for r in train_records):
      raise errors.ConfigError(
          f"task {self.name!r}{' with score_weight' if self.name == 'classification' else ''} trains on scores, but "
          f"{self.task['train_split']!r} of {self.task['dataset'] or self.task['files']} has none: give the TSV reader "
          "a score column (config.task.columns=...,score:<column>)")
    return {"score_mean": float(np.mean([r["score"] for r in train_records]))}

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> dict[str, np.ndarray]:
    label = lookup(record["label"]) if self.name == "classification" and record.get("label") is not None else -1
    return encode_example(tokenizer, record["text_a"], record.get("text_b"), label, max_length=self.task["max_length"],
                          score=record.get("score") if self.uses_scores() else None)

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    return {"labels": "".join(f"{p}\n" for p in predictions)}

  def unlabelled(self, record: dict) -> dict:
    return {"text_a": record["text_a"], "text_b": record.get("text_b"), "label": None}

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """HF's BertForSequenceClassification when the head reads BERT's pooled [CLS] (the only vector that class
    classifies) and has no auxiliary score; else the remote class, which reads the final [CLS] vector or the mean of
    the tokens as trained (a tanh pooler cannot pass a vector through) and gives the score beside the logits."""
    output, config = self.hf_output()
    pooling, score = pooling_of(self.task), "score" in head_params and output != "score"
    tensors = hf.linear_to_hf("classifier", head_params[output])
    tensors |= hf.linear_to_hf("score", head_params["score"]) if score else {}
    head = {"pooling": pooling, "dropout": self.task["dropout"], "score": score}
    native = "BertForSequenceClassification" if pooling == "pooled" and not score else None
    return HfHead("SequenceClassification", native, tensors, config, head, pooler=pooling == "pooled")


class Classification(SentenceFamily):
  """Sentence(-pair) classification: a label per example, scored by accuracy and macro-F1, and with
  `positive_label` by that class's F1 ("f1", GLUE's paraphrase F1)."""
  name = "classification"
  scoring = "labels"
  config_fields = (
      *SentenceFamily.config_fields,
      Field("rdrop", 0.0, NON_NEGATIVE,
            "R-Drop's alpha (each training example twice, + alpha * symmetric KL of the two predictions; twice the "
            "encoder work per step); 0 = off."),
      Field("score_weight", 0.0, NON_NEGATIVE,
            "also regress each example's score (the dataset's score column, e.g. SICK relatedness) from the same "
            "vector, adding this weight times its squared error to the loss; 0 = off."),
      Field("positive_label", "", Anything("a label of the task, or '' (checked against the labels when read)"),
            "the positive label, whose F1 is also scored, as \"f1\" (GLUE's MRPC/QQP F1); \"\" = none."),
  )

  def uses_scores(self) -> bool:
    """Whether the task also regresses the records' scores (`score_weight`)."""
    return bool(self.task["score_weight"])

  def check(self, config: ml_collections.ConfigDict) -> None:
    """R-Drop repeats batch rows, which packed batches do not; a positive_label must be one of config.task.labels
    when the config names them (else it is checked against the training labels: `train_fields`)."""
    task = config.task
    if config.data.pack and task.rdrop > 0:
      raise errors.ConfigError(f"config.data.pack=True: expected config.task.rdrop=0, found {task.rdrop} (R-Drop "
                               "repeats batch rows; packed rows are not repeated)")
    if task.positive_label and task.labels and task.positive_label not in task.labels:
      raise errors.ConfigError(f"config.task.positive_label={task.positive_label!r}: expected one of "
                               f"config.task.labels {list(task.labels)}")

  def train_fields(self, train_records: Sequence[dict]) -> dict[str, Any]:
    """As SentenceFamily's; a positive_label that is not one of the task's labels is a ConfigError."""
    positive = self.task["positive_label"]
    if positive and positive not in self.task["labels"]:
      raise errors.ConfigError(f"config.task.positive_label={positive!r} is not one of the task's labels "
                                       f"{list(self.task['labels'])}")
    return super().train_fields(train_records)

  def label_vocabulary(self, train_records: Sequence[dict]) -> list[str]:
    return sorted({r["label"] for r in train_records})

  def file_labels(self, data_format: str) -> list[str] | None:
    return list(self.task["labels"]) or None

  def objective(self) -> Objective:
    return build(self.task)

  def hf_output(self) -> tuple[str, dict[str, Any]]:
    """(the head's output layer that is BertForSequenceClassification's classifier, that class's config fields)."""
    return "classifier", labels_config(self.task["labels"]) | {"problem_type": "single_label_classification"}

  def outputs(self, predictions: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    """The logits: `decode` takes their argmax, predict also their softmax."""
    return predictions["logits"]

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> str:
    return self.task["labels"][int(np.argmax(raw))]

  def has_labels(self, records: Sequence[dict]) -> bool:
    return all(r.get("label") is not None for r in records)

  def metric_names(self) -> tuple[str, ...]:
    return ("accuracy", "macro_f1") + (("f1",) if self.task["positive_label"] else ())

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    gold = [r["label"] for r in records]
    result = metrics.label_scores(gold, list(predictions))
    scores = {"accuracy": result["accuracy"], "macro_f1": result["macro"]["f1"]}
    if positive := self.task["positive_label"]:
      scores["f1"] = float(metrics.micro_f1(metrics.positive_counts(gold, list(predictions), positive).sum(axis=0)))
    return scores

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    probabilities = np.exp(raw.astype(np.float64) - raw.max())
    probabilities /= probabilities.sum()
    return texts(record) | {"label": prediction,
                            "probabilities": dict(zip(self.task["labels"], probabilities.round(6).tolist()))}
