"""Span-based NER (spec, "Fine-tuning for Span-Based Applications").

Every word span (i, j) with j - i < L is classified over the entity types plus NULL:
  spanRep_ij = [s_i; e_j; g_ij],  s_i = FFN_start(z_i), e_j = FFN_end(z_j) (optional; else z_i, z_j),
  g_ij = mean(z_i..z_j) or SelfAttention(z_i:j),  y_ij = softmax(FFN(spanRep_ij)).
Decoding keeps a span when its best non-NULL probability reaches a threshold calibrated on dev (None: plain argmax),
then, for flat data, greedily drops overlaps by score; nested data keeps every accepted span.

Almost every candidate is NULL (98.6% of GENIA's spans up to 10 words), so the classifier's biases start at the log
frequencies of the labels among the training candidates (`task.prior_bias`, RetinaNet's prior initialization): the
first steps then start at the null-rate loss instead of spending the run learning it. Adam moves a parameter by about
the learning rate per step, so a bias starting at 0 cannot reach the 5-8 logits of the null prior in a short run, and
the head then makes every span NULL through its weights, the same output for every span. `task.null_weight` scales
the NULL spans' share of the loss.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors
from encoder.fields import POSITIVE, POSITIVE_INT, Choice, Field
from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective
from tasks import batching, tagging, word_shape
from tasks.alignment import first_subword_positions
from tasks.family import HfHead, TaskFamily, labels_config, linears
from tasks.readers import overlaps, tagging_to_spans
from tasks.scoring import metrics, tag_schemes
from tasks.task_fields import BOOL

NULL = 0  # Label index of "no entity"; entity types are 1..K.
POOLINGS = ("mean", "attention")
# Acceptance thresholds tried on dev: from about the prior of an entity type among the candidates (a head that has
# just begun to separate entities gives them a few percent) up to 0.95.
THRESHOLDS = (0.01, 0.02, 0.05) + tuple(round(0.05 * k, 2) for k in range(2, 20))


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
  lasts = {word: position for position, word in enumerate(encoding.word_ids) if word is not None}
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
  label_bias: tuple[float, ...] = ()  # Initial classifier biases, NULL first (() = zeros).
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
    bias = nn.initializers.constant(np.asarray(self.label_bias or 0.0, np.float32))
    classifier = nn.Dense(self.num_labels + 1, kernel_init=init, bias_init=bias, name="classifier")
    return per_token(classifier, h).astype(jnp.float32)


def span_loss(logits: jax.Array, batch: dict[str, jax.Array], null_weight: float = 1.0):
  """Weighted mean cross-entropy over every real candidate span (labels >= 0): a NULL span weighs `null_weight`, an
  entity 1, and the sum is divided by the weights' sum (so is the accuracy metric)."""
  labels = batch["span_labels"]
  weights = jnp.where(labels == NULL, null_weight, 1.0) * (labels >= 0)
  return layers.cross_entropy(logits, jnp.maximum(labels, 0), weights, "span_ner")


def label_prior(records: Sequence[dict], num_labels: int, *, max_width: int,
                null_weight: float = 1.0) -> np.ndarray:
  """[num_labels + 1] log frequencies of NULL (weighted by `null_weight`) and of each type among the candidate spans
  of `records` ({"words", "spans": [(start, end, label >= 1)]}): the classifier biases that minimize the loss of a
  head that ignores its input, where training then starts (`task.prior_bias`)."""
  counts = np.zeros(num_labels + 1)
  for record in records:
    entities = [label for start, end, label in record["spans"] if end - start <= max_width]
    np.add.at(counts, entities, 1)
    counts[NULL] += len(enumerate_spans(len(record["words"]), max_width)) - len(entities)
  counts[NULL] *= null_weight
  counts = np.maximum(counts, 1.0)  # A type with no training span: one, so its log stays finite.
  return np.log(counts / counts.sum())


def build(config: Mapping[str, Any]) -> Objective:
  """Task "span_ner": config keys num_labels (or labels), label_bias (initial classifier biases;
  `SpanNER.train_fields`) and SpanNER's fields (those missing at their defaults): pooling, boundary_ffn, span_hidden,
  dropout, case_features, null_weight."""
  config = SpanNER.complete(config)
  num_labels = config.get("num_labels") or len(config["labels"])
  pooling = config["pooling"]
  if pooling not in POOLINGS:
    raise errors.ConfigError(f"config.task.pooling={pooling!r}: expected one of {', '.join(map(repr, POOLINGS))} "
                             "for span_ner")
  head = SpanClassifierHead(num_labels, pooling=pooling, boundary_ffn=config["boundary_ffn"],
                            hidden=config["span_hidden"], dropout=config["dropout"],
                            case_features=config["case_features"], label_bias=tuple(config.get("label_bias", ())))
  null_weight = float(config["null_weight"])
  if not null_weight > 0:
    raise errors.ConfigError(f"config.task.null_weight={null_weight}: expected a loss weight > 0 for NULL spans (1: "
                             "plain cross-entropy; 0 would leave nothing teaching the head what is not an entity)")
  return Objective(name="span_ner", head=head, loss=functools.partial(span_loss, null_weight=null_weight))


def decode_spans(probs: np.ndarray, span_words: np.ndarray, *, threshold: float | None = None,
                 nested: bool = False) -> list[tuple[int, int, int]]:
  """probs [S, K+1], span_words [S, 2] -> [(start, end_exclusive, label >= 1)] sorted by start.

  A span is accepted when its best entity label beats NULL (threshold None) or reaches `threshold`;
  flat decoding then keeps the highest-scoring spans that do not overlap an already kept one.
  """
  labels = 1 + np.argmax(probs[:, 1:], axis=1)
  scores = probs[np.arange(len(probs)), labels]
  accepted = scores > probs[:, NULL] if threshold is None else scores >= threshold
  order = np.argsort(-scores, kind="stable")
  chosen, taken = [], np.zeros(int(span_words.max(initial=-1)) + 1, bool)
  for index in order[accepted[order]]:
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
                   nested: bool = False, grid: Sequence[float] = THRESHOLDS) -> float:
  """The non-NULL threshold with the best dev F1 (ties: the lowest), for `decode_spans(threshold=...)`."""
  def f1_at(threshold):
    return span_f1(gold, [decode_spans(p, w, threshold=threshold, nested=nested) for p, w in zip(probs, span_words)])
  return float(max(grid, key=lambda t: (f1_at(t), -t)))


LAYOUT = batching.Layout(batching.PLAIN.token_fields, {"span_labels": -1})  # A padded candidate has no label.


class SpanNER(TaskFamily):
  """Every word span up to max_span_width classified over NULL + entity types; flat (greedy non-overlap) or nested
  (task.nested: overlapping spans kept), scored by exact-match span P/R/F1 (and token accuracy when flat)."""
  name = "span_ner"
  word_level = True
  scoring = "conll"  # Flat runs only: nested predictions have no .conll file.
  formats = ("conll", "conllu", "spans")
  config_fields = (
      *tagging.WORD_FIELDS,
      Field("max_span_width", 8, POSITIVE_INT, "longest candidate span L, in words."),
      Field("pooling", "mean", Choice(POOLINGS), "the span's tokens pooled by mean or attention."),
      Field("boundary_ffn", True, BOOL, "FFN_start / FFN_end on the boundary tokens."),
      Field("span_hidden", 256, POSITIVE_INT, "width of the span classifier's hidden layer."),
      Field("nested", False, BOOL, "keep overlapping spans (nested data), not greedy non-overlap."),
      Field("prior_bias", True, BOOL,
            "the classifier's biases start at the log frequencies of NULL and each type among the training candidate "
            "spans (so training starts at the null-rate loss; tasks/span_ner.py says why); False: zeros."),
      Field("null_weight", 1.0, POSITIVE, "loss weight of a NULL span (an entity span weighs 1)."),
  )

  def __init__(self, task: Mapping[str, Any]):
    super().__init__(task)
    self.scheme = self.task["scheme"] or "IOB2"

  def gold_spans(self, record: dict) -> list[dict]:
    """The record's spans (a tagging record's tags chunked in the trained scheme)."""
    if "spans" in record:
      return record["spans"]
    tags = tag_schemes.recode(record["tags"], self.task["source_scheme"], self.task["scheme"])
    return tagging_to_spans({**record, "tags": tags}, scheme=self.scheme)["spans"]

  def label_vocabulary(self, train_records: Sequence[dict]) -> list[str]:
    return sorted({s["label"] for r in train_records for s in self.gold_spans(r)})

  def file_labels(self, data_format: str) -> list[str] | None:
    types = list(self.task["labels"])
    if not types:
      return None
    return types if data_format == "spans" else tag_schemes.tag_vocab(
        types, self.task["source_scheme"] or self.task["scheme"])

  def usable(self, records: Sequence[dict]) -> bool:
    """Flat runs refuse nested gold: greedy flat decoding could never predict it, and .conll files cannot hold it."""
    return bool(self.task["nested"]) or not any("spans" in r and overlaps(r["spans"]) for r in records)

  def reader_checks(self) -> dict[str, Any]:
    return {} if self.task["nested"] else {"flat": True}

  def train_fields(self, train_records: Sequence[dict]) -> dict[str, Any]:
    """label_bias: the classifier's initial biases, the labels' log frequencies among the training candidate spans
    (`label_prior`), when task.prior_bias."""
    if not self.task["prior_bias"]:
      return {}
    index = {label: i for i, label in enumerate(self.task["labels"])}
    records = [{"words": r["words"], "spans": [(s["start"], s["end"], 1 + index[s["label"]])
                                               for s in self.gold_spans(r) if s["label"] in index]}
               for r in train_records]
    prior = label_prior(records, len(index), max_width=self.task["max_span_width"],
                        null_weight=self.task["null_weight"])
    return {"label_bias": tuple(float(b) for b in prior)}

  def objective(self) -> Objective:
    return build(self.task)

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> dict[str, np.ndarray]:
    spans = [(s["start"], s["end"], 1 + lookup(s["label"])) for s in self.gold_spans(record)]
    return encode_spans(tokenizer, record["words"], spans, max_length=self.task["max_length"],
                        max_width=self.task["max_span_width"],
                        case_features=bool(self.task["case_features"]))

  def widths(self) -> dict[str, Callable[[int], int]]:
    """The spans of L - 2 words (between [CLS] and [SEP]) at L tokens."""
    width = self.task["max_span_width"]
    spans = lambda length: len(enumerate_spans(max(length - 2, 1), width))
    return dict.fromkeys(("span_starts", "span_ends", "span_words", "span_labels"), spans)

  def outputs(self, predictions: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
    """Probabilities over NULL + types per candidate span."""
    return jax.nn.softmax(predictions, axis=-1)

  def tune(self, records: Sequence[dict], examples: Sequence[dict], raw: Sequence[np.ndarray]) -> float:
    """The acceptance threshold with the best dev F1 (used on test: chosen on dev, never on test)."""
    gold = [[(int(s), int(e) + 1, int(label)) for (s, e), label in zip(ex["span_words"], ex["span_labels"])
             if label > 0] for ex in examples]
    return tune_threshold(raw, [ex["span_words"].reshape(-1, 2) for ex in examples], gold,
                          nested=bool(self.task["nested"]))

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> list[tuple[int, int, str]]:
    return [(start, end, self.task["labels"][label - 1]) for start, end, label in
            decode_spans(raw, example["span_words"].reshape(-1, 2), threshold=threshold,
                         nested=bool(self.task["nested"]))]

  def metric_names(self) -> tuple[str, ...]:
    return ("precision", "recall", "f1") + (() if self.task["nested"] else ("accuracy",))

  def data_named_scores(self) -> tuple[str, ...]:
    """An F1 per entity type, named by the data's types."""
    return ("f1_<type>",)

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    """Exact-match span P/R/F1 (micro, and F1 per type) over each sentence's set of spans, nested or not; flat runs
    also token accuracy (of the spans written as tags); nested runs also the outer and inner entities apart
    (`tasks.scoring.metrics.nesting_scores`: outer_f1, inner_f1, inner_recall)."""
    pairs = [({(s["label"], s["start"], s["end"]) for s in self.gold_spans(r)},
              {(label, start, end) for start, end, label in p}) for r, p in zip(records, predictions)]
    types, counts = metrics.span_counts(pairs)
    result = metrics.scores_from_counts(types, counts.sum(axis=0))
    if self.task["nested"]:
      extra = metrics.nesting_scores(pairs)
    else:
      extra = {"accuracy": float(metrics.accuracy_from_counts(
          metrics.accuracy_counts(*self.tag_columns(records, predictions)).sum(0)))}
    return ({"precision": result["micro"]["precision"], "recall": result["micro"]["recall"],
             "f1": result["micro"]["f1"]} | extra | {f"f1_{kind}": row["f1"] for kind, row in
                                                     result["per_type"].items()})

  def tag_columns(self, records: Sequence[dict], predictions: Sequence[Any]) -> tuple[list, list]:
    """Gold tags (a tagging record's own, in the trained scheme) and the predicted spans as tags, per sentence (flat
    spans only)."""
    tags = lambda spans, record: tag_schemes.tags_from_spans(spans, len(record["words"]), self.scheme)
    gold = [tag_schemes.recode(r["tags"], self.task["source_scheme"], self.task["scheme"]) if "tags" in r
            else tags([(s["label"], s["start"], s["end"]) for s in r["spans"]], r) for r in records]
    return gold, [tags([(label, start, end) for start, end, label in p], r) for r, p in zip(records, predictions)]

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    """Flat runs: `.conll` (word, gold tag, predicted tag); nested spans live in the .jsonl file only."""
    if self.task["nested"]:
      return {}
    gold, predicted = self.tag_columns(records, predictions)
    return {"conll": "\n".join(tagging.conll_block(r["words"], g, p)
                               for r, g, p in zip(records, gold, predicted))}

  def unlabelled(self, record: dict) -> dict:
    return {"words": record["words"], "spans": []}

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    """{"words", "entities": [{"start", "end" (exclusive), "label", "score", "text"}]}."""
    words, labels = list(record["words"]), self.task["labels"]
    index = {(int(s), int(e)): i for i, (s, e) in enumerate(example["span_words"].reshape(-1, 2))}
    return {"words": words, "entities": [
        {"start": start, "end": end, "label": label,
         "score": round(float(raw[index[start, end - 1], 1 + labels.index(label)]), 6),
         "text": " ".join(words[start:end])} for start, end, label in prediction]}

  def conll(self, output: dict) -> str:
    if self.task["nested"]:
      raise errors.UserError("--output conll cannot hold nested spans (the run trained with config.task.nested): "
                                   "use --output jsonl")
    spans = [(e["label"], e["start"], e["end"]) for e in output["entities"]]
    return tagging.conll_block(output["words"],
                               tag_schemes.tags_from_spans(spans, len(output["words"]), self.scheme)) + "\n"

  def layout(self) -> batching.Layout:
    return LAYOUT

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """The remote word-level class as a span classifier (HF's heads label the sequence or each token, never word
    spans), decoding with the threshold the run tuned on dev; label 0 ("O") is no entity."""
    tensors = linears(head_params, ["ffn_start", "ffn_end", "span_attention", "ffn", "classifier"])
    if "case_embeddings" in head_params:
      tensors["case_embeddings.weight"] = np.asarray(head_params["case_embeddings"]["embedding"])
    task = self.task
    head = {"kind": "spans", "dropout": task["dropout"], "shapes": list(word_shape.SHAPES),
            "case_features": int(task["case_features"] or 0), "boundary_ffn": bool(task["boundary_ffn"]),
            "pooling": task["pooling"], "span_hidden": int(task["span_hidden"]),
            "max_span_width": int(task["max_span_width"]), "threshold": threshold, "nested": bool(task["nested"])}
    labels = labels_config([tag_schemes.OUTSIDE, *self.task["labels"]])
    return HfHead("TokenClassification", None, tensors, labels, head)
