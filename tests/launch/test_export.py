"""launch.export writes runs that HuggingFace transformers loads: a pretraining run as BertForPreTraining, a fine-tuned
classifier or regressor as BertForSequenceClassification, a tagger as BertForTokenClassification, each giving our
logits on the same inputs (<= 1e-4) and, for a tagger, the tags launch.predict gives; heads HF has no class for (SBO,
a classifier on the raw [CLS], a CRF, word shapes and word endings, span NER) are saved beside with a note; mistakes
are one line naming the path."""

import json
import shutil

import numpy as np
import pytest
import safetensors.numpy

from configs import pretrain
from encoder import errors
from encoder.model import Encoder
from encoder.tokenizer import load_tokenizer
from launch import export, predict, train
from launch.model import EncoderWithHeads, encoder_config
from objectives import registry as objectives
from tests.conftest import require_data
from tests.launch.conftest import run_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Ours and HF's float32 models on the same weights, other kernels and sums: a measured bound (at most 7.2e-7 on Zen 3,
# 1/140 of it; the encoder's parity is in the numerics lane, docs/testing.md); a misplaced weight moves logits by O(1).
TOLERANCE = 1e-4
TEXTS = [("A man is playing a guitar .", "Someone plays music ."), ("The cat sleeps .", "A dog runs in the park .")]
WORDS = [["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."], ["Peter", "Blackburn"]]


@pytest.fixture(scope="module")
def pooled_runs(tmp_path_factory):
  """name -> a runlocal run of that preset whose head reads BERT's pooled [CLS] (what BertForSequenceClassification
  classifies), trained on first use."""
  workdirs = {}

  def get(name: str):
    if name not in workdirs:
      require_data("sick/SICK_train.txt")
      config = run_config(name)
      config.task.pooling = "pooled"
      workdirs[name] = tmp_path_factory.mktemp(f"{name}_pooled")
      train.train_and_evaluate(config, workdirs[name])
    return workdirs[name]
  return get


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory):
  """A few steps of configs/pretrain.py:runlocal with MLM, NSP and SBO heads."""
  require_data("wikitext-2/raw/wiki.valid.raw")
  workdir = tmp_path_factory.mktemp("pretrain")
  train.train_and_evaluate(pretrain.get_config("runlocal,objectives=mlm+nsp+sbo,steps=4"), workdir)
  return workdir


def _batch(tokenizer, texts) -> dict[str, np.ndarray]:
  """Texts (pairs, or word lists) padded to one length: our batch (attention_segments 0 at padding)."""
  encodings = [tokenizer.encode(*t) if isinstance(t, tuple) else tokenizer.encode(t) for t in texts]
  length = max(len(e) for e in encodings)
  pad = lambda values: np.asarray([list(v) + [0] * (length - len(v)) for v in values], np.int32)
  ids, types = pad([e.input_ids for e in encodings]), pad([e.type_ids for e in encodings])
  mask = pad([[1] * len(e) for e in encodings])
  positions = np.broadcast_to(np.arange(length, dtype=np.int32), ids.shape)
  return {"input_ids": ids, "type_ids": types, "attention_segments": mask, "masked_positions": positions,
          "word_positions": positions}


def _ours(workdir, objectives_, texts) -> tuple[dict, dict]:
  """(our predictions of the run's evaluation parameters, the batch) on `texts`."""
  config = predict.run_config(workdir, "a run")
  tokenizer = load_tokenizer(config.data.tokenizer)
  _, params = predict.restore_params(workdir, config)
  model = EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), objectives_)
  batch = _batch(tokenizer, texts)
  return model.apply({"params": params}, batch), batch


def _theirs(model_class, directory, batch):
  """The HF model loaded from `directory`, applied to our batch (eval mode)."""
  model = model_class.from_pretrained(directory).eval()
  with torch.no_grad():
    return model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                 token_type_ids=torch.tensor(batch["type_ids"], dtype=torch.long),
                 attention_mask=torch.tensor(batch["attention_segments"], dtype=torch.long))


def _difference(ours, theirs, mask=None) -> float:
  """Max |ours - theirs| (over the real positions of `mask` [batch, length], when given)."""
  difference = np.abs(np.asarray(ours) - theirs.numpy())
  return float((difference[mask.astype(bool)] if mask is not None else difference).max())


def _export(workdir, out, capsys) -> tuple[str, str]:
  """Run the command; (its stdout, its stderr)."""
  capsys.readouterr()  # What the run's training (a fixture started in the test) wrote.
  export.main(["--workdir", str(workdir), "--out", str(out)])
  captured = capsys.readouterr()
  return captured.out, captured.err


def _user_error(argv: list[str]) -> str:
  with pytest.raises(SystemExit) as exit_info:
    errors.run(export.main, argv)
  message = str(exit_info.value.code)
  assert message.startswith("error: ") and "\n" not in message
  return message


def test_pretraining_run_loads_as_bert_for_pretraining(pretraining_run, tmp_path, capsys):
  """MLM logits at every real position and NSP logits equal ours; SBO is saved beside, said on one stderr line."""
  out, err = _export(pretraining_run, tmp_path / "hf", capsys)
  assert out == f"wrote {tmp_path / 'hf'}: BertForPreTraining\n"
  assert len(err.splitlines()) == 1 and "['sbo']" in err and export.BESIDE_WEIGHTS in err
  predictions, batch = _ours(pretraining_run, [objectives.build(n) for n in ("mlm", "nsp")], TEXTS)
  theirs = _theirs(transformers.BertForPreTraining, tmp_path / "hf", batch)
  mlm = _difference(predictions["mlm"], theirs.prediction_logits, batch["attention_segments"])
  nsp = _difference(predictions["nsp"], theirs.seq_relationship_logits)
  print(f"max |difference|: MLM logits {mlm:.2e}, NSP logits {nsp:.2e}")
  assert mlm <= TOLERANCE and nsp <= TOLERANCE
  beside = safetensors.numpy.load_file(tmp_path / "hf" / export.BESIDE_WEIGHTS)
  _, params = predict.restore_params(pretraining_run, predict.run_config(pretraining_run, "a run"))
  assert beside.keys() == export.flat({"sbo": params["sbo"]}).keys()
  np.testing.assert_array_equal(beside["sbo/layer_0/kernel"], params["sbo"]["layer_0"]["kernel"])


def test_modernbert_run_loads_as_modernbert_model(tmp_path, capsys):
  """A run of the ModernBERT switches: HF's ModernBertModel gives our last hidden states; MLM head and pooler beside."""
  require_data("wikitext-2/raw/wiki.valid.raw")
  workdir = tmp_path / "run"
  train.train_and_evaluate(pretrain.get_config("runlocal,arch=modernbert,objectives=mlm+nsp,steps=2"), workdir)
  out, err = _export(workdir, tmp_path / "hf", capsys)
  assert out == f"wrote {tmp_path / 'hf'}: ModernBertModel\n"
  assert len(err.splitlines()) == 1 and "no pooler" in err
  config = predict.run_config(workdir, "a run")
  tokenizer = load_tokenizer(config.data.tokenizer)
  _, params = predict.restore_params(workdir, config)
  batch = _batch(tokenizer, TEXTS)
  cfg = encoder_config(config.model, tokenizer.vocab_size)
  ours = Encoder(cfg).apply({"params": params["encoder"]}, batch["input_ids"], batch["type_ids"],
                            attention_segments=batch["attention_segments"]).last
  model = transformers.ModernBertModel.from_pretrained(tmp_path / "hf").eval()
  with torch.no_grad():
    theirs = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                   attention_mask=torch.tensor(batch["attention_segments"], dtype=torch.long)).last_hidden_state
  assert _difference(ours, theirs, batch["attention_segments"]) <= TOLERANCE
  beside = safetensors.numpy.load_file(tmp_path / "hf" / export.BESIDE_WEIGHTS)
  assert {name.split("/")[0] for name in beside} == {"mlm", "nsp", "pooler"}


@pytest.mark.parametrize("name, output", [("sick", "logits"), ("sick_relatedness", "score")])
def test_pooled_sentence_heads_load_as_bert_for_sequence_classification(pooled_runs, tmp_path, capsys, name, output):
  """Pair classification (id2label) and regression (num_labels 1, problem_type regression) on the pooled [CLS]."""
  workdir = pooled_runs(name)
  out, err = _export(workdir, tmp_path / "hf", capsys)
  assert out.endswith(": BertForSequenceClassification\n") and err == ""
  family = predict.Predictor.from_workdir(workdir).family
  predictions, batch = _ours(workdir, [family.objective()], TEXTS)
  theirs = _theirs(transformers.BertForSequenceClassification, tmp_path / "hf", batch)
  ours = predictions[family.objective().name][output]
  difference = _difference(ours if output == "logits" else ours[:, None], theirs.logits)
  print(f"max |difference| of {name}'s {output}: {difference:.2e}")
  assert difference <= TOLERANCE and (theirs.logits[0] != theirs.logits[1]).any()  # Not one constant output.
  hf_config = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
  if output == "score":
    assert hf_config.num_labels == 1 and hf_config.problem_type == "regression"
  else:
    assert list(hf_config.id2label.values()) == list(family.task["labels"])


def test_tagger_loads_as_bert_for_token_classification_and_tags_as_predict(trained, tmp_path, capsys):
  """CoNLL-2003 BIO tagging: per-subword logits equal ours, and HF's argmax at each word's first subword (words from
  HF's own tokenizer, read from the export) gives launch.predict's tags on the run's dev sentences."""
  workdir = trained("conll2003")
  out, err = _export(workdir, tmp_path / "hf", capsys)
  assert out.endswith(": BertForTokenClassification\n") and err == ""
  predictor = predict.Predictor.from_workdir(workdir)
  predictions, batch = _ours(workdir, [predictor.family.objective()], WORDS)
  theirs = _theirs(transformers.BertForTokenClassification, tmp_path / "hf", batch)
  difference = _difference(predictions[predictor.family.objective().name]["logits"], theirs.logits,
                           batch["attention_segments"])
  print(f"max |difference| of the tagger's logits: {difference:.2e}")
  assert difference <= TOLERANCE
  sentences = [r["words"] for r in map(json.loads, (workdir / "predictions" / "dev.jsonl").read_text().splitlines())]
  tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
  model = transformers.BertForTokenClassification.from_pretrained(tmp_path / "hf").eval()
  for words, ours in zip(sentences, predictor.predict(sentences)):
    encoding = tokenizer(words, is_split_into_words=True, truncation=True, max_length=predictor.task["max_length"],
                         return_tensors="pt")
    with torch.no_grad():
      best = model(**encoding).logits[0].argmax(-1).tolist()
    word_ids = encoding.word_ids()
    firsts = [i for i, w in enumerate(word_ids) if w is not None and w != (word_ids[i - 1] if i else None)]
    hf_tags = [model.config.id2label[best[i]] for i in firsts]
    assert hf_tags == [t for t in ours["tags"] if t is not None]


@pytest.mark.parametrize("name, why", [("sst2", "task.pooling='cls'"), ("conll2003_crf", "CRF"),
                                       ("conll2003_spans", "span NER"), ("ud_sample", "task.last_subword")])
def test_heads_hf_has_no_class_for_are_saved_beside(trained, tmp_path, capsys, name, why):
  """The encoder loads as BertModel (the run's evaluation parameters: sst2's moving average) and the whole head is in
  head.safetensors, described in head.json; one stderr line says so. The demo's POS tagger (ud_sample) is one: it
  reads word shapes and word endings, which BertForTokenClassification cannot."""
  workdir = trained(name)
  out, err = _export(workdir, tmp_path / "hf", capsys)
  assert out.endswith(": BertModel\n") and len(err.splitlines()) == 1 and why in err
  config = predict.read_config(workdir)
  _, params = predict.restore_params(workdir, config)
  head = predict.Predictor.from_workdir(workdir).family.objective().name
  beside = safetensors.numpy.load_file(tmp_path / "hf" / export.BESIDE_WEIGHTS)
  expected = export.flat({head: params[head]})
  assert beside.keys() == expected.keys() and all(np.array_equal(beside[k], expected[k]) for k in beside)
  note = json.loads((tmp_path / "hf" / export.BESIDE_NOTE).read_text())
  assert why in note["note"] and note["task"]["name"] == config.task.name
  tokenizer = load_tokenizer(config.data.tokenizer)
  batch = _batch(tokenizer, TEXTS)
  encoder = Encoder(encoder_config(config.model, tokenizer.vocab_size))
  ours = encoder.apply({"params": params["encoder"]}, batch["input_ids"], batch["type_ids"], None,
                       batch["attention_segments"])
  theirs = _theirs(transformers.BertModel, tmp_path / "hf", batch)
  assert _difference(ours.last, theirs.last_hidden_state, batch["attention_segments"]) <= TOLERANCE

def test_user_errors_are_one_line_naming_the_path(trained, tmp_path):
  workdir = trained("sick")
  assert _user_error(["--workdir", str(tmp_path), "--out", str(tmp_path / "x")]).startswith(
      f"error: {tmp_path / 'config.json'} does not exist: {tmp_path} is not a run directory (give the --workdir of "
      "a pretraining or fine-tuning run: python -m launch.main --config configs/pretrain.py:...")
  file = tmp_path / "file"
  file.write_text("x")
  assert _user_error(["--workdir", str(workdir), "--out", str(file)]) == (
      f"error: --out {file}: expected a directory to create, found a file")
  assert _user_error(["--workdir", str(workdir), "--out", str(tmp_path)]).startswith(
      f"error: --out {tmp_path}: the directory is not empty")
  empty = tmp_path / "no_checkpoint"
  empty.mkdir()
  shutil.copy(workdir / "config.json", empty / "config.json")
  assert _user_error(["--workdir", str(empty), "--out", str(tmp_path / "out")]).startswith(
      f"error: {(empty / 'checkpoints').absolute()} holds no checkpoint")
  assert not (tmp_path / "out").exists()
