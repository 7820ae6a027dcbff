"""Determinism of the training engine, in real subprocesses: device-count invariance (1 device, 8 devices as a data
mesh and as a 2x4 data x model mesh, pmap, 2 processes x 4 devices through jax.distributed), kill (SIGKILL while a
checkpoint is written and while it is committed; SIGTERM; injected by the test harness tests/faults.py) and resume,
gradient accumulation, and the memory savers (FSDP, remat, both with accumulation and a model axis). tests/launch
reuses these helpers.

  python -m benchmarks.determinism    # last line: one JSON object with the measured differences
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from encoder import cli, errors

REPO = Path(__file__).resolve().parents[1]
CONFIG = "configs/pretrain.py:runlocal"
# The tiny runlocal model for 20 steps, dropout off (so pmap and jit draw no different random bits), a loss line every
# step, checkpoints every 5 steps.
TINY = ("--config.model.hidden_dropout=0.0", "--config.model.attention_dropout=0.0", "--config.num_train_steps=20",
        "--config.log_every_steps=1", "--config.checkpoint_every_steps=5", "--config.eval_every_steps=0",
        "--config.measure_mfu=False")
TIMEOUT_S = 300


def _env(devices: int, cache: Path) -> dict[str, str]:
  path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])  # Keep the caller's too.
  # The runs' shared compilation cache, named by the engine's own variable (launch.compilation_cache.ENV), which wins
  # over JAX's and over a caller's "off" (the test suite's, for its in-process tests): a resumed run loads the
  # programs its first run compiled, as a user's does, and a loaded program is the same executable.
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             ENCODERLAB_COMPILATION_CACHE=str(cache / "jax"), PYTHONPATH=path)
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  return env


def command(workdir: Path, overrides: Sequence[str] = (), cache: Path | None = None,
            config: str = CONFIG) -> list[str]:
  """The launch.main command line of a tiny run (TINY's settings on `config`; tokenized corpus cached under `cache`)."""
  cache_args = [f"--config.data.cache_dir={cache / 'corpus'}"] if cache else []
  return [sys.executable, "-m", "launch.main", f"--config={config}", f"--workdir={workdir}", *TINY, *cache_args,
          *overrides]


def run(workdir: Path, overrides: Sequence[str] = (), *, devices: int = 1, cache: Path, check: bool = True,
        config: str = CONFIG, fault: tuple[str, int] | None = None) -> subprocess.CompletedProcess:
  """One training run in a subprocess with `devices` CPU devices (TINY's settings, then `overrides`, on `config`);
  raises with its output when it fails and `check`. `fault`: (what, step) injected into the process by
  tests/faults.py (e.g. ("SIGTERM", 13))."""
  env = _env(devices, cache)
  if fault is not None:
    from tests import faults  # pylint: disable=import-outside-toplevel  (a test harness: only when asked for)
    env = faults.environment(*fault, base=env)
  result = subprocess.run(command(workdir, overrides, cache, config), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
  if check and result.returncode != 0 and (line := cli.child_error(result.stderr)):
    raise errors.UserError(f"the run in {workdir} was refused: {line}")
  if check and result.returncode != 0:
    raise RuntimeError(f"run in {workdir} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                       f"{result.stderr[-5000:]}")
  return result


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_multiprocess(workdir: Path, overrides: Sequence[str] = (), *, processes: int = 2, devices: int = 4,
                     cache: Path) -> None:
  """`processes` local processes with `devices` CPU devices each, wired by jax.distributed on 127.0.0.1; waits for
  all of them (killing all on a failure or timeout)."""
  address = f"127.0.0.1:{_free_port()}"
  logs = [workdir.parent / f"{workdir.name}.process{i}.log" for i in range(processes)]
  procs: list[subprocess.Popen] = []
  for i in range(processes):
    args = [*command(workdir, overrides, cache), f"--coordinator_address={address}", f"--num_processes={processes}",
            f"--process_id={i}"]
    with open(logs[i], "w") as log:
      procs.append(subprocess.Popen(args, cwd=REPO, env=_env(devices, cache), stdout=log, stderr=subprocess.STDOUT))
  try:
    codes: list[int | str] = [p.wait(timeout=TIMEOUT_S) for p in procs]
  except subprocess.TimeoutExpired:
    codes = ["timeout"]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  if codes != [0] * processes:
    raise RuntimeError(f"multi-process run failed {codes}:\n" + "\n".join(log.read_text()[-3000:] for log in logs))


def logged(workdir: Path, key: str) -> np.ndarray:
  """The `key` metric (e.g. "train/grad_norm") of every logged step (metrics.jsonl), in step order."""
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  by_step = {r["step"]: r[key] for r in records if key in r}
  return np.array([by_step[s] for s in sorted(by_step)], np.float64)


def losses(workdir: Path) -> np.ndarray:
  """The train/loss of every logged step (metrics.jsonl), in step order."""
  return logged(workdir, "train/loss")


def max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
  if a.shape != b.shape:
    raise ValueError(f"different numbers of values: {a.shape} vs {b.shape}")
  return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def final_params(workdir: Path) -> dict[str, np.ndarray]:
  """{path: array} of the parameters in the newest checkpoint of a run."""
  from encoder import init_from  # pylint: disable=import-outside-toplevel  (keeps the module import light)
  _, params = init_from.run_params(workdir)
  flat = {}

  def visit(tree, prefix):
    for key, value in tree.items():
      if isinstance(value, dict):
        visit(value, f"{prefix}{key}/")
      else:
        flat[prefix + key] = np.asarray(value)
  visit(params, "")
  return flat


def params_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
  return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def params_max_rel_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
  return max(float(np.max(np.abs(a[k] - b[k])) / max(float(np.max(np.abs(b[k]))), 1e-12)) for k in b)


def differences(name: str, workdirs: Sequence[Path], reference: Path) -> dict[str, float]:
  """The largest relative differences of `workdirs` to the `reference` run: every logged step's train/loss
  (`{name}_max_rel_diff`) and train/grad_norm (`{name}_grad_norm_max_rel_diff`), and every leaf of the final
  parameters, relative to the leaf's largest magnitude (`{name}_params_max_rel_diff`)."""
  params = final_params(reference)
  worst = lambda diff: max(diff(workdir) for workdir in workdirs)
  return {f"{name}_max_rel_diff": worst(lambda w: max_rel_diff(losses(w), losses(reference))),
          f"{name}_grad_norm_max_rel_diff": worst(lambda w: max_rel_diff(logged(w, "train/grad_norm"),
                                                                         logged(reference, "train/grad_norm"))),
          f"{name}_params_max_rel_diff": worst(lambda w: params_max_rel_diff(final_params(w), params))}


def baseline(root: Path, cache: Path) -> Path:
  """The 1-device reference run (every other check compares against it)."""
  workdir = root / "one_device"
  if not (workdir / "results.json").exists():
    run(workdir, cache=cache)
  return workdir


def device_invariance(root: Path, cache: Path) -> dict[str, float]:
  """Max relative loss, grad norm and final parameter differences (`differences`) to the 1-device run: 8-device data
  mesh and 2x4 data x model mesh together, pmap, 2 processes."""
  reference = baseline(root, cache)
  run(root / "data8", devices=8, cache=cache)
  run(root / "data2_model4", ["--config.mesh_model=4"], devices=8, cache=cache)
  run(root / "pmap8", ["--config.parallelism=pmap"], devices=8, cache=cache)
  run_multiprocess(root / "two_processes", cache=cache)
  return (differences("device_invariance", [root / "data8", root / "data2_model4"], reference)
          | differences("pmap", [root / "pmap8"], reference)
          | differences("multiprocess", [root / "two_processes"], reference))


def _killed_in_save(workdir: Path, step: int, phase: str, cache: Path) -> dict[str, Any]:
  """Runs `workdir` with a SIGKILL inside the save of `step` ("write" or "commit"; tests/faults.py): the step it
  resumed from (None: it started afresh), and what the kill left: the steps committed, the uncommitted temporary
  directories and whether each holds a commit_success.txt."""
  killed = run(workdir, cache=cache, check=False, fault=(f"kill_in_{phase}", step))
  if killed.returncode != -9 or "test fault: SIGKILL" not in killed.stderr:
    raise RuntimeError(f"the run meant to be killed in the {phase} of step {step} returned {killed.returncode}:\n"
                       f"{killed.stderr[-3000:]}")
  names = [p.name for p in (workdir / "checkpoints").iterdir()]
  temporary = sorted(n for n in names if ".orbax-checkpoint-tmp" in n)
  return {"resumed_from": _resumed_from(killed), "committed": sorted(int(n) for n in names if n.isdigit()),
          "temporary": temporary,
          "temporary_commit_file": [(workdir / "checkpoints" / n / "commit_success.txt").is_file() for n in temporary]}


def _resumed_from(result: subprocess.CompletedProcess) -> int | None:
  match = re.search(r"resuming from checkpoint step (\d+)", result.stdout)
  return int(match.group(1)) if match else None


def kill_and_resume(root: Path, cache: Path) -> dict[str, Any]:
  """A run SIGKILLed while its step-15 checkpoint is being written, restarted and SIGKILLed again in the commit of
  step 20 (data, commit timestamp and commit_success.txt written, not yet renamed), then restarted to the end; and a
  run sent SIGTERM after step 13 (it saves step 13 and stops) and restarted. What each SIGKILL left in checkpoints/,
  the step each restart resumed from, and whether each run ends bitwise equal to the uninterrupted 1-device run."""
  reference, workdir = baseline(root, cache), root / "killed_in_save"
  out: dict[str, Any] = {"kill_in_write": _killed_in_save(workdir, 15, "write", cache),
         "kill_in_commit": _killed_in_save(workdir, 20, "commit", cache)}
  out["after_kill_in_commit_resumed_from"] = _resumed_from(run(workdir, cache=cache))
  out["resume_bitwise_equal"] = params_equal(final_params(workdir), final_params(reference))
  workdir = root / "killed_SIGTERM"
  stopped = run(workdir, cache=cache, fault=("SIGTERM", 13))
  if "SIGTERM: saved step 13" not in stopped.stdout + stopped.stderr:
    raise RuntimeError(f"the run sent SIGTERM did not save step 13:\n{stopped.stdout[-2000:]}")
  out["sigterm_resumed_from"] = _resumed_from(run(workdir, cache=cache))
  out["sigterm_resume_bitwise_equal"] = params_equal(final_params(workdir), final_params(reference))
  return out


def accumulation(root: Path, cache: Path) -> dict[str, float]:
  """2 micro-batches of 4 accumulated vs the 1-device run's batches of 8: loss, grad norm and final parameter
  differences (`differences`)."""
  reference = baseline(root, cache)
  run(root / "accumulated", ["--config.grad_accum_steps=2"], cache=cache)
  return differences("accumulation", [root / "accumulated"], reference)


def state_mib_per_device(result: subprocess.CompletedProcess) -> float:
  """The "N MiB of state per device" of a run's starting line."""
  match = re.search(r"([\d,.]+) MiB of state per device", result.stdout)
  if match is None:
    raise RuntimeError(f"no 'MiB of state per device' in the run's output:\n{result.stdout[-2000:]}")
  return float(match.group(1).replace(",", ""))


def memory_savers(root: Path, cache: Path) -> dict[str, float | bool]:
  """Max relative loss, grad norm and final parameter differences (`differences`) to the 1-device run of FSDP over 8
  devices, remat ("full") on 1 device, and FSDP with a model axis of 2, remat "dots_saveable" and 2 accumulated
  micro-batches; and the state per device of the FSDP run over the whole state (the 1-device remat run's: an 8-device
  data-parallel run holds all of it on every device); whether it warned that 8 does not divide the vocabulary."""
  reference = baseline(root, cache)
  fsdp = run(root / "fsdp8", ["--config.fsdp=true"], devices=8, cache=cache)
  plain = run(root / "remat_full", ["--config.model.remat=full"], cache=cache)
  run(root / "fsdp_model2_remat_accum2", ["--config.fsdp=true", "--config.mesh_model=2", "--config.grad_accum_steps=2",
                                          "--config.model.remat=dots_saveable"], devices=8, cache=cache)
  return {**differences("fsdp", [root / "fsdp8"], reference), **differences("remat", [root / "remat_full"], reference),
          **differences("fsdp_remat_accum", [root / "fsdp_model2_remat_accum2"], reference),
          "fsdp_state_fraction": state_mib_per_device(fsdp) / state_mib_per_device(plain),
          "fsdp_vocab_warning": "vocab_size 30522 is not divisible by the 8 data devices" in fsdp.stderr}


def main() -> None:
  cli.ArgumentParser(prog="python -m benchmarks.determinism", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # No flags: --help, refusals.
  root = Path(tempfile.mkdtemp(prefix="determinism-"))
  try:
    results = {**device_invariance(root, root / "cache"), **kill_and_resume(root, root / "cache"),
               **accumulation(root, root / "cache"), **memory_savers(root, root / "cache")}
  finally:
    shutil.rmtree(root, ignore_errors=True)
  print(json.dumps(results))


if __name__ == "__main__":
  errors.run(main)
