"""launch.predict labels new data as the run's own evaluation did: for every task family (sentence and pair
classification, regression, CRF and greedy tagging, span NER) the dev predictions a tiny runlocal run wrote come back
from `Predictor` and from the command line; raw text is split into the treebank's words; bad input is one line
naming the file and line."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import finetune, samples
from encoder import errors
from launch import predict
from launch.experiments import report
from tasks import registry
from tasks.readers import read_conllu
from tasks.scoring import score
from tests.conftest import optimised, require_data

REPO = Path(__file__).resolve().parents[2]


def _dev(workdir: Path) -> list[dict]:
  return [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]


def _inputs(records: list[dict]) -> list[dict]:
  """The dev records without their gold labels."""
  return [{"words": r["words"]} if "words" in r else {"text_a": r["text_a"], "text_b": r["text_b"]} for r in records]


def _user_error(argv: list[str]) -> str:
  """The one-line message of launch.predict's exit on a user error."""
  with pytest.raises(SystemExit) as exit_info:
    errors.run(predict.main, argv)
  message = str(exit_info.value.code)
  assert message.startswith("error: ") and "\n" not in message
  return message


def test_split_words_gives_the_treebank_words():
  """Against the packaged EWT sample: each sentence's `# text` split UD-style, word for word."""
  assert predict.split_words("I don't like U.S. fast-food... J. Smith said!!! 1,000.5 $") == [
      "I", "do", "n't", "like", "U.S.", "fast-food", "...", "J.", "Smith", "said", "!!!", "1,000.5", "$"]
  assert predict.split_words("Al-Zaman: it's 10:30", split_hyphens=True) == ["Al", "-", "Zaman", ":", "it", "'s",
                                                                             "10:30"]
  for split, expected in (("train", 280), ("heldout", 182)):
    blocks = samples.ud_sample_file(split).read_text(encoding="utf-8").strip().split("\n\n")
    texts = [next(line[9:] for line in block.splitlines() if line.startswith("# text = ")) for block in blocks]
    words = [record["words"] for record in read_conllu(samples.ud_sample_file(split))]
    assert sum(predict.split_words(text, True) == w for text, w in zip(texts, words)) == expected


@pytest.mark.parametrize("name", ["sst2", "sick", "sick_relatedness", "conll2003_crf", "conll2003_spans", "ud_sample"])
def test_dev_predictions_equal_the_runs_own(trained, name):
  workdir = trained(name)
  results = json.loads((workdir / "results.json").read_text())
  predictor = predict.Predictor.from_workdir(workdir)
  assert predictor.step == results["best_step"]
  records = _dev(workdir)
  with optimised():  # Compiled as the run's own evaluation was (tests/conftest.py), so equal to the bit.
    outputs = predictor.predict_records(_inputs(records))
  assert len(outputs) == len(records) == 32
  for record, output in zip(records, outputs):
    if "label" in output:
      assert output["label"] == record["prediction"]
      probabilities = output["probabilities"]
      assert max(probabilities, key=probabilities.get) == output["label"]
      assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-5)  # float32 softmax over <= 5 labels: ~1e-6.
    elif "score" in output:
      assert output["score"] == record["prediction"]
    elif "tags" in output:
      tagged = [t for t in output["tags"] if t is not None]
      assert tagged == record["prediction"] and output["tags"][:len(tagged)] == tagged
      assert len(output["tags"]) == len(record["words"])
    else:
      assert [[e["start"], e["end"], e["label"]] for e in output["entities"]] == record["prediction"]
      assert all(e["score"] >= results["threshold"] - 1e-6 for e in output["entities"])
      assert all(e["text"] == " ".join(record["words"][e["start"]:e["end"]]) for e in output["entities"])
  assert any(output != outputs[0] for output in outputs[1:])  # Not one constant answer.


def test_a_run_saved_before_its_task_fields_existed_predicts_as_it_did(trained, tmp_path):
  """A config.json without the task fields a run left at their defaults (as one written before they existed) reads
  back whole (the families' declared defaults fill it: tasks.registry.complete_task) and predicts the same; the
  experiment reports read it the same way."""
  workdir, old = trained("conll2003_spans"), tmp_path / "old_run"
  shutil.copytree(workdir, old)
  saved = json.loads((old / "config.json").read_text())
  defaults = registry.task_defaults(saved["task"]["name"])
  dropped = sorted(k for k, v in saved["task"].items() if k != "name" and v == defaults[k])
  assert {"boundary_ffn", "max_span_width", "n_best", "null_weight", "pooling"} <= set(dropped)
  saved["task"] = {k: v for k, v in saved["task"].items() if k not in dropped}
  (old / "config.json").write_text(json.dumps(saved))
  assert predict.read_config(old).task.to_dict() == predict.read_config(workdir).task.to_dict()
  assert report.load_run(old)["task"] == report.load_run(workdir)["task"]
  records = _inputs(_dev(workdir))
  assert predict.Predictor.from_workdir(old).predict_records(records) == \
      predict.Predictor.from_workdir(workdir).predict_records(records)


def test_latest_checkpoint_and_the_moving_average(trained):
  """`latest` reads the last step; a run with a parameter EMA is evaluated with the average (as its evaluation)."""
  workdir = trained("sst2")
  results = json.loads((workdir / "results.json").read_text())
  assert predict.Predictor.from_workdir(workdir, "latest").step == results["step"]
  config = predict.read_config(workdir)
  step, params = predict.restore_params(workdir, config, "latest")
  state = ocp.StandardCheckpointer().restore((workdir / "checkpoints" / str(step) / "default").absolute())
  flat = lambda tree: jax.tree.leaves(jax.tree.map(np.asarray, tree))
  assert all(np.array_equal(a, b) for a, b in zip(flat(params), flat(state["opt_state"]["ema"])))
  assert not all(np.array_equal(a, b) for a, b in zip(flat(params), flat(state["params"])))


def test_command_line_conll_output_rescores_as_the_run(trained, tmp_path, capsys):
  """The dev file's first 32 sentences (the run's dev split) in CoNLL columns -> `word tag` lines equal to the run's
  predictions/dev.conll, and tasks.scoring.score reads them."""
  workdir = trained("conll2003_crf")
  blocks = require_data("conll2003/bio/valid.txt").read_text(encoding="utf-8").strip().split("\n\n")
  sentences = np.cumsum([not block.startswith("-DOCSTART-") for block in blocks])
  gold = tmp_path / "dev.txt"  # The run's dev split, validation[:32]: 32 sentences (and the -DOCSTART- lines).
  gold.write_text("\n\n".join(blocks[:int(np.searchsorted(sentences, 32)) + 1]) + "\n", encoding="utf-8")
  out = tmp_path / "pred.conll"
  predict.main(["--workdir", str(workdir), "--input", str(gold), "--format", "conll", "--output", "conll",
                "--out", str(out)])
  untagged = sum(1 for r in _dev(workdir) if len(r["prediction"]) < len(r["words"]))  # Past max_length: "O".
  assert capsys.readouterr().err == (f"warning: {untagged} of 32 inputs are longer than the run's task.max_length (32 "
                                     f"subwords): their last words get no prediction (first: {gold}:18)\n")
  ours = [line.split() for line in out.read_text(encoding="utf-8").splitlines() if line]
  theirs = [line.split() for line in (workdir / "predictions" / "dev.conll").read_text().splitlines() if line]
  assert [(w, t) for w, t in ours] == [(w, p) for w, _, p in theirs]
  score.main(["conll", "--gold", str(gold), "--pred", str(out)])
  scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  results = json.loads((workdir / "results.json").read_text())
  assert 100 * scored["f1"] == pytest.approx(results["dev"]["f1"], abs=1e-9)  # Float64 both sides: rounding only.


def test_command_line_reads_the_runs_tsv_columns(trained, tmp_path, capsys):
  """SICK's own trial file (header, pair columns, labels ignored) -> JSON lines naming each input's line."""
  workdir = trained("sick")
  lines = require_data("sick/SICK_trial.txt").read_text(encoding="utf-8").splitlines()[:33]
  path = tmp_path / "trial.tsv"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  predict.main(["--workdir", str(workdir), "--input", str(path), "--format", "tsv"])
  outputs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [o["line"] for o in outputs] == list(range(2, 34))
  assert [o["label"] for o in outputs] == [r["prediction"] for r in _dev(workdir)]
  assert outputs[0]["text_a"] == lines[1].split("\t")[1]


def test_command_line_tags_raw_text_from_stdin(trained):
  """End to end in a subprocess: text on stdin, split into words, one JSON line per non-blank line, exit status 0."""
  workdir = trained("ud_sample")
  done = subprocess.run([sys.executable, "-m", "launch.predict", "--workdir", str(workdir), "--input", "-"],
                        input="I don't like fast-food.\n\nThey refuse to permit us.\n", capture_output=True,
                        text=True, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)}, timeout=300, check=False)
  assert done.returncode == 0, done.stderr
  outputs = [json.loads(line) for line in done.stdout.splitlines()]
  assert [o["line"] for o in outputs] == [1, 3]
  assert outputs[0]["words"] == ["I", "do", "n't", "like", "fast", "-", "food", "."]
  assert all(tag in finetune.UPOS for o in outputs for tag in o["tags"])


def test_bad_input_is_one_line_naming_the_file_and_line(trained, tmp_path):
  workdir = trained("sick")
  path = tmp_path / "input.txt"
  run = lambda *extra: _user_error(["--workdir", str(workdir), "--input", str(path), *extra])
  path.write_text("A man plays.\tNobody plays.\nA single sentence\n", encoding="utf-8")
  assert run() == (f"error: {path}:2: expected two non-empty texts separated by a tab (the run was trained on sentence "
                   "pairs), got 1 tab-separated field")
  path.write_bytes(b"A man plays.\tNobody plays.\n\xff\xfe\n")
  assert run().startswith(f"error: {path}:2: expected UTF-8 text")
  path.write_text("\n\n", encoding="utf-8")
  assert run() == f"error: {path}: expected at least one input (a line), found none"
  path.write_text("sentence_A\tsentence_B\n", encoding="utf-8")
  assert "words" in run("--format", "words") and "use --format text or tsv" in run("--format", "words")
  assert "--output conll is for word-level tasks" in run("--output", "conll")
  path.write_text("first\tsecond\nA man plays.\tNobody plays.\n", encoding="utf-8")
  assert run("--format", "tsv").startswith(f"error: {path}:1: expected a header with a column named 'sentence_A'")
  path.write_text("A man plays.\tNobody plays.\n", encoding="utf-8")
  assert _user_error(["--workdir", str(tmp_path / "missing"), "--input", str(path)]).startswith(
      f"error: {tmp_path / 'missing' / 'config.json'} does not exist")


def test_a_workdir_that_is_not_a_finished_fine_tuning_run(tmp_path):
  path = tmp_path / "input.txt"
  path.write_text("some text\n", encoding="utf-8")
  run = lambda: _user_error(["--workdir", str(tmp_path), "--input", str(path)])
  (tmp_path / "config.json").write_text('{"task": "", "objectives": "mlm", "model": {}}', encoding="utf-8")
  assert "this is a pretraining run" in run()
  (tmp_path / "config.json").write_text('{"task": "", "objectives": "mlm"}', encoding="utf-8")
  assert "expected the config.json a run wrote (with a model block)" in run()
  (tmp_path / "config.json").write_text('{"task": ', encoding="utf-8")
  assert run().startswith(f"error: {tmp_path / 'config.json'}:1: expected JSON")


def test_a_run_without_checkpoints(trained, tmp_path):
  workdir = trained("ud_sample")
  (tmp_path / "config.json").write_text((workdir / "config.json").read_text(), encoding="utf-8")
  (tmp_path / "results.json").write_text((workdir / "results.json").read_text(), encoding="utf-8")
  path = tmp_path / "input.txt"
  path.write_text("some text\n", encoding="utf-8")
  message = _user_error(["--workdir", str(tmp_path), "--input", str(path)])
  assert message.startswith(f"error: {(tmp_path / 'checkpoints').absolute()} holds no checkpoint")


def test_no_traceback_and_a_nonzero_status_from_the_command(tmp_path):
  """A real process: a workdir that is no run exits with status 1 and one `error:` line on stderr."""
  done = subprocess.run([sys.executable, "-m", "launch.predict", "--workdir", str(tmp_path), "--input", "-"],
                        input="text\n", capture_output=True, text=True, cwd=REPO,
                        env=os.environ | {"PYTHONPATH": str(REPO)}, timeout=300, check=False)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [f"error: {tmp_path / 'config.json'} does not exist: {tmp_path} is not a "
                                              "run directory (give the --workdir of a fine-tuning run: python -m "
                                              "launch.main --config configs/finetune.py:... --workdir DIR)"]


def test_labels_and_buckets_come_from_results_or_the_training_data(trained, tmp_path):
  """results.json's record is used as is (no data read: the config's files do not exist); without it they are
  rebuilt from the training split, and a run whose data is gone says so in one line."""
  workdir = trained("ud_sample")
  config = predict.read_config(workdir)
  labels, buckets = predict.labels_and_buckets(config, {})
  assert labels == list(finetune.UPOS) and set(buckets) <= set(config.data.buckets) | {config.task.max_length}
  config.task.files = f"train:{tmp_path / 'gone.conllu'},validation:{tmp_path / 'gone.conllu'}"
  assert predict.labels_and_buckets(config, {"labels": ["A", "B"], "buckets": [16, 32]}) == (["A", "B"], (16, 32))
  with pytest.raises(errors.UserError, match=re.escape("results.json does not record its labels and length buckets")):
    predict.labels_and_buckets(config, {})
