"""`python -m tasks.scoring.score` end to end: tables + last-line JSON, alignment errors with file:line, bootstrap.

Scores are float64 on both sides (ratios of integer counts, moments of 80 numbers) and JSON keeps every digit: they
agree to ~1e-15, so 1e-12 (1e-9 for correlations and the real CoNLL file) leaves room for rounding only, far below
what one example moves a score by (>= 1/51362).
"""

import json
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score
from seqeval.scheme import IOB2

from tasks.readers import read_conll
from tasks.scoring import score
from tests.conftest import conll_tags, require_data

REPO = Path(__file__).resolve().parents[3]
GOLD = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""
PRED = GOLD.replace("German JJ B-NP B-MISC", "German JJ B-NP I-MISC").replace("Blackburn NNP I-NP I-PER",
                                                                              "Blackburn NNP I-NP B-PER")


def run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tasks.scoring.score", *args], cwd=REPO, capture_output=True, text=True,
                        check=False)


def write(tmp_path: Path, name: str, text: str) -> str:
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_conll_command_prints_table_and_json_last(tmp_path):
  gold, pred = write(tmp_path, "gold.txt", GOLD), write(tmp_path, "pred.txt", PRED)
  done = run("conll", "--gold", gold, "--pred", pred)
  assert done.returncode == 0, done.stderr
  lines = done.stdout.strip().splitlines()
  summary = json.loads(lines[-1])
  # conlleval: EU, German (I-MISC after O opens a chunk) right; Peter Blackburn split in two -> 2/4 and 2/3.
  assert summary["precision"] == 2 / 4 and summary["recall"] == 2 / 3 and summary["accuracy"] == 4 / 6
  assert summary["sentences"] == 2 and summary["tokens"] == 6 and summary["mode"] == "conlleval"
  assert any(line.startswith("MISC") for line in lines) and any(line.startswith("micro avg") for line in lines)
  strict = json.loads(run("conll", "--gold", gold, "--pred", pred, "--mode", "strict", "--scheme", "BIO")
                      .stdout.strip().splitlines()[-1])
  # strict: the I-MISC after O is no entity; EU is the only hit of 3 predicted and 3 gold entities.
  assert strict["precision"] == 1 / 3 and strict["recall"] == 1 / 3 and strict["scheme"] == "IOB2"


def test_misaligned_files_name_the_file_and_line(tmp_path, capsys):
  gold = write(tmp_path, "gold.txt", GOLD)
  missing_token = write(tmp_path, "short.txt", PRED.replace("call NN I-NP O\n", ""))
  with pytest.raises(SystemExit, match=r"short.txt:6: sentence 1 has 3 tokens .* \(line 6\) it has 4"):
    score.main(["conll", "--gold", gold, "--pred", missing_token])
  merged = write(tmp_path, "merged.txt", PRED.replace("call NN I-NP O\n\n", "call NN I-NP O\n"))
  with pytest.raises(SystemExit, match=r"merged.txt:7: sentence 1 has 6 tokens"):
    score.main(["conll", "--gold", gold, "--pred", merged])
  extra = write(tmp_path, "extra.txt", PRED + "\nMore NNP B-NP O\n")
  with pytest.raises(SystemExit, match=r"extra.txt:11: .* has 2 sentences and .* has 3"):
    score.main(["conll", "--gold", gold, "--pred", extra])
  bad_tag = write(tmp_path, "bad.txt", PRED.replace("rejects VBZ B-VP O", "rejects VBZ B-VP E-PER"))
  with pytest.raises(SystemExit, match=r"bad.txt:4: expected a tag of the IOB2 scheme .*, got 'E-PER'"):
    score.main(["conll", "--gold", gold, "--pred", bad_tag, "--mode", "strict"])
  with pytest.raises(SystemExit, match="No such file"):
    score.main(["conll", "--gold", gold, "--pred", str(tmp_path / "absent.txt")])


def test_lines_of_different_widths_are_refused_naming_file_and_line(tmp_path):
  """conlleval refuses a file whose token lines have different numbers of columns: so does tasks.scoring.score."""
  gold = write(tmp_path, "gold.txt", GOLD)
  ragged = write(tmp_path, "ragged.txt", PRED.replace("call NN I-NP O", "call I-NP O"))
  done = run("conll", "--gold", gold, "--pred", ragged)
  assert done.returncode == 1 and done.stdout == ""
  assert done.stderr.strip() == (f"error: {ragged}:6: expected 4 whitespace-separated columns as in line 3, got 3: "
                                 "'call I-NP O'")


def test_labels_command(tmp_path):
  gold = write(tmp_path, "gold.tsv", "a good film\tpos\nbad\tneg\n\nfine\tpos\nmeh\tneg\n")
  pred = write(tmp_path, "pred.txt", "pos\npos\npos\nneg\n")
  done = run("labels", "--gold", gold, "--pred", pred)
  assert done.returncode == 0, done.stderr
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  # neg: P 1, R 1/2, F 2/3; pos: P 2/3, R 1, F 4/5 -> macro averages.
  assert summary["accuracy"] == 3 / 4 and abs(summary["f1"] - (2 / 3 + 4 / 5) / 2) < 1e-12
  short = write(tmp_path, "short.txt", "pos\npos\npos\n")
  with pytest.raises(SystemExit, match=r"gold.tsv:5: .* has 4 labels and .* has 3"):
    score.main(["labels", "--gold", gold, "--pred", short])


SPAN_GOLD = [{"words": ["No", "increase", "in", "TGF-beta", "mRNA"],
              "spans": [{"start": 3, "end": 4, "label": "protein"}, {"start": 3, "end": 5, "label": "RNA"}]},
             {"words": ["IL-2", "binds"], "spans": [{"start": 0, "end": 1, "label": "protein"}]}]


def test_spans_command_scores_nested_runs_and_taggers_against_nested_gold(tmp_path):
  gold = write(tmp_path, "gold.jsonl", "".join(json.dumps(r) + "\n" for r in SPAN_GOLD))
  lines = lambda predictions: "".join(json.dumps({**r, "prediction": p}) + "\n" for r, p in zip(SPAN_GOLD, predictions))
  nested = write(tmp_path, "nested.jsonl", lines([[[3, 4, "protein"], [3, 5, "RNA"], [1, 2, "DNA"]], []]))
  done = run("spans", "--gold", gold, "--pred", nested)
  assert done.returncode == 0, done.stderr
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  # 2 of 3 predicted right, 2 of 3 gold found. Outer: gold RNA (3,5), protein (0,1); predicted RNA (3,5), DNA (1,2)
  # -> P 1/2, R 1/2. Inner: gold and predicted protein (3,4).
  assert (summary["precision"], summary["recall"], summary["sentences"]) == (2 / 3, 2 / 3, 2)
  assert (summary["outer_f1"], summary["inner_f1"], summary["inner_recall"]) == (0.5, 1.0, 1.0)
  tagger = write(tmp_path, "tagger.jsonl", lines([["O", "O", "O", "B-RNA", "I-RNA"], ["B-protein"]]))
  flat = json.loads(run("spans", "--gold", gold, "--pred", tagger).stdout.strip().splitlines()[-1])
  assert (flat["precision"], flat["recall"], flat["outer_f1"], flat["inner_f1"]) == (1.0, 2 / 3, 1.0, 0.0)
  other_words = write(tmp_path, "other.jsonl", lines([[], []]).replace('"IL-2"', '"IL-4"'))
  with pytest.raises(SystemExit, match=r"other.jsonl:2: expected a run's prediction line .* same sentence in"):
    score.main(["spans", "--gold", gold, "--pred", other_words])
  with pytest.raises(SystemExit, match=r"short.jsonl: 1 sentences but .*gold.jsonl has 2"):
    score.main(["spans", "--gold", gold, "--pred", write(tmp_path, "short.jsonl", lines([[]]))])
  with pytest.raises(SystemExit, match=r"bad.jsonl:1: expected tags O or B-, I-, E-, S- \+ a type"):
    score.main(["spans", "--gold", gold, "--pred", write(tmp_path, "bad.jsonl", lines([["O", "X"], []]))])


def test_scores_command_and_its_bootstrap(tmp_path):
  """Regression files (one number a line, last column): Pearson/Spearman/MSE against scipy; the bootstrap on
  Pearson's r; a non-number or a missing line names the file and line."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import scipy.stats  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  gold_values = np.round(rng.uniform(1, 5, size=80), 1)
  a_values, b_values = gold_values + rng.normal(scale=0.5, size=80), gold_values + rng.normal(scale=1.5, size=80)
  gold = write(tmp_path, "gold.txt", "".join(f"pair{i}\t{v}\n" for i, v in enumerate(gold_values)))
  a, b = (write(tmp_path, f"{n}.txt", "\n".join(map(repr, v.tolist())) + "\n") for n, v in (("a", a_values),
                                                                                             ("b", b_values)))
  done = run("scores", "--gold", gold, "--pred", a)
  assert done.returncode == 0, done.stderr
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  assert abs(summary["pearson"] - scipy.stats.pearsonr(gold_values, a_values).statistic) < 1e-9
  assert abs(summary["spearman"] - scipy.stats.spearmanr(gold_values, a_values).statistic) < 1e-9
  assert summary["examples"] == 80
  boot = run("bootstrap", "--task", "scores", "--gold", gold, "--pred-a", a, "--pred-b", b, "--samples", "500")
  result = json.loads(boot.stdout.strip().splitlines()[-1])
  assert result["metric"] == "pearson" and result["delta"] > 0 and result["p_value"] < 0.05
  broken = write(tmp_path, "broken.txt", "1.0\n2.5\nhigh\n")
  with pytest.raises(SystemExit, match=r"broken.txt:3: expected a number in the last column, got 'high'"):
    score.main(["scores", "--gold", gold, "--pred", broken])
  short = write(tmp_path, "short.txt", "1.0\n2.5\n")
  with pytest.raises(SystemExit, match=r"short.txt: 2 scores but .*gold.txt has 80"):
    score.main(["scores", "--gold", gold, "--pred", short])


def test_bootstrap_command_is_seeded(tmp_path):
  gold = write(tmp_path, "gold.txt", "\n".join(["yes"] * 50))
  a = write(tmp_path, "a.txt", "\n".join(["yes"] * 45 + ["no"] * 5))
  b = write(tmp_path, "b.txt", "\n".join(["yes"] * 35 + ["no"] * 15))
  args = ["bootstrap", "--task", "labels", "--gold", gold, "--pred-a", a, "--pred-b", b, "--samples", "2000"]
  done = run(*args)
  assert done.returncode == 0, done.stderr
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  assert summary["metric"] == "accuracy" and abs(summary["delta"] - 0.2) < 1e-12 and summary["samples"] == 2000
  assert summary["p_value"] < 0.05
  assert json.loads(run(*args).stdout.strip().splitlines()[-1]) == summary


@pytest.mark.slow
def test_real_conll_valid_end_to_end(tmp_path):
  gold_path = require_data("conll2003/bio/valid.txt")
  rng = random.Random(0)
  lines = [line.rsplit(" ", 1)[0] + " " + rng.choice(["O", "B-PER", "I-PER", "B-LOC", "I-ORG", "I-MISC"])
           if line.strip() and rng.random() < 0.05 else line for line in gold_path.read_text().splitlines()]
  pred_path = write(tmp_path, "pred.txt", "\n".join(lines) + "\n")
  gold, pred = conll_tags("conll2003/bio/valid.txt"), [r["tags"] for r in read_conll(pred_path)]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    expected = {"conlleval": [f(gold, pred) for f in (precision_score, recall_score, f1_score)],
                "strict": [f(gold, pred, mode="strict", scheme=IOB2) for f in (precision_score, recall_score,
                                                                               f1_score)]}
  for mode, (p, r, f) in expected.items():
    done = run("conll", "--gold", str(gold_path), "--pred", pred_path, "--mode", mode)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["sentences"] == 3250 and summary["tokens"] == 51362
    assert abs(summary["precision"] - p) < 1e-9 and abs(summary["recall"] - r) < 1e-9 and abs(summary["f1"] - f) < 1e-9
  done = run("bootstrap", "--gold", str(gold_path), "--pred-a", str(gold_path), "--pred-b", pred_path,
             "--samples", "1000")
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  assert summary["a"] == 1.0 and summary["p_value"] < 0.01
