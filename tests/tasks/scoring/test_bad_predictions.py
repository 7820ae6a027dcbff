"""Prediction files are checked as gold files are (issue 71): for every scoring kind, a bad prediction file is one line
`error: pred:line: expected ...` naming the field, exit status 1, nothing printed on stdout and nothing written; and
what a gold file is refused for (a non-finite score, a malformed question) a prediction file is refused for too."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.scoring import kinds, score

REPO = Path(__file__).resolve().parents[3]
CONLL = "EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n"
SPAN_GOLD = [{"words": ["No", "increase", "in", "TGF-beta", "mRNA"],
              "spans": [{"start": 3, "end": 4, "label": "protein"}, {"start": 3, "end": 5, "label": "RNA"}]},
             {"words": ["IL-2", "binds"], "spans": [{"start": 0, "end": 1, "label": "protein"}]}]
SQUAD_GOLD = "".join(json.dumps({"id": f"q{i}", "answers": [{"text": t}]}) + "\n" for i, t in enumerate(["a", "b"]))


def _span_lines(first_prediction) -> str:
  """A run's predictions/<split>.jsonl for SPAN_GOLD, the first sentence predicting `first_prediction`."""
  return "".join(json.dumps({**r, "prediction": p}) + "\n" for r, p in zip(SPAN_GOLD, [first_prediction, []]))


GOLD = {"conll": CONLL, "labels": "pos\nneg\n", "scores": "1.0\n2.5\n3.0\n", "squad": SQUAD_GOLD,
        "spans": "".join(json.dumps(r) + "\n" for r in SPAN_GOLD)}

# kind -> (a bad prediction file, the line expected, for each way a prediction file can be wrong).
BAD = {
    "conll": [(CONLL.replace("Peter NNP B-PER", "Peter NNP Peter"), "4: expected a tag in the last column: O or B-"),
              (CONLL.replace("rejects VBZ O", "rejects O"), "2: expected 3 whitespace-separated columns as in line 1")],
    "labels": [("pos\n", "2: .* has 2 labels and .* has 1"), ("", ": expected one example per line")],
    "scores": [("1.0\nnan\n3\n", "2: expected a finite number in the last column, got 'nan'"),
               ("1.0\n2.5\ninf\n", "3: expected a finite number in the last column, got 'inf'"),
               ("1.0\nhigh\n3\n", "2: expected a number in the last column, got 'high'")],
    "squad": [('{"q0": "a",\n "q0": "b"}', "2: expected each question id once, found 'q0' again, first at line 1"),
              ('{"q0": "a",\n "q1": 3}', "2: expected the answer text of question 'q1' to be a string, got 3"),
              ('{"q0": "a",\n "q1": null}', "2: expected the answer text of question 'q1' to be a string, got None"),
              ('["a", "b"]', "1: expected the official {question id: answer text} JSON object, found a list"),
              ('{"q0": "a",\n "q1" "b"}', "2: expected the official .* found invalid JSON at column 7")],
    "spans": [(_span_lines([[3, 9, "RNA"]]), "1: expected prediction\\[0\\] to have 0 <= start < end <= 5 "
                                             "\\(the word count; end exclusive\\), got \\[3, 9, 'RNA'\\]"),
              (_span_lines([[4, 3, "RNA"]]), "1: expected prediction\\[0\\] to have 0 <= start < end <= 5"),
              (_span_lines([[3, 5, "RNA"], [3, 5, "RNA"]]), "1: expected prediction\\[1\\] not to repeat an earlier "
                                                            "span, got \\[3, 5, 'RNA'\\] twice"),
              (_span_lines([["RNA", 3, 5]]), "1: expected prediction\\[0\\] in the documented field order \\[start, "
                                             "end, type\\], got \\['RNA', 3, 5\\]"),
              (_span_lines([[3, "RNA", 5]]), "1: expected prediction\\[0\\] to be \\[start: int, end: int, type: "
                                             "non-empty str\\]"),
              (_span_lines([[3.0, 5, "RNA"]]), "1: expected prediction\\[0\\] to be \\[start: int"),
              (_span_lines([[True, 5, "RNA"]]), "1: expected prediction\\[0\\] to be \\[start: int"),
              (_span_lines([[3, 5, ""]]), "1: expected prediction\\[0\\] to be \\[start: int, end: int, type: non"),
              (_span_lines([[3, 5]]), "1: expected prediction\\[0\\] to be \\[start: int"),
              (_span_lines(["O"] * 6), '1: expected at most a tag per word \\(5\\) in "prediction", got 6')],
}


def _refused(tmp_path: Path, capsys, kind: str, gold: str, pred: str) -> str:
  """The one line `score <kind>` ends with (asserted: exit status 1, stdout empty, no file written)."""
  (tmp_path / "gold").write_text(gold, encoding="utf-8")
  (tmp_path / "pred").write_text(pred, encoding="utf-8")
  before = sorted(tmp_path.iterdir())
  with pytest.raises(SystemExit) as exit_info:
    score.main([kind, "--gold", str(tmp_path / "gold"), "--pred", str(tmp_path / "pred")])
  line = str(exit_info.value.code)
  assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line
  assert capsys.readouterr().out == "" and sorted(tmp_path.iterdir()) == before
  return line


def test_every_kind_has_bad_prediction_cases():
  assert set(BAD) == set(kinds.KINDS)


def _good(tmp_path: Path, kind: str) -> list[str]:
  """`--gold G --pred P` of the kind with a valid prediction file (the gold itself, or a perfect run's)."""
  (tmp_path / "good_gold").write_text(GOLD[kind], encoding="utf-8")
  pred = {"squad": '{"q0": "a", "q1": "b"}', "spans": _span_lines([[3, 4, "protein"], [3, 5, "RNA"]])}
  (tmp_path / "good_pred").write_text(pred.get(kind, GOLD[kind]), encoding="utf-8")
  return ["--gold", str(tmp_path / "good_gold"), "--pred", str(tmp_path / "good_pred")]


@pytest.mark.parametrize("kind,pred,expected", [(k, p, e) for k, cases in BAD.items() for p, e in cases],
                         ids=[f"{k}-{i}" for k, cases in BAD.items() for i in range(len(cases))])
def test_a_bad_prediction_file_is_one_line_at_its_line(tmp_path, capsys, kind, pred, expected):
  score.main([kind, *_good(tmp_path, kind)])  # The same gold with a valid prediction file scores.
  assert json.loads(capsys.readouterr().out.splitlines()[-1])["task"] == kind
  line = _refused(tmp_path, capsys, kind, GOLD[kind], pred)
  # Every line names the prediction file but a length mismatch, which names the longer file where the other ends.
  assert line.startswith((f"error: {tmp_path / 'pred'}", f"error: {tmp_path / 'gold'}:")), line
  assert re.search(expected, line), line


@pytest.mark.parametrize("kind,bad", [("conll", CONLL.replace("Peter NNP B-PER", "Peter NNP Peter")),
                                      ("scores", "1.0\nnan\n3\n"),
                                      ("squad", SQUAD_GOLD + json.dumps({"id": "q0", "answers": []}) + "\n"),
                                      ("squad", json.dumps({"id": "q0", "answers": [{"text": 3}]}) + "\n")],
                         ids=["conll-tag", "scores-nan", "squad-id-twice", "squad-answer-type"])
def test_what_a_prediction_file_is_refused_for_a_gold_file_is_too(tmp_path, capsys, kind, bad):
  pred = {"squad": '{"q0": "a"}'}.get(kind, GOLD[kind])
  line = _refused(tmp_path, capsys, kind, bad, pred)
  assert line.startswith(f"error: {tmp_path / 'gold'}:"), line


def test_span_fields_in_another_order_end_in_one_line_not_a_traceback(tmp_path):
  """The case of issue 71 through the command line: it ended in a traceback (a type sorted against an int)."""
  (tmp_path / "gold.jsonl").write_text(GOLD["spans"], encoding="utf-8")
  (tmp_path / "pred.jsonl").write_text(_span_lines([["RNA", 3, 5], [3, 4, "protein"]]), encoding="utf-8")
  done = subprocess.run([sys.executable, "-m", "tasks.scoring.score", "spans", "--gold", str(tmp_path / "gold.jsonl"),
                         "--pred", str(tmp_path / "pred.jsonl")], cwd=REPO, capture_output=True, text=True, check=False)
  assert done.returncode == 1 and done.stdout == ""
  assert done.stderr == (f"error: {tmp_path / 'pred.jsonl'}:1: expected prediction[0] in the documented field order "
                         "[start, end, type], got ['RNA', 3, 5] (the type first: write [3, 5, 'RNA'])\n")
