"""launch.export writes every run as a HuggingFace model that computes what the run computes.

Every fine-tuning preset of configs/finetune.py and the demo's POS tagger, at runlocal size (tests/launch/conftest.py's
shared runs): the export loads with its Auto class (HF's own BertFor* class where one computes the head, else the
remote code of launch/hf_modeling with trust_remote_code=True, refused without it) with no missing or unexpected
tensor; HF's pipeline on the same raw inputs gives launch.predict's labels, tags, entities and answers, and its
probabilities and scores to <= 1e-4 (float32 encoders of 2 layers agree to ~1e-6 between XLA and torch, which sum in
other orders; predict rounds probabilities to 6 decimals); the head's raw outputs (word logits, span probabilities)
equal ours to <= 1e-4; `init=hf:<export>` gives back the run's encoder bit for bit; the model card holds a command
that rebuilds the run's config, its scores and its data's licence. A pretraining run (BertForPreTraining, SBO beside),
a run of the ModernBERT switches (MLM + NSP: remote code) and a tagger fine-tuned on it do the same; mistakes are one
line naming the path. (ELECTRA: tests/launch/test_electra_run.py; the remote code's parts: test_hf_modeling.py.)"""

import json
import re
import shlex
import shutil

import jax
import numpy as np
import pytest
import safetensors.numpy
from absl import flags
from ml_collections import config_flags

from configs import checks, finetune, pretrain
from encoder import errors, init_from
from encoder.config import from_fields
from encoder.tokenizer import load_tokenizer
from launch import export, model_card, predict, train, workload
from launch.model import EncoderWithHeads, encoder_config
from objectives import hf_heads, registry as objectives
from tasks import batching, finetune_data, word_shape
from tests.conftest import require_data
from tests.launch.conftest import run_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from launch.hf_modeling import modeling_encoderlab, pipeline_encoderlab  # noqa: E402  (they import torch: after its importorskip)

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).

# Ours and HF's float32 models on the same weights, other kernels and sums: a measured bound (at most 7.2e-7 on Zen 3,
# 1/140 of it; the encoder's parity is in the numerics lane, docs/testing.md); a misplaced weight moves logits by O(1).
TOLERANCE = 1e-4
PRESETS = sorted(finetune.TASK_PRESETS) + ["ud_sample"]  # Every preset, and the demo's POS tagger.
INPUTS = 8  # Dev records run through predict and HF per preset.
TEXTS = [("A man is playing a guitar .", "Someone plays music ."), ("The cat sleeps .", "A dog runs in the park .")]


def expected_class(task: dict) -> str:
  """The class an export of a run with this task mapping names: HF's own where it computes the head exactly."""
  name = task["name"]
  if name in ("classification", "regression"):
    native = task.get("pooling") == "pooled" and not task.get("score_weight")
    return "BertForSequenceClassification" if native else "EncoderlabBertForSequenceClassification"
  if name == "tagging":
    plain = not (task.get("crf") or task.get("case_features") or task.get("last_subword"))
    return "BertForTokenClassification" if plain else "EncoderlabBertForTokenClassification"
  return {"span_ner": "EncoderlabBertForTokenClassification", "question_answering": "BertForQuestionAnswering"}[name]


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory):
  """A few steps of configs/pretrain.py:runlocal with MLM, NSP and SBO heads."""
  workdir = tmp_path_factory.mktemp("pretrain")
  train.train_and_evaluate(pretrain.get_config("runlocal,objectives=mlm+nsp+sbo,steps=4"), workdir)
  return workdir


@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory):
  """Two steps of configs/pretrain.py:runlocal,arch=modernbert with MLM and NSP (a bias-free encoder)."""
  workdir = tmp_path_factory.mktemp("modernbert")
  train.train_and_evaluate(pretrain.get_config("runlocal,arch=modernbert,objectives=mlm+nsp,steps=2"), workdir)
  return workdir


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


def _export(workdir, out, capsys) -> tuple[str, str]:
  """Run the command; (its stdout, its stderr)."""
  capsys.readouterr()  # What the run's training (a fixture started in the test) wrote.
  export.main(["--workdir", str(workdir), "--out", str(out)])
  captured = capsys.readouterr()
  return captured.out, captured.err


def _load(out, auto_class: str, architecture: str):
  """The export through `auto_class` (trust_remote_code for remote classes, which refuse to load without it), after
  checking HF's load report: nothing missing, nothing unexpected."""
  auto = getattr(transformers, auto_class)
  remote = architecture.startswith("Encoderlab")
  if remote:
    with pytest.raises(ValueError, match="trust_remote_code=True"):
      auto.from_pretrained(out, trust_remote_code=False)
  model, report = auto.from_pretrained(out, trust_remote_code=remote, output_loading_info=True)
  assert type(model).__name__ == architecture
  assert not report["missing_keys"] and not report["unexpected_keys"] and not report["mismatched_keys"], report
  return model.eval()


def _dev_records(workdir, count: int = INPUTS) -> list[dict]:
  return [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()][:count]


def _our_predictions(workdir, predictor: predict.Predictor, records: list[dict]) -> tuple[dict, list[dict]]:
  """(the run's head outputs on `records` as one batch, their examples): what the run's model computes."""
  family = predictor.family
  split = finetune_data.split_of("input", family, predictor.tokenizer, [family.unlabelled(r) for r in records])
  batch = batching.collate(split.examples, predictor.buckets, widths=family.widths(), layout=family.layout())
  cfg = encoder_config(predict.read_config(workdir).model, predictor.tokenizer.vocab_size)
  model = EncoderWithHeads(cfg, (family.objective(),))
  return model.apply({"params": predictor.params}, batch)[family.objective().name], split.examples


def _compare_sentences(predictor, out, records, remote: bool) -> None:
  """The text-classification pipeline (truncation at the run's max_length) gives predict's labels and probabilities
  (classification) or scores (regression)."""
  pairs = predictor.pairs
  inputs = [{"text": r["text_a"], "text_pair": r["text_b"]} if pairs else r["text_a"] for r in records]
  ours = predictor.predict([(r["text_a"], r["text_b"]) if pairs else r["text_a"] for r in records])
  run = transformers.pipeline("text-classification", model=str(out), trust_remote_code=remote)
  if predictor.task["name"] == "regression":
    theirs = run(inputs, function_to_apply="none", truncation=True)
    difference = max(abs(o["score"] - t["score"]) for o, t in zip(ours, theirs))
    print(f"max |difference| of the scores: {difference:.2e}")
    assert difference <= TOLERANCE
    return
  theirs = [{d["label"]: d["score"] for d in t} for t in run(inputs, top_k=None, truncation=True)]
  difference = max(abs(o["probabilities"][label] - t[label]) for o, t in zip(ours, theirs) for label in t)
  print(f"max |difference| of the probabilities: {difference:.2e}")
  assert difference <= TOLERANCE
  for o, t in zip(ours, theirs):
    top, second = sorted(o["probabilities"].values())[::-1][:2]
    assert max(t, key=t.get) == o["label"] or top - second < 1e-5  # A tie at float32 precision may go either way.


def _word_spans(workdir, text: str) -> list[tuple[int, int]]:
  """Character spans of the words predict splits `text` into."""
  return [m.span() for m in re.finditer(predict.word_pattern(predict.read_config(workdir).task), text, re.IGNORECASE)]


def _hf_outputs(model, tokenizer, words: list[str], max_length: int):
  """The HF model's outputs on one sentence of words, with its word-level inputs (pipeline_encoderlab.encode_words)."""
  inputs = pipeline_encoderlab.encode_words(tokenizer, words, max_length, list(word_shape.SHAPES))
  with torch.no_grad():
    if type(model).__name__.startswith("Encoderlab"):
      return model(**inputs), inputs
    return model(**{k: v for k, v in inputs.items() if k not in ("word_ids", "case_ids")}), inputs


def _compare_words(workdir, predictor, out, model, records, remote: bool) -> None:
  """Taggers: the token-classification pipeline tags each of predict's words as predict does (words past max_length
  untagged by both), and HF's logits at each word's first token equal ours. Span NER: the pipeline's entities are
  predict's (labels, character spans, probabilities), and every candidate span's probabilities equal ours."""
  texts = [" ".join(r["words"]) for r in records]
  ours = predictor.predict(texts)
  if predictor.task["name"] == "span_ner":  # Entities to compare (genia_nested's shared run trains 40 steps for it).
    assert sum(len(o["entities"]) for o in ours) >= 2, ours
  run = transformers.pipeline("token-classification", model=str(out), trust_remote_code=remote)
  theirs = run(texts, ignore_labels=[])
  for text, o, t in zip(texts, ours, theirs):
    spans = _word_spans(workdir, text)
    assert len(spans) == len(o["words"])
    if predictor.task["name"] == "span_ner":
      entities = [(e["label"], spans[e["start"]][0], spans[e["end"] - 1][1]) for e in o["entities"]]
      assert entities == [(e["entity_group"], e["start"], e["end"]) for e in t]
      assert all(abs(a["score"] - b["score"]) <= TOLERANCE for a, b in zip(o["entities"], t))
    else:
      tagged = {start: e["entity"] for e in t for start in [e["start"]]}  # Native: a token entry per subword.
      assert [tagged.get(start) for start, _ in spans] == o["tags"]
  if remote and predictor.task["name"] == "tagging":  # Words given as a list: the same tags.
    words = records[0]["words"]
    assert [e["entity"] for e in run(words, is_split_into_words=True, ignore_labels=[])] == [
        tag for tag in predictor.predict([words])[0]["tags"] if tag is not None]
  predictions, examples = _our_predictions(workdir, predictor, [{"words": r["words"]} for r in records])
  tokenizer = transformers.AutoTokenizer.from_pretrained(out, trust_remote_code=remote)
  differences = []
  for row, (record, example) in enumerate(zip(records, examples)):
    output, inputs = _hf_outputs(model, tokenizer, record["words"], predictor.task["max_length"])
    if predictor.task["name"] == "span_ner":
      count = len(example["span_words"])
      np.testing.assert_array_equal(output.span_words[0, :count].numpy(), example["span_words"])
      ours_p = np.asarray(jax.nn.softmax(predictions[row, :count], -1))
      differences.append(np.abs(ours_p - torch.softmax(output.logits[0, :count], -1).numpy()).max())
    else:
      positions, _ = modeling_encoderlab.first_positions(inputs["word_ids"])
      theirs_w = modeling_encoderlab.gather(output.logits, positions)[0].numpy()
      count = len(example["word_positions"])
      differences.append(np.abs(np.asarray(predictions["word_logits"][row, :count]) - theirs_w).max())
  print(f"max |difference| of the head's outputs: {max(differences):.2e}")
  assert max(differences) <= TOLERANCE


def _compare_answers(predictor, out, records) -> None:
  """The question-answering pipeline (pipeline_encoderlab's: transformers 5 has none) gives predict's answers, their
  character spans and scores (start + end logit) on the run's dev questions, contexts of several windows included."""
  pairs = [(r["question"], r["context"]) for r in records]
  family = predictor.family
  assert any(len(family.encode(predictor.tokenizer, family.unlabelled(predictor.record(pair)), None)) > 1
             for pair in pairs)  # Some contexts span several windows.
  ours = predictor.predict(pairs)
  run = transformers.pipeline("question-answering", model=str(out), trust_remote_code=True)
  theirs = run([{"question": question, "context": context} for question, context in pairs])
  assert [(t["answer"], t["start"], t["end"]) for t in theirs] == [(o["answer"], o["start"], o["end"]) for o in ours]
  difference = max(abs(t["score"] - o["score"]) for t, o in zip(theirs, ours))
  print(f"max |difference| of the answers' scores: {difference:.2e}")
  assert difference <= TOLERANCE


def _assert_round_trip(workdir, out, architecture: str) -> None:
  """`init=hf:<out>` (encoder.init_from, what fine-tuning from it reads) gives the run's model config and encoder bit
  for bit; a pooler the class does not hold (its head never reads it) comes back as zeros."""
  config = predict.run_config(workdir, "a run")
  _, params = predict.restore_params(workdir, config)
  fields, _ = init_from.model_fields(f"hf:{out}")
  vocab_size = load_tokenizer(config.data.tokenizer).vocab_size
  assert from_fields(fields, vocab_size) == from_fields(config.model.to_dict(), vocab_size)
  loaded = export.flat(init_from.parameters(f"hf:{out}", hf_heads.read_heads)["encoder"])
  held = safetensors.numpy.load_file(out / "model.safetensors")
  has_pooler = any(name.endswith("pooler.dense.weight") for name in held)
  assert loaded.keys() == export.flat(params["encoder"]).keys()
  for path, ours in export.flat(jax.tree.map(np.asarray, params["encoder"])).items():
    theirs = loaded[path]
    if path.startswith("pooler/") and not has_pooler:
      assert not theirs.any(), (architecture, path)
    else:
      np.testing.assert_array_equal(theirs, ours, err_msg=path)


def _rebuilt_config(command: str) -> dict:
  """The config absl's config flags (as launch.main defines them) build from a card's `python -m launch.main` line."""
  argv = ["launch.main", *(arg for arg in shlex.split(command) if arg.startswith("--config"))]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True, sys_argv=argv)
  values(argv)
  return json.loads(json.dumps(checks.to_dict(values.config)))


def _assert_card(workdir, out, auto_class: str, architecture: str, data: bool = True) -> str:
  """README.md: the from_pretrained call, the class, the training command (rebuilding the run's config), the dev
  scores and the data's licence."""
  card = (out / export.CARD).read_text()
  trust = ", trust_remote_code=True" if architecture.startswith("Encoderlab") else ""
  assert f'{auto_class}.from_pretrained("DIR"{trust})' in card and f"`{architecture}`" in card
  command = re.search(r"^python -m launch\.main .*$", card, re.MULTILINE).group(0)
  assert _rebuilt_config(command) == json.loads((workdir / "config.json").read_text()), command
  results = predict.read_results(workdir)
  assert all(f"| dev | {metric} | {value:.4g} |" in card for metric, value in results.get("dev", {}).items())
  licence = re.search(r"licence: (.*)$", card, re.MULTILINE).group(1)
  assert ("not recorded" not in licence) == data, licence
  return card


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_is_an_hf_model_that_predicts_as_launch_predict(trained, tmp_path, capsys, name):
  workdir = trained(name)
  out = tmp_path / "hf"
  stdout, stderr = _export(workdir, out, capsys)
  predictor = predict.Predictor.from_workdir(workdir)
  architecture = expected_class(predictor.task)
  assert stdout == f"wrote {out}: {architecture}\n" and stderr == ""
  hf_config = json.loads((out / "config.json").read_text())
  assert hf_config["architectures"] == [architecture]
  remote = architecture.startswith("Encoderlab")
  assert (out / "modeling_encoderlab.py").is_file() == remote
  qa = predictor.task["name"] == "question_answering"
  assert (out / "pipeline_encoderlab.py").is_file() == ((remote and predictor.word_task) or qa)
  auto_class = export.auto_class(architecture.split("For")[-1])
  model = _load(out, auto_class, architecture)
  tokenizer = transformers.AutoTokenizer.from_pretrained(out, trust_remote_code=remote)
  assert tokenizer.model_max_length == predictor.task["max_length"]
  records = _dev_records(workdir, 32 if qa else INPUTS)
  if predictor.task["name"] in ("classification", "regression"):
    _compare_sentences(predictor, out, records, remote)
  elif predictor.task["name"] == "question_answering":
    _compare_answers(predictor, out, records)
  else:
    _compare_words(workdir, predictor, out, model, records, remote)
  _assert_round_trip(workdir, out, architecture)
  _assert_card(workdir, out, auto_class, architecture)


@pytest.mark.parametrize("name", ["sick", "sick_relatedness"])
def test_pooled_sentence_heads_are_bert_for_sequence_classification(pooled_runs, tmp_path, capsys, name):
  """Pair classification (id2label) and regression (num_labels 1, problem_type regression) on the pooled [CLS]: HF's
  own class, no remote code, the pipeline giving predict's labels and probabilities (or scores)."""
  workdir = pooled_runs(name)
  stdout, stderr = _export(workdir, tmp_path / "hf", capsys)
  assert stdout.endswith(": BertForSequenceClassification\n") and stderr == ""
  assert not (tmp_path / "hf" / "modeling_encoderlab.py").exists()
  _load(tmp_path / "hf", "AutoModelForSequenceClassification", "BertForSequenceClassification")
  predictor = predict.Predictor.from_workdir(workdir)
  _compare_sentences(predictor, tmp_path / "hf", _dev_records(workdir), remote=False)
  hf_config = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
  if name == "sick_relatedness":
    assert hf_config.num_labels == 1 and hf_config.problem_type == "regression"
  else:
    assert list(hf_config.id2label.values()) == list(predictor.task["labels"])
  _assert_round_trip(workdir, tmp_path / "hf", "BertForSequenceClassification")


def _pretraining_outputs(workdir, names: tuple[str, ...]) -> tuple[dict, dict]:
  """(our MLM/NSP predictions of the run's evaluation parameters on TEXTS at every position, the batch)."""
  config = predict.run_config(workdir, "a run")
  tokenizer = load_tokenizer(config.data.tokenizer)
  _, params = predict.restore_params(workdir, config)
  encodings = [tokenizer.encode(*pair) for pair in TEXTS]
  length = max(len(e.input_ids) for e in encodings)
  pad = lambda rows: np.asarray([list(r) + [0] * (length - len(r)) for r in rows], np.int32)
  batch = {"input_ids": pad([e.input_ids for e in encodings]), "type_ids": pad([e.type_ids for e in encodings]),
           "attention_segments": pad([[1] * len(e.input_ids) for e in encodings])}
  batch["masked_positions"] = np.broadcast_to(np.arange(length, dtype=np.int32), batch["input_ids"].shape)
  heads = [objectives.build(n, workload.objective_options(config, n)) for n in names]
  model = EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), heads)
  return model.apply({"params": params}, batch), batch


def _assert_pretraining_outputs(workdir, model, names) -> None:
  """HF's MLM logits at every real position and NSP logits equal ours."""
  ours, batch = _pretraining_outputs(workdir, names)
  with torch.no_grad():
    theirs = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                   token_type_ids=torch.tensor(batch["type_ids"], dtype=torch.long),
                   attention_mask=torch.tensor(batch["attention_segments"], dtype=torch.long))
  real = batch["attention_segments"].astype(bool)
  mlm = np.abs(np.asarray(ours["mlm"]) - theirs.prediction_logits.numpy())[real].max()
  nsp = np.abs(np.asarray(ours["nsp"]) - theirs.seq_relationship_logits.numpy()).max()
  print(f"max |difference|: MLM logits {mlm:.2e}, NSP logits {nsp:.2e}")
  assert mlm <= TOLERANCE and nsp <= TOLERANCE


def _assert_fill_mask(out, remote: bool) -> None:
  """The fill-mask pipeline's best token is the argmax of the export's own MLM logits at [MASK]."""
  tokenizer = transformers.AutoTokenizer.from_pretrained(out, trust_remote_code=remote)
  text = f"the capital of france is {tokenizer.mask_token} ."
  best = transformers.pipeline("fill-mask", model=str(out), trust_remote_code=remote)(text, top_k=1)[0]["token"]
  model = transformers.AutoModelForPreTraining.from_pretrained(out, trust_remote_code=remote).eval()
  inputs = tokenizer(text, return_tensors="pt")
  with torch.no_grad():
    logits = model(**inputs).prediction_logits[0]
  assert best == int(logits[inputs["input_ids"][0].tolist().index(tokenizer.mask_token_id)].argmax())


def test_pretraining_run_is_bert_for_pretraining(pretraining_run, tmp_path, capsys):
  """MLM and NSP logits equal ours, fill-mask works; SBO is saved beside, said on one stderr line and in the card."""
  out = tmp_path / "hf"
  stdout, stderr = _export(pretraining_run, out, capsys)
  assert stdout == f"wrote {out}: BertForPreTraining\n"
  assert len(stderr.splitlines()) == 1 and "['sbo']" in stderr and export.BESIDE_WEIGHTS in stderr
  model = _load(out, "AutoModelForPreTraining", "BertForPreTraining")
  _assert_pretraining_outputs(pretraining_run, model, ("mlm", "nsp"))
  _assert_fill_mask(out, remote=False)
  beside = safetensors.numpy.load_file(out / export.BESIDE_WEIGHTS)
  _, params = predict.restore_params(pretraining_run, predict.run_config(pretraining_run, "a run"))
  assert beside.keys() == export.flat({"sbo": params["sbo"]}).keys()
  np.testing.assert_array_equal(beside["sbo/layer_0/kernel"], params["sbo"]["layer_0"]["kernel"])
  _assert_round_trip(pretraining_run, out, "BertForPreTraining")
  assert "head.safetensors` holds sbo/" in _assert_card(pretraining_run, out, "AutoModelForPreTraining",
                                                       "BertForPreTraining")


def test_modernbert_run_is_remote_code_on_hf_modernbert(modernbert_run, tmp_path, capsys):
  """The ModernBERT switches with MLM and NSP: HF's ModernBertModel under EncoderlabModernBertForPreTraining (BERT's
  pooler and NSP, the MLM head's biases a bias-free ModernBERT drops) gives our MLM and NSP logits; fill-mask works;
  `init=hf:` gives back the encoder, its pooler and both heads bit for bit."""
  out = tmp_path / "hf"
  stdout, stderr = _export(modernbert_run, out, capsys)
  assert stdout == f"wrote {out}: EncoderlabModernBertForPreTraining\n" and stderr == ""
  model = _load(out, "AutoModelForPreTraining", "EncoderlabModernBertForPreTraining")
  assert isinstance(model.model, transformers.ModernBertModel)
  _assert_pretraining_outputs(modernbert_run, model, ("mlm", "nsp"))
  _assert_fill_mask(out, remote=True)
  _assert_round_trip(modernbert_run, out, "EncoderlabModernBertForPreTraining")
  _, params = predict.restore_params(modernbert_run, predict.run_config(modernbert_run, "a run"))
  heads = {k: v for k, v in init_from.parameters(f"hf:{out}", hf_heads.read_heads).items() if k != "encoder"}
  assert sorted(heads) == ["mlm", "nsp"]
  for name, leaf in export.flat(heads).items():
    np.testing.assert_array_equal(leaf, export.flat(jax.tree.map(np.asarray, params))[name], err_msg=name)
  _assert_card(modernbert_run, out, "AutoModelForPreTraining", "EncoderlabModernBertForPreTraining")


def test_tagger_on_modernbert_is_remote_code_that_tags_as_predict(modernbert_run, tmp_path, capsys):
  """conll2003_crf fine-tuned from the ModernBERT run: EncoderlabModernBertForTokenClassification, whose pipeline
  tags as predict does."""
  require_data("conll2003/bio/train.txt")
  workdir = tmp_path / "run"
  train.train_and_evaluate(finetune.get_config(f"task=conll2003_crf,runlocal,init=run:{modernbert_run}"), workdir)
  out = tmp_path / "hf"
  stdout, _ = _export(workdir, out, capsys)
  assert stdout == f"wrote {out}: EncoderlabModernBertForTokenClassification\n"
  model = _load(out, "AutoModelForTokenClassification", "EncoderlabModernBertForTokenClassification")
  _compare_words(workdir, predict.Predictor.from_workdir(workdir), out, model, _dev_records(workdir), remote=True)
  _assert_round_trip(workdir, out, "EncoderlabModernBertForTokenClassification")


def _user_error(argv: list[str]) -> str:
  with pytest.raises(SystemExit) as exit_info:
    errors.run(export.main, argv)
  message = str(exit_info.value.code)
  assert message.startswith("error: ") and "\n" not in message
  return message


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


def test_training_command_of_a_custom_run_rebuilds_its_config():
  """A config away from every preset (another learning rate, files instead of a dataset) still comes back whole."""
  config = finetune.get_config("task=conll2003,runlocal")
  with config.unlocked():
    config.optimizer.learning_rate = 3e-4
    config.data.buckets = (16, 24, 32)
  command = model_card.training_command(config)
  assert command.startswith("python -m launch.main --config=configs/finetune.py:task=conll2003,runlocal ")
  assert _rebuilt_config(command) == json.loads(json.dumps(checks.to_dict(config)))
