"""The multiple-choice family (tasks/multiple_choice.py), added as its module, its reader (tasks/readers/choices.py)
and a registry line: its reader's records and one-line errors, its logits and one training step's gradients against
HF's BertForMultipleChoice on the same weights, a padded choice, and predict's line format. (A run on a fixture
dataset, its export and predict: tests/launch/test_multiple_choice_run.py.)"""

import copy
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import finetune
from encoder import errors, hf
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch import export
from launch.model import EncoderWithHeads
from tasks import batching, finetune_data, registry
from tasks.readers import FORMATS, ReaderError
from tests.conftest import require_package
from tests.tolerances import assert_as_accurate

torch = require_package("torch")
transformers = require_package("transformers")
from tests.launch import test_hf_gradient_parity as parity  # noqa: E402  (it imports torch: after require_package)

TINY = parity.TINY

B, C, L = 2, 3, 10  # Examples, choices, tokens.
LENGTHS = ((10, 7, 4), (9, 9, 5))  # Each choice's tokens (a [CLS] context [SEP] choice [SEP] row).
RECORDS = [{"context": "The man turned on the faucet.", "choices": ["The toilet filled.", "Water flowed."], "label": 1},
           {"context": "She ran", "choices": ["fast", "home", "away"], "label": None}]


@pytest.fixture(scope="module")
def tokenizer():
  return load_tokenizer(minilm_path())


def family():
  return registry.family({"name": "multiple_choice", "max_length": 16, "labels": [], "dropout": 0.0})


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
  """(BertForMultipleChoice with random weights, our encoder config and parameters of the same weights)."""
  model = transformers.BertForMultipleChoice(transformers.BertConfig(**TINY, attn_implementation="eager"))
  parity._randomize(model, np.random.default_rng(0))
  directory = tmp_path_factory.mktemp("multiple_choice")
  model.save_pretrained(directory, safe_serialization=True)
  cfg, params, _ = hf.load_hf_checkpoint(directory)
  return model, cfg, {"encoder": params, "multiple_choice": {"classifier": parity._linear(model.classifier)}}


def _batch() -> dict[str, np.ndarray]:
  """[B, C, L] rows of the lengths above, segment 1 from the middle on, the right choices 1 and 2."""
  rng = np.random.default_rng(1)
  valid = np.arange(L) < np.asarray(LENGTHS)[..., None]
  return {"input_ids": np.where(valid, rng.integers(1, TINY["vocab_size"], (B, C, L)), 0).astype(np.int32),
          "type_ids": (valid & (np.arange(L) >= np.asarray(LENGTHS)[..., None] // 2)).astype(np.int32),
          "attention_segments": valid.astype(np.int32),
          "positions": np.broadcast_to(np.arange(L, dtype=np.int32), (B, C, L)).copy(),
          "label": np.array([1, 2], np.int32), "example_mask": np.ones(B, np.float32)}


def _torch_inputs(batch: dict, dtype=torch.long) -> dict:
  return {"input_ids": torch.tensor(batch["input_ids"], dtype=dtype),
          "token_type_ids": torch.tensor(batch["type_ids"], dtype=dtype),
          "attention_mask": torch.tensor(batch["attention_segments"], dtype=dtype)}


def _logits(cfg, params, batch) -> np.ndarray:
  model = EncoderWithHeads(cfg, (family().objective(),))
  apply = jax.jit(lambda p, b: model.apply({"params": p}, b)["multiple_choice"]["logits"])
  return np.asarray(apply(params, batch))


@pytest.mark.slow  # A tiny HF model in float32 and float64 and a compiled encoder: ~5 s of CPU.
@pytest.mark.numerics
def test_logits_equal_bert_for_multiple_choice_and_a_padded_choice_gets_none(hf_model):
  """Every (context, choice) row through the encoder as one of B * C rows, scored from its pooled [CLS]: HF's
  logits [B, C]. Bound (tests/tolerances.py): as accurate as HF's own float32 against its float64 copy (a whole
  network's rounding has no useful closed form), plus sum_bound over the classifier's H terms. A choice that is
  padding (no tokens: a record with fewer choices than the batch's most) gets float32's lowest logit, and the other
  rows keep theirs: rows are independent, the same program on the same shape gives them bit for bit."""
  model, cfg, params = hf_model
  batch = _batch()
  ours = _logits(cfg, params, batch)
  with torch.no_grad():
    theirs, exact = (m(**_torch_inputs(batch)).logits.numpy() for m in (model, copy.deepcopy(model).double()))
  print(f"logits: max |ours - float64| {np.abs(ours - exact).max():.2e}, "
        f"HF float32's {np.abs(theirs - exact).max():.2e}")
  assert_as_accurate(ours, theirs, exact, TINY["hidden_size"], "logits")
  padded = batch | {k: batch[k].copy() for k in ("input_ids", "type_ids", "attention_segments")}
  for key in ("input_ids", "type_ids", "attention_segments"):
    padded[key][0, 2] = 0
  fewer = _logits(cfg, params, padded)
  assert fewer[0, 2] == np.finfo(np.float32).min
  assert (fewer[0, :2] == ours[0, :2]).all() and (fewer[1] == ours[1]).all()
  loss, metrics = family().objective().loss({"logits": jnp.asarray(fewer)}, padded)
  assert np.isfinite(float(loss)) and float(metrics["multiple_choice_loss"][1]) == B


@pytest.mark.slow  # A training step of a tiny HF model in float32 and float64 and ours compiled: ~6 s of CPU.
@pytest.mark.numerics
def test_a_training_step_equals_bert_for_multiple_choice(hf_model):
  """The engine's loss (mean over the examples of the softmax cross-entropy over their choices) and every
  parameter's gradient, the classifier's [1, H] included: HF's loss with labels. Bound as test_hf_gradient_parity's:
  as accurate as HF float32 against HF float64; the last reduction sums over at most the B * C * L tokens."""
  model, cfg, params = hf_model
  batch = _batch()
  loss, grads = parity._engine_step(cfg, [family().objective()], params, batch)
  (loss32, grads32), (loss64, grads64) = parity._hf_steps(
      model, lambda m, _: m(**_torch_inputs(batch), labels=torch.tensor(batch["label"], dtype=torch.long)).loss)
  head = grads["multiple_choice"]["classifier"]
  ours = parity._encoder_gradients(cfg, grads) | {"classifier.weight": head["kernel"].T,
                                                  "classifier.bias": head["bias"]}
  assert sorted(ours) == sorted(grads64)
  worst = max((np.abs(ours[k] - grads64[k]).max() / max(np.abs(grads32[k] - grads64[k]).max(), 1e-30), k)
              for k in grads64)
  print(f"loss {loss:.6f}: |ours - float64| {abs(loss - loss64):.2e}, HF float32's {abs(loss32 - loss64):.2e}; "
        f"gradients: worst ratio to HF float32's error {worst[0]:.2f} ({worst[1]})")
  assert_as_accurate(loss, loss32, loss64, B * C * L, "loss")
  for name in grads64:
    assert_as_accurate(ours[name], grads32[name], grads64[name], B * C * L, name)


def test_a_batch_pads_each_example_to_its_most_choices():
  """Examples of 2 and 3 choices: [batch, 3, bucket] token fields, the missing choice a row of zeros (no tokens)."""
  examples = [{"input_ids": np.ones((2, 4), np.int32), "attention_segments": np.ones((2, 4), np.int32),
               "label": np.int32(1)},
              {"input_ids": np.full((3, 6), 2, np.int32), "attention_segments": np.ones((3, 6), np.int32),
               "label": np.int32(0)}]
  batch = batching.collate(examples, (8,), batch_size=3, layout=family().layout())
  assert batch["input_ids"].shape == batch["attention_segments"].shape == batch["positions"].shape == (3, 3, 8)
  assert batch["attention_segments"].sum(-1).tolist() == [[4, 4, 0], [6, 6, 6], [0, 0, 0]]
  assert not batch["input_ids"][0, 2].any() and batch["example_mask"].tolist() == [1, 1, 0]


def test_records_encode_as_rows_of_context_and_choice(tokenizer):
  """[CLS] context [SEP] choice [SEP] per choice, 0-padded to the longest choice's row; -1: no label."""
  examples = [family().encode(tokenizer, r, lambda label: 0) for r in RECORDS]
  assert examples[0]["input_ids"].shape[0] == 2 and examples[1]["input_ids"].shape[0] == 3
  assert examples[0]["label"] == 1 and examples[1]["label"] == -1
  for record, example in zip(RECORDS, examples):
    for choice, ids, mask in zip(record["choices"], example["input_ids"], example["attention_segments"]):
      assert ids[:mask.sum()].tolist() == tokenizer.encode(record["context"], choice, max_length=16).input_ids
      assert not ids[mask.sum():].any()
  assert batching.lengths_of(examples).tolist() == [e["input_ids"].shape[1] for e in examples]


def test_the_reader_reads_records_and_refuses_a_bad_line_naming_its_field(tmp_path):
  path = tmp_path / "items.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + "\n")
  data_format = FORMATS["choices"]
  records = list(data_format.read(path))
  assert records == RECORDS
  kind = data_format.records
  assert [kind.restore(kind.store(r)) for r in records] == RECORDS  # What tfds stores (no None) and gives back.
  bad = {'{"context": "", "choices": ["a", "b"]}': 'field "context"',
         '{"context": "c", "choices": ["a"]}': 'field "choices"',
         '{"context": "c", "choices": ["a", ""]}': 'field "choices"',
         '{"context": "c", "choices": ["a", "b"], "label": 2}': 'field "label"',
         '{"context": "c", "choices": ["a", "b"], "label": "1"}': 'field "label"',
         '["c", "a", "b"]': "a JSON object", '{"context": "c",': "invalid JSON"}
  for line, field in bad.items():
    path.write_text(json.dumps(RECORDS[0]) + "\n" + line + "\n")
    with pytest.raises(ReaderError, match=f"^{re.escape(str(path))}:2: expected .*{field}"):
      list(data_format.read(path))


def test_predict_reads_a_context_and_its_choices_per_line():
  mc = family()
  assert mc.line_record("in.txt", 3, ["ctx", "a", "b", "c"], False) == {"context": "ctx", "choices": ["a", "b", "c"]}
  assert mc.text_record(("ctx", "a", "b")) == {"context": "ctx", "choices": ["a", "b"]}
  for texts in (["ctx", "a"], ["ctx", "", "b"]):
    with pytest.raises(ReaderError, match=r"^in\.txt:3: expected a context and at least two choices"):
      mc.line_record("in.txt", 3, texts, False)
  with pytest.raises(errors.UserError, match=r"^inputs\[0\]: expected a list of at least two non-empty texts"):
    mc.check_input("inputs[0]", {"context": "ctx", "choices": ["a"]}, False)
  decoded = mc.decode(np.array([0.0, 2.0, np.finfo(np.float32).min], np.float32),
                      {"input_ids": np.zeros((2, 4))}, None)
  assert decoded == 1
  assert mc.output(RECORDS[0], {}, np.array([0.0, 0.0], np.float32), 0)["probabilities"] == [0.5, 0.5]
  assert mc.score(RECORDS[:1] * 2, [1, 0]) == {"accuracy": 0.5}


def test_packing_is_refused_for_examples_of_several_rows():
  """config.data.pack reads one row per example: a multiple-choice run with it is one ConfigError at start-up."""
  config = finetune.get_config("task=sst2,runlocal")
  config.data.pack = True
  train = finetune_data.Split("train", [], [{"input_ids": np.ones((2, 5), np.int32), "label": np.int32(0)}] * 4)
  with config.unlocked():
    config.task.name = "multiple_choice"
  with pytest.raises(errors.ConfigError, match=r"^config\.data\.pack=True: task 'multiple_choice' makes "
                                               r"examples of several rows"):
    finetune_data.plan(config, train)


def test_the_export_plan_is_bert_for_multiple_choice_on_bert_and_the_head_beside_elsewhere():
  """`launch.export` reads the family's `hf_head` alone: HF's class and its Auto class on a BERT encoder; on ModernBERT,
  where no class holds the head (HF's is BERT's, launch/hf_modeling has none), the head is saved beside."""
  config = finetune.get_config("task=sst2,runlocal")
  with config.unlocked():
    config.task.name = "multiple_choice"
  head = {"classifier": {"kernel": np.ones((4, 1), np.float32), "bias": np.zeros(1, np.float32)}}
  results = {"labels": [], "buckets": [32]}
  plan = export.finetuned_plan(config, {"multiple_choice": head}, "bert", results)
  assert (plan.architecture, plan.auto_class, plan.code, plan.beside) == ("BertForMultipleChoice",
                                                                          "AutoModelForMultipleChoice", (), {})
  assert plan.task_head.pooler and sorted(plan.task_head.tensors) == ["classifier.bias", "classifier.weight"]
  assert plan.task_head.tensors["classifier.weight"].shape == (1, 4)  # BertForMultipleChoice's [1, hidden].
  elsewhere = export.finetuned_plan(config, {"multiple_choice": head}, "modernbert", results)
  assert elsewhere.task_head is None and elsewhere.beside == {"multiple_choice": head}
  assert "BertForMultipleChoice" in elsewhere.note
