"""Extractive question answering (spec, "Fine-tuning for Span-Based Applications"; SQuAD, BERT's run_squad.py).

The question and the context are packed as a pair, [CLS] question [SEP] context-window [SEP] (segment ids 0/1); the
question keeps its first `max_question_length` subwords, and a context longer than the rest of `max_length` is cut
into overlapping windows whose starts are `doc_stride` subwords apart (BERT's doc_stride; HF's `stride` is instead the
overlap). The head is one linear layer on the final hidden states, [H, 2] -> start and end logits per token (HF's
BertForQuestionAnswering.qa_outputs). A window is trained on the answer's first and last subword when it holds the
whole answer, else on [CLS] (position 0) for both; the loss is the mean of the start and end cross-entropies.

Decoding a question: in each window, the `n_best` highest start and end logits, every pair with start <= end, at most
`max_answer_length` subwords, both inside the context; the best start + end logit over all windows; the answer is the
context's characters from the start subword's first to the end subword's last (tokenizer offsets into the original
text). SQuAD 2.0 (task.unanswerable): a question is unanswerable ("") when its null score (start + end logit at [CLS],
the least over windows) exceeds the best answer's score by more than a threshold chosen on dev to maximize F1.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors, hf
from encoder.fields import POSITIVE_INT, Field
from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective
from tasks.family import HfHead, TaskFamily
from tasks.scoring import squad
from tasks.task_fields import BOOL

OUTSIDE = -1  # char_spans of a token outside the context ([CLS], the question, [SEP], padding).


def window_starts(context_length: int, budget: int, stride: int) -> list[int]:
  """First context subword of each window of `budget` subwords, `stride` apart, until one reaches the end."""
  starts = [0]
  while starts[-1] + budget < context_length:
    starts.append(starts[-1] + min(stride, budget))
  return starts


def answer_subwords(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
  """The first and last context subword (inclusive) overlapping characters [start, end), None when none does."""
  inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
  return (inside[0], inside[-1]) if inside else None


def encode_windows(tokenizer, question: str, context: str, answer: tuple[int, int] | None, *, max_length: int,
                   doc_stride: int, max_question_length: int) -> list[dict[str, np.ndarray]]:
  """One example per window: ids, segment ids, each token's character span in `context` (OUTSIDE elsewhere) and the
  training targets (the answer's subwords within the window, else 0 = [CLS]). `answer`: characters [start, end)."""
  (question_ids, _), (context_ids, offsets) = tokenizer.subwords_with_offsets([question, context])
  question_ids = question_ids[:max_question_length]
  budget = max_length - len(question_ids) - 3
  if budget < 1:
    raise errors.ConfigError(f"config.task.max_length={max_length} leaves no room for the context after a question of "
                             f"{len(question_ids)} subwords (max_question_length {max_question_length}) and 3 specials")
  target = answer_subwords(offsets, *answer) if answer is not None else None
  head = [tokenizer.cls_id, *question_ids, tokenizer.sep_id]
  examples = []
  for first in window_starts(len(context_ids), budget, doc_stride):
    last = min(first + budget, len(context_ids))  # Exclusive.
    ids = head + context_ids[first:last] + [tokenizer.sep_id]
    spans = np.full((len(ids), 2), OUTSIDE, np.int32)
    spans[len(head):len(head) + last - first] = offsets[first:last]
    start = end = 0
    if target is not None and first <= target[0] and target[1] < last:
      start, end = target[0] - first + len(head), target[1] - first + len(head)
    examples.append({"input_ids": np.asarray(ids, np.int32),
                     "type_ids": np.asarray([0] * len(head) + [1] * (len(ids) - len(head)), np.int32),
                     "char_spans": spans, "start_position": np.asarray(start, np.int32),
                     "end_position": np.asarray(end, np.int32)})
  return examples


class SpanEndpointsHead(nn.Module):
  """qa_outputs [H, 2] on every final hidden state -> start and end logits (no dropout, as HF's class)."""
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> dict[str, jax.Array]:
    """-> {"start_logits", "end_logits"}: [batch, length] each."""
    dense = nn.Dense(2, kernel_init=nn.initializers.normal(self.initializer_range), name="qa_outputs")
    logits = per_token(dense, outputs.last).astype(jnp.float32)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


def span_endpoints_loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
  """(start cross-entropy + end cross-entropy) / 2 over real windows, padding tokens excluded from the softmax."""
  weights = batch.get("example_mask", jnp.ones(batch["start_position"].shape)).astype(jnp.float32)
  padding = batch["attention_segments"] == 0
  mean = 0.0
  metrics: dict[str, tuple[jax.Array, jax.Array]] = {}  # (sum, count) per metric.
  for side in ("start", "end"):
    logits = jnp.where(padding, -1e9, predictions[f"{side}_logits"])
    side_mean, side_metrics = layers.cross_entropy(logits, batch[f"{side}_position"], weights, f"qa_{side}")
    mean, metrics = mean + side_mean / 2, metrics | side_metrics
  total = (metrics["qa_start_loss"][0] + metrics["qa_end_loss"][0]) / 2
  return mean, metrics | {"question_answering_loss": (total, weights.sum())}


def window_candidates(logits: np.ndarray, char_spans: np.ndarray, n_best: int, max_answer_length: int
                      ) -> list[tuple[float, int, int]]:
  """(start + end logit, first char, end char) of every admissible pair among a window's n-best starts and ends,
  best first (ties: the earlier start rank, then end rank). logits [tokens, 2]; char_spans [tokens, 2]."""
  inside = char_spans[:, 0] != OUTSIDE
  starts = np.argsort(-logits[:, 0], kind="stable")[:n_best]
  ends = np.argsort(-logits[:, 1], kind="stable")[:n_best]
  found = [(float(logits[s, 0]) + float(logits[e, 1]), int(char_spans[s, 0]), int(char_spans[e, 1]))
           for s in starts for e in ends if inside[s] and inside[e] and s <= e < s + max_answer_length]
  return sorted(found, key=lambda candidate: -candidate[0])


def best_answer(raws: Sequence[np.ndarray], examples: Sequence[dict], n_best: int, max_answer_length: int
                ) -> dict[str, float | int]:
  """A question's best answer over its windows: {"start", "end" (characters, end exclusive), "score", "null_score"
  (the least [CLS] start + end logit over windows)}; start = end = 0 and score -inf when no pair is admissible."""
  best = (-np.inf, 0, 0)
  for raw, example in zip(raws, examples):
    found = window_candidates(raw, example["char_spans"], n_best, max_answer_length)
    if found and found[0][0] > best[0]:
      best = found[0]
  null = min(float(raw[0, 0]) + float(raw[0, 1]) for raw in raws)
  return {"start": best[1], "end": best[2], "score": best[0], "null_score": null}


def answer_text(record: dict, prediction: dict) -> str:
  """The predicted answer's characters in the record's context ("" for no answer)."""
  return record["context"][prediction["start"]:prediction["end"]]


def choose_null_threshold(null_margins: Sequence[float], answer_f1: Sequence[float] | np.ndarray,
                          null_f1: Sequence[float] | np.ndarray) -> float:
  """The threshold t with the best mean F1 when a question is answered "" iff its margin (null score - best answer
  score) > t: answer_f1 / null_f1 are each question's F1 with its best answer / with "". Candidates are the margins
  themselves (and below the least one: every question null); ties: the lowest threshold."""
  margins = np.asarray(null_margins, np.float64)
  order = np.argsort(margins, kind="stable")
  answered, null = np.asarray(answer_f1, np.float64)[order], np.asarray(null_f1, np.float64)[order]
  # Threshold margins[order[k]]: questions 0..k answered, k+1.. null. k = -1: all null.
  totals = np.concatenate([[0.0], np.cumsum(answered)]) + np.concatenate([np.cumsum(null[::-1])[::-1], [0.0]])
  sorted_margins = margins[order]
  tied = np.concatenate([[False], sorted_margins[:-1] == sorted_margins[1:], [False]])  # Cut inside equal margins.
  best = int(np.argmax(np.where(tied, -np.inf, totals)))
  return float(margins[order[0]] - 1.0) if best == 0 else float(margins[order[best - 1]])


class QuestionAnswering(TaskFamily):
  """Extractive QA over windows of a context (SQuAD v1.1 and v2.0): EM and F1 after SQuAD's normalization."""
  name = "question_answering"
  scoring = "squad"
  formats = ("squad",)
  text_fields = ("question", "context")
  config_fields = (
      Field("doc_stride", 128, POSITIVE_INT, "subwords between the starts of a context's windows (BERT's doc_stride)."),
      Field("max_question_length", 64, POSITIVE_INT, "the question's subwords kept (the rest cut)."),
      Field("max_answer_length", 30, POSITIVE_INT, "the longest answer decoded, in subwords."),
      Field("n_best", 20, POSITIVE_INT, "start and end candidates per window (the n highest logits of each)."),
      Field("unanswerable", False, BOOL,
            "SQuAD 2.0 (questions without answer; null-score threshold tuned on dev)."),
  )

  def __init__(self, task: Mapping[str, Any]):
    super().__init__(task)
    self.n_best = int(self.task["n_best"])
    self.max_answer_length = int(self.task["max_answer_length"])

  def reads_pairs(self, reader_options: Mapping[str, Any]) -> bool:
    return True  # A question and its context.

  def check_input(self, where: str, record: dict, pairs: bool) -> None:
    for key in self.text_fields:
      if not isinstance(record.get(key), str) or not record[key].strip():
        raise errors.UserError(f"{where}: expected a non-empty {key}, got {record.get(key)!r} (a QA run reads "
                               '{"question": ..., "context": ...})')

  def usable(self, records: Sequence[dict]) -> bool:
    """A SQuAD v1.1 run (no task.unanswerable) refuses v2.0's unanswerable questions in any split: it can neither
    learn nor predict "no answer", and v1.1's metric cannot score one."""
    return self.unanswerable() or not any(r["is_impossible"] for r in records)

  def reader_checks(self) -> dict[str, Any]:
    return {} if self.unanswerable() else {"answerable": True}

  def objective(self) -> Objective:
    return Objective(name=self.name, head=SpanEndpointsHead(), loss=span_endpoints_loss)

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> list[dict[str, np.ndarray]]:
    """The record's windows (the first gold answer is the training target)."""
    answer = record["answers"][0] if record["answers"] else None
    return encode_windows(tokenizer, record["question"], record["context"],
                          None if answer is None else (answer["start"], answer["start"] + len(answer["text"])),
                          max_length=self.task["max_length"], doc_stride=int(self.task["doc_stride"]),
                          max_question_length=int(self.task["max_question_length"]))

  def widths(self) -> dict[str, Callable[[int], int]]:
    return {"char_spans": lambda length: length}

  def outputs(self, predictions: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    """[batch, length, 2]: start and end logits."""
    return jnp.stack([predictions["start_logits"], predictions["end_logits"]], axis=-1)

  def unanswerable(self) -> bool:
    return bool(self.task["unanswerable"])

  def tune(self, records: Sequence[dict], examples: Sequence[Sequence[dict]], raw: Sequence[Sequence[np.ndarray]]
           ) -> float | None:
    """SQuAD 2.0: the null-score threshold with the best dev F1 (BERT's null_score_diff_threshold); v1.1: None."""
    if not self.unanswerable():
      return None
    best = [best_answer(r, e, self.n_best, self.max_answer_length) for r, e in zip(raw, examples)]
    golds = [[a["text"] for a in record["answers"]] for record in records]
    answered = squad.question_scores(golds, [answer_text(r, b) for r, b in zip(records, best)], True)[:, 1]
    null = squad.question_scores(golds, [""] * len(records), True)[:, 1]
    return choose_null_threshold([b["null_score"] - b["score"] for b in best], answered, null)

  def decode(self, raw: Sequence[np.ndarray], example: Sequence[dict], threshold: float | None) -> dict:
    """A question's windows -> {"start", "end", "score"} (characters of its context, end exclusive; "" is start =
    end); unanswerable tasks answer "" when the null score beats the answer's by more than `threshold`."""
    best = best_answer(raw, example, self.n_best, self.max_answer_length)
    if self.unanswerable() and best["null_score"] - best["score"] > (0.0 if threshold is None else threshold):
      return {"start": 0, "end": 0, "score": best["null_score"]}
    return {"start": best["start"], "end": best["end"], "score": best["score"]}

  def has_labels(self, records: Sequence[dict]) -> bool:
    return all(r["answers"] or r["is_impossible"] for r in records)

  def metric_names(self) -> tuple[str, ...]:
    return ("exact_match", "f1")

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    """SQuAD's exact match and F1 (evaluate-v1.1.py; v2.0's rules for unanswerable tasks)."""
    golds = [[a["text"] for a in record["answers"]] for record in records]
    return squad.scores(golds, [answer_text(r, p) for r, p in zip(records, predictions)], self.unanswerable())

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    """`.json`: the official {question id: answer text} (what evaluate-v1.1.py and tasks.scoring.score read)."""
    answers = {r["id"]: answer_text(r, p) for r, p in zip(records, predictions)}
    return {"json": json.dumps(answers, ensure_ascii=False, indent=0) + "\n"}

  def unlabelled(self, record: dict) -> dict:
    """{"question", "context"} (or a text pair: question, context) as a question record without gold."""
    question, context = (record["question"], record["context"]) if "question" in record else (
        record["text_a"], record["text_b"])
    return {"id": str(record.get("id", "")), "title": "", "question": question, "context": context, "answers": [],
            "is_impossible": False}

  def output(self, record: dict, example: Sequence[dict], raw: Sequence[np.ndarray], prediction: Any) -> dict:
    """{"question", "answer", "start", "end" (characters of the context, end exclusive), "score" (start + end
    logit)}."""
    record = self.unlabelled(record)
    return {"question": record["question"], "answer": answer_text(record, prediction), "start": prediction["start"],
            "end": prediction["end"], "score": round(prediction["score"], 6)}

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """HF's BertForQuestionAnswering: its qa_outputs is our [H, 2] layer (start logits first); the windows and the
    decoding (with the null threshold the run tuned on dev, SQuAD 2.0) are the pipeline's (launch/hf_modeling)."""
    head = {"max_length": self.task["max_length"], "doc_stride": int(self.task["doc_stride"]),
            "max_question_length": int(self.task["max_question_length"]), "n_best": self.n_best,
            "max_answer_length": self.max_answer_length, "unanswerable": self.unanswerable(), "threshold": threshold}
    return HfHead("QuestionAnswering", "BertForQuestionAnswering",
                  hf.linear_to_hf("qa_outputs", head_params["qa_outputs"]), {}, head)
