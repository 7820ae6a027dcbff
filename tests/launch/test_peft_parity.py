"""LoRA parity with HuggingFace PEFT on the real MiniLM checkpoint, both directions: our adapter, written in PEFT's
format (encoder.peft_format), loads with peft.PeftModel.from_pretrained on transformers' BertModel with nothing
missing or unexpected and gives our hidden states; an adapter made with peft loads into our encoder through
init=peft:DIR and gives peft's; a LoRA run's export is a plain HF model (the branches merged) with, beside it, its
PEFT adapter carrying the task head, and both predict as launch.predict. Houlsby adapters equal their function
restated on transformers' BERT (AdapterHub's package does not install with transformers 5).

Bound: 1e-4 on the 7 hidden states, the plain MiniLM parity bound of tests/encoder/test_hf_checkpoint.py (ours and
transformers' float32 encoders on the same weights differ by other kernels' summation orders, measured 4.3e-6 there).
The LoRA branch adds one rank-r product per target, O(0.1) against the O(1) dense outputs, so it moves the rounding
by a few float32 ulps of those terms: the same bound holds (measured below, printed); a branch on the wrong slice or
transposed moves the states by O(0.1).
"""

import json
import warnings

import flax.traverse_util
import jax
import numpy as np
import pytest

from configs import finetune
from encoder import init_from, peft_format, pretrained
from encoder.config import LORA_TARGETS
from encoder.model import Encoder
from launch import export, predict, train
from launch.model import run_encoder_config
from objectives import hf_heads
from tests.conftest import missing, require_data, require_package

torch = require_package("torch")
transformers = require_package("transformers")
peft = require_package("peft")
pytestmark = pytest.mark.numerics  # Parity with PyTorch (docs/testing.md).
BOUND = 1e-4


@pytest.fixture(scope="module")
def minilm():
  try:
    path = pretrained.minilm_path()
  except pretrained.PretrainedNotFoundError as err:
    missing("the MiniLM checkpoint", str(err))
  cfg, params, _ = hf_heads.load_hf_checkpoint(path)
  return path, cfg, params


@pytest.fixture(scope="module")
def batch():
  """ids [3, 12] with padding (lengths 12, 7, 3), [CLS] first."""
  rng = np.random.default_rng(0)
  lengths = np.array([12, 7, 3])
  valid = np.arange(12)[None] < lengths[:, None]
  ids = np.where(valid, rng.integers(1000, 30000, size=(3, 12)), 0)
  ids[:, 0] = 101
  return ids, valid


def _ours(cfg, params, ids):
  out = jax.jit(lambda p, x: Encoder(cfg).apply({"params": p}, x).hidden_states)(params, ids)
  return [np.asarray(h) for h in out]


def _theirs(model, ids, valid):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(valid.astype(np.int64)),
                token_type_ids=torch.zeros(ids.shape, dtype=torch.long), output_hidden_states=True)
  return [h.numpy() for h in out.hidden_states]


def _max_diff(ours, theirs, valid):
  return max(float(np.abs(a - b)[valid].max()) for a, b in zip(ours, theirs))


@pytest.mark.slow
def test_our_adapter_loads_in_peft_and_gives_our_outputs(minilm, batch, tmp_path):
  path, base_cfg, base = minilm
  cfg = base_cfg.replace(lora_rank=8, lora_alpha=16.0, lora_targets=LORA_TARGETS, lora_layers=(0, 2, 5))
  shapes = jax.eval_shape(Encoder(cfg).init, jax.random.key(0), np.ones((1, 8), np.int32))["params"]
  rng = np.random.default_rng(1)
  flat = flax.traverse_util.flatten_dict(shapes)
  branches = flax.traverse_util.unflatten_dict({  # A as PEFT's init draws it, B non-zero: the branches matter.
      k: (rng.uniform(-1, 1, v.shape) / np.sqrt(v.shape[0]) if k[-1] == "a" else rng.normal(0, 0.02, v.shape)
          ).astype(np.float32) for k, v in flat.items() if any("lora_" in n for n in k)})
  params = init_from._with(jax.tree.map(np.asarray, base), branches)  # MiniLM's weights with the branches.
  peft_format.write_adapter(tmp_path, cfg, params, base=str(path))
  model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = peft.PeftModel.from_pretrained(model, tmp_path).eval()
  assert not [w for w in caught if "missing" in str(w.message).lower() or "unexpected" in str(w.message).lower()]
  state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
  written = peft.utils.load_peft_weights(str(tmp_path))
  assert sorted(state) == sorted(written) and len(written) == 2 * 6 * 3
  for key, value in written.items():
    np.testing.assert_array_equal(state[key].numpy(), value.numpy())
  ids, valid = batch
  diff = _max_diff(_ours(cfg, params, ids), _theirs(model, ids, valid), valid)
  plain = _max_diff(_ours(base_cfg, base, ids), _theirs(model, ids, valid), valid)
  print(f"MiniLM + LoRA: max |ours - peft| over 7 hidden states {diff:.3g} (without our branches: {plain:.3g})")
  assert diff <= BOUND < plain


@pytest.mark.slow
def test_a_peft_adapter_loads_into_our_encoder_through_init(minilm, batch, tmp_path):
  path, base_cfg, _ = minilm
  torch.manual_seed(0)
  model = transformers.BertModel.from_pretrained(path, attn_implementation="eager")
  config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value", "intermediate.dense"],
                           layers_to_transform=[1, 4])
  model = peft.get_peft_model(model, config)
  with torch.no_grad():
    for name, param in model.named_parameters():
      if "lora_B" in name:
        param.normal_(0.0, 0.05)
  model.save_pretrained(tmp_path)
  model = model.eval()
  cfg, _, params = init_from.load(f"peft:{tmp_path}")
  assert (cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_layers) == (
      4, 8.0, ("query", "value", "intermediate"), (1, 4))
  ids, valid = batch
  diff = _max_diff(_ours(cfg, params["encoder"], ids), _theirs(model, ids, valid), valid)
  plain = _max_diff(_ours(base_cfg, params["encoder"], ids), _theirs(model, ids, valid), valid)
  print(f"peft adapter in ours: max |ours - peft| over 7 hidden states {diff:.3g} (without the branches: {plain:.3g})")
  assert diff <= BOUND < plain


@pytest.mark.slow
def test_a_lora_run_exports_a_plain_model_and_a_peft_adapter_that_predict_as_launch_predict(tmp_path):
  """A LoRA run (MRPC, runlocal, a head on BERT's pooled [CLS]): launch.export merges the branches, so the export is
  HF's own BertForSequenceClassification, and --peft-adapter writes them unmerged with the head (task_type SEQ_CLS,
  modules_to_save classifier); both give launch.predict's probabilities and labels. The base peft loads onto is the
  run's frozen encoder (random at runlocal: written here as a BertModel)."""
  require_data("mrpc/train.tsv")
  config = finetune.get_config("task=mrpc,runlocal")
  config.regime, config.task.pooling = "lora", "pooled"
  workdir, out = tmp_path / "run", tmp_path / "out"
  train.train_and_evaluate(config, workdir)
  assert export.export(workdir, out, peft_adapter=True) == ("BertForSequenceClassification", "")
  adapter = json.loads((out / export.PEFT_ADAPTER / peft_format.CONFIG).read_text())
  assert adapter["task_type"] == "SEQ_CLS" and adapter["modules_to_save"] == ["classifier"]
  predictor = predict.Predictor.from_workdir(workdir)
  assert np.abs(predictor.params["encoder"]["layer_1"]["attention"]["lora_query"]["b"]).max() > 1e-4  # Trained.
  records = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()][:8]
  ours = predictor.predict([(r["text_a"], r["text_b"]) for r in records])
  cfg = run_encoder_config(predict.read_config(workdir), predictor.tokenizer.vocab_size)
  base = {k: v for k, v in flax.traverse_util.flatten_dict(predictor.params["encoder"]).items()
          if not any("lora_" in n for n in k)}
  hf_heads.save_hf_checkpoint(tmp_path / "base", peft_format.base_config(cfg),
                              flax.traverse_util.unflatten_dict(base), tokenizer_files=[])
  tokenizer = transformers.AutoTokenizer.from_pretrained(out)
  inputs = tokenizer([r["text_a"] for r in records], [r["text_b"] for r in records], padding=True, truncation=True,
                     max_length=config.task.max_length, return_tensors="pt")
  merged = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
  labels = [merged.config.id2label[i] for i in range(merged.config.num_labels)]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    unmerged = peft.PeftModel.from_pretrained(transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "base", num_labels=len(labels)), out / export.PEFT_ADAPTER).eval()
  assert not [w for w in caught if "missing" in str(w.message).lower() or "unexpected" in str(w.message).lower()]
  want = np.array([[o["probabilities"][label] for label in labels] for o in ours])
  for model in (merged, unmerged):
    with torch.no_grad():
      got = torch.softmax(model(**inputs).logits, -1).numpy()
    print(f"{type(model).__name__}: max |probabilities - launch.predict's| {np.abs(got - want).max():.2e}")
    np.testing.assert_allclose(got, want, atol=BOUND)  # The bound above: float32 encoders on the same weights.
    assert [labels[i] for i in got.argmax(-1)] == [o["label"] for o in ours]


@pytest.mark.slow
def test_adapters_compute_houlsbys_function_on_hf_bert(tmp_path):
  """AdapterHub's `adapters` (the Houlsby reference, DoubleSeqBnConfig) does not install with transformers 5
  (docs/regimes.md), so its function is restated on transformers' BertModel: BertSelfOutput and BertOutput of the
  adapted layers compute LayerNorm(adapter(dropout(dense(h))) + input) with adapter(x) = x + up(silu(down(x))), as
  AdapterHub's bottleneck with original_ln_after and residual_before_ln does. Ours equals it on a random tiny BERT
  within the plain tiny-BERT parity bound (tests/encoder/test_hf_checkpoint.py: 1e-5, measured 2.4e-7 there)."""
  torch.manual_seed(0)
  config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=48, max_position_embeddings=24, attn_implementation="eager")
  model = transformers.BertModel(config).eval()
  with torch.no_grad():
    for param in model.parameters():
      param.normal_(0.0, 0.2)
  model.save_pretrained(tmp_path)
  base_cfg, base, _ = hf_heads.load_hf_checkpoint(tmp_path)
  cfg = base_cfg.replace(adapter_size=8, adapter_placement="both", adapter_layers=(1,))
  rng = np.random.default_rng(0)
  adapters = {f"adapter_{s}": {"down": {"kernel": rng.normal(0, 0.3, (32, 8)), "bias": rng.normal(0, 0.3, 8)},
                               "up": {"kernel": rng.normal(0, 0.3, (8, 32)), "bias": rng.normal(0, 0.3, 32)}}
              for s in ("attention", "feed_forward")}
  adapters = jax.tree.map(lambda x: x.astype(np.float32), adapters)
  params = init_from._with(jax.tree.map(np.asarray, base), {"layer_1": adapters})

  def houlsby(module, tree):
    def forward(hidden_states, input_tensor):
      h = module.dropout(module.dense(hidden_states))
      t = lambda name: torch.tensor(np.asarray(tree[name]["kernel"]))
      b = lambda name: torch.tensor(np.asarray(tree[name]["bias"]))
      h = h + torch.nn.functional.silu(h @ t("down") + b("down")) @ t("up") + b("up")
      return module.LayerNorm(h + input_tensor)
    module.forward = forward
  houlsby(model.encoder.layer[1].attention.output, adapters["adapter_attention"])
  houlsby(model.encoder.layer[1].output, adapters["adapter_feed_forward"])
  ids = np.random.default_rng(1).integers(1, 64, size=(2, 10))
  valid = np.ones(ids.shape, bool)
  ours, theirs = _ours(cfg, params, ids), _theirs(model, ids, valid)
  diff, plain = _max_diff(ours, theirs, valid), _max_diff(_ours(base_cfg, base, ids), theirs, valid)
  print(f"Houlsby adapters: max |ours - restated on transformers| {diff:.3g} (without ours: {plain:.3g})")
  assert diff <= 1e-5 < plain
