"""Pipelines of encoderlab exports that decode as the run did (config.json's `custom_pipelines` names them; they run
with `trust_remote_code=True`).

  pipeline("token-classification", model=directory, trust_remote_code=True)("EU rejects German call .")
  pipeline("question-answering", model=directory, trust_remote_code=True)(question="Who?", context="...")

WordClassificationPipeline, for word-level heads that read word boundaries and casing HF's own pipeline does not pass
(taggers with word endings, word shapes or a CRF; span NER): raw text is split into words as the run's data were (the
pattern in config.json's `encoderlab_head`), or the words come as a list (`is_split_into_words=True`); each sentence
is cut at the run's max_length tokens, as `launch.predict` cuts it (words past it get no entry). Each word gets the
model's decision: the tag at its first token, or Viterbi's tag under a CRF; span NER gives the entities the run's
tuned threshold keeps. The output is HF's: per word {"entity", "score", "index" (the word's), "word", "start",
"end"}, "O" left out unless `ignore_labels=[]`; with `aggregation_strategy` "simple", "first", "average" or "max",
adjacent words of one entity grouped as HF groups them ({"entity_group", "score", "word", "start", "end"}). A tag's
score is its probability under its first token's softmax (under a CRF: the emissions', not the path's); span NER
always gives entity groups, scored by the span's probability.

QuestionAnsweringPipeline, for extractive QA (transformers 5 has no question-answering pipeline of its own): the
run's windows (the question cut at max_question_length tokens, windows of max_length tokens whose starts are
doc_stride context tokens apart), the best start and end (among each window's n_best, at most max_answer_length
tokens apart, inside the context) by the sum of their logits over all windows (BERT's run_squad) and, for a SQuAD 2.0
run, "" when the [CLS] null score beats it by more than the dev-tuned threshold. It returns {"answer", "start",
"end" (characters of the context, end exclusive), "score" (start + end logit)}, as `launch.predict` does.

Imports only torch and transformers.
"""

import re
from collections.abc import Iterator
from typing import Any, cast

import torch
from transformers import Pipeline, TokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy

IGNORE = -1  # word_ids of tokens outside every word.
OUTSIDE = -1  # Character spans of tokens outside the context.
SHAPES = ("none", "lower", "title", "upper", "mixed", "numeric", "other")  # Word shapes; "none": specials, padding.


def word_shape(word: str) -> str:
  """One of SHAPES: numeric if any digit, other without letters, else by the casing of the letters."""
  if any(c.isdigit() for c in word):
    return "numeric"
  letters = [c for c in word if c.isalpha()]
  if not letters:
    return "other"
  if all(c.islower() for c in letters):
    return "lower"
  if letters[0].isupper() and all(c.islower() for c in letters[1:]):
    return "title"
  if all(c.isupper() for c in letters):
    return "upper"
  return "mixed"


def encode_words(tokenizer, words: list[str], max_length: int, shapes: list[str]) -> dict[str, torch.Tensor]:
  """One sentence of words as a word-level head's inputs (a batch of one): the tokenizer's ids, `word_ids` (-1 for
  specials) and `case_ids` (each token's word's shape, its index in `shapes`, the run's table: config.json's
  encoderlab_head["shapes"]), cut at `max_length` tokens as the run cut them."""
  encoding = tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=max_length,
                       return_tensors="pt")
  word_ids = [IGNORE if w is None else w for w in encoding.word_ids(0)]
  inputs = {key: encoding[key] for key in ("input_ids", "attention_mask", "token_type_ids") if key in encoding}
  cases = [shapes.index("none" if w == IGNORE else word_shape(words[w])) for w in word_ids]
  return inputs | {"word_ids": torch.tensor([word_ids]), "case_ids": torch.tensor([cases])}


class WordClassificationPipeline(TokenClassificationPipeline):
  """HF's TokenClassificationPipeline over the run's words (see the module docstring)."""

  def _sanitize_parameters(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, ignore_labels: list[str] | None = None, aggregation_strategy: str | AggregationStrategy | None = None,
      is_split_into_words: bool = False, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    postprocess: dict[str, Any] = {}
    if aggregation_strategy is not None:
      postprocess["aggregation_strategy"] = (AggregationStrategy[aggregation_strategy.upper()]
                                             if isinstance(aggregation_strategy, str) else aggregation_strategy)
    if ignore_labels is not None:
      postprocess["ignore_labels"] = ignore_labels
    return {"is_split_into_words": is_split_into_words}, {}, postprocess

  def __call__(self, inputs: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # HF's pipelines narrow it too
    """One text, a list of texts, or (is_split_into_words=True) one list of words or a list of them."""
    if kwargs.get("is_split_into_words") and inputs and all(isinstance(word, str) for word in inputs):
      return Pipeline.__call__(self, [inputs], **kwargs)[0]
    return Pipeline.__call__(self, inputs, **kwargs)

  def preprocess(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, sentence: Any, is_split_into_words: bool = False) -> Iterator[dict[str, Any]]:
    """`sentence`: a text (str), or with is_split_into_words its words (a sequence of str)."""
    head = self.model.config.encoderlab_head
    if is_split_into_words:
      words, text, spans, start = list(sentence), " ".join(sentence), [], 0
      for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    else:
      matches = list(re.finditer(head["word_pattern"], sentence, flags=re.IGNORECASE))
      words, text, spans = [m.group(0) for m in matches], sentence, [m.span() for m in matches]
    yield encode_words(self.tokenizer, words, head["max_length"], head["shapes"]) | {
        "words": words, "text": text, "spans": spans, "is_last": True}

  def _forward(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, model_inputs: dict[str, Any]) -> dict[str, Any]:
    context = {key: model_inputs.pop(key) for key in ("words", "text", "spans", "is_last")}
    output = self.model(**model_inputs)
    word_ids = model_inputs["word_ids"][0].tolist()
    present = [w for i, w in enumerate(word_ids) if w != IGNORE and (i == 0 or w != word_ids[i - 1])]
    if self.model.config.encoderlab_head["kind"] == "spans":
      entities = self.model.entities(output)[0]  # type: ignore[operator]  # WordHead's; typed as any PreTrainedModel
      return context | {"present": present, "entities": entities}
    probabilities = torch.softmax(output.word_logits[0].float(), dim=-1)
    tags = output.tags[0]
    return context | {"present": present, "tags": tags.tolist(),
                      "scores": probabilities.gather(1, tags.clamp(min=0)[:, None])[:, 0].tolist()}

  def postprocess(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, all_outputs: list[dict[str, Any]], aggregation_strategy: AggregationStrategy = AggregationStrategy.NONE,
      ignore_labels: list[str] | None = None) -> list[dict[str, Any]]:
    ignore_labels = ["O"] if ignore_labels is None else ignore_labels
    out = all_outputs[0]
    text, spans, present = out["text"], out["spans"], out["present"]
    if "entities" in out:
      found = [{"entity_group": label, "score": score, "start": spans[present[first]][0],
                "end": spans[present[end - 1]][1]} for first, end, label, score in out["entities"]]
      return [entity | {"word": text[entity["start"]:entity["end"]]} for entity in found
              if entity["entity_group"] not in ignore_labels]
    id2label = cast(dict[int, str], self.model.config.id2label)  # A token classifier's; HF makes the keys ints.
    entries = [{"entity": id2label[tag], "score": score, "index": word, "word": out["words"][word],
                "start": spans[word][0], "end": spans[word][1]}
               for word, tag, score in zip(present, out["tags"], out["scores"])]
    if aggregation_strategy != AggregationStrategy.NONE:
      entries = [group | {"word": text[group["start"]:group["end"]]} for group in self.group_entities(entries)]
    return [entry for entry in entries if entry.get("entity", entry.get("entity_group")) not in ignore_labels]


def window_starts(context_length: int, budget: int, stride: int) -> list[int]:
  """First context token of each window of `budget` tokens, `stride` apart, until one reaches the end."""
  starts = [0]
  while starts[-1] + budget < context_length:
    starts.append(starts[-1] + min(stride, budget))
  return starts


def best_answer(start_logits: torch.Tensor, end_logits: torch.Tensor, char_spans: list[list[tuple[int, int]]],
                n_best: int, max_answer_length: int) -> tuple[float, int, int, float]:
  """(best start + end logit, its first character, its end character, the least [CLS] null score) over windows
  [W, L]: in each window the admissible pairs of its n_best starts and ends (inside the context, start <= end <
  start + max_answer_length), the first best (by window, then start rank, then end rank) kept."""
  best = (float("-inf"), 0, 0)
  for starts, ends, spans in zip(start_logits, end_logits, char_spans):
    inside = [span[0] != OUTSIDE for span in spans]
    top_starts = torch.argsort(-starts[:len(spans)], stable=True)[:n_best].tolist()
    top_ends = torch.argsort(-ends[:len(spans)], stable=True)[:n_best].tolist()
    found = [(float(starts[s]) + float(ends[e]), spans[s][0], spans[e][1]) for s in top_starts for e in top_ends
             if inside[s] and inside[e] and s <= e < s + max_answer_length]
    found.sort(key=lambda candidate: -candidate[0])
    if found and found[0][0] > best[0]:
      best = found[0]
  null = min(float(starts[0]) + float(ends[0]) for starts, ends in zip(start_logits, end_logits))
  return best + (null,)


class QuestionAnsweringPipeline(Pipeline):
  """Extractive QA as the run decoded it (see the module docstring)."""

  def _sanitize_parameters(self, **kwargs):
    return {}, {}, {}

  def __call__(self, *args, question=None, context=None, **kwargs):
    """pipe(question=..., context=...), pipe({"question", "context"}) or pipe([{"question", "context"}, ...])."""
    inputs = {"question": question, "context": context} if question is not None else args[0]
    return super().__call__(inputs, **kwargs)

  def preprocess(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, inputs: dict[str, str]) -> dict[str, Any]:
    if self.tokenizer is None:
      raise ValueError("question answering needs the export's tokenizer: pipeline('question-answering', "
                       "model=directory, trust_remote_code=True) loads it")
    head = self.model.config.encoderlab_head
    # Whole texts, cut into windows of max_length below: verbose=False, or the tokenizer warns that a context longer
    # than model_max_length (the run's max_length) "will result in indexing errors", which no window has.
    question = self.tokenizer(inputs["question"], add_special_tokens=False, verbose=False)["input_ids"][
        :head["max_question_length"]]
    encoding = self.tokenizer(inputs["context"], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    context, offsets = encoding["input_ids"], [tuple(span) for span in encoding["offset_mapping"]]
    budget = head["max_length"] - len(question) - 3
    if budget < 1:
      raise ValueError(f"max_length {head['max_length']} leaves no room for the context after a question of "
                       f"{len(question)} tokens")
    prefix = [self.tokenizer.cls_token_id, *question, self.tokenizer.sep_token_id]
    windows, spans = [], []
    for first in window_starts(len(context), budget, head["doc_stride"]):
      last = min(first + budget, len(context))
      windows.append(prefix + context[first:last] + [self.tokenizer.sep_token_id])
      spans.append([(OUTSIDE, OUTSIDE)] * len(prefix) + offsets[first:last] + [(OUTSIDE, OUTSIDE)])
    length = max(map(len, windows))
    pad = lambda rows, value: torch.tensor([row + [value] * (length - len(row)) for row in rows])
    return {"input_ids": pad(windows, self.tokenizer.pad_token_id),
            "attention_mask": pad([[1] * len(w) for w in windows], 0),
            "token_type_ids": pad([[0] * len(prefix) + [1] * (len(w) - len(prefix)) for w in windows], 0),
            "char_spans": spans, "context": inputs["context"]}

  def _forward(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, model_inputs: dict[str, Any]) -> dict[str, Any]:
    extra = {key: model_inputs.pop(key) for key in ("char_spans", "context")}
    output = self.model(**model_inputs)
    return extra | {"start_logits": output.start_logits.float(), "end_logits": output.end_logits.float()}

  def postprocess(  # type: ignore[override]  # HF's pipeline stages take their own parameters
      self, model_outputs: dict[str, Any]) -> dict[str, Any]:
    head = self.model.config.encoderlab_head
    score, start, end, null = best_answer(model_outputs["start_logits"], model_outputs["end_logits"],
                                          model_outputs["char_spans"], head["n_best"], head["max_answer_length"])
    threshold = 0.0 if head.get("threshold") is None else head["threshold"]
    if head["unanswerable"] and null - score > threshold:
      score, start, end = null, 0, 0
    return {"answer": model_outputs["context"][start:end], "start": start, "end": end, "score": score}
