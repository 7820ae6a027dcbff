"""End-to-end runs of launch.main in subprocesses on real text (WikiText-2): device-count invariance, pmap,
2 processes x 4 devices, kill-and-resume (also while a checkpoint is written or committed), gradient accumulation,
FSDP and remat, bad inputs. The runs are benchmarks/determinism.py's helpers; they share one compilation cache and
one tokenized-corpus cache."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from benchmarks import determinism
from configs import pretrain
from encoder.config import AUTO, PLATFORM_FIELDS, resolve_platform
from objectives import data as pretraining_data

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).

# Losses and gradient norms (relative): the runs sum the same float32 terms (up to ~2e6, the word embeddings' squared
# gradients) in another order (devices, shards, processes, micro-batches); a pairwise sum's rounding is at most about
# log2(n) * eps = 21 * 1.2e-7 = 2.5e-6 relative (measured: <= 2.2e-7), while a gradient off by a factor (a pmean for a
# psum) or missing a shard's part moves the grad norm by far more than 1e-5.
TOLERANCE = 1e-5
# Final parameters after 20 AdamW steps at lr 1e-3, each leaf's largest difference over its largest magnitude: Adam
# divides every gradient component by its own RMS, so the rounding of small components is not damped and compounds
# over the steps (measured: <= 6.6e-6); one update of lr that differs on a leaf of magnitude ~0.1 is ~1e-2.
PARAMS_TOLERANCE = 1e-4


def assert_same_training(diffs: dict[str, float], *names: str) -> None:
  """Every logged loss and grad norm within TOLERANCE, every final parameter within PARAMS_TOLERANCE of the 1-device
  run, for each of `names` (determinism.differences keys)."""
  limits = {"max_rel_diff": TOLERANCE, "grad_norm_max_rel_diff": TOLERANCE, "params_max_rel_diff": PARAMS_TOLERANCE}
  over = {f"{name}_{kind}": diffs[f"{name}_{kind}"] for name in names for kind, limit in limits.items()
          if not diffs[f"{name}_{kind}"] <= limit}
  assert not over, over


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("runs")
  return root, root / "cache"


@pytest.fixture(scope="module")
def baseline(runs):
  return determinism.baseline(*runs)


def test_baseline_writes_logs_results_and_checkpoints(baseline):
  records = [json.loads(line) for line in (baseline / "metrics.jsonl").read_text().splitlines()]
  train = [r for r in records if "train/loss" in r]
  assert [r["step"] for r in train] == list(range(1, 21))
  assert {"train/mlm_accuracy", "train/learning_rate", "train/grad_norm", "train/tokens_per_second",
          "train/padding"} <= set(train[0])
  assert train[-1]["train/loss"] < train[0]["train/loss"]
  results = json.loads((baseline / "results.json").read_text())
  assert results["step"] == 20 and "eval/mlm_accuracy" in results["eval"]
  recorded = json.loads((baseline / "config.json").read_text())
  assert recorded["num_train_steps"] == 20
  # The platform's choices, made at start-up, recorded as values (not "auto"): on this CPU what its modules traced.
  asked = recorded["model"] | dict.fromkeys(PLATFORM_FIELDS, AUTO)
  assert {k: recorded["model"][k] for k in PLATFORM_FIELDS} == resolve_platform(asked)
  assert sorted(int(p.name) for p in (baseline / "checkpoints").iterdir() if p.name.isdigit())[-1] == 20
  assert any((baseline / "tensorboard").iterdir())


def test_rerunning_a_finished_run_keeps_its_results(runs, baseline):
  before = (baseline / "results.json").read_text()
  result = determinism.run(baseline, [], cache=runs[1])
  assert "already trained 20 steps" in result.stdout
  assert (baseline / "results.json").read_text() == before


def test_same_training_on_1_and_8_devices_and_2x4_mesh_and_pmap_and_2_processes(runs, baseline):
  assert_same_training(determinism.device_invariance(*runs), "device_invariance", "pmap", "multiprocess")


def test_sigkill_in_a_checkpoint_write_or_commit_or_sigterm_and_resume_is_bitwise_equal(runs, baseline):
  # Killed mid-write of step 15: only its temporary directory, no commit file; killed after step 20's commit file,
  # before its rename: a temporary directory holding commit_success.txt. Neither is restored: each restart resumes
  # from the newest committed step.
  assert determinism.kill_and_resume(*runs) == {
      "kill_in_write": {"resumed_from": None, "committed": [5, 10], "temporary": ["15.orbax-checkpoint-tmp"],
                        "temporary_commit_file": [False]},
      "kill_in_commit": {"resumed_from": 10, "committed": [5, 10, 15], "temporary": ["20.orbax-checkpoint-tmp"],
                         "temporary_commit_file": [True]},
      "after_kill_in_commit_resumed_from": 15, "resume_bitwise_equal": True,
      "sigterm_resumed_from": 13, "sigterm_resume_bitwise_equal": True}


def test_accumulation_equals_the_larger_batch(runs, baseline):
  assert_same_training(determinism.accumulation(*runs), "accumulation")


def test_fsdp_and_remat_train_the_same_and_fsdp_shards_the_state(runs, baseline):
  diffs = determinism.memory_savers(*runs)
  assert_same_training(diffs, "fsdp", "remat", "fsdp_remat_accum")
  assert diffs["fsdp_state_fraction"] < 0.25  # 8 data devices: the embedding tables and kernels split 8 ways.
  assert diffs["fsdp_vocab_warning"]


def test_nan_stops_naming_the_step_and_keeps_checkpoints(runs, baseline, tmp_path):
  workdir = tmp_path / "nan"
  result = determinism.run(workdir, cache=runs[1], check=False, fault=("nan", 13))
  assert result.returncode != 0
  assert "NaN/inf at step 13" in result.stderr and "Traceback" not in result.stderr
  steps = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == [5, 10]
  params = determinism.final_params(workdir)  # The step-10 checkpoint is intact and finite.
  assert all(np.isfinite(v).all() for v in params.values())
  assert len((workdir / "metrics.jsonl").read_text().splitlines()) == 12  # Every line written before is kept.


def test_corrupt_latest_checkpoint_resumes_from_previous(runs, baseline, tmp_path):
  workdir = tmp_path / "corrupt"
  shutil.copytree(baseline, workdir)
  for data_file in (workdir / "checkpoints" / "20").rglob("*"):
    if data_file.is_file() and "ocdbt" in str(data_file):
      data_file.write_bytes(b"garbage")
  result = determinism.run(workdir, ["--config.num_train_steps=25"], cache=runs[1])
  assert "checkpoints/20 is unreadable" in result.stderr
  assert "resuming from checkpoint step 15" in result.stdout
  assert json.loads((workdir / "results.json").read_text())["step"] == 25
  assert [p.name.split("-")[0] for p in (workdir / "corrupt_checkpoints").iterdir()] == ["20"]


def test_refuses_workdir_with_another_model(runs, baseline):
  result = subprocess.run(determinism.command(baseline, ["--config.model.num_layers=3"], runs[1]),
                          cwd=determinism.REPO, capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode != 0 and "model.num_layers: 2 -> 3" in result.stderr
  assert json.loads((baseline / "config.json").read_text())["model"]["num_layers"] == 2  # Not overwritten.


def test_missing_and_empty_data_files(tmp_path):
  config = pretrain.get_config("runlocal")
  config.data.train_files = str(tmp_path / "absent.txt")
  with pytest.raises(FileNotFoundError, match=r"absent\.txt.*config\.data\.train_files"):
    pretraining_data.load(config, cache_dir=tmp_path / "cache")
  (tmp_path / "empty.txt").write_text("")
  config.data.train_files = str(tmp_path / "empty.txt")
  with pytest.raises(ValueError, match="empty"):
    pretraining_data.load(config, cache_dir=tmp_path / "cache")


def test_worker_processes_feed_the_same_batches(runs, baseline, tmp_path):
  # config.data.workers: grain's worker processes (spawned, re-importing launch.main) mask and batch instead of
  # threads; the batches, so the losses and parameters, are the same bit for bit, and no shared memory is left over.
  workdir = tmp_path / "workers"
  result = determinism.run(workdir, ["--config.data.workers=2"], cache=runs[1])
  losses = lambda run: [json.loads(line).get("train/loss") for line in (run / "metrics.jsonl").read_text().splitlines()]
  assert losses(workdir) == losses(baseline)
  ours, theirs = determinism.final_params(workdir), determinism.final_params(baseline)
  assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)
  assert "leaked" not in result.stderr
