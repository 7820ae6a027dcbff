"""Reader records -> encoded fine-tuning examples, per task (the host side of `tasks.registry`'s tasks).

Label vocabularies are explicit in the config or derived from the training records (sorted, so deterministic);
tagging records are converted from the file's tag scheme (e.g. IOB1) to the one trained (e.g. BIOES) losslessly.
"""

from typing import Any, Callable, Mapping, Sequence

from tasks import alignment, classification, span_ner, tag_schemes
from tasks.readers import tagging_to_spans


def label_vocabulary(task: Mapping[str, Any], train_records: Sequence[dict]) -> list[str]:
  """The class labels / tags / entity types of a task, index order (the config's, else derived from train)."""
  configured = list(task.get("labels") or [])
  if configured:
    return configured
  if task["name"] == "classification":
    return sorted({r["label"] for r in train_records})
  if task["name"] == "regression":  # One real-valued output, no label vocabulary.
    return []
  if task["name"] == "span_ner":
    return sorted({s["label"] for r in train_records for s in _spans(task, r)})
  scheme = task.get("scheme")
  tags = {t for r in train_records for t in r["tags"]}
  if not scheme:  # Plain labels (POS): every tag seen in training.
    return sorted(tags)
  types = sorted({tag_schemes.split_tag(t)[1] for t in tags} - {""})
  return tag_schemes.tag_vocab(types, scheme)


def _spans(task: Mapping[str, Any], record: dict) -> list[dict]:
  if "spans" in record:
    return record["spans"]
  return tagging_to_spans({**record, "tags": _tags(task, record)}, scheme=task.get("scheme") or "IOB2")["spans"]


def _tags(task: Mapping[str, Any], record: dict) -> list[str]:
  """The record's tags in the trained scheme (converted from `source_scheme` when they differ)."""
  source, target = task.get("source_scheme"), task.get("scheme")
  if source and target and tag_schemes.canonical_scheme(source) != tag_schemes.canonical_scheme(target):
    return tag_schemes.convert(record["tags"], source, target)
  return list(record["tags"])


def uses_scores(task: Mapping[str, Any]) -> bool:
  """Whether the task trains on the records' real-valued scores (regression, or classification + `score_weight`)."""
  return task["name"] == "regression" or (task["name"] == "classification" and bool(task.get("score_weight")))


def list_widths(task: Mapping[str, Any]) -> dict[str, Callable[[int], int]]:
  """Padded width of the task's word / span fields at a token bucket length L (`tasks.batching.collate`): at most
  L words fit in L tokens, and the spans of L - 2 words (between [CLS] and [SEP])."""
  if task["name"] == "tagging":
    return dict.fromkeys(("word_positions", "word_labels"), lambda length: length)
  if task["name"] == "span_ner":
    width = task.get("max_span_width", 8)
    spans = lambda length: len(span_ner.enumerate_spans(max(length - 2, 1), width))
    return dict.fromkeys(("span_starts", "span_ends", "span_words", "span_labels"), spans)
  return {}


def encode(task: Mapping[str, Any], tokenizer, records: Sequence[dict], labels: Sequence[str]) -> list[dict]:
  """Encode every record of a split for the task; unknown labels are an error naming the record."""
  index = {label: i for i, label in enumerate(labels)}
  max_length = task["max_length"]

  def lookup(label: str, where: int):
    if label not in index:
      raise ValueError(f"record {where}: label {label!r} is not in the task's labels {list(labels)[:20]}")
    return index[label]

  examples = []
  for i, record in enumerate(records):
    if task["name"] in ("classification", "regression"):
      label = lookup(record["label"], i) if task["name"] == "classification" and record.get("label") is not None else -1
      examples.append(classification.encode_example(tokenizer, record["text_a"], record.get("text_b"), label,
                                                    max_length=max_length,
                                                    score=record.get("score") if uses_scores(task) else None))
    elif task["name"] == "tagging":
      tags = [lookup(t, i) for t in _tags(task, record)]
      examples.append(alignment.encode_words(tokenizer, record["words"], tags, max_length=max_length,
                                             alignment=task.get("alignment", "first"),
                                             case_features=bool(task.get("case_features")),
                                             last_subword=bool(task.get("last_subword"))))
    elif task["name"] == "span_ner":
      spans = [(s["start"], s["end"], 1 + lookup(s["label"], i)) for s in _spans(task, record)]
      examples.append(span_ner.encode_spans(tokenizer, record["words"], spans, max_length=max_length,
                                            max_width=task.get("max_span_width", 8),
                                            case_features=bool(task.get("case_features"))))
    else:
      raise ValueError(f"unknown task {task['name']!r}")
  return examples
