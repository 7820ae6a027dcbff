"""Extractive QA end to end at runlocal size on real SQuAD questions: train + evaluate (the official {id: answer}
files, scored as the official script scores them), `launch.predict` (JSON lines and TSV question/context pairs ->
answer text, character offsets, score; the run's own dev predictions given back), and `launch.export` to
BertForQuestionAnswering with our start/end logits."""

import json
import re

import numpy as np
import pytest

from encoder import errors
from encoder.tokenizer import load_tokenizer
from launch import export, predict
from launch.model import EncoderWithHeads, encoder_config
from tasks import batching, question_answering
from tasks.scoring import score
from tests.tasks.scoring.test_squad import official_evaluate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def run(trained):
  """configs/finetune.py:task=squad,runlocal (tests/launch/conftest.py's shared run, which test_export also exports):
  64 training questions, 32 held-out ones (dev), 32 of the official dev set (test), windows of 32 subwords."""
  return trained("squad")


def _jsonl(path):
  return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_run_writes_the_official_predictions_and_scores_them_as_the_official_script(run, capsys):
  results = json.loads((run / "results.json").read_text())
  for split in ("dev", "test"):
    records = _jsonl(run / "predictions" / f"{split}.jsonl")
    answers = json.loads((run / "predictions" / f"{split}.json").read_text(encoding="utf-8"))
    assert len(records) == 32 and list(answers) == [r["id"] for r in records]
    assert all(answers[r["id"]] == r["context"][r["prediction"]["start"]:r["prediction"]["end"]] for r in records)
    dataset = [{"paragraphs": [{"qas": [{"id": r["id"], "answers": [{"text": a["text"]} for a in r["answers"]]}
                                        for r in records]}]}]
    official = official_evaluate(dataset, answers)
    assert results[split]["f1"] == pytest.approx(official["f1"], abs=1e-9)  # Percents, float64 both sides.
    assert results[split]["exact_match"] == pytest.approx(official["exact_match"], abs=1e-9)
    capsys.readouterr()
    score.score_files(["squad", "--gold", str(run / "predictions" / f"{split}.jsonl"), "--pred",
                       str(run / "predictions" / f"{split}.json")])
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert printed["f1"] * 100 == pytest.approx(results[split]["f1"], abs=1e-9) and printed["questions"] == 32  # f64.
  assert any(r["prediction"]["end"] > r["prediction"]["start"] for r in records)
  assert set(results["evaluation_examples_per_second"]) == {"dev", "test"}  # Windows per second, each split timed.
  assert all(rate > 0 for rate in results["evaluation_examples_per_second"].values())


def test_predict_gives_back_the_runs_dev_predictions(run):
  records = _jsonl(run / "predictions" / "dev.jsonl")
  outputs = predict.Predictor.from_workdir(run).predict([(r["question"], r["context"]) for r in records])
  assert [(o["start"], o["end"]) for o in outputs] == [(r["prediction"]["start"], r["prediction"]["end"])
                                                       for r in records]
  # The same float32 model on other batch shapes (summation order only): measured 4.9e-7 on scores up to 6.1 on
  # Zen 3, 1/20 of the bound; a wrong window or offset changes the answer itself (compared exactly above).
  assert [o["score"] for o in outputs] == pytest.approx([r["prediction"]["score"] for r in records], abs=1e-5)
  assert all(o["answer"] == r["context"][o["start"]:o["end"]] for o, r in zip(outputs, records))


def test_predict_command_reads_json_lines_and_tsv(run, tmp_path, capsys):
  records = _jsonl(run / "predictions" / "dev.jsonl")[:3]
  inputs = {"jsonl": "".join(json.dumps({"question": r["question"], "context": r["context"]}) + "\n\n"
                             for r in records),
            "tsv": "".join(f"{r['question']}\t{r['context']}\n" for r in records)}
  expected = [r["context"][r["prediction"]["start"]:r["prediction"]["end"]] for r in records]
  for input_format, text in inputs.items():
    path = tmp_path / f"questions.{input_format}"
    path.write_text(text, encoding="utf-8")
    capsys.readouterr()
    predict.main(["--workdir", str(run), "--input", str(path), "--format", input_format])
    outputs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["answer"] for o in outputs] == expected
    assert [o["line"] for o in outputs] == ([1, 3, 5] if input_format == "jsonl" else [1, 2, 3])
    assert all(set(o) == {"line", "question", "answer", "start", "end", "score"} for o in outputs)


def test_predict_refuses_a_question_without_context(run, tmp_path):
  path = tmp_path / "bad.jsonl"
  path.write_text('{"question": "Who?", "context": "Me."}\n\n{"question": "Who?"}\n', encoding="utf-8")
  with pytest.raises(errors.UserError, match=f"^{re.escape(str(path))}:3: expected a non-empty context"):
    predict.main(["--workdir", str(run), "--input", str(path), "--format", "jsonl"])
  with pytest.raises(errors.UserError, match=r"^inputs\[1\]: expected a non-empty context"):
    predict.Predictor.from_workdir(run).predict_records([{"question": "Who?", "context": "Me."}, {"question": "?"}])


def test_export_loads_as_bert_for_question_answering_with_our_logits(run, tmp_path, capsys):
  capsys.readouterr()
  export.main(["--workdir", str(run), "--out", str(tmp_path / "hf")])
  assert capsys.readouterr().out == f"wrote {tmp_path / 'hf'}: BertForQuestionAnswering\n"
  config = predict.read_config(run)
  tokenizer = load_tokenizer(config.data.tokenizer)
  family = question_answering.QuestionAnswering(config.task.to_dict())
  records = _jsonl(run / "predictions" / "dev.jsonl")[:4]
  windows = [w for r in records for w in family.encode(tokenizer, r, None)][:6]
  batch = batching.collate(windows, (32,), widths=family.widths())
  _, params = predict.restore_params(run, config)
  model = EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), (family.objective(),))
  ours = model.apply({"params": params}, batch)[family.name]
  theirs = transformers.BertForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
  with torch.no_grad():
    out = theirs(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                 token_type_ids=torch.tensor(batch["type_ids"], dtype=torch.long),
                 attention_mask=torch.tensor(batch["attention_segments"], dtype=torch.long))
  real = batch["attention_segments"].astype(bool)
  for side, logits in (("start", out.start_logits), ("end", out.end_logits)):
    difference = np.abs(np.asarray(ours[f"{side}_logits"]) - logits.numpy())[real].max()
    assert difference <= 1e-4, (side, difference)  # Ours and HF's float32 model: measured 9.5e-7 on Zen 3 (1/100).


def test_report_bootstraps_squad_runs_on_their_gold_questions(run, tmp_path):
  """launch.experiments.report: the run's dev questions as gold, `bootstrap --task squad` on two prediction files."""
  from launch.experiments import report  # pylint: disable=import-outside-toplevel
  kind, pred, jsonl = report.prediction_files({"workdir": str(run), "task": {"name": "question_answering"}}, "dev")
  assert (kind, pred.name) == ("squad", "dev.json")
  gold = tmp_path / "gold.txt"
  gold.write_text(report.gold_text(kind, jsonl), encoding="utf-8")
  records = _jsonl(jsonl)
  perfect = tmp_path / "perfect.json"
  perfect.write_text(json.dumps({r["id"]: r["answers"][0]["text"] for r in records}), encoding="utf-8")
  result = report.bootstrap_p(kind, gold, perfect, pred, 200)
  assert result["a"] == 1.0 and result["b"] * 100 == pytest.approx(  # Float64 both sides.
      json.loads((run / "results.json").read_text())["dev"]["f1"], abs=1e-9)
