"""Multiple choice (SWAG, HellaSwag, COPA): a context and k candidate answers, one of them right.

Each (context, choice) pair is encoded [CLS] context [SEP] choice [SEP] (segment ids 0/1), so an example is k rows of
tokens ([k, length]: the family's `layout`); the engine runs the encoder on the batch's rows and hands the head their
outputs back as [batch, k, ...] (`launch.model.encoder_rows`). The head scores each row from BERT's pooled [CLS]:
dropout -> Dense(1), as HF's BertForMultipleChoice, and is trained with the cross-entropy of the softmax over an
example's choices; scored by accuracy. Records may have different numbers of choices: a batch pads its examples to
its most, and a padded choice (no tokens) gets no probability. Data: the `choices` JSON-lines format
(tasks/readers/choices.py); `launch.predict --format text` reads a context and its choices per line, tab-separated.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors, hf
from objectives import layers, objective
from objectives.objective import Objective
from tasks import batching
from tasks.family import HfHead, TaskFamily
from tasks.readers.lines import ReaderError

# The example's fields of one value per token, each [choices, length]: a choice's row pads with 0 past its tokens,
# so attention_segments (1 real, 0 pad) comes with the example; a padded choice is a row of zeros.
LAYOUT = batching.Layout(("input_ids", "type_ids", "attention_segments"), {})


class MultipleChoiceHead(nn.Module):
  """dropout -> W [H, 1] on each row's pooled [CLS] (BertForMultipleChoice's classifier): a score per choice."""
  dropout: float = 0.1
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> dict[str, jax.Array]:
    """-> {"logits": [batch, choices]}; a padded choice's logit is float32's lowest (softmax gives it 0)."""
    pooled = nn.Dropout(self.dropout)(outputs.pooled, deterministic=not train)
    scores = nn.Dense(1, kernel_init=nn.initializers.normal(self.initializer_range), name="classifier")(pooled)
    present = batch["attention_segments"][..., 0] > 0
    return {"logits": jnp.where(present, scores[..., 0].astype(jnp.float32), jnp.finfo(jnp.float32).min)}


def multiple_choice_loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
  """Mean cross-entropy of the softmax over each real example's choices (`example_mask`), with accuracy."""
  logits = predictions["logits"]
  weights = batch.get("example_mask", jnp.ones(logits.shape[:1]))
  return layers.cross_entropy(logits, batch["label"], weights, "multiple_choice")


def build(config: Mapping[str, Any]) -> Objective:
  """Task "multiple_choice": its head (dropout: config's) and loss; it reads BERT's pooled [CLS] of each row."""
  config = MultipleChoice.complete(config)
  return Objective(name="multiple_choice", head=MultipleChoiceHead(dropout=config["dropout"]),
                   loss=multiple_choice_loss, reads=objective.cls_only)


def _rows(rows: Sequence[Sequence[int]]) -> np.ndarray:
  """Token rows of different lengths as one [rows, longest] array, 0-padded."""
  out = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


class MultipleChoice(TaskFamily):
  """A choice index per example (its context and candidate answers), scored by accuracy."""
  name = "multiple_choice"
  formats = ("choices",)
  text_fields = ("context", "choices")  # The record's context, and its list of choices.

  def objective(self) -> Objective:
    return build(self.task)

  def layout(self) -> batching.Layout:
    return LAYOUT

  def texts(self, record: dict) -> list[str | list[str]]:
    return [record["context"], *record["choices"]]

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> dict[str, np.ndarray]:
    """[CLS] context [SEP] choice [SEP] per choice ([choices, longest] fields) and the right choice's index (-1:
    none)."""
    encodings = [tokenizer.encode(record["context"], choice, max_length=self.task["max_length"])
                 for choice in record["choices"]]
    ids = _rows([e.input_ids for e in encodings])
    return {"input_ids": ids, "type_ids": _rows([e.type_ids for e in encodings]),
            "attention_segments": _rows([[1] * len(e.input_ids) for e in encodings]),
            "label": np.asarray(-1 if record.get("label") is None else record["label"], np.int32)}

  def outputs(self, predictions: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    """The logits [batch, choices]: `decode` takes the argmax over the example's own choices."""
    return predictions["logits"]

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> int:
    return int(np.argmax(raw[:len(example["input_ids"])]))

  def has_labels(self, records: Sequence[dict]) -> bool:
    return all(r.get("label") is not None for r in records)

  def metric_names(self) -> tuple[str, ...]:
    return ("accuracy",)

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    return {"accuracy": float(np.mean([r["label"] == p for r, p in zip(records, predictions)]))}

  def prediction_files(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, str]:
    return {"labels": "".join(f"{p}\n" for p in predictions)}

  def unlabelled(self, record: dict) -> dict:
    return {"context": record["context"], "choices": list(record["choices"]), "label": None}

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    """{"context", "choices", "label": the chosen index, "probabilities": the softmax over the choices}."""
    logits = raw[:len(record["choices"])].astype(np.float64)
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    return {"context": record["context"], "choices": list(record["choices"]), "label": prediction,
            "probabilities": probabilities.round(6).tolist()}

  def reads_pairs(self, reader_options: Mapping[str, Any]) -> bool:
    return False

  def line_record(self, path: str, number: int, texts: Sequence[str], pairs: bool) -> dict:
    """A line `context<TAB>choice 1<TAB>choice 2[<TAB>...]` (at least two choices)."""
    if len(texts) < 3 or not all(texts):
      raise ReaderError(path, number, f"a context and at least two choices, non-empty and separated by tabs, got "
                        f"{len(texts)} tab-separated field{'s' * (len(texts) != 1)}")
    return self.text_record(texts)

  def text_record(self, texts: Sequence[str | None]) -> dict:
    """(context, choice, choice, ...) as a record."""
    return {"context": texts[0], "choices": list(texts[1:])}

  def check_input(self, where: str, record: dict, pairs: bool) -> None:
    """A non-empty context and at least two non-empty choices."""
    context, choices = record.get("context"), record.get("choices")
    if not isinstance(context, str) or not context.strip():
      raise errors.UserError(f'{where}: expected a non-empty text in "context", got {context!r}')
    if (not isinstance(choices, list) or len(choices) < 2
        or not all(isinstance(choice, str) and choice.strip() for choice in choices)):
      raise errors.UserError(f'{where}: expected a list of at least two non-empty texts in "choices", got '
                             f"{choices!r}")

  def hf_head(self, head_params: Mapping[str, Any], threshold: float | None = None) -> HfHead:
    """HF's BertForMultipleChoice: the same pooled [CLS], dropout and classifier [1, hidden]; no remote class (on a
    ModernBERT encoder the head is saved beside)."""
    return HfHead("MultipleChoice", "BertForMultipleChoice", hf.linear_to_hf("classifier", head_params["classifier"]),
                  {}, {"dropout": self.task["dropout"]}, pooler=True, remote=False)
