"""One training step against HuggingFace PyTorch BERT on the same weights and masks: the engine's loss and every
parameter's gradient, MLM + NSP against BertForPreTraining, the classification, token-classification and
question-answering heads against BertFor{Sequence,Token}Classification and BertForQuestionAnswering, and MLM + SBO
against a PyTorch restatement of the span boundary objective.

Gradients are compared tensor by tensor as max|ours - theirs| / max|theirs| (float32, dropout off).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder import hf_checkpoint as hf
from launch import steps
from launch.model import EncoderWithHeads
from objectives import registry
from tasks import classification, question_answering, tagging
from tests.conftest import require_package

torch = require_package("torch")
transformers = require_package("transformers")
F = torch.nn.functional

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
B, L, P = 3, 12, 4
LENGTHS = (12, 8, 5)
RTOL = 1e-4
IGNORE = -100  # HF's ignored label.


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
  return model, hf.load_hf_checkpoint(directory)


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
  loss, _, grads = jax.jit(lambda s, b: steps.grad_step(fns, s, b, accum=1, nan_step=-1))(state, batch)
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
  return {name: np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy()
          for name, p in model.named_parameters()}


def _relative(ours, theirs) -> float:
  """max|ours - theirs| / max|theirs| (0 when both are all zero)."""
  scale = float(np.abs(theirs).max())
  difference = float(np.abs(np.asarray(ours) - theirs).max())
  return difference / scale if scale > 0 else difference


def _assert_same_gradients(ours: dict, theirs: dict) -> float:
  """Every parameter present in both, each gradient within RTOL; returns the largest relative difference.

  The key biases' gradient is zero in exact arithmetic (softmax ignores q.b_k, the same for every key), so both sides
  hold rounding noise there (~1e-10): they must be that, at most 1e-7 of the largest gradient.
  """
  assert sorted(ours) == sorted(theirs)
  largest = max(float(np.abs(g).max()) for g in theirs.values())
  zero = {name for name in theirs if name.endswith("attention.self.key.bias")}
  assert all(max(np.abs(ours[name]).max(), np.abs(theirs[name]).max()) <= 1e-7 * largest for name in zero)
  worst = {name: _relative(ours[name], theirs[name]) for name in theirs.keys() - zero}
  bad = {name: r for name, r in worst.items() if r > RTOL}
  assert not bad, f"gradients differ beyond {RTOL}: {bad}"
  return max(worst.values())


def _encoder_gradients(cfg, grads, heads=None):
  """Our encoder (+ MLM/NSP head) gradients under BertFor*'s parameter names."""
  state = hf.hf_state(cfg, grads["encoder"], heads)
  return state if heads else {"bert." + name: value for name, value in state.items()}


def test_mlm_nsp_step_equals_bert_for_pretraining(pretraining, batch):
  """MLM (mean over the masked tokens) + NSP (mean over the pairs): BertForPreTraining's loss is the same sum."""
  model, (cfg, params, heads) = pretraining
  objectives = [registry.build("mlm"), registry.build("nsp")]
  loss, grads = _engine_step(cfg, objectives, {"encoder": params, **heads}, batch)
  theirs = model(**_torch_inputs(batch), labels=_mlm_labels(batch),
                 next_sentence_label=torch.tensor(batch["nsp_label"], dtype=torch.long)).loss
  np.testing.assert_allclose(loss, theirs.item(), rtol=1e-5)
  _assert_same_gradients(_encoder_gradients(cfg, grads, {"mlm": grads["mlm"], "nsp": grads["nsp"]}),
                         _torch_grads(model, theirs))


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


def test_mlm_sbo_step_equals_bert_mlm_plus_a_torch_span_boundary_objective(pretraining, batch):
  """MLM from BertForPreTraining's MLM logits (HF's own cross-entropy, ignoring -100) + the restated SBO: the same
  loss, and the same gradients for the encoder, the MLM head and every SBO parameter."""
  model, (cfg, params, heads) = pretraining
  objectives = [registry.build("mlm"), registry.build("sbo")]
  init = jax.jit(EncoderWithHeads(cfg, tuple(objectives)).init)(jax.random.key(0), batch)["params"]
  rng = np.random.default_rng(2)
  sbo = jax.tree.map(lambda x: rng.normal(0.0, 0.2, x.shape).astype(np.float32), init["sbo"])
  loss, grads = _engine_step(cfg, objectives, {"encoder": params, "mlm": heads["mlm"], "sbo": sbo}, batch)

  sbo_torch = jax.tree.map(lambda x: torch.tensor(x, requires_grad=True), sbo)
  out = model(**_torch_inputs(batch), output_hidden_states=True)
  mlm = F.cross_entropy(out.prediction_logits.reshape(-1, cfg.vocab_size), _mlm_labels(batch).reshape(-1),
                        ignore_index=IGNORE)
  theirs = mlm + _torch_sbo_loss(out.hidden_states[-1], sbo_torch, model.bert.embeddings.word_embeddings.weight,
                                 batch, cfg)
  np.testing.assert_allclose(loss, theirs.item(), rtol=1e-5)
  torch_grads = _torch_grads(model, theirs)
  nsp = {name for name in torch_grads if name.startswith("cls.seq_relationship")}
  _assert_same_gradients(_encoder_gradients(cfg, grads, {"mlm": grads["mlm"]}),
                         {name: g for name, g in torch_grads.items() if name not in nsp})
  ours_sbo, theirs_sbo = jax.tree.leaves(grads["sbo"]), jax.tree.leaves(jax.tree.map(lambda t: t.grad.numpy(),
                                                                                      sbo_torch))
  assert max(_relative(a, b) for a, b in zip(ours_sbo, theirs_sbo)) <= RTOL


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


def test_classification_step_equals_bert_for_sequence_classification(pretraining, batch):
  """Our head on BERT's pooled [CLS] (pooling="pooled"), mean cross-entropy: HF's single-label loss."""
  model, (cfg, params, _) = pretraining
  theirs_model = _with_encoder(transformers.BertForSequenceClassification, model, num_labels=3)
  objective = classification.build({"num_labels": 3, "pooling": "pooled", "dropout": 0.0})
  loss, grads = _engine_step(cfg, [objective], {"encoder": params,
                                                "classification": {"classifier": _linear(theirs_model.classifier)}},
                             batch)
  theirs = theirs_model(**_torch_inputs(batch), labels=torch.tensor(batch["label"], dtype=torch.long)).loss
  np.testing.assert_allclose(loss, theirs.item(), rtol=1e-5)
  head = grads["classification"]["classifier"]
  ours = _encoder_gradients(cfg, grads) | {"classifier.weight": head["kernel"].T, "classifier.bias": head["bias"]}
  _assert_same_gradients(ours, _torch_grads(theirs_model, theirs))


def test_token_classification_step_equals_bert_for_token_classification(pretraining, batch):
  """Tagging without a CRF: mean cross-entropy over the labelled tokens (ours -1, HF's -100 elsewhere)."""
  model, (cfg, params, _) = pretraining
  theirs_model = _with_encoder(transformers.BertForTokenClassification, model, num_labels=5)
  objective = tagging.build({"tags": ["O", "B-X", "I-X", "B-Y", "I-Y"], "dropout": 0.0})
  loss, grads = _engine_step(cfg, [objective], {"encoder": params,
                                                "tagging": {"classifier": _linear(theirs_model.classifier)}}, batch)
  labels = torch.tensor(np.where(batch["label_ids"] >= 0, batch["label_ids"], IGNORE), dtype=torch.long)
  theirs = theirs_model(**_torch_inputs(batch), labels=labels).loss
  np.testing.assert_allclose(loss, theirs.item(), rtol=1e-5)
  head = grads["tagging"]["classifier"]
  ours = _encoder_gradients(cfg, grads) | {"classifier.weight": head["kernel"].T, "classifier.bias": head["bias"]}
  pooler = {name: ours.pop(name) for name in list(ours) if name.startswith("bert.pooler.")}  # Not in HF's model.
  assert all(not g.any() for g in pooler.values())
  _assert_same_gradients(ours, _torch_grads(theirs_model, theirs))


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
    if hf_loss is None:
      theirs = theirs_model(**_torch_inputs(rows), **positions).loss
    else:
      out = theirs_model(**_torch_inputs(rows))
      padding = torch.tensor(rows["attention_segments"] == 0)
      theirs = sum(F.cross_entropy(logits.masked_fill(padding, -1e9), positions[f"{side}_positions"])
                   for side, logits in (("start", out.start_logits), ("end", out.end_logits))) / 2
    np.testing.assert_allclose(loss, theirs.item(), rtol=1e-5)
    qa = grads["question_answering"]["qa_outputs"]
    ours = _encoder_gradients(cfg, grads) | {"qa_outputs.weight": qa["kernel"].T, "qa_outputs.bias": qa["bias"]}
    pooler = {name: ours.pop(name) for name in list(ours) if name.startswith("bert.pooler.")}  # Not in HF's model.
    assert all(not g.any() for g in pooler.values())
    torch_grads = _torch_grads(theirs_model, theirs)
    # qa_outputs.bias and the last LayerNorm's bias get 0 in exact arithmetic (each row's softmax minus one-hot sums
    # to 0 over positions), the last query bias ~1e-7 of the largest gradient: rounding noise, compared absolutely.
    largest = max(float(np.abs(g).max()) for g in torch_grads.values())
    tiny = [name for name, g in torch_grads.items() if np.abs(g).max() < RTOL * largest]
    assert "qa_outputs.bias" in tiny
    assert all(np.abs(ours.pop(n) - torch_grads.pop(n)).max() <= RTOL * largest for n in tiny)
    _assert_same_gradients(ours, torch_grads)
