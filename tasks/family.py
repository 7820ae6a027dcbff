"""The task-family contract (DESIGN, "Contracts between parts"): everything about fine-tuning that depends on the
kind of task lives in its family's module, behind these methods; the data pipeline (`tasks.finetune_data`), the
evaluation (`tasks.evaluation`), the engine, `launch.predict` and reports call them and never name a family.

A family is built from the task's config mapping (`config.task` as a dict, plus its label vocabulary under
"labels"): `tasks.registry.family(task)`. Adding one is its module plus one registry line; see docs/design.md,
"Adding a task family".

Values that pass between the methods: a *record* is what a reader yields (`tasks.readers`: {"text_a", "text_b", "label",
"score"} or {"words", "tags"} or {"words", "spans"} or a SQuAD question or {"context", "choices", "label"}); an
*example* is a record encoded for the model (numpy arrays: `input_ids`, `type_ids` and the family's own fields; token
fields are [length], or [rows, length] when the family's `layout` makes an example several rows of tokens, multiple
choice's; a record may be several examples); *raw* is one example's row of `outputs` on the host (padding cut off by
`widths`); a *prediction* is what `decode` makes of it and what `score` and the prediction files read (a label, a
score, a tag list, a list of (start, end, label) spans, a choice's index).
"""

import abc
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from encoder import errors, fields, hf
from encoder.fields import Field
from objectives.objective import Objective
from tasks import batching, task_fields
from tasks.readers.lines import ReaderError


class HfHead(NamedTuple):
  """A trained head as HuggingFace transformers loads it (`TaskFamily.hf_head`, `launch.export`): in HF's own BERT
  class when one computes it exactly, else in the class of launch/hf_modeling that does (remote code)."""
  task: str | None  # The classes' task: "SequenceClassification", "TokenClassification" (taggers, span NER) or
  # "QuestionAnswering" (launch/hf_modeling's Encoderlab{Bert,ModernBert}For<task>); None: no class (`not_in_hf`).
  native: str | None  # HF's BertFor* class that computes the head exactly (no remote code on a BERT encoder), or None.
  tensors: dict[str, np.ndarray]  # The head's tensors in those classes' names (classifier.weight [labels, hidden]).
  config: dict[str, Any]  # Their config.json fields (id2label, label2id, problem_type).
  head: dict[str, Any]  # What the remote class and pipeline read (config.json's encoderlab_head: pooling, crf, ...).
  pooler: bool = False  # Whether the head reads BERT's pooled [CLS] (the export then holds the pooler).
  beside: dict[str, Any] | None = None  # `not_in_hf`: the head's parameters, saved beside the encoder.
  note: str = ""  # `not_in_hf`: why no class computes the head.
  remote: bool = True  # Whether launch/hf_modeling has an Encoderlab*For<task> class for it (else, on an encoder HF's
  # `native` class cannot hold, ModernBERT's, the head is saved beside).


def not_in_hf(head_params: Mapping[str, Any], why: str) -> HfHead:
  """A head no class computes: the encoder exports alone, every head parameter is saved beside."""
  return HfHead(None, None, {}, {}, {}, beside=dict(head_params), note=why)


def labels_config(labels: Sequence[str]) -> dict[str, Any]:
  """config.json's id2label and label2id for labels in index order."""
  return {"id2label": {str(i): label for i, label in enumerate(labels)},
          "label2id": {label: i for i, label in enumerate(labels)}}


def linears(head_params: Mapping[str, Any], names: Sequence[str]) -> dict[str, np.ndarray]:
  """Those of the linen Dense layers `names` that the head has, as torch nn.Linear tensors of the same names."""
  tensors: dict[str, np.ndarray] = {}
  for name in names:
    if name in head_params:
      tensors |= hf.linear_to_hf(name, head_params[name])
  return tensors


# One record's example and raw outputs as `tune`, `decode` and `output` get them: the example dict and the array of
# its outputs, or the lists of them when `encode` made several examples of the record (QA windows); each family's
# overrides state the form its `encode` makes.
RecordExample = Any
RecordRaw = Any


class TaskFamily(abc.ABC):
  """What a task family provides; `task` is its config mapping. A family subclasses this and states only what it
  does differently: the abstract members (its head, how a record becomes an example and a prediction, its scores and
  what `launch.predict` returns) have no sensible default; every other member defaults to the plainest family (a
  sentence-level task with no label vocabulary, no per-word fields, nothing to tune or check, no extra prediction
  files and no HF class for its head)."""
  name: str  # The registry name (config.task.name).
  formats: tuple[str, ...]  # The reader formats (tasks.readers.FORMATS) whose records it trains on.
  word_level: bool = False  # Labels words (inputs are word lists) rather than whole texts.
  scoring: str | None = None  # Its prediction files' kind in tasks.scoring.kinds.KINDS (what `tasks.scoring.score`
  # and the reports' bootstrap read); None: the reports compute no significance for it.

  # The record fields that one or two input texts fill (`launch.predict`: a line's tab-separated texts, a pair).
  text_fields: tuple[str, str] = ("text_a", "text_b")
  # The config.task fields this family reads beyond task_fields.COMMON (every family's), each with its default, rule
  # and comment: the task block, configs/rules.py and docs/config.md are built from them (tasks.registry).
  config_fields: tuple[Field, ...] = ()

  def __init__(self, task: Mapping[str, Any]):
    self.task = self.complete(task)

  @classmethod
  def complete(cls, task: Mapping[str, Any]) -> dict[str, Any]:
    """`task` with each field the family reads that it lacks at its declared default (a family or head built from a
    partial mapping, as tests and `build` functions do; a run's task block has them all)."""
    return fields.defaults(task_fields.COMMON) | {"name": cls.name} | fields.defaults(cls.config_fields) \
        | dict(task)

  def check(self, config: ml_collections.ConfigDict) -> None:
    """Relations between the task's fields and the rest of the run's `config` that only this family knows (e.g.
    classification's R-Drop and packed batches), each a one-line ConfigError naming the fields; configs.checks calls
    it before a run reads data or writes anything. Default: nothing to check."""
    return

  def label_vocabulary(self, train_records: Sequence[dict]) -> list[str]:
    """Labels / tags / entity types in index order, when the config names none (derived from train, sorted); default:
    none (a real-valued or extractive target)."""
    return []

  def file_labels(self, data_format: str) -> list[str] | None:
    """The task's labels as the data files write them (checked at their line), or None (default): nothing to
    check."""
    return None

  def usable(self, records: Sequence[dict]) -> bool:
    """Whether the task can train and score on every record (not: nested spans without task.nested); default: yes."""
    return True

  def reader_checks(self) -> dict[str, Any]:
    """Reader options that refuse, at their line, the records `usable` rejects (read again to name the line);
    default: none."""
    return {}

  def train_fields(self, train_records: Sequence[dict]) -> dict[str, Any]:
    """Task fields computed from the training records (e.g. the score output's initial bias); may raise UserError.
    Default: none."""
    return {}

  @abc.abstractmethod
  def objective(self) -> Objective:
    """The head and its loss."""

  @abc.abstractmethod
  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]
             ) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
    """One record as an example, or as a list of examples (a QA context's windows: `tune`, `decode` and `output`
    then get the lists of a record's examples and raw outputs); `lookup` maps a label to its index (an unknown label
    raises naming the record)."""

  def widths(self) -> dict[str, Callable[[int], int]]:
    """Padded width of each per-word / per-span example field at a token bucket length (`tasks.batching.collate`);
    default: none (every field is per example or per token)."""
    return {}

  def layout(self) -> batching.Layout:
    """How `tasks.batching.collate` pads the examples: their token fields ([length], or [rows, length] when an
    example is several rows of tokens, which `launch.model.EncoderWithHeads` runs as rows of the encoder and hands
    back to the head in the example's shape) and each field's pad value. Default: one row of tokens per example, the
    fields padding with 0 (`batching.PLAIN`; tagging and span NER add their labels' -1: their `LAYOUT`)."""
    return batching.PLAIN

  def texts(self, record: dict) -> list[str | list[str]]:
    """The record's texts (or word lists) that `encode` segments, so a split is segmented in one native call
    (`encoder.tokenizer.batched`); default: its words (word-level families), else its `text_fields`."""
    fields = ("words",) if self.word_level else self.text_fields
    return [record[field] for field in fields if record.get(field)]
  @abc.abstractmethod
  def outputs(self, predictions: Any, batch: dict[str, jax.Array]) -> jax.Array:
    """The head's predictions -> what `decode` reads, per row (runs on device, inside jit)."""

  def tune(self, records: Sequence[dict], examples: Sequence[RecordExample], raw: Sequence[RecordRaw]
           ) -> float | None:
    """A decoding threshold chosen on dev (span NER, SQuAD 2.0's null-score threshold), or None (default)."""
    return None

  @abc.abstractmethod
  def decode(self, raw: RecordRaw, example: RecordExample, threshold: float | None) -> Any:
    """One record's raw outputs and example (lists of them when `encode` gave several) -> its prediction."""

  def has_labels(self, records: Sequence[dict]) -> bool:
    """Whether a split can be scored (SST-2's test split has no labels); default: yes."""
    return True

  @abc.abstractmethod
  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    """The family's metrics of a split (fractions)."""

  @abc.abstractmethod
  def metric_names(self) -> tuple[str, ...]:
    """The metrics `score` returns whatever the data (what config.task.metric may name; per-type "f1_<type>" scores
    are named by the data, not here)."""

  def data_named_scores(self) -> tuple[str, ...]:
    """Patterns of the scores `score` names after the data, a placeholder in angle brackets ("f1_<type>": an F1 per
    entity type, e.g. f1_PER), which config.task.metric may name too; default: none."""
    return ()

  def is_score(self, metric: str) -> bool:
    """Whether `metric` names a dev score of the family (what config.task.metric and best_metric may name): one of
    `metric_names`, or one matching a `data_named_scores` pattern."""
    return metric in self.metric_names() or any(re.fullmatch(re.sub("<[^>]*>", ".*", re.escape(pattern)), metric)
                                                 for pattern in self.data_named_scores())

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    """Files written beside `<split>.jsonl`: suffix -> text (`.conll` columns, `.labels` lines); default: none."""
    return {}

  @abc.abstractmethod
  def unlabelled(self, record: dict) -> dict:
    """A record to predict (no gold) completed with placeholder gold, so `encode` takes it."""

  @abc.abstractmethod
  def output(self, record: dict, example: RecordExample, raw: RecordRaw, prediction: Any) -> dict:
    """What `launch.predict` returns for one input (example and raw: lists when `encode` gave several)."""

  def conll(self, output: dict) -> str:
    """Word-level families: a `launch.predict` output as `word tag` lines and a blank line (what tasks.scoring.score
    reads). Default: a UserError (the family's outputs are not word tags)."""
    raise errors.UserError(f"--output conll is for word-level tasks; a {self.name} run writes --output jsonl")

  def reads_pairs(self, reader_options: Mapping[str, Any]) -> bool:
    """Whether a run reading its data with `reader_options` (its reader's columns) takes two texts per input (both
    `text_fields`); default: when the reader has a text_b column (sentence pairs)."""
    return reader_options.get("text_b") is not None

  def line_record(self, path: str, number: int, texts: Sequence[str], pairs: bool) -> dict:
    """A line of `launch.predict --format text` (its tab-separated `texts`, stripped) as a record to predict, or a
    ReaderError at path:number. Default (sentence families): one text, or two for a run on pairs (`reads_pairs`),
    filling `text_fields`."""
    if len(texts) != (2 if pairs else 1) or not all(texts):
      raise ReaderError(path, number, f"{'two non-empty texts separated by a tab' if pairs else 'one text'} (the run "
                        f"was trained on {'sentence pairs' if pairs else 'single texts'}), got {len(texts)} "
                        f"tab-separated field{'s' * (len(texts) != 1)}")
    return self.text_record(texts)

  def text_record(self, texts: Sequence[str | None]) -> dict:
    """An input given as texts (`launch.predict.Predictor.predict`'s items: a text, or a pair) as a record: the first
    two fill `text_fields` (a missing second: None)."""
    return dict(zip(self.text_fields, (list(texts) + [None, None])[:2]))

  def check_input(self, where: str, record: dict, pairs: bool) -> None:
    """Raises a UserError naming `where` when `launch.predict` cannot label `record` (a record to predict, no gold;
    `pairs`: `reads_pairs` of the run). Default: word-level families need non-empty words, others one non-empty
    text, or two for a run on pairs."""
    if self.word_level:
      words = record.get("words")
      if not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise errors.UserError(f"{where}: expected a list of words (non-empty strings), got {words!r}")
      return
    first, second = self.text_fields
    if not isinstance(record.get(first), str) or not record[first].strip():
      raise errors.UserError(f"{where}: expected a non-empty text, got {record.get(first)!r}")
    if pairs != bool(record.get(second)):
      raise errors.UserError(f"{where}: expected {'two texts (a sentence pair)' if pairs else 'one text'}: the run was "
                             f"trained on {'pairs' if pairs else 'single texts'}")

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """The trained head (the run's params[objective name]; `threshold`: the decoding threshold the run tuned on dev)
    as HF classes hold it, or `not_in_hf` (default: the encoder exports alone, the head is saved beside); what
    `launch.export` writes."""
    return not_in_hf(head_params, f"the {self.name} family has no HF class for its head")
