"""Orbax checkpoints in workdir/checkpoints: async saves, the last K plus the best by a metric, resume from the
newest readable one (a corrupt or partial newest one is reported, moved aside and the previous one used), and a
refusal to resume a workdir whose saved model config differs from the one asked for.

The input pipeline is a pure function of the step (launch/input_pipeline.py), so the step is its iterator state.
"""

import json
import sys
import time
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers

from configs import checks
from encoder import errors, files
from encoder.files import Path


def create_manager(workdir: Path, config: ml_collections.ConfigDict) -> ocp.CheckpointManager:
  """Async manager keeping config.keep_checkpoints latest plus the best by config.best_metric."""
  policies = [checkpoint_managers.LatestN(n=config.keep_checkpoints)]
  if config.best_metric:
    policies.append(checkpoint_managers.BestN(
        get_metric_fn=lambda metrics: metrics[config.best_metric], reverse=config.best_mode == "min", n=1,
        keep_checkpoints_without_metrics=False))
  # best_fn also makes orbax write each save's metrics (without it BestN never sees any and keeps nothing).
  best = (dict(best_fn=lambda metrics: metrics[config.best_metric], best_mode=config.best_mode)
          if config.best_metric else {})
  options = ocp.CheckpointManagerOptions(
      preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies), enable_async_checkpointing=True, **best)
  return ocp.CheckpointManager(files.absolute(workdir / "checkpoints"), options=options)


def save(manager: ocp.CheckpointManager, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
  """Starts an async save of `state` at `step` (with eval metrics when there are some, for best-N)."""
  manager.save(step, args=ocp.args.StandardSave(state), metrics=metrics, force=True)


def restore_latest(manager: ocp.CheckpointManager, abstract_state: Any, workdir: Path) -> Any | None:
  """The newest checkpoint that restores onto `abstract_state` (shapes, dtypes, shardings), or None if there is none.

  An unreadable one is reported on stderr and moved to workdir/corrupt_checkpoints/ (kept, never deleted).
  """
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
    except Exception as err:  # noqa: BLE001  (Orbax raises many types for truncated/missing files: all unreadable)
      moved = workdir / "corrupt_checkpoints" / f"{step}-{int(time.time())}"
      print(f"warning: checkpoint {manager.directory / str(step)} is unreadable ({type(err).__name__}: "
            f"{str(err)[:300]}); moving it to {moved} and trying the previous one", file=sys.stderr, flush=True)
      multihost_utils.sync_global_devices(f"restore-failed-{step}")
      if jax.process_index() == 0:
        files.move(manager.directory / str(step), moved)
      multihost_utils.sync_global_devices(f"moved-{step}")
      manager.reload()
  return None


def best_step(manager: ocp.CheckpointManager, metric: str, mode: str) -> int | None:
  """The kept checkpoint with the best saved `metric` ("max" or "min" mode; ties: the earliest), None if none has it."""
  scored = []
  for step in manager.all_steps():
    metrics = manager.metrics(step) or {}
    if metric in metrics:
      scored.append((metrics[metric] if mode == "max" else -metrics[metric], -step))
  return -max(scored)[1] if scored else None


def restore_step(manager: ocp.CheckpointManager, step: int, abstract_state: Any) -> Any:
  """The checkpoint of `step` restored onto `abstract_state` (shapes, dtypes, shardings)."""
  return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))


def saved_config(workdir: Path) -> dict | None:
  """The config.json of a workdir holding checkpoints (the run a start resumes), else None."""
  saved_path = workdir / "config.json"
  checkpoints = workdir / "checkpoints"
  has_checkpoints = checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir())
  return files.read_json(saved_path) if has_checkpoints and saved_path.is_file() else None


def check_compatible(workdir: Path, config: ml_collections.ConfigDict) -> None:
  """Refuses a workdir holding checkpoints written under a different model config (listing the differences)."""
  saved = saved_config(workdir)
  if saved is None:
    return
  saved_path = workdir / "config.json"
  differences = checks.incompatible_fields(saved, checks.to_dict(config))
  if differences:
    raise errors.ConfigError(
        f"{workdir} holds checkpoints of a different model ({saved_path} differs: {'; '.join(differences)}); "
        "use a new --workdir, or the saved config to resume")


def write_config(workdir: Path, config: ml_collections.ConfigDict) -> None:
  """workdir/config.json: the full resolved config of this run (process 0 only)."""
  if jax.process_index() == 0:
    (workdir / "config.json").write_text(json.dumps(checks.to_dict(config), indent=2, sort_keys=True) + "\n")
