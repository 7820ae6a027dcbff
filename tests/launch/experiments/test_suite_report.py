"""launch.experiments.suite_report on fabricated suite directories: per-task medians over seeds and suite averages
equal numpy's, and the two-checkpoint p-values equal a plain loop over scikit-learn / scipy / seqeval with the
same resampling draws (median over seeds of each side on every resample)."""

import json
import random

import numpy as np
import pytest
import scipy.stats
import seqeval.metrics
from sklearn.metrics import accuracy_score, f1_score

from launch.experiments import suite_report

SAMPLES = 200  # One chunk of paired_bootstrap's draws: the loop below draws the same.
N = 50  # Test examples (sentences) per task.


def _f1(gold, pred):
  return f1_score(gold, pred, pos_label="1", zero_division=0)


def _pearson(gold, pred):
  return scipy.stats.pearsonr(gold, pred).statistic


def _entity_f1(gold, pred):
  return seqeval.metrics.f1_score(gold, pred)


# task -> (family, metric, split, reference metric on (gold, pred) lists)
TASKS = {"mrpc": ("classification", "f1", "test", _f1),
         "sick_relatedness": ("regression", "pearson", "test", _pearson),
         "conll2003": ("tagging", "f1", "test", _entity_f1),
         "sst2": ("classification", "accuracy", "dev", accuracy_score)}


def _gold(task: str, rng: random.Random):
  if task == "sick_relatedness":
    return [round(rng.uniform(1, 5), 1) for _ in range(N)]
  if task == "conll2003":
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC"]
    return [[rng.choice(tags) for _ in range(rng.randint(1, 6))] for _ in range(N)]
  return [rng.choice("011") for _ in range(N)]


def _predict(task: str, gold, rng: random.Random, noise: float):
  if task == "sick_relatedness":
    return [g + rng.gauss(0, 2 * noise) for g in gold]
  if task == "conll2003":
    return [[rng.choice(["O", "B-PER", "I-PER", "B-LOC"]) if rng.random() < noise else t for t in s] for s in gold]
  return [rng.choice("01") if rng.random() < noise else g for g in gold]


def _write_run(root, task, seed, gold, pred):
  """A finished fine-tuning workdir as the engine and the sweep leave it (the files the report reads)."""
  family, metric, split, reference = TASKS[task]
  workdir = root / f"task-{task}_seed-{seed}"
  (workdir / "predictions").mkdir(parents=True)
  config = {"seed": seed, "best_metric": f"eval/{metric}",
            "task": {"name": family, "dataset": task, "metric": metric, "scheme": "IOB2" if family == "tagging" else "",
                     "score_mode": "conlleval", "positive_label": "1" if metric == "f1" else ""}}
  scores = {metric: 100 * reference(gold, pred)}
  results = {"step": 10, "stopped_early": False, "dev": scores if split == "dev" else {"x": 0.0},
             "test": scores if split == "test" else {}}
  point = {"config": f"configs/finetune.py:init=hf:x,task={task}", "group": f"task-{task}", "wall_s": 1.0}
  for name, content in (("config.json", config), ("results.json", results), ("sweep_point.json", point)):
    (workdir / name).write_text(json.dumps(content))
  if family == "tagging":
    text = "\n".join("".join(f"w{i} {g} {p}\n" for i, (g, p) in enumerate(zip(gs, ps))) for gs, ps in zip(gold, pred))
    (workdir / "predictions" / f"{split}.conll").write_text(text)
  else:
    key = "score" if family == "regression" else "label"
    (workdir / "predictions" / f"{split}.jsonl").write_text(
        "".join(json.dumps({"text_a": "t", key: g, "prediction": p}) + "\n" for g, p in zip(gold, pred)))
  return scores[metric]


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
  """Suite A (4 tasks, seeds 0-2) and B (3 tasks, seeds 0-1; no SST-2): their roots, gold and predictions."""
  rng = random.Random(0)
  gold = {task: _gold(task, rng) for task in TASKS}
  made = {}
  for name, seeds, tasks, noise in (("a", (0, 1, 2), list(TASKS), 0.2), ("b", (0, 1), list(TASKS)[:3], 0.3)):
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
  assert numbers["tasks"] == ["sst2", "mrpc", "sick_relatedness", "conll2003"]  # The suite's order.
  for task, row in numbers["rows"][0].items():
    assert row["seeds"] == [0, 1, 2] and row["split"] == TASKS[task][2]
    np.testing.assert_allclose(row["values"], values[task], rtol=0, atol=1e-12)
    assert row["median"] == pytest.approx(np.median(values[task]), abs=1e-12)
  assert numbers["averages"][0] == pytest.approx(np.mean([np.median(v) for v in values.values()]), abs=1e-12)
  assert "squad" in numbers["not_run"] and "comparison" not in numbers
  text = (tmp_path / "suite.md").read_text()
  assert "| **suite average** (4 tasks) |" in text and "Not run: " in text and "squad" in text
  assert "- task-ud_pos_seed-0: failed: error: out of memory" in text  # The sweep's failed point is listed.


def test_two_suites_compared_task_by_task_as_a_plain_bootstrap_loop(suites, tmp_path):
  gold, made = suites
  (root_a, preds_a, values_a), (root_b, preds_b, values_b) = made["a"], made["b"]
  numbers = suite_report.write([root_a, root_b], tmp_path, samples=SAMPLES)
  shared = ["mrpc", "sick_relatedness", "conll2003"]
  assert numbers["shared"] == shared and set(numbers["comparison"]) == set(shared)
  for i, values in enumerate((values_a, values_b)):
    assert numbers["averages"][i] == pytest.approx(np.mean([np.median(values[t]) for t in shared]), abs=1e-12)
  for task in shared:
    reference, g = TASKS[task][3], gold[task]
    draws = np.random.default_rng(0).integers(0, N, size=(SAMPLES, N))
    median = lambda preds, idx: np.median([reference([g[i] for i in idx], [p[i] for i in idx]) for p in preds])
    observed = median(preds_a[task], range(N)) - median(preds_b[task], range(N))
    deltas = np.array([median(preds_a[task], idx) - median(preds_b[task], idx) for idx in draws])
    sign = 1 if observed >= 0 else -1  # Tested in the direction of the observed difference.
    compared = numbers["comparison"][task]
    assert compared["delta"] == pytest.approx(100 * observed, abs=1e-9)
    assert compared["delta"] == pytest.approx(np.median(values_a[task]) - np.median(values_b[task]), abs=1e-9)
    assert compared["better"] == ("A" if sign > 0 else "B")
    assert compared["p_value"] == np.mean(sign * deltas >= 2 * sign * observed - 1e-12), task
  text = (tmp_path / "suite.md").read_text()
  assert "| sst2 | dev accuracy | 3 / 0 |" in text and "| **suite average** (3 tasks) |" in text
