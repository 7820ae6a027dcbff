"""JSON-lines span files -> span records {"words", "spans": [{"start", "end", "label"}]}; tagging <-> span records.

One JSON object per line: `{"words": ["New", "York", "Times"], "spans": [{"start": 0, "end": 3, "label": "ORG"},
{"start": 0, "end": 2, "label": "LOC"}]}`. Spans are token offsets, `end` exclusive; they may nest or overlap (nested
NER); an exact duplicate is an error. Other keys are ignored. With `outermost`, a span inside another one of its record
is dropped: the outer entities of nested data, flat unless two spans cross.
"""

import itertools
import json
import os
from collections.abc import Iterator, Sequence

from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.record_format import SPANS, RecordFormat
from tasks.scoring import metrics, tag_schemes

_FORMAT = 'a JSON object {"words": [str, ...], "spans": [{"start": int, "end": int, "label": str}, ...]}'


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def overlaps(spans: Sequence[dict]) -> bool:
  """Whether any two of a record's spans share a word (nested or crossing entities)."""
  ordered = sorted((s["start"], s["end"]) for s in spans)
  return any(start < previous_end for (_, previous_end), (start, _) in itertools.pairwise(ordered))


def outermost_spans(spans: Sequence[dict]) -> list[dict]:
  """The spans that lie inside no other span of the list (`tasks.scoring.metrics.nesting_parts`), in order."""
  key = lambda s: (s["label"], s["start"], s["end"])
  outer, _ = metrics.nesting_parts({key(s) for s in spans})
  return [s for s in spans if key(s) in outer]


def _check_record(obj, label_names: set[str] | None, flat: bool = False, outermost: bool = False) -> str | None:
  """What is wrong with a decoded line (None when it is a valid span record)."""
  if not isinstance(obj, dict) or "words" not in obj or "spans" not in obj:
    return f"{_FORMAT}; got a {type(obj).__name__}{f' with keys {sorted(obj)}' if isinstance(obj, dict) else ''}"
  words, spans = obj["words"], obj["spans"]
  if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
    return '"words" to be a non-empty list of non-empty strings'
  if not isinstance(spans, list):
    return '"spans" to be a list'
  seen = set()
  for i, span in enumerate(spans):
    if not isinstance(span, dict) or not _is_int(span.get("start")) or not _is_int(span.get("end")) \
        or not isinstance(span.get("label"), str) or not span["label"]:
      return f'spans[{i}] to be {{"start": int, "end": int, "label": non-empty str}}, got {span!r}'
    if not 0 <= span["start"] < span["end"] <= len(words):
      return f"spans[{i}] to have 0 <= start < end <= {len(words)} (the word count; end exclusive), got {span!r}"
    if label_names is not None and span["label"] not in label_names:
      return f"spans[{i}] to have a label in {sorted(label_names)}, got {span['label']!r}"
    key = (span["start"], span["end"], span["label"])
    if key in seen:
      return f"spans[{i}] not to repeat an earlier span, got {span!r} twice"
    seen.add(key)
  if flat:
    ordered = sorted(outermost_spans(spans) if outermost else spans, key=lambda s: (s["start"], s["end"]))
    for first, second in itertools.pairwise(ordered):
      if second["start"] < first["end"]:
        return ("spans that do not overlap (nested entities: span_ner with config.task.nested=true, or only the "
                f"outermost with config.task.columns=outermost:true), got {first!r} and {second!r}")
  return None


def read_spans_jsonl(path: str | os.PathLike, *, label_names: Sequence[str] | None = None,
                     flat: bool = False, outermost: bool = False) -> Iterator[dict]:
  """Yields {"words", "spans"} per non-blank line, spans sorted by (start, -end, label); validates every line (with
  `flat`, overlapping spans are an error too; with `outermost`, only the spans inside no other are kept, and `flat`
  checks those)."""
  allowed = None if label_names is None else set(label_names)
  for number, line in numbered_lines(path):
    if not line.strip():
      continue
    try:
      obj = json.loads(line)
    except json.JSONDecodeError as err:
      raise ReaderError(path, number, f"{_FORMAT}; invalid JSON at column {err.colno}: {err.msg}") from None
    problem = _check_record(obj, allowed, flat, outermost)
    if problem:
      raise ReaderError(path, number, problem)
    spans = [{"start": s["start"], "end": s["end"], "label": s["label"]} for s in obj["spans"]]
    spans = outermost_spans(spans) if outermost else spans
    yield {"words": obj["words"], "spans": sorted(spans, key=lambda s: (s["start"], -s["end"], s["label"]))}


def tagging_to_spans(record: dict, scheme: str = "IOB2") -> dict:
  """A tagging record {"words", "tags", ...} as a span record {"words", "spans"}; `tasks.scoring.tag_schemes` chunks the
  tags of `scheme` ("IOB1", "IOB2", "BIOES", ...) leniently, as conlleval."""
  spans = tag_schemes.spans_from_tags(record["tags"], scheme)
  return {"words": record["words"], "spans": [{"start": start, "end": end, "label": kind}
                                              for kind, start, end in spans]}


def spans_to_tagging(record: dict, scheme: str = "IOB2") -> dict:
  """A flat span record {"words", "spans"} as a tagging record {"words", "tags"}; overlapping spans are an error."""
  spans = [(span["label"], span["start"], span["end"]) for span in record["spans"]]
  return {"words": record["words"], "tags": tag_schemes.tags_from_spans(spans, len(record["words"]), scheme)}


SPANS_JSONL = RecordFormat("spans", read_spans_jsonl, SPANS)
