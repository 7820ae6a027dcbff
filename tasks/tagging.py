"""Sequence labelling (spec, "Sequence Labeling", "BIO Tagging"): a per-token head W_K, greedy or CRF decoding.

y_i = softmax(h_i W_K) for every subword (optionally [h_i; h_last(i)] with the hidden state of the word's last subword,
so a word read at its first subword also sees its ending: "walk ##ing"); training labels come from `tasks.alignment`
(first subword only, or every subword). Words are read at their first subword (`word_positions`), so decoding is
word-level: argmax per word, or Viterbi under a linear-chain CRF whose transitions forbid moves the tag scheme does not
allow (e.g. O -> I-X in BIO). With a CRF the loss is the word-level sequence negative log-likelihood (forward
algorithm).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.fields import NON_NEGATIVE_INT, Check, Choice, Field
from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective
from tasks import alignment, batching, crf as crf_lib, word_shape
from tasks.family import HfHead, TaskFamily, labels_config, linears
from tasks.readers import overlaps
from tasks.scoring import metrics, tag_schemes
from tasks.task_fields import BOOL


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
    predictions: dict[str, Any] = {"logits": logits, "word_logits": layers.gather(logits, batch["word_positions"])}
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
  """Task "tagging": config keys tags (the tag vocabulary, index order) and Tagging's fields (those missing at their
  defaults): crf, scheme (or None), dropout, case_features, last_subword."""
  config = Tagging.complete(config)
  head = TaggingHead(tuple(config["tags"]), use_crf=config["crf"], scheme=config["scheme"], dropout=config["dropout"],
                     case_features=config["case_features"], last_subword=config["last_subword"])
  return Objective(name="tagging", head=head, loss=tagging_loss)


def conll_block(words: Sequence[str], *columns: Sequence[str]) -> str:
  """One sentence as CoNLL lines `word column...` (what `tasks.scoring.score` reads)."""
  return "".join(" ".join(fields) + "\n" for fields in zip(words, *columns))


def padded(tags: Sequence[str], num_words: int) -> list[str]:
  """Predicted tags for every word: "O" past truncation (as the run's .conll files and the scorer read them)."""
  return list(tags) + [tag_schemes.OUTSIDE] * (num_words - len(tags))


def _scheme_problem(value: str) -> str | None:
  ok = value == "" or value.upper() in tag_schemes.SCHEME_NAMES
  return None if ok else f"a tag scheme of {', '.join(tag_schemes.SCHEME_NAMES)} or '' (plain tags)"


# The word-level fields span NER reads as well (tasks/span_ner.py).
WORD_FIELDS = (
    Field("scheme", "IOB2", Check(_scheme_problem, "a tag scheme name or ''", ("BIOX",)),
          'trained and scored tag scheme (IOB2, BIOES, IO, ...; "" = plain tags).'),
    Field("source_scheme", "", Check(_scheme_problem, "a tag scheme name or ''", ("BIOX",)),
          "the data's tag scheme, converted to `scheme` (\"\" = same)."),
    Field("case_features", 0, NON_NEGATIVE_INT, "word-shape embedding width (0 = off)."),
)


# A subword label per token, and the word labels, pad with -1: no label (tasks.batching.collate).
LAYOUT = batching.Layout((*batching.PLAIN.token_fields, "label_ids"), {"label_ids": -1, "word_labels": -1})


class Tagging(TaskFamily):
  """A tag per word (BIO/IO/BIOES entities, or plain tags such as UPOS), scored by entity P/R/F1 (or accuracy)."""
  name = "tagging"
  word_level = True
  scoring = "conll"
  formats = ("conll", "conllu", "spans")
  config_fields = (
      *WORD_FIELDS,
      Field("score_mode", "conlleval", Choice(("conlleval", "strict")),
            'entity scoring: "conlleval" (lenient chunks) or "strict".'),
      Field("alignment", "first", Choice(("first", "all")),
            'subword training labels: "first" (others ignored) or "all" (every subword).'),
      Field("crf", False, BOOL, "a linear-chain CRF (Viterbi decoding) instead of greedy argmax."),
      Field("last_subword", False, BOOL, "each subword also sees its word's last subword."),
  )

  def gold_tags(self, record: dict) -> list[str]:
    """The record's tags in the trained scheme (a span record's flat spans written as tags)."""
    if "spans" in record:
      spans = [(s["label"], s["start"], s["end"]) for s in record["spans"]]
      return tag_schemes.tags_from_spans(spans, len(record["words"]), self.task["scheme"] or "IOB2")
    return tag_schemes.recode(record["tags"], self.task["source_scheme"], self.task["scheme"])

  def label_vocabulary(self, train_records: Sequence[dict]) -> list[str]:
    if any("spans" in r for r in train_records):
      types = sorted({s["label"] for r in train_records for s in r["spans"]})
      return tag_schemes.tag_vocab(types, self.task["scheme"] or "IOB2")
    tags = {t for r in train_records for t in r["tags"]}
    if not self.task["scheme"]:  # Plain labels (POS): every tag seen in training.
      return sorted(tags)
    return tag_schemes.tag_vocab(sorted({tag_schemes.split_tag(t)[1] for t in tags} - {""}), self.task["scheme"])

  def file_labels(self, data_format: str) -> list[str] | None:
    labels = list(self.task["labels"])
    if not labels or not self.task["scheme"]:
      return labels or None
    types = tag_schemes.entity_types(labels)
    return types if data_format == "spans" else tag_schemes.tag_vocab(
        types, self.task["source_scheme"] or self.task["scheme"])

  def usable(self, records: Sequence[dict]) -> bool:
    """Span records must be flat: tags cannot hold nested or crossing spans."""
    return not any("spans" in r and overlaps(r["spans"]) for r in records)

  def reader_checks(self) -> dict[str, Any]:
    return {"flat": True}  # Asked only for the span records `usable` refuses.

  def objective(self) -> Objective:
    return build(self.task | {"tags": self.task["labels"]})

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> dict[str, np.ndarray]:
    return alignment.encode_words(tokenizer, record["words"], [lookup(t) for t in self.gold_tags(record)],
                                  max_length=self.task["max_length"], alignment=self.task["alignment"],
                                  case_features=bool(self.task["case_features"]),
                                  last_subword=bool(self.task["last_subword"]))

  def widths(self) -> dict[str, Callable[[int], int]]:
    """At most L words fit in L tokens."""
    return dict.fromkeys(("word_positions", "word_labels"), lambda length: length)

  def outputs(self, predictions: dict[str, Any], batch: dict[str, jax.Array]) -> jax.Array:
    return decode(predictions, batch)

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> list[str]:
    return [self.task["labels"][int(t)] for t in raw]

  def metric_names(self) -> tuple[str, ...]:
    return ("precision", "recall", "f1", "accuracy") if self.task["scheme"] else ("accuracy",)

  def data_named_scores(self) -> tuple[str, ...]:
    """Entity tagging (a scheme) scores an F1 per entity type, named by the data's types."""
    return ("f1_<type>",) if self.task["scheme"] else ()

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    """Entity P/R/F1 (micro, and F1 per type) and token accuracy; plain tags: word accuracy."""
    gold = [self.gold_tags(r) for r in records]
    predicted = [padded(p, len(r["words"])) for r, p in zip(records, predictions)]
    if not self.task["scheme"]:
      return {"accuracy": float(metrics.accuracy_from_counts(metrics.accuracy_counts(gold, predicted).sum(0)))}
    return entity_scores(self.task, gold, predicted)

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    return {"conll": "\n".join(conll_block(r["words"], self.gold_tags(r), padded(p, len(r["words"])))
                               for r, p in zip(records, predictions))}

  def unlabelled(self, record: dict) -> dict:
    placeholder = tag_schemes.OUTSIDE if self.task["scheme"] else self.task["labels"][0]  # Never read.
    return {"words": record["words"], "tags": [placeholder] * len(record["words"])}

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    """{"words", "tags"}: None for words past max_length."""
    words = list(record["words"])
    return {"words": words, "tags": list(prediction) + [None] * (len(words) - len(prediction))}

  def conll(self, output: dict) -> str:
    tags = padded([t for t in output["tags"] if t is not None], len(output["words"]))
    return conll_block(output["words"], tags) + "\n"

  def layout(self) -> batching.Layout:
    return LAYOUT

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """HF's BertForTokenClassification (the same per-subword logits; our tags are the argmax at each word's first
    subword) unless the head has parts that class lacks: a CRF (Viterbi over its transitions, the scheme's forbidden
    moves at FORBIDDEN as decoded), word shapes (computed from the cased words, which uncased ids have lost) or the
    word-final subword (needs word boundaries); then the remote tagger, which reads them."""
    tensors = linears(head_params, ["classifier"])
    if "case_embeddings" in head_params:
      tensors["case_embeddings.weight"] = np.asarray(head_params["case_embeddings"]["embedding"])
    if "crf" in head_params:
      crf = crf_lib.LinearChainCRF(tuple(self.task["labels"]), self.task["scheme"])
      constrained = crf.apply({"params": head_params["crf"]}, method=crf.constrained)
      tensors |= {f"crf.{name}": np.asarray(x) for name, x in zip(("transitions", "start", "end"), constrained)}
    head = {"kind": "tagger", "dropout": self.task["dropout"], "crf": bool(self.task["crf"]),
            "case_features": int(self.task["case_features"] or 0), "shapes": list(word_shape.SHAPES),
            "last_subword": bool(self.task["last_subword"])}
    native = None if head["crf"] or head["case_features"] or head["last_subword"] else "BertForTokenClassification"
    return HfHead("TokenClassification", native, tensors, labels_config(self.task["labels"]), head)


def entity_scores(task: Mapping[str, Any], gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
                  ) -> dict[str, float]:
  """Micro entity P/R/F1, token accuracy and F1 per type of tag sequences in the task's scheme and scoring mode."""
  result = metrics.entity_scores(gold, predicted, mode=task["score_mode"], scheme=task["scheme"] or "IOB2")
  return ({"precision": result["micro"]["precision"], "recall": result["micro"]["recall"],
           "f1": result["micro"]["f1"], "accuracy": result["accuracy"]}
          | {f"f1_{kind}": row["f1"] for kind, row in result["per_type"].items()})
