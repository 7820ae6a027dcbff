"""launch.experiments.suite_report on fabricated suite directories: per-task medians over seeds and suite averages
equal numpy's, and the two-checkpoint p-values equal a plain loop over scikit-learn / scipy / seqeval with the
same resampling draws (median over seeds of each side on every resample)."""

import json
import random
import re
import shutil

import numpy as np
import pytest
import scipy.stats
import seqeval.metrics
from sklearn.metrics import accuracy_score, f1_score

from encoder import errors
from launch.experiments import suite_report
from tests.tasks.scoring.test_squad import official_f1_score, official_metric_max_over_ground_truths

SAMPLES = 200  # One chunk of paired_bootstrap's draws: the loop below draws the same.
N = 50  # Test examples (sentences) per task.


def _f1(gold, pred):
  return f1_score(gold, pred, pos_label="1", zero_division=0)


def _pearson(gold, pred):
  return scipy.stats.pearsonr(gold, pred).statistic


def _entity_f1(gold, pred):
  return seqeval.metrics.f1_score(gold, pred)


def _squad_f1(gold, pred):
  """evaluate-v1.1.py's F1 (tests/tasks/scoring/test_squad.py's restatement), as a fraction."""
  return np.mean([official_metric_max_over_ground_truths(official_f1_score, p, g) for g, p in zip(gold, pred)])


WORDS = ["the", "Eiffel", "tower", "in", "Paris", "1889", "an", "iron", "lattice", "Gustave"]


# task -> (family, metric, split, reference metric on (gold, pred) lists)
TASKS = {"mrpc": ("classification", "f1", "test", _f1),
         "sick_relatedness": ("regression", "pearson", "test", _pearson),
         "conll2003": ("tagging", "f1", "test", _entity_f1),
         "squad": ("question_answering", "f1", "test", _squad_f1),
         "sst2": ("classification", "accuracy", "dev", accuracy_score)}


def _gold(task: str, rng: random.Random):
  if task == "sick_relatedness":
    return [round(rng.uniform(1, 5), 1) for _ in range(N)]
  if task == "conll2003":
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC"]
    return [[rng.choice(tags) for _ in range(rng.randint(1, 6))] for _ in range(N)]
  if task == "squad":  # Gold answers: 1-3 spans of the context " ".join(WORDS).
    spans = lambda: " ".join(WORDS[(i := rng.randrange(8)):i + rng.randint(1, 3)])
    return [[spans() for _ in range(rng.randint(1, 3))] for _ in range(N)]
  return [rng.choice("011") for _ in range(N)]


def _predict(task: str, gold, rng: random.Random, noise: float):
  if task == "sick_relatedness":
    return [g + rng.gauss(0, 2 * noise) for g in gold]
  if task == "conll2003":
    return [[rng.choice(["O", "B-PER", "I-PER", "B-LOC"]) if rng.random() < noise else t for t in s] for s in gold]
  if task == "squad":  # A gold answer, or another span of the context (partial credit), or nothing.
    spans = lambda: " ".join(WORDS[(i := rng.randrange(9)):i + rng.randint(0, 2)])
    return [spans() if rng.random() < 2 * noise else g[0] for g in gold]
  return [rng.choice("01") if rng.random() < noise else g for g in gold]


def _write_run(root, task, seed, gold, pred, parent=None):
  """A finished fine-tuning workdir as the engine and the sweep leave it (the files the report reads); parent: the
  ablation's pretraining point it started from."""
  family, metric, split, reference = TASKS[task]
  workdir = root / f"{parent + '__' if parent else ''}task-{task}_seed-{seed}"
  (workdir / "predictions").mkdir(parents=True)
  config = {"seed": seed, "best_metric": f"eval/{metric}",
            "task": {"name": family, "dataset": task, "metric": metric, "scheme": "IOB2" if family == "tagging" else "",
                     "score_mode": "conlleval",
                     "positive_label": "1" if metric == "f1" and family == "classification" else ""}}
  scores = {metric: 100 * reference(gold, pred)}
  results = {"step": 10, "stopped_early": False, "dev": scores if split == "dev" else {"x": 0.0},
             "test": scores if split == "test" else {}}
  point = {"config": f"configs/finetune.py:init=hf:x,task={task}", "group": f"task-{task}", "wall_s": 1.0,
           "parent": parent}
  for name, content in (("config.json", config), ("results.json", results), ("sweep_point.json", point)):
    (workdir / name).write_text(json.dumps(content))
  if family == "tagging":
    text = "\n".join("".join(f"w{i} {g} {p}\n" for i, (g, p) in enumerate(zip(gs, ps))) for gs, ps in zip(gold, pred))
    (workdir / "predictions" / f"{split}.conll").write_text(text)
  elif family == "question_answering":  # The record and its prediction as character offsets of the context.
    context = " ".join(WORDS)
    offsets = lambda text: {"start": context.index(text), "end": context.index(text) + len(text), "score": 1.0}
    (workdir / "predictions" / f"{split}.jsonl").write_text("".join(
        json.dumps({"id": str(i), "question": "q", "context": context, "is_impossible": False,
                    "answers": [{"text": a, "start": context.index(a)} for a in g], "prediction": offsets(p)}) + "\n"
        for i, (g, p) in enumerate(zip(gold, pred))))
  else:
    key = "score" if family == "regression" else "label"
    (workdir / "predictions" / f"{split}.jsonl").write_text(
        "".join(json.dumps({"text_a": "t", key: g, "prediction": p}) + "\n" for g, p in zip(gold, pred)))
  return scores[metric]


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
  """Suite A (5 tasks, seeds 0-2) and B (4 tasks, seeds 0-1; no SST-2): their roots, gold and predictions."""
  rng = random.Random(0)
  gold = {task: _gold(task, rng) for task in TASKS}
  made = {}
  for name, seeds, tasks, noise in (("a", (0, 1, 2), list(TASKS), 0.2), ("b", (0, 1), list(TASKS)[:4], 0.3)):
    root = tmp_path_factory.mktemp(f"suite_{name}")
    preds = {t: [_predict(t, gold[t], rng, noise) for _ in seeds] for t in tasks}
    values = {t: [_write_run(root, t, s, gold[t], p) for s, p in zip(seeds, preds[t])] for t in tasks}
    made[name] = (root, preds, values)
  (made["a"][0] / "sweep.jsonl").write_text(json.dumps({"name": "task-ud_pos_seed-0", "status": "failed",
                                                        "returncode": 1, "error": "error: out of memory"}) + "\n")
  return gold, made


def test_one_suite_gives_per_task_medians_and_their_mean(suites, tmp_path):
  _, made = suites
  root, _, values = made["a"]
  numbers = suite_report.write([root], tmp_path)
  assert numbers["tasks"] == ["sst2", "mrpc", "sick_relatedness", "conll2003", "squad"]  # The suite's order.
  for task, row in numbers["rows"][0].items():
    assert row["seeds"] == [0, 1, 2] and row["split"] == TASKS[task][2]
    np.testing.assert_allclose(row["values"], values[task], rtol=0, atol=1e-12)  # Float64 both sides: rounding only.
    assert row["median"] == pytest.approx(np.median(values[task]), abs=1e-12)
  assert numbers["averages"][0] == pytest.approx(np.mean([np.median(v) for v in values.values()]), abs=1e-12)
  assert "ud_pos" in numbers["not_run"] and "comparison" not in numbers
  text = (tmp_path / "suite.md").read_text()
  assert "| **suite average** (5 tasks) |" in text and "Not run: " in text and "ud_pos" in text
  assert "- task-ud_pos_seed-0: failed: error: out of memory" in text  # The sweep's failed point is listed.


def test_two_suites_compared_task_by_task_as_a_plain_bootstrap_loop(suites, tmp_path):
  gold, made = suites
  (root_a, preds_a, values_a), (root_b, preds_b, values_b) = made["a"], made["b"]
  numbers = suite_report.write([root_a, root_b], tmp_path, samples=SAMPLES)
  shared = ["mrpc", "sick_relatedness", "conll2003", "squad"]
  assert numbers["shared"] == shared and set(numbers["comparison"]) == set(shared)
  for i, values in enumerate((values_a, values_b)):
    assert numbers["averages"][i] == pytest.approx(np.mean([np.median(values[t]) for t in shared]),  # Float64.
                                                  abs=1e-12)
  for task in shared:
    reference, g = TASKS[task][3], gold[task]
    draws = np.random.default_rng(0).integers(0, N, size=(SAMPLES, N))
    median = lambda preds, idx: np.median([reference([g[i] for i in idx], [p[i] for i in idx]) for p in preds])  # noqa: B023  (called within the iteration)
    observed = median(preds_a[task], range(N)) - median(preds_b[task], range(N))
    deltas = np.array([median(preds_a[task], idx) - median(preds_b[task], idx) for idx in draws])
    sign = 1 if observed >= 0 else -1  # Tested in the direction of the observed difference.
    compared = numbers["comparison"][task]
    assert compared["delta"] == pytest.approx(100 * observed, abs=1e-9)  # Float64 percents: rounding only.
    assert compared["delta"] == pytest.approx(np.median(values_a[task]) - np.median(values_b[task]), abs=1e-9)
    assert compared["better"] == ("A" if sign > 0 else "B")
    assert compared["p_value"] == np.mean(sign * deltas >= 2 * sign * observed - 1e-12), task
  text = (tmp_path / "suite.md").read_text()
  assert "| sst2 | dev accuracy | 3 / 0 |" in text and "| **suite average** (4 tasks) |" in text


@pytest.fixture(scope="module")
def ablation(suites, tmp_path_factory):
  """One ablation root: point p-a fine-tuned as suite A, p-b as suite B (fewer tasks and seeds), p-c as A again."""
  gold, made = suites
  root = tmp_path_factory.mktemp("ablation")
  for point, name in (("p-a", "a"), ("p-b", "b"), ("p-c", "a")):
    for task, preds in made[name][1].items():
      for seed, pred in enumerate(preds):
        _write_run(root, task, seed, gold[task], pred, parent=point)
  return root


def test_by_point_compares_each_ablation_point_with_the_baseline_as_two_suites_would(suites, ablation, tmp_path):
  _, made = suites
  pair = suite_report.write([made["a"][0], made["b"][0]], tmp_path / "pair", samples=SAMPLES)
  numbers = suite_report.write([ablation], tmp_path / "points", samples=SAMPLES, by_point=True, baseline="p-a")
  assert numbers["points"] == ["p-a", "p-b", "p-c"] and numbers["shared"] == pair["shared"]
  for point, index in (("p-a", 0), ("p-b", 1), ("p-c", 0)):  # Each point's rows and average are its suite's.
    assert numbers["rows"][point] == pair["rows"][index] and numbers["averages"][point] == pair["averages"][index]
  for task, compared in pair["comparison"].items():  # p-b against p-a: B against A, the same resamples.
    against = numbers["comparison"]["p-b"][task]
    assert against["delta"] == -compared["delta"] and against["p_value"] == compared["p_value"]
    assert against["better"] == {"A": "B", "B": "A", "tie": "tie"}[compared["better"]]
  assert all(c["delta"] == 0 and c["better"] == "tie" for c in numbers["comparison"]["p-c"].values())
  assert suite_report.p_text({"p_value": 0.0, "samples": 10_000}) == "< 0.0001"
  assert suite_report.p_text({"p_value": 0.01234, "samples": 10_000}) == "0.0123"
  assert set(numbers["comparison"]["p-c"]) == set(made["a"][1]) and "p-a" not in numbers["comparison"]
  text = (tmp_path / "points" / "suite.md").read_text()
  squad = numbers["comparison"]["p-b"]["squad"]
  assert "| p-a (baseline) | " in text and "| suite average (4 tasks) |" in text
  assert (f"| {numbers['rows']['p-b']['squad']['median']:.2f} [2 seeds] ({squad['delta']:+.2f}, "
          f"p {suite_report.p_text(squad)}) |") in text
  assert text.splitlines()[-1].startswith("| p-c | ") and "| – |" in text  # p-b ran no SST-2.


def test_by_point_mistakes_are_one_line_errors(suites, ablation, tmp_path):
  _, made = suites
  with pytest.raises(errors.UserError, match=r"runs from 3 pretraining points \(p-a, p-b, p-c\).*--by-point"):
    suite_report.write([ablation], tmp_path)
  with pytest.raises(errors.UserError, match=r"--baseline p-z: no finished fine-tuning run from that point.*p-a, p-b"):
    suite_report.write([ablation], tmp_path, by_point=True, baseline="p-z")
  with pytest.raises(errors.UserError, match="no finished fine-tuning run of a sweep's pretraining point"):
    suite_report.write([made["a"][0]], tmp_path, by_point=True)
  with pytest.raises(SystemExit) as exit_info:
    suite_report.main([str(ablation), "--baseline", "p-a"])
  assert exit_info.value.code == "error: --baseline names an ablation's point: it needs --by-point"


def test_a_damaged_results_json_is_named_with_its_line(suites, tmp_path):
  root = shutil.copytree(suites[1]["a"][0], tmp_path / "suite")
  damaged = next(root.rglob("results.json"))
  damaged.write_text('{"dev": {"f1": 91.2},\n "test": \n', encoding="utf-8")  # Cut short, as by a full disk.
  with pytest.raises(errors.UserError, match=f"^{re.escape(str(damaged))}:3: expected JSON"):
    suite_report.write([root], tmp_path / "out")
