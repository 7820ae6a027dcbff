"""Bad input as a new user gives it, one test per category (configs, checkpoints, data files, corpora, scorer inputs,
benchmark arguments): each command exits non-zero with one line `error: ...` naming the file (and line) or key,
never a traceback (docs/errors.md lists the cases). Commands run in subprocesses, as a user runs them; the data
files are written here, so nothing needs the shared data directory."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from encoder import errors
from encoder.pretrained import minilm_path
from launch import compilation_cache

REPO = Path(__file__).resolve().parents[2]
HEADER = "sentence_A\tsentence_B\tlabel\n"
ROWS = "".join(f"A man plays {i}\tA man is playing {i}\t{'YES' if i % 2 else 'NO'}\n" for i in range(80))
SENTENCE = "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                        env={**os.environ, **(env or {})})


def assert_one_line(done: subprocess.CompletedProcess, *named: str) -> str:
  """Non-zero exit, no traceback, and a last stderr line `error: ...` that names each of `named`."""
  assert done.returncode != 0, done.stdout[-2000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  line = done.stderr.strip().splitlines()[-1]
  assert line.startswith("error: ") and [text for text in named if text not in line] == [], done.stderr[-3000:]
  return line


def write(path: Path, data: str | bytes) -> str:
  path.write_bytes(data if isinstance(data, bytes) else data.encode())
  return str(path)


def finetune(tmp_path: Path, task: str, fmt: str, train: str, dev: str, columns: str = "") -> list[str]:
  """launch.main on custom files (runlocal: a tiny random-init model) with a tfds cache of its own."""
  return ["-m", "launch.main", f"--config=configs/finetune.py:task={task},runlocal", f"--workdir={tmp_path / 'run'}",
          "--config.task.dataset=", f"--config.task.format={fmt}", f"--config.task.columns={columns}",
          f"--config.task.files=train:{train},validation:{dev}", "--config.task.test_split=",
          f"--config.data.cache_dir={tmp_path / 'tfds'}"]


@pytest.mark.parametrize("arg, named", [
    ("configs/finetune.py:task=conll", ["task='conll'", "conll2003"]),  # Unknown task: its close match is named.
    ("configs/pretrain.py:steps=ten", ["steps='ten'", "integer"]),
])
def test_config_errors(tmp_path, arg, named):
  assert_one_line(command("-m", "launch.main", f"--config={arg}", f"--workdir={tmp_path}"), *named)
  assert not any(tmp_path.iterdir())


def test_a_config_file_without_get_config_and_a_compilation_cache_that_is_a_file(tmp_path):
  no_function = write(tmp_path / "mine.py", "learning_rate = 1e-4\n")
  assert_one_line(command("-m", "launch.main", f"--config={no_function}", f"--workdir={tmp_path / 'run'}"),
                  no_function, "defines no get_config function")
  a_file = write(tmp_path / "cache", "")
  done = command("-m", "launch.main", "--config=configs/pretrain.py:runlocal", f"--workdir={tmp_path / 'run'}",
                 env={compilation_cache.ENV: a_file})
  assert_one_line(done, f"${compilation_cache.ENV}={a_file}", "must be a writable directory")
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("breakage, named", [
    ("no config.json", ["config.json not found"]),
    ("malformed config.json", ["config.json:1: expected JSON"]),
    ("non-BERT config.json", ["config.json", "'model_type' = 'roberta'"]),
    ("pickle-only", ["only pickled weights (pytorch_model.bin)"]),
])
def test_checkpoint_errors_while_the_config_is_built(tmp_path, breakage, named):
  checkpoint = shutil.copytree(minilm_path(), tmp_path / "checkpoint", ignore=shutil.ignore_patterns("*.safetensors"))
  config = json.loads((checkpoint / "config.json").read_text())
  (checkpoint / "model.safetensors").write_bytes(b"")  # Never read: the config fails first.
  if breakage == "no config.json":
    (checkpoint / "config.json").unlink()
  elif breakage == "malformed config.json":
    (checkpoint / "config.json").write_text('{"model_type": "bert",')
  elif breakage == "non-BERT config.json":
    (checkpoint / "config.json").write_text(json.dumps(config | {"model_type": "roberta"}))
  else:
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "pytorch_model.bin").write_bytes(b"PK\x03\x04 never unpickled")
  done = command("-m", "launch.main", f"--config=configs/finetune.py:task=sick,init=hf:{checkpoint}",
                 f"--workdir={tmp_path / 'run'}")
  assert_one_line(done, str(checkpoint), *named)


@pytest.mark.parametrize("case", ["no examples", "label outside the task's", "not UTF-8"])
def test_data_file_errors_before_tfds_prepares_anything(tmp_path, case):
  good = write(tmp_path / "good.tsv", HEADER + ROWS)
  if case == "no examples":
    args, named = finetune(tmp_path, "sick", "tsv", write(tmp_path / "train.tsv", HEADER), good,
                           "text_a:sentence_A,text_b:sentence_B,label:label"), ["train.tsv:", "train split"]
  elif case == "not UTF-8":
    bad = write(tmp_path / "train.tsv", (HEADER + "Un caf\xe9\tUn th\xe9\tYES\n" + ROWS).encode("latin-1"))
    args, named = finetune(tmp_path, "sick", "tsv", bad, good, "text_a:sentence_A,text_b:sentence_B,label:label"), [
        "train.tsv:2:", "UTF-8"]
  else:  # ud_pos has the 17 UPOS tags as its labels: 'DETERMINER' on line 3 is none of them.
    dev = write(tmp_path / "dev.conllu", SENTENCE * 80)
    bad = write(tmp_path / "train.conllu", SENTENCE + "1\tA\ta\tDETERMINER\tDT\t_\t0\troot\t_\t_\n\n" + SENTENCE * 80)
    args, named = finetune(tmp_path, "ud_pos", "conllu", bad, dev), ["train.conllu:4:", "'DETERMINER'", "UPOS"]
  done = command(*args)
  assert_one_line(done, *named)
  assert "prepared" not in done.stderr and not any((tmp_path / "tfds").rglob("*.array_record*"))


def _squad(*questions: tuple[str, bool]) -> str:
  """A SQuAD file of (id, unanswerable) questions on one paragraph, a question per line."""
  qas = ",\n".join(json.dumps({"id": qid, "question": "Where is Paris?", "is_impossible": impossible, "answers": (
      [] if impossible else [{"text": "France", "answer_start": 12}])}) for qid, impossible in questions)
  return '{"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [\n' \
      + qas + "]}]}]}\n"


@pytest.mark.parametrize("case", ["repeated id", "v2.0 dev file in a v1.1 run", "no task.format"])
def test_squad_files_a_run_cannot_score_are_refused_before_training(tmp_path, case):
  """Predictions are keyed by question id; a v1.1 run can neither predict nor score an unanswerable question; own
  SQuAD files need task.format=squad (the default format is tsv). The workdir is never created."""
  train = write(tmp_path / "train.json", _squad(("q1", False), ("q2", False)))
  if case == "repeated id":
    args = finetune(tmp_path, "squad", "squad", write(tmp_path / "dup.json", _squad(("q1", False), ("q1", False))),
                    train)
    named = ["dup.json:3:", "each question id once", "'q1' again, first at line 2"]
  elif case == "v2.0 dev file in a v1.1 run":
    args = finetune(tmp_path, "squad", "squad", train, write(tmp_path / "dev.json", _squad(("a", False), ("b", True))))
    named = ["dev.json:3:", "'b' unanswerable", "config.task.unanswerable=True"]
  else:
    args = [arg for arg in finetune(tmp_path, "squad", "squad", train, train) if not arg.startswith("--config.task.f")]
    args.append(f"--config.task.files=train:{train},validation:{train}")
    named = ["config.task.format='tsv'", "reads squad files", "set config.task.format=squad"]
  assert_one_line(command(*args), *named)
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, named", [
    (" \n\t\n", ["empty corpus file", "only whitespace"]),
    ("\u2603\ufe0f \U0001F600\n", ["no usable text", "[UNK]"]),  # Every token of it is [UNK] to MiniLM's vocabulary.
])
def test_corpus_errors(tmp_path, text, named):
  corpus = write(tmp_path / "corpus.txt", text)
  done = command("-m", "launch.main", "--config=configs/pretrain.py:runlocal", f"--workdir={tmp_path / 'run'}",
                 f"--config.data.train_files={corpus}", "--config.data.eval_files=")
  assert_one_line(done, corpus, *named)


GOLD = "EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn I-PER\n"


@pytest.mark.parametrize("pred, named", [
    (GOLD.replace("Peter B-PER", "Peter Peter"), ["pred:4:", "'Peter'"]),
    (GOLD.replace("Peter B-PER", "Peter X-PER"), ["pred:4:", "'X-PER'"]),
    ("", ["pred:", "found none"]),
    ("-DOCSTART- O\n\n\n", ["pred:", "found none"]),
    (GOLD.replace("Peter", "P\xe9ter").encode("latin-1"), ["pred:4:", "UTF-8"]),
    ("EU B-ORG\nrejects O\n", ["gold:4:", "2 sentences", "has 1"]),
])
def test_scorer_refuses_and_prints_no_score(tmp_path, pred, named):
  gold, pred = write(tmp_path / "gold", GOLD), write(tmp_path / "pred", pred)
  done = command("-m", "tasks.scoring.score", "conll", "--gold", gold, "--pred", pred)
  assert_one_line(done, *named)
  assert done.stdout == ""


def test_scorer_refuses_an_empty_gold_file(tmp_path):
  empty = write(tmp_path / "gold", "")
  assert_one_line(command("-m", "tasks.scoring.score", "labels", "--gold", empty, "--pred", empty),
                  "gold:", "found none")


def test_debug_shows_the_traceback(tmp_path):
  pred = write(tmp_path / "pred", GOLD.replace("Peter B-PER", "Peter Peter"))
  args = ("-m", "tasks.scoring.score", "conll", "--gold", write(tmp_path / "gold", GOLD), "--pred", pred)
  for done in (command(*args, "--debug"), command(*args, env={errors.DEBUG_ENV: "1"})):
    assert done.returncode != 0 and "Traceback" in done.stderr and "ReaderError" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {pred}:4:")


def test_benchmark_mistyped_override():
  done = command("-m", "benchmarks.finetune", "--task", "sick", "--set", "optimizer.learnig_rate=1e-4")
  assert_one_line(done, "'optimizer.learnig_rate'", "optimizer.learning_rate")


def test_bf16_reference_refused_on_a_cpu_without_bf16_units(monkeypatch):
  """PyTorch's bf16 matmuls are hundreds of times slower there: one line saying so, before any training."""
  from benchmarks import finetune  # pylint: disable=import-outside-toplevel
  from encoder import matmul  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(matmul, "native_bf16_dots", lambda where: False)
  with pytest.raises(errors.UserError,
                     match=r"--precision bfloat16: this CPU has no bf16 matrix instructions .*float32"):
    finetune.main(["--task", "sick", "--reference", "--precision", "bfloat16"])


def test_cli_run_reports_user_errors_and_keeps_bugs_loud(tmp_path):
  def fails(error: Exception):
    raise error
  with pytest.raises(SystemExit, match=r"^error: a.tsv:3: expected 2 columns, got 3$"):
    errors.run(fails, errors.UserError("a.tsv:3: expected 2 columns, got 3"))
  with pytest.raises(SystemExit, match=rf"^error: {tmp_path / 'missing'}: No such file or directory$"):
    errors.run(open, tmp_path / "missing")
  with pytest.raises(KeyError):  # A programming error keeps its traceback.
    errors.run(fails, KeyError("bug"))


@pytest.mark.slow
def test_output_paths_of_the_wrong_kind(tmp_path):
  """--workdir naming a file and predict's --out naming a directory: one line each, the file kept."""
  taken = write(tmp_path / "taken", "keep me\n")
  assert_one_line(command("-m", "launch.main", "--config=configs/finetune.py:task=sst2,runlocal", f"--workdir={taken}"),
                  f"--workdir {taken}: expected a run directory, found a file")
  assert Path(taken).read_text() == "keep me\n"
  assert_one_line(command("-m", "launch.predict", "--workdir", str(tmp_path), "--input", taken, "--out",
                          str(tmp_path)), f"--out {tmp_path}: expected the file to write the predictions to")
