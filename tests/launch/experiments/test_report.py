"""launch.experiments.report on hand-made workdirs (config.json, results.json, metrics.jsonl, predictions/,
sweep_point.json of a classification, a tagging and a pretraining sweep): the table's cells are the mean ± sample std
of results.json's numbers computed here by hand, its p-values equal `python -m tasks.scoring.score bootstrap` on the
same files with gold files written here, the curves are PNGs and the HTML page needs no other file."""

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from encoder import errors
from launch.experiments import report

REPO = Path(__file__).resolve().parents[3]
LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
TAGS = ("O", "B-PER", "I-PER", "B-LOC")
# group -> seed -> (dev accuracy, test accuracy, fraction of test predictions right)
CLASSIFICATION = {"base": {0: (80.0, 78.0, 0.70), 1: (84.0, 80.0, 0.72)},
                  "lr-0.001": {0: (86.0, 83.5, 0.80), 1: (85.0, 81.0, 0.76)}}


def _write(path: Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding="utf-8")


def _workdir(root: Path, name: str, group: str, seed: int, task: dict | str, results: dict | None,
             metric: str) -> Path:
  workdir = root / name
  _write(workdir / "config.json", json.dumps({"task": task, "seed": seed, "best_metric": metric}))
  _write(workdir / "sweep_point.json", json.dumps({"name": name, "group": group, "wall_s": 10.0 + seed}))
  lines = [{"step": s, "train/loss": 2.0 / s, "train/tokens_per_second": 100.0 * s} for s in (10, 20, 30)]
  lines.append({"step": 30, metric: 0.5})
  _write(workdir / "metrics.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
  if results is not None:
    _write(workdir / "results.json", json.dumps(results))
  return workdir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A sweep root of 4 classification runs, 2 tagging runs, 1 pretraining run and 1 unfinished run."""
  root = tmp_path_factory.mktemp("report") / "sweep"
  rng = np.random.default_rng(0)
  gold = rng.choice(LABELS, size=300)
  for group, by_seed in CLASSIFICATION.items():
    for seed, (dev, test, right) in by_seed.items():
      pred = np.where(rng.random(300) < right, gold, rng.choice(LABELS, size=300))
      workdir = _workdir(root, f"{group}_seed-{seed}", group, seed, {"name": "classification", "dataset": "sick"},
                         {"step": 30, "dev": {"accuracy": dev}, "test": {"accuracy": test}}, "eval/accuracy")
      _write(workdir / "predictions/test.jsonl", "".join(json.dumps({"text_a": "x", "label": g, "prediction": p})
                                                          + "\n" for g, p in zip(gold, pred)))
      _write(workdir / "predictions/test.labels", "".join(f"{p}\n" for p in pred))
  _workdir(root, "killed_seed-0", "killed", 0, {"name": "classification", "dataset": "sick"}, None, "eval/accuracy")
  sentences = [rng.choice(TAGS, size=rng.integers(3, 9)) for _ in range(120)]
  for name, right in (("crf", 0.9), ("greedy", 0.8)):
    workdir = _workdir(root, name, name, 0, {"name": "tagging", "dataset": "conll2003", "scheme": "IOB2"},
                       {"step": 30, "dev": {"f1": 90.0}, "test": {"f1": 85.0}}, "eval/f1")
    blocks = ["".join(f"w{i} {g} {g if rng.random() < right else rng.choice(TAGS)}\n" for i, g in enumerate(s))
              for s in sentences]
    _write(workdir / "predictions/test.conll", "\n".join(blocks))
  _workdir(root, "objectives-mlm", "objectives-mlm", 0, "",
           {"step": 30, "eval": {"eval/mlm_accuracy": 0.125, "eval/loss": 6.5}}, "eval/mlm_accuracy")
  out = root / "report"
  summary = report.write_report([root], out, baselines=["base", "greedy"], samples=3000)
  return root, out, summary


def _table(summary, title):
  return next(t for t in summary["tables"] if t["title"] == title)


def test_table_is_mean_and_sample_std_of_results(runs):
  _, out, summary = runs
  assert [t["title"] for t in summary["tables"]] == ["classification on sick", "tagging on conll2003", "pretraining"]
  markdown = (out / "report.md").read_text()
  # base: dev 80, 84 -> 82.00 ± 2.83; test 78, 80 -> 79.00 ± 1.41; wall 10, 11 -> 10.50 ± 0.71; tokens/s: median
  # of the log lines after the first (2000, 3000) = 2500 for every run; steps 30.
  assert "| base (baseline) | 2/2 | 82.00 ± 2.83 | 79.00 ± 1.41 | 30 ± 0 | 10.50 ± 0.71 | 2500 ± 0 |" in markdown
  assert "| lr-0.001 | 2/2 | 85.50 ± 0.71 | 82.25 ± 1.77 | 30 ± 0 |" in markdown
  assert "| killed | 0/1 | – | – | – | – | – | – |" in markdown
  assert "| objectives-mlm | 1/1 | 0.1250 | 6.50 | 30 | 10.00 | 2500 |" in markdown
  cells = _table(summary, "classification on sick")["groups"]["lr-0.001"]["cells"]
  assert cells["test accuracy"]["values"] == [83.5, 81.0]
  assert cells["test accuracy"]["std"] == pytest.approx(np.std([83.5, 81.0], ddof=1))  # Float64 both sides.


def _score_bootstrap(gold: Path, pred_a: Path, pred_b: Path, task: str) -> dict:
  command = [sys.executable, "-m", "tasks.scoring.score", "bootstrap", "--gold", str(gold), "--pred-a", str(pred_a),
             "--pred-b", str(pred_b), "--task", task, "--samples", "3000"]
  return json.loads(subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True).stdout
                    .splitlines()[-1])


@pytest.mark.slow
def test_p_values_equal_tasks_score_bootstrap(runs, tmp_path):
  root, out, summary = runs
  gold = tmp_path / "gold.labels"
  gold.write_text("".join(json.loads(line)["label"] + "\n"
                          for line in (root / "base_seed-0/predictions/test.jsonl").read_text().splitlines()))
  tests = _table(summary, "classification on sick")["bootstrap"]["lr-0.001"]
  assert [t["seed"] for t in tests] == [0, 1]
  for test in tests:
    expected = _score_bootstrap(gold, root / f"lr-0.001_seed-{test['seed']}/predictions/test.labels",
                                root / f"base_seed-{test['seed']}/predictions/test.labels", "labels")
    assert test["p_value"] == expected["p_value"] and test["delta"] == expected["delta"] > 0
  assert tests[0]["p_value"] < 0.05  # 80% against 70% right on 300 examples.
  gold_conll = tmp_path / "gold.conll"
  gold_conll.write_text("\n".join(" ".join(line.split()[:2]) for line in
                                  (root / "greedy/predictions/test.conll").read_text().split("\n")))
  (test,) = _table(summary, "tagging on conll2003")["bootstrap"]["crf"]
  expected = _score_bootstrap(gold_conll, root / "crf/predictions/test.conll", root / "greedy/predictions/test.conll",
                              "conll")
  assert test["p_value"] == expected["p_value"] and test["delta"] == expected["delta"]
  cell = f"{expected['p_value']:.4f} (seed 0, test f1 {100 * expected['delta']:+.2f})"
  assert cell in (out / "report.md").read_text()
  assert _table(summary, "pretraining")["baseline"] is None


def test_tags_without_a_scheme_get_no_entity_bootstrap(runs):
  """UD POS tagging (scheme "") has no entities: no p-value, where entity F1 would fail on its tags."""
  root, _, _ = runs
  run = {"workdir": str(root / "crf"), "task": {"name": "tagging", "dataset": "conll2003", "scheme": "IOB2"}}
  assert report.prediction_files(run, "test") == ("conll", root / "crf/predictions/test.conll",
                                                  root / "crf/predictions/test.conll")
  assert report.prediction_files(run | {"task": {"name": "tagging", "dataset": "ud_ewt_upos", "scheme": ""}},
                                 "test") is None


def test_curves_and_self_contained_page(runs):
  _, out, summary = runs
  for table in summary["tables"]:
    assert (out / f"{table['slug']}_curves.png").read_bytes().startswith(b"\x89PNG")
  page = (out / "report.html").read_text()
  sources = re.findall(r'src="([^"]*)"', page)
  assert len(sources) == 3 and all(s.startswith("data:image/png;base64,") for s in sources)
  assert base64.b64decode(sources[0].split(",", 1)[1]) == (out / "classification_on_sick_curves.png").read_bytes()
  assert "<td>82.00 ± 2.83</td>" in page and "href=" not in page


def test_user_errors(runs, tmp_path):
  root, _, _ = runs
  with pytest.raises(errors.UserError, match="--baseline nope: no such group or run"):
    report.write_report([root], tmp_path / "out", baselines=["nope"])
  result = subprocess.run([sys.executable, "-m", "launch.experiments.report", str(tmp_path / "missing")], cwd=REPO,
                          capture_output=True, text=True, check=False)
  assert result.returncode == 1 and result.stderr.startswith("error:") and "missing" in result.stderr
  assert "Traceback" not in result.stderr
