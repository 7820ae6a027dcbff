"""A scoring kind added from this file alone (no edit to library code): "exact", the share of examples whose
predicted line equals the gold line character for character (a case-sensitive exact match, as a normalised-answer
task would score). One `kinds.register` call gives it a `tasks.scoring.score` subcommand, a `bootstrap --task`, and
the reports' paired bootstrap and per-seed statistics for a family that names it, which shows that nothing outside
tasks/scoring/kinds.py names a kind."""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from encoder import errors
from launch.experiments import report, suite_report
from tasks import classification, registry
from tasks.readers.lines import numbered_lines
from tasks.scoring import bootstrap, kinds, score

GOLD = ["Paris", "1889", "iron", "Eiffel", "tower", "Seine", "France", "1887"]
A = ["Paris", "1889", "Iron", "Eiffel", "tower", "Seine", "France", "1888"]  # 6 of 8 right.
B = ["paris", "1889", "iron", "eiffel", "Tower", "seine", "France", "1888"]  # 3 of 8 right.


def _lines(path: str) -> list[str]:
  return [line.strip() for _, line in numbered_lines(path) if line.strip()]


def _statistics(metric: str, gold: Sequence, pred: Sequence, **_) -> tuple[np.ndarray, Any] | None:
  if metric != "exact":
    return None
  matches = np.array([g == p for g, p in zip(gold, pred)], np.float64)
  return np.stack([matches, np.ones(len(matches))], axis=1), lambda summed: summed[..., 0] / summed[..., 1]


def _score(args: argparse.Namespace) -> dict[str, Any]:
  gold, pred = _lines(args.gold), _lines(args.pred)
  stats, metric = _statistics("exact", gold, pred)
  return {"task": "exact", "exact": float(metric(stats.sum(axis=0))), "examples": len(gold)}


def _bootstrap(args: argparse.Namespace) -> tuple[bootstrap.BootstrapResult, str]:
  gold = _lines(args.gold)
  (a, metric), (b, _) = (_statistics("exact", gold, _lines(path)) for path in (args.pred_a, args.pred_b))
  return bootstrap.paired_bootstrap(a, b, metric, args.samples, args.seed), "exact"


def _run_columns(directory: Path, split: str) -> tuple[list, list]:
  rows = [json.loads(line) for line in (directory / f"{split}.jsonl").read_text().splitlines()]
  return [r["label"] for r in rows], [r["prediction"] for r in rows]


EXACT = kinds.ScoringKind(
    "exact", _score, bootstrap=_bootstrap, suffix="labels",
    gold_text=lambda source: "".join(f"{r['label']}\n" for r in map(json.loads, source.read_text().splitlines())),
    run_columns=_run_columns, statistics=_statistics)


class ExactClassification(classification.Classification):
  """Classification whose predictions are scored as exact matches: a family naming the new kind."""
  name = "exact_classification"
  scoring = "exact"


@pytest.fixture(autouse=True)
def registered(monkeypatch):
  """The kind's one registry line (`kinds.register(EXACT)`) and a family naming it, undone after each test."""
  monkeypatch.setitem(kinds.KINDS, EXACT.name, EXACT)
  monkeypatch.setitem(registry.FAMILIES, ExactClassification.name, ExactClassification)


def _run(root: Path, name: str, predictions: Sequence[str]) -> dict[str, Any]:
  """A fine-tuning run's workdir as tasks.evaluation writes it: predictions/test.jsonl and test.labels."""
  directory = root / name / "predictions"
  directory.mkdir(parents=True)
  (directory / "test.jsonl").write_text("".join(json.dumps({"text_a": f"q{i}", "label": g, "prediction": p}) + "\n"
                                                for i, (g, p) in enumerate(zip(GOLD, predictions))))
  (directory / "test.labels").write_text("".join(f"{p}\n" for p in predictions))
  return {"workdir": str(root / name), "seed": 0,
          # Completed from the family's declared fields, as report.load_run reads a run's config.json.
          "task": registry.complete_task({"name": "exact_classification", "metric": "exact", "scheme": ""})}


def _printed(capsys) -> dict[str, Any]:
  return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_register_gives_the_kind_a_score_command_and_a_bootstrap(tmp_path, capsys):
  gold, a, b = (tmp_path / f"{name}.txt" for name in ("gold", "a", "b"))
  for path, lines in ((gold, GOLD), (a, A), (b, B)):
    path.write_text("\n".join(lines) + "\n")
  score.score_files(["exact", "--gold", str(gold), "--pred", str(a)])
  assert _printed(capsys) == {"task": "exact", "exact": 6 / 8, "examples": 8}
  score.score_files(["bootstrap", "--task", "exact", "--gold", str(gold), "--pred-a", str(a), "--pred-b", str(b),
                     "--samples", "2000", "--seed", "1"])
  printed = _printed(capsys)
  # Independently: the same paired resampling (bootstrap.paired_bootstrap) of numpy's per-example matches.
  matches = lambda pred: np.stack([[float(g == p) for g, p in zip(GOLD, pred)], np.ones(8)], axis=1)
  expected = bootstrap.paired_bootstrap(matches(A), matches(B), lambda s: s[:, 0] / s[:, 1], 2000, 1)
  assert (printed["metric"], printed["a"], printed["b"]) == ("exact", 6 / 8, 3 / 8)
  assert printed["delta"] == pytest.approx(3 / 8, abs=1e-15) and printed["p_value"] == expected.p_value
  with pytest.raises(errors.UserError, match="invalid choice: 'exactly'"):  # A kind outside the registry: refused.
    score.parser().parse_args(["bootstrap", "--task", "exactly", "--gold", "g", "--pred-a", "a", "--pred-b", "b"])


def test_the_reports_bootstrap_and_per_seed_statistics_take_a_registered_kind(tmp_path):
  run_a, run_b = _run(tmp_path, "a", A), _run(tmp_path, "b", B)
  kind, pred, gold_source = report.prediction_files(run_a, "test")
  assert (kind, pred, gold_source) == ("exact", tmp_path / "a/predictions/test.labels",
                                       tmp_path / "a/predictions/test.jsonl")
  gold = tmp_path / "gold.txt"
  gold.write_text(report.gold_text(kind, gold_source))
  assert gold.read_text().split("\n")[:-1] == GOLD
  result = report.bootstrap_p(kind, gold, pred, report.prediction_files(run_b, "test")[1], samples=500)
  assert (result["a"], result["b"]) == (6 / 8, 3 / 8)
  found, stats, metric = suite_report.run_statistics(run_a, "test")
  assert found == GOLD and stats.shape == (8, 2) and metric(stats.sum(axis=0)[None])[0] == 6 / 8
  assert suite_report.run_statistics(run_a | {"task": run_a["task"] | {"metric": "f1"}}, "test") is None
