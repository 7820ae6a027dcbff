"""Heads of encoderlab runs that HuggingFace transformers has no class for, on HF's own BertModel or ModernBertModel.

Written beside the weights by encoderlab's `python -m launch.export`; config.json's `auto_map` names the class, so

  AutoModelForSequenceClassification.from_pretrained(directory, trust_remote_code=True)   # or ...ForTokenClassification

computes what the run computed (what `python -m launch.predict` reads): a classifier or regressor on the final [CLS]
vector, the pooled [CLS] or the mean of the tokens; word-level heads (AutoModelForTokenClassification): a tagger
whose words are read at their first subword, optionally with the word's last subword, its shape (casing) and a CRF
decoded by Viterbi, or span NER over every word span with the run's tuned threshold; and, for runs of the ModernBERT
switches, the heads HF's ModernBERT classes lay out otherwise (MLM with every bias, NSP on BERT's pooler, question
answering). Word-level heads take `word_ids` (each token's word, -1 for specials and padding) and `case_ids` (its
word's shape) beside the token ids: pipeline_encoderlab.encode_words makes them from a tokenizer and a list of words.

Imports only torch and transformers.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812  (torch's own convention)
from transformers import BertModel, BertPreTrainedModel, ModernBertForMaskedLM, ModernBertModel, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import QuestionAnsweringModelOutput, SequenceClassifierOutput
from transformers.models.modernbert.modeling_modernbert import ModernBertPreTrainedModel
from transformers.utils import ModelOutput

from .configuration_encoderlab import EncoderlabBertConfig, EncoderlabModernBertConfig

IGNORE = -1  # word_ids of tokens outside every word; tags and span_words of padding.
_WORD_INPUTS = ("pass word_ids and case_ids: pipeline_encoderlab.encode_words, or pipeline('token-classification', "
                "model=..., trust_remote_code=True)")


def inference_only(kwargs: dict) -> None:
  """Refuses training targets: these heads compute the run's predictions; training goes on in encoderlab
  (`init=hf:<this directory>` starts from the export's encoder)."""
  given = sorted(key for key in ("labels", "start_positions", "end_positions", "next_sentence_label")
                 if kwargs.get(key) is not None)
  if given:
    raise NotImplementedError(f"{given}: this head has no training loss here; fine-tune with encoderlab from "
                              "init=hf:<this directory>")


def first_positions(word_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
  """(position of each word's first token [B, W] in word order, 0 at padding; real words [B, W] bool)."""
  previous = F.pad(word_ids[:, :-1], (1, 0), value=IGNORE)
  first = (word_ids != IGNORE) & (word_ids != previous)
  return _compact(first)


def last_positions_of_words(word_ids: torch.Tensor) -> torch.Tensor:
  """Position of each word's last token [B, W] in word order (0 at padding)."""
  following = F.pad(word_ids[:, 1:], (0, 1), value=IGNORE)
  return _compact((word_ids != IGNORE) & (word_ids != following))[0]


def _compact(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
  """The positions where `flags` [B, L] holds, left-aligned [B, max count] (0 past each row's count), and a mask."""
  counts = flags.sum(1)
  order = torch.argsort((~flags).to(torch.int8), dim=1, stable=True)[:, :int(counts.max()) if flags.numel() else 0]
  mask = torch.arange(order.shape[1], device=flags.device)[None] < counts[:, None]
  return torch.where(mask, order, 0), mask


def last_positions(word_ids: torch.Tensor) -> torch.Tensor:
  """[B, L]: for each token, the position of its word's last token (tokens outside words: themselves)."""
  length = word_ids.shape[1]
  positions = torch.arange(length, device=word_ids.device).expand_as(word_ids)
  following = F.pad(word_ids[:, 1:], (0, 1), value=IGNORE)
  ends = torch.where((word_ids != IGNORE) & (word_ids != following), positions, length)
  to_the_right = torch.flip(torch.cummin(torch.flip(ends, [1]), dim=1).values, [1])  # The next word end at or after.
  return torch.where(word_ids != IGNORE, to_the_right, positions)


def gather(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
  """values [B, L, ...] at positions [B, P] -> [B, P, ...]."""
  index = positions.reshape(positions.shape + (1,) * (values.dim() - 2)).expand(positions.shape + values.shape[2:])
  return values.gather(1, index)


def viterbi(emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor,
            end: torch.Tensor) -> torch.Tensor:
  """Best tag paths [B, T] (0 at padding) of a linear-chain CRF: score = start[y0] + sum emissions + sum
  transitions[y_t-1, y_t] + end[y_last], over left-aligned rows of `mask`; ties go to the lowest tag."""
  num_tags = emissions.shape[-1]
  identity = torch.arange(num_tags, device=emissions.device)[None]
  best, pointers = start[None] + emissions[:, 0], []
  for step in range(1, emissions.shape[1]):
    on = mask[:, step, None]
    score, pointer = (best[:, :, None] + transitions[None]).max(dim=1)
    pointers.append(torch.where(on, pointer, identity))  # Padding passes the last real tag through.
    best = torch.where(on, score + emissions[:, step], best)
  tag = (best + end[None]).argmax(-1)
  path = [tag]
  for pointer in reversed(pointers):
    tag = pointer.gather(1, tag[:, None])[:, 0]
    path.append(tag)
  return torch.where(mask, torch.stack(path[::-1], dim=1), 0)


class Pooler(nn.Module):
  """BERT's pooler, tanh(W h_CLS + b), for encoders without one (HF's ModernBERT)."""

  def __init__(self, config):
    super().__init__()
    self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.mlp_bias)  # The run's use_bias.

  def forward(self, cls: torch.Tensor) -> torch.Tensor:
    return torch.tanh(self.dense(cls))


class OnBert(BertPreTrainedModel):
  """The run's encoder as HF's BertModel, held as `bert` (as HF's BertFor* classes hold it)."""
  config_class = EncoderlabBertConfig

  def add_encoder(self, pooler: bool) -> None:
    self.bert = BertModel(self.config, add_pooling_layer=pooler)

  def encode(self, input_ids, attention_mask, token_type_ids) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(last hidden states [B, L, H], pooled [CLS] [B, H] or None)."""
    out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    return out.last_hidden_state, out.pooler_output


class OnModernBert(ModernBertPreTrainedModel):
  """The run's encoder as HF's ModernBertModel, held as `model`, plus BERT's pooler when the head reads it."""
  config_class = EncoderlabModernBertConfig

  def add_encoder(self, pooler: bool) -> None:
    self.model = ModernBertModel(self.config)
    self.pooler = Pooler(self.config) if pooler else None

  def encode(self, input_ids, attention_mask, token_type_ids) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(last hidden states [B, L, H], pooled [CLS] [B, H] or None); ModernBERT has no token types."""
    last = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return last, None if self.pooler is None else self.pooler(last[:, 0])


if TYPE_CHECKING:
  class _OnEncoder(PreTrainedModel):
    """For mypy only: what the head mixins below take from the encoder class they are mixed with (OnBert,
    OnModernBert), which comes after them in each model class's bases."""

    def add_encoder(self, pooler: bool) -> None: ...

    def encode(self, input_ids, attention_mask, token_type_ids) -> tuple[torch.Tensor, torch.Tensor | None]: ...
else:
  _OnEncoder = object  # At run time the mixins are plain classes.


@dataclass
class SentenceClassifierOutput(SequenceClassifierOutput):
  """HF's output plus `score`: the auxiliary regression output of a classifier trained with one."""
  score: torch.Tensor | None = None


class SentenceHead(_OnEncoder):
  """One linear layer on the final [CLS] vector (pooling "cls"), BERT's pooled [CLS] ("pooled") or the mean of the
  real tokens ("mean"): `classifier` gives the logits (num_labels 1, problem_type "regression": a score), `score` an
  auxiliary score beside them."""

  def __init__(self, config):
    super().__init__(config)
    head = config.encoderlab_head
    self.pooling = head["pooling"]
    self.add_encoder(pooler=self.pooling == "pooled")
    self.dropout = nn.Dropout(head["dropout"])
    self.classifier = nn.Linear(config.hidden_size, config.num_labels)
    self.score = nn.Linear(config.hidden_size, 1) if head.get("score") else None
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
    attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    last, pooled = self.encode(input_ids, attention_mask, token_type_ids)
    if self.pooling == "cls":
      sentence = last[:, 0]
    elif self.pooling == "pooled":
      assert pooled is not None  # add_encoder(pooler=True) gave the encoder its pooler.
      sentence = pooled
    else:
      mask = attention_mask[..., None].to(last.dtype)
      sentence = (last * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    sentence = self.dropout(sentence)
    logits = self.classifier(sentence)
    loss = None
    if labels is not None:
      loss = (F.mse_loss(logits[:, 0], labels.to(logits.dtype)) if self.config.num_labels == 1  # A score.
              else F.cross_entropy(logits, labels))
    return SentenceClassifierOutput(loss=loss, logits=logits,
                                    score=None if self.score is None else self.score(sentence)[:, 0])


@dataclass
class WordTaggerOutput(ModelOutput):
  """logits [B, L, K] of every token; word_logits [B, W, K] at each word's first token; tags [B, W] the run's
  decision per word (first-token argmax, or Viterbi under the CRF), -1 at padding."""
  loss: torch.Tensor | None = None
  logits: torch.Tensor | None = None
  word_logits: torch.Tensor | None = None
  tags: torch.Tensor | None = None


class CRF(nn.Module):
  """A linear-chain CRF's scores (transitions [K, K], start [K], end [K]), moves the tag scheme forbids already at
  -1e9 (as the run decoded them)."""

  def __init__(self, num_tags: int):
    super().__init__()
    self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
    self.start = nn.Parameter(torch.zeros(num_tags))
    self.end = nn.Parameter(torch.zeros(num_tags))


@dataclass
class SpanClassifierOutput(ModelOutput):
  """logits [B, S, 1 + types] of every candidate span (index 0: no entity); span_words [B, S, 2] its first and last
  word (-1 at padding)."""
  loss: torch.Tensor | None = None
  logits: torch.Tensor | None = None
  span_words: torch.Tensor | None = None


class WordHead(_OnEncoder):
  """The word-level heads (AutoModelForTokenClassification), by config.json's encoderlab_head["kind"]:

  "tagger": a tag per word, read at the word's first token: W_K on the token's vector, optionally concatenated with
  its word's last token's vector (`last_subword`) and its word's shape embedding (`case_features`); greedy, or
  Viterbi under a CRF (`crf`).

  "spans": span NER: every word span (i, j) of at most `max_span_width` words is [s_i; e_j; g_ij] (boundary FFNs on
  its first and last token, the mean or attention-weighted sum of its tokens) -> FFN -> GELU -> logits over "no
  entity" + the types; `entities` decodes them as the run did (its tuned threshold, greedy non-overlap unless
  nested).

  One class for both: HF's Auto classes map a config class to one model class per process.
  """

  def __init__(self, config):
    super().__init__(config)
    head = config.encoderlab_head
    self.add_encoder(pooler=False)
    self.dropout = nn.Dropout(head["dropout"])
    cased = head["case_features"]
    self.case_embeddings = nn.Embedding(len(head["shapes"]), cased) if cased else None
    if head["kind"] == "spans":
      width = config.hidden_size + cased
      self.ffn_start = nn.Linear(width, width) if head["boundary_ffn"] else None
      self.ffn_end = nn.Linear(width, width) if head["boundary_ffn"] else None
      self.span_attention = nn.Linear(width, 1) if head["pooling"] == "attention" else None
      self.ffn = nn.Linear(3 * width, head["span_hidden"])
      self.classifier = nn.Linear(head["span_hidden"], config.num_labels)
    else:
      self.classifier = nn.Linear(config.hidden_size * (2 if head["last_subword"] else 1) + cased, config.num_labels)
      self.crf = CRF(config.num_labels) if head["crf"] else None
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, word_ids=None, case_ids=None,
              **kwargs) -> WordTaggerOutput | SpanClassifierOutput:
    inference_only(kwargs)
    head = self.config.encoderlab_head
    spans = head["kind"] == "spans"
    if word_ids is None and (spans or head["last_subword"] or head["crf"]):
      raise ValueError(f"this {'span classifier' if spans else 'tagger'} reads word boundaries: {_WORD_INPUTS}")
    if case_ids is None and self.case_embeddings is not None:
      raise ValueError(f"this head reads each word's shape (casing): {_WORD_INPUTS}")
    last, _ = self.encode(input_ids, attention_mask, token_type_ids)
    hidden = self.dropout(last)
    return self._spans(hidden, word_ids, case_ids) if spans else self._tags(hidden, word_ids, case_ids)

  def _cased(self, hidden: torch.Tensor, case_ids: torch.Tensor | None) -> torch.Tensor:
    """hidden [B, L, H] with each token's word-shape embedding concatenated (when the head reads them)."""
    if self.case_embeddings is None:
      return hidden
    return torch.cat([hidden, self.case_embeddings(case_ids).to(hidden.dtype)], dim=-1)

  def _tags(self, hidden: torch.Tensor, word_ids: torch.Tensor | None, case_ids: torch.Tensor | None
            ) -> WordTaggerOutput:
    if self.config.encoderlab_head["last_subword"]:
      assert word_ids is not None  # forward refuses a last_subword tagger without word_ids.
      hidden = torch.cat([hidden, gather(hidden, last_positions(word_ids))], dim=-1)
    logits = self.classifier(self._cased(hidden, case_ids))
    if word_ids is None:
      return WordTaggerOutput(logits=logits)
    positions, words = first_positions(word_ids)
    word_logits = gather(logits, positions)
    if self.crf is None:
      tags = word_logits.argmax(-1)
    else:
      tags = viterbi(word_logits.float(), words, self.crf.transitions, self.crf.start, self.crf.end)
    return WordTaggerOutput(logits=logits, word_logits=word_logits, tags=torch.where(words, tags, IGNORE))

  def candidates(self, word_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every span of at most max_span_width words: (first token [B, S], last token [B, S], words [B, S, 2]; -1 at
    padding)."""
    width = self.config.encoderlab_head["max_span_width"]
    firsts, words = first_positions(word_ids)
    lasts = last_positions_of_words(word_ids)
    rows = [[(i, j) for i in range(count) for j in range(i, min(count, i + width))] for count in words.sum(1).tolist()]
    spans = torch.full((len(rows), max(map(len, rows), default=0), 2), IGNORE, dtype=torch.long,
                       device=word_ids.device)
    for row, pairs in enumerate(rows):
      if pairs:
        spans[row, :len(pairs)] = torch.tensor(pairs, device=word_ids.device)
    real = spans[..., 0] != IGNORE
    first_word, last_word = spans[..., 0].clamp(min=0), spans[..., 1].clamp(min=0)
    return (torch.where(real, firsts.gather(1, first_word), 0), torch.where(real, lasts.gather(1, last_word), 0),
            spans)

  def _spans(self, hidden: torch.Tensor, word_ids: torch.Tensor, case_ids: torch.Tensor | None
             ) -> SpanClassifierOutput:
    z = self._cased(hidden, case_ids)
    starts, ends, span_words = self.candidates(word_ids)
    start_rep = z if self.ffn_start is None else F.gelu(self.ffn_start(z))
    end_rep = z if self.ffn_end is None else F.gelu(self.ffn_end(z))
    positions = torch.arange(z.shape[1], device=z.device)
    inside = (positions >= starts[..., None]) & (positions <= ends[..., None])  # [B, S, L]
    if self.span_attention is None:
      weights = inside / inside.sum(-1, keepdim=True).clamp(min=1)
    else:
      scores = self.span_attention(z)[..., 0][:, None, :]  # [B, 1, L]
      weights = torch.softmax(torch.where(inside, scores, torch.full_like(scores, -1e9)), -1)
    summary = torch.einsum("bsl,blh->bsh", weights.to(z.dtype), z)
    rep = torch.cat([gather(start_rep, starts), gather(end_rep, ends), summary], dim=-1)
    logits = self.classifier(self.dropout(F.gelu(self.ffn(rep))))
    return SpanClassifierOutput(logits=logits, span_words=span_words)

  def entities(self, output: SpanClassifierOutput) -> list[list[tuple[int, int, str, float]]]:
    """Each row's entities (first word, end word exclusive, type, probability) as the run decoded them
    (`decode_spans` with its threshold, flat or nested)."""
    head = self.config.encoderlab_head
    if output.logits is None or output.span_words is None:
      raise ValueError("entities decodes a span classifier's output: it needs its logits and span_words")
    labels = cast(dict[int, str] | None, self.config.id2label)  # HF makes the keys ints when it reads config.json.
    assert labels is not None  # A config with num_labels has id2label (the export writes it).
    found = []
    for probabilities, words in zip(torch.softmax(output.logits.float(), dim=-1), output.span_words):
      real = words[:, 0] != IGNORE
      found.append([(first, end, labels[label], score) for first, end, label, score in
                    decode_spans(probabilities[real], words[real], head.get("threshold"), head["nested"])])
    return found


def decode_spans(probabilities: torch.Tensor, span_words: torch.Tensor, threshold: float | None, nested: bool
                 ) -> list[tuple[int, int, int, float]]:
  """probabilities [S, 1 + types] of spans span_words [S, 2] (first, last word) -> [(first word, end word
  exclusive, label >= 1, probability)] by first word: a span is kept when its best type's probability reaches
  `threshold` (beats label 0, no entity, when None); unless `nested`, the most probable spans first, each dropping
  the later ones that overlap it."""
  labels = 1 + probabilities[:, 1:].argmax(1)
  scores = probabilities.gather(1, labels[:, None])[:, 0]
  # float64: the threshold is the run's (a float64 of its dev grid), compared as numpy compares it.
  accepted = scores > probabilities[:, 0] if threshold is None else scores.double() >= threshold
  taken: set[int] = set()  # Words of the spans chosen so far (unless nested).
  chosen = []
  for index in torch.argsort(-scores, stable=True).tolist():
    if not accepted[index]:
      continue
    first, last = int(span_words[index, 0]), int(span_words[index, 1])
    if not nested:
      if taken & set(range(first, last + 1)):
        continue
      taken |= set(range(first, last + 1))
    chosen.append((first, last + 1, int(labels[index]), float(scores[index])))
  return sorted(chosen)


class QuestionAnsweringHead(_OnEncoder):
  """qa_outputs [H, 2] on every final hidden state: start and end logits (BERT's SQuAD head)."""

  def __init__(self, config):
    super().__init__(config)
    self.add_encoder(pooler=False)
    self.qa_outputs = nn.Linear(config.hidden_size, 2)
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
    inference_only(kwargs)
    last, _ = self.encode(input_ids, attention_mask, token_type_ids)
    start, end = self.qa_outputs(last).unbind(-1)
    return QuestionAnsweringModelOutput(start_logits=start, end_logits=end)


class EncoderlabBertModel(BertModel):
  """The encoder alone (`AutoModel`), e.g. for feature extraction."""
  config_class = EncoderlabBertConfig


class EncoderlabModernBertModel(ModernBertModel):
  """The encoder alone (`AutoModel`), e.g. for feature extraction."""
  config_class = EncoderlabModernBertConfig


class EncoderlabBertForSequenceClassification(SentenceHead, OnBert):
  """SentenceHead on BertModel."""


class EncoderlabModernBertForSequenceClassification(SentenceHead, OnModernBert):
  """SentenceHead on ModernBertModel."""


class EncoderlabBertForTokenClassification(WordHead, OnBert):
  """WordHead on BertModel."""


class EncoderlabModernBertForTokenClassification(WordHead, OnModernBert):
  """WordHead on ModernBertModel."""


class EncoderlabModernBertForQuestionAnswering(QuestionAnsweringHead, OnModernBert):
  """QuestionAnsweringHead on ModernBertModel (HF's own puts a prediction head before qa_outputs)."""


class PredictionHead(nn.Module):
  """The run's MLM transform, dense -> GELU -> LayerNorm, each with its bias (HF's ModernBERT head drops the biases
  a bias-free encoder lacks; the run's MLM head trains them all)."""

  def __init__(self, config):
    super().__init__()
    self.dense = nn.Linear(config.hidden_size, config.hidden_size)
    self.act = ACT2FN[config.classifier_activation]
    self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)

  def forward(self, hidden: torch.Tensor) -> torch.Tensor:
    return self.norm(self.act(self.dense(hidden)))


class EncoderlabModernBertForMaskedLM(ModernBertForMaskedLM):
  """HF's ModernBertForMaskedLM with the run's MLM head (PredictionHead, the decoder tied to the word embeddings):
  what AutoModelForMaskedLM and the fill-mask pipeline load."""
  config_class = EncoderlabModernBertConfig

  def __init__(self, config: EncoderlabModernBertConfig) -> None:
    super().__init__(config)
    self.head = PredictionHead(config)  # type: ignore[assignment]  # the run's head in place of HF's (the same call)
    self.post_init()


@dataclass
class PreTrainingOutput(ModelOutput):
  """As HF's BertForPreTrainingOutput: MLM logits [B, L, V] and NSP logits [B, 2] (0: is next)."""
  loss: torch.Tensor | None = None
  prediction_logits: torch.Tensor | None = None
  seq_relationship_logits: torch.Tensor | None = None


class EncoderlabModernBertForPreTraining(EncoderlabModernBertForMaskedLM):
  """The run's MLM head plus BERT's pooler and NSP classifier (`seq_relationship` on the pooled [CLS]): what
  BertForPreTraining computes, on ModernBERT."""

  def __init__(self, config):
    super().__init__(config)
    self.pooler = Pooler(config)
    self.seq_relationship = nn.Linear(config.hidden_size, 2)
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, **kwargs) -> PreTrainingOutput:
    inference_only(kwargs)
    last = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return PreTrainingOutput(prediction_logits=self.decoder(self.head(last)),
                             seq_relationship_logits=self.seq_relationship(self.pooler(last[:, 0])))
