"""One training step against HuggingFace PyTorch BERT on the same weights and masks: the engine's loss and every
parameter's gradient, MLM + NSP against BertForPreTraining, the classification, token-classification and
question-answering heads against BertFor{Sequence,Token}Classification and BertForQuestionAnswering, and MLM + SBO
against a PyTorch restatement of the span boundary objective.

Float32, dropout off. HF's model also runs in float64 (a double copy of the same weights): the exact reference. Each
loss and each parameter's gradient must be as accurate as HF's own float32 result against it (tests/tolerances.py,
`assert_as_accurate`): a chain of two layers' reductions has no useful closed-form bound, and a tensor whose
gradient is small next to the terms it sums (the last layer's queries under QA, 3e-4 of the largest gradient) carries
rounding errors up to 1e-4 of its own size on both sides. Gradients that are zero in exact arithmetic (every key
bias: softmax ignores q.b_k, the same for every key; a QA step's qa_outputs bias and last LayerNorm bias: each row's
softmax minus one-hot sums to 0) hold float32 noise on both sides and ~1e-17 in float64: held to HF's noise alike.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from launch import steps
from launch.model import EncoderWithHeads
from objectives import hf_heads, registry
from tasks import classification, question_answering, tagging
from tests.conftest import require_package
from tests.tolerances import assert_as_accurate

torch = require_package("torch")
transformers = require_package("transformers")
F = torch.nn.functional

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
B, L, P = 3, 12, 4
LENGTHS = (12, 8, 5)
IGNORE = -100  # HF's ignored label.
pytestmark = pytest.mark.numerics  # Parity with PyTorch (docs/testing.md).


def _randomize(module, rng):
  """Every parameter of a torch module drawn N(0, 0.2) (not the near-identity init), from a numpy generator."""
  with torch.no_grad():
    for param in module.parameters():
      param.copy_(torch.from_numpy(rng.normal(0.0, 0.2, param.shape).astype(np.float32)))


def _hf_config(**extra):
  return transformers.BertConfig(**TINY, **extra, attn_implementation="eager")


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory):
  """(BertForPreTraining with random weights, our (cfg, params, heads) of the same weights)."""
  model = transformers.BertForPreTraining(_hf_config())
  _randomize(model, np.random.default_rng(0))
  directory = tmp_path_factory.mktemp("pretraining")
  model.save_pretrained(directory, safe_serialization=True)
  return model, hf_heads.load_hf_checkpoint(directory)


@pytest.fixture(scope="module")
def batch():
  """Padded rows (lengths 12, 8, 5), two segments, distinct masked positions (the last row has one unused slot:
  weight 0), NSP labels, span boundaries around each masked token, sentence and token labels (-1: none)."""
  rng = np.random.default_rng(1)
  lengths = np.array(LENGTHS)
  valid = np.arange(L)[None] < lengths[:, None]
  used = np.minimum(P, lengths - 2)  # Masked tokens per row: 4, 4, 3.
  positions = np.stack([np.pad(np.sort(rng.choice(np.arange(1, n - 1), k, replace=False)), (0, P - k))
                        for n, k in zip(lengths, used)])
  weights = (np.arange(P)[None] < used[:, None]).astype(np.float32)
  label_ids = np.where(valid, rng.integers(0, 5, (B, L)), -1)
  label_ids[:, 0] = -1  # [CLS] has no tag.
  return {
      "input_ids": np.where(valid, rng.integers(1, TINY["vocab_size"], (B, L)), 0).astype(np.int32),
      "type_ids": np.where(valid & (np.arange(L)[None] >= lengths[:, None] // 2), 1, 0).astype(np.int32),
      "positions": np.broadcast_to(np.arange(L, dtype=np.int32), (B, L)).copy(),
      "attention_segments": valid.astype(np.int32),
      "masked_positions": positions.astype(np.int32),
      "masked_ids": rng.integers(1, TINY["vocab_size"], (B, P)).astype(np.int32),
      "masked_weights": weights,
      "nsp_label": np.array([0, 1, 1], np.int32),
      "span_left": np.maximum(positions - 1, 0).astype(np.int32),
      "span_right": np.minimum(positions + 2, lengths[:, None] - 1).astype(np.int32),
      "span_offset": np.tile(np.arange(P, dtype=np.int32), (B, 1)),
      "label": np.array([2, 0, 1], np.int32),
      "label_ids": label_ids.astype(np.int32),
      "word_positions": np.tile(np.arange(1, 5, dtype=np.int32), (B, 1)),
      "word_labels": label_ids[:, 1:5].astype(np.int32),
  }


def _engine_step(cfg, objectives, params, batch):
  """The engine's loss and gradients of one step (launch.steps.grad_step, every objective weighted 1)."""
  objectives = tuple(objectives)
  fns = steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                      weights={o.name: 1.0 for o in objectives}, tx=optax.identity())
  state = steps.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=(), rng=jax.random.PRNGKey(0))
  loss, _, grads = jax.jit(lambda s, b: steps.grad_step(fns, s, b, accum=1))(state, batch)
  return float(loss), jax.tree.map(np.asarray, grads)


def _torch_inputs(batch):
  return dict(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
              token_type_ids=torch.tensor(batch["type_ids"], dtype=torch.long),
              attention_mask=torch.tensor(batch["attention_segments"], dtype=torch.long))


def _mlm_labels(batch):
  """HF's MLM labels: the masked token's id at each used masked position, -100 everywhere else."""
  labels = np.full((B, L), IGNORE)
  for row, (positions, ids, weights) in enumerate(zip(batch["masked_positions"], batch["masked_ids"],
                                                      batch["masked_weights"])):
    used = weights > 0
    labels[row, positions[used]] = ids[used]
  return torch.tensor(labels)


def _torch_grads(model, loss):
  """{name: gradient} of every parameter of `model` after loss.backward() (None, unreached: zeros)."""
  model.zero_grad()
  loss.backward()
  return {name: np.zeros(p.shape) if p.grad is None else p.grad.numpy() for name, p in model.named_parameters()}


def _named(tree) -> dict:
  """{"['sbo']['layer_0']['kernel']": leaf, ...} of a tree of parameters outside HF's model."""
  return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _hf_steps(model, loss, extra=None) -> list[tuple[float, dict]]:
  """HF's step in float32 and, on a float64 copy of the model, in float64: [(loss, {name: gradient})] for each.
  loss(model, extra) -> loss tensor; `extra` (a tree of numpy arrays: parameters outside the model) comes as leaf
  tensors of the model's dtype, their gradients named by `_named`."""
  steps_ = []
  for m in (model, copy.deepcopy(model).double()):
    dtype = next(m.parameters()).dtype
    leaves = jax.tree.map(lambda x: torch.tensor(np.asarray(x), dtype=dtype, requires_grad=True), extra)  # noqa: B023  (called within the iteration)
    value = loss(m, leaves)
    steps_.append((value.item(), _torch_grads(m, value) | _named(jax.tree.map(lambda t: t.grad.numpy(), leaves))))
  return steps_


def _assert_as_accurate(ours: float, ours_grads: dict, hf: list) -> None:
  """Our loss and every parameter's gradient (present in all three) as accurate as HF float32's against HF float64;
  the last reduction of each sums over at most the batch's B * L tokens."""
  (loss32, grads32), (loss64, grads64) = hf
  assert_as_accurate(ours, loss32, loss64, B * L, "loss")
  assert sorted(ours_grads) == sorted(grads32) == sorted(grads64)
  for name in grads64:
    assert_as_accurate(ours_grads[name], grads32[name], grads64[name], B * L, name)


def _encoder_gradients(cfg, grads, heads=None):
  """Our encoder (+ MLM/NSP head) gradients under BertFor*'s parameter names."""
  state = hf_heads.hf_state(cfg, grads["encoder"], heads)
  return state if heads else {"bert." + name: value for name, value in state.items()}


@pytest.mark.slow
def test_mlm_nsp_step_equals_bert_for_pretraining(pretraining, batch):
  """MLM (mean over the masked tokens) + NSP (mean over the pairs): BertForPreTraining's loss is the same sum."""
  model, (cfg, params, heads) = pretraining
  objectives = [registry.build("mlm"), registry.build("nsp")]
  loss, grads = _engine_step(cfg, objectives, {"encoder": params, **heads}, batch)
  hf = _hf_steps(model, lambda m, _: m(**_torch_inputs(batch), labels=_mlm_labels(batch),
                                       next_sentence_label=torch.tensor(batch["nsp_label"], dtype=torch.long)).loss)
  _assert_as_accurate(loss, _encoder_gradients(cfg, grads, {"mlm": grads["mlm"], "nsp": grads["nsp"]}), hf)


def _torch_sbo_loss(hidden, sbo, embedding, batch, cfg, max_span_tokens=32):
  """The span boundary objective restated (SpanBERT): s_i = LN(GELU(LN(GELU([z_{s-1}; z_{e+1}; p_{i-s+1}] W0 + b0))
  W1 + b1)), logits = s_i E^T + bias, mean cross-entropy over the used masked tokens."""
  take = lambda name: torch.stack([hidden[row, torch.tensor(batch[name][row], dtype=torch.long)] for row in range(B)])
  offset = torch.tensor(np.minimum(batch["span_offset"], max_span_tokens - 1), dtype=torch.long)
  x = torch.cat([take("span_left"), take("span_right"), sbo["position_embeddings"]["embedding"][offset]], dim=-1)
  for i in (0, 1):
    dense, norm = sbo[f"layer_{i}"], sbo[f"layer_norm_{i}"]
    x = F.layer_norm(F.gelu(x @ dense["kernel"] + dense["bias"]), (cfg.hidden_size,), norm["scale"], norm["bias"],
                     cfg.layer_norm_eps)
  logits = x @ embedding.T + sbo["output_bias"]
  nll = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), torch.tensor(batch["masked_ids"]).long().reshape(-1),
                        reduction="none")
  weights = torch.tensor(batch["masked_weights"]).reshape(-1)
  return (nll * weights).sum() / weights.sum()


@pytest.mark.slow
def test_mlm_sbo_step_equals_bert_mlm_plus_a_torch_span_boundary_objective(pretraining, batch):
  """MLM from BertForPreTraining's MLM logits (HF's own cross-entropy, ignoring -100) + the restated SBO: the same
  loss, and the same gradients for the encoder, the MLM head and every SBO parameter."""
  model, (cfg, params, heads) = pretraining
  objectives = [registry.build("mlm"), registry.build("sbo")]
  init = jax.jit(EncoderWithHeads(cfg, tuple(objectives)).init)(jax.random.key(0), batch)["params"]
  rng = np.random.default_rng(2)
  sbo = jax.tree.map(lambda x: rng.normal(0.0, 0.2, x.shape).astype(np.float32), init["sbo"])
  loss, grads = _engine_step(cfg, objectives, {"encoder": params, "mlm": heads["mlm"], "sbo": sbo}, batch)

  def hf_loss(m, extra):  # MLM and SBO, without NSP.
    out = m(**_torch_inputs(batch), output_hidden_states=True)
    mlm = F.cross_entropy(out.prediction_logits.reshape(-1, cfg.vocab_size), _mlm_labels(batch).reshape(-1),
                          ignore_index=IGNORE)
    return mlm + _torch_sbo_loss(out.hidden_states[-1], extra["sbo"], m.bert.embeddings.word_embeddings.weight, batch,
                                 cfg)

  hf = [(value, {name: g for name, g in grads_.items() if not name.startswith("cls.seq_relationship")})
        for value, grads_ in _hf_steps(model, hf_loss, {"sbo": sbo})]
  ours = _encoder_gradients(cfg, grads, {"mlm": grads["mlm"]}) | _named({"sbo": grads["sbo"]})
  _assert_as_accurate(loss, ours, hf)


def _with_encoder(cls, pretraining, **config):
  """A BertFor* task model holding the pretraining model's encoder weights (those it has: BertForTokenClassification
  has no pooler) and a random head."""
  model = cls(_hf_config(**config))
  _randomize(model, np.random.default_rng(3))
  own = model.bert.state_dict()
  model.bert.load_state_dict({name: w for name, w in pretraining.bert.state_dict().items() if name in own})
  return model


def _linear(layer) -> dict:
  """A torch Linear as our dense tree ({kernel [in, out], bias})."""
  return {"kernel": layer.weight.detach().numpy().T.copy(), "bias": layer.bias.detach().numpy().copy()}


@pytest.mark.slow
def test_classification_step_equals_bert_for_sequence_classification(pretraining, batch):
  """Our head on BERT's pooled [CLS] (pooling="pooled"), mean cross-entropy: HF's single-label loss."""
  model, (cfg, params, _) = pretraining
  theirs_model = _with_encoder(transformers.BertForSequenceClassification, model, num_labels=3)
  objective = classification.build({"num_labels": 3, "pooling": "pooled", "dropout": 0.0})
  loss, grads = _engine_step(cfg, [objective], {"encoder": params,
                                                "classification": {"classifier": _linear(theirs_model.classifier)}},
                             batch)
  hf = _hf_steps(theirs_model, lambda m, _: m(**_torch_inputs(batch),
                                              labels=torch.tensor(batch["label"], dtype=torch.long)).loss)
  head = grads["classification"]["classifier"]
  ours = _encoder_gradients(cfg, grads) | {"classifier.weight": head["kernel"].T, "classifier.bias": head["bias"]}
  _assert_as_accurate(loss, ours, hf)


def test_token_classification_step_equals_bert_for_token_classification(pretraining, batch):
  """Tagging without a CRF: mean cross-entropy over the labelled tokens (ours -1, HF's -100 elsewhere)."""
  model, (cfg, params, _) = pretraining
  theirs_model = _with_encoder(transformers.BertForTokenClassification, model, num_labels=5)
  objective = tagging.build({"tags": ["O", "B-X", "I-X", "B-Y", "I-Y"], "dropout": 0.0})
  loss, grads = _engine_step(cfg, [objective], {"encoder": params,
                                                "tagging": {"classifier": _linear(theirs_model.classifier)}}, batch)
  labels = torch.tensor(np.where(batch["label_ids"] >= 0, batch["label_ids"], IGNORE), dtype=torch.long)
  hf = _hf_steps(theirs_model, lambda m, _: m(**_torch_inputs(batch), labels=labels).loss)
  head = grads["tagging"]["classifier"]
  ours = _encoder_gradients(cfg, grads) | {"classifier.weight": head["kernel"].T, "classifier.bias": head["bias"]}
  pooler = {name: ours.pop(name) for name in list(ours) if name.startswith("bert.pooler.")}  # Not in HF's model.
  assert all(not g.any() for g in pooler.values())
  _assert_as_accurate(loss, ours, hf)


@pytest.mark.slow
def test_question_answering_step_equals_bert_for_question_answering(pretraining, batch):
  """Start/end logits from qa_outputs [H, 2], loss (start CE + end CE) / 2: HF's own loss on full-length rows (HF puts
  padding in the softmax, ours leaves it out), and on padded rows HF's logits with the padding masked."""
  model, (cfg, params, _) = pretraining
  theirs_model = _with_encoder(transformers.BertForQuestionAnswering, model)
  objective = question_answering.QuestionAnswering({"max_length": L}).objective()
  head = {"question_answering": {"qa_outputs": _linear(theirs_model.qa_outputs)}}
  targets = {"start_position": np.array([3, 0, 2], np.int32), "end_position": np.array([6, 0, 4], np.int32)}
  # Full rows: no padding token either (HF's embedding never updates the [PAD] row, padding_idx).
  full = batch | targets | {"attention_segments": np.ones_like(batch["attention_segments"]),
                            "input_ids": np.maximum(batch["input_ids"], 1)}
  padded = batch | targets
  for rows, hf_loss in ((full, None), (padded, "masked")):
    loss, grads = _engine_step(cfg, [objective], {"encoder": params} | head, rows)
    positions = {f"{side}_positions": torch.tensor(rows[f"{side}_position"], dtype=torch.long)
                 for side in ("start", "end")}

    def theirs(m, _, rows=rows, positions=positions, hf_loss=hf_loss):
      if hf_loss is None:
        return m(**_torch_inputs(rows), **positions).loss
      out = m(**_torch_inputs(rows))
      padding = torch.tensor(rows["attention_segments"] == 0)
      return sum(F.cross_entropy(logits.masked_fill(padding, -1e9), positions[f"{side}_positions"])
                 for side, logits in (("start", out.start_logits), ("end", out.end_logits))) / 2

    qa = grads["question_answering"]["qa_outputs"]
    ours = _encoder_gradients(cfg, grads) | {"qa_outputs.weight": qa["kernel"].T, "qa_outputs.bias": qa["bias"]}
    pooler = {name: ours.pop(name) for name in list(ours) if name.startswith("bert.pooler.")}  # Not in HF's model.
    assert all(not g.any() for g in pooler.values())
    _assert_as_accurate(loss, ours, _hf_steps(theirs_model, theirs))
