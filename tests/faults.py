"""Faults injected into a real training process, for the resume and NaN-guard tests, from outside the product: a
run started with `environment(...)` (benchmarks.determinism.run(fault=...), or any process tree that inherits it:
a sweep's points, a local cluster's processes) imports tests/fault_hook/sitecustomize.py at start-up, which arms
`install` here; nothing in launch/ or configs/ knows about it.

A fault names a step (1-based, as the run's logs count) and what happens there:
  "SIGTERM"         the signal arrives as step N starts (its batch is taken): the run finishes step N, saves it and
                    stops, as a pre-empted job does;
  "SIGKILL"         the process dies as step N starts, after the saves of the steps before have been committed;
  "kill_in_write"   SIGKILL while step N's checkpoint is being written: once array data appear in orbax's temporary
                    directory, at the latest when its commit begins;
  "kill_in_commit"  SIGKILL in step N's commit, after the commit timestamp and commit_success.txt are written and
                    before the temporary directory is renamed;
  "nan"             step N's loss and gradients are NaN (the engine's guard must stop, naming step N).
`workdir`, an fnmatch pattern, limits the fault to the runs whose workdir's name matches (one point of a sweep).

Only public interfaces are wrapped, once `launch.train` is imported: the kinds' `launch.workload.Pretraining.load`
and `Finetuning.load` (the batch iterator), `launch.checkpointing.create_manager` (to wait for pending saves),
`launch.steps.grad_step` (the NaN), and orbax's documented `CheckpointManagerOptions(temporary_path_class=...)` with a
subclass of its public `orbax.checkpoint.path.atomicity.AtomicRenameTemporaryPath`, whose create() makes the step's
temporary directory and whose finalize() writes the commit file and renames it
(https://orbax.readthedocs.io/en/latest/api_reference/checkpoint.path.atomicity.html): the commit fault stops that
rename (`epath.Path.rename` of the temporary directory). Should orbax change how it commits, the fault no longer
kills and `benchmarks.determinism` raises naming the exit code.
"""

import dataclasses
import fnmatch
import functools
import importlib.abc
import importlib.util
import json
import os
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

ENV = "ENCODERLAB_TEST_FAULTS"  # The fault, as JSON; read by tests/fault_hook/sitecustomize.py.
HOOK = pathlib.Path(__file__).resolve().parent / "fault_hook"
REPO = HOOK.parents[1]
FAULTS = ("SIGTERM", "SIGKILL", "kill_in_write", "kill_in_commit", "nan")
MARK = "test fault:"  # Starts the stderr line of every kill, so a test can tell it from a crash.


def environment(fault: str, step: int, workdir: str = "*", base: dict[str, str] | None = None) -> dict[str, str]:
  """`base` (default os.environ) with the fault armed for every Python process started with it."""
  if fault not in FAULTS:
    raise ValueError(f"fault {fault!r}: expected one of {FAULTS}")
  env = dict(os.environ if base is None else base)
  path = [str(HOOK), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
  return env | {ENV: json.dumps({"fault": fault, "step": step, "workdir": workdir}),
                "PYTHONPATH": os.pathsep.join(path)}


def _kill(message: str) -> None:
  print(f"{MARK} SIGKILL {message}", file=sys.stderr, flush=True)
  os.kill(os.getpid(), signal.SIGKILL)


class _AfterImport(importlib.abc.MetaPathFinder):
  """Runs `then(module)` once `name` has been imported (a post-import hook)."""

  def __init__(self, name: str, then):
    self.name, self.then = name, then

  def find_spec(self, fullname, path, target=None):
    if fullname != self.name:
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(fullname)
    load = spec.loader.exec_module

    def exec_module(module):
      load(module)
      self.then(module)

    spec.loader.exec_module = exec_module
    return spec


def install(spec: dict[str, Any]) -> None:
  """Arms `spec` ({"fault", "step", "workdir"}): the wrappers go in when `launch.train` is imported."""
  sys.meta_path.insert(0, _AfterImport("launch.train", lambda _: _wrap(spec["fault"], spec["step"], spec["workdir"])))


def _wrap(fault: str, step: int, pattern: str) -> None:
  # pylint: disable=import-outside-toplevel  (launch.train imported them already)
  import jax
  import jax.numpy as jnp
  import orbax.checkpoint as ocp

  from launch import checkpointing, steps, workload
  state = {"armed": False, "manager": None}

  def loading(original):  # A kind's load (launch.workload.Pretraining.load, Finetuning.load).
    def load(kind, workdir):
      state["armed"] = fnmatch.fnmatch(pathlib.PurePosixPath(str(workdir)).name, pattern)
      work = original(kind, workdir)
      return dataclasses.replace(work, train_batches=lambda start: signalled(work.train_batches(start), start))
    return load

  def signalled(batches: Iterator, start: int) -> Iterator:
    for done, batch in enumerate(batches, start + 1):
      if state["armed"] and done == step and fault in ("SIGTERM", "SIGKILL"):
        state["manager"].wait_until_finished()
        if fault == "SIGKILL":
          _kill(f"as step {step} starts")
        print(f"{MARK} SIGTERM as step {step} starts", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
      yield batch

  def create_manager(workdir, config):
    state["manager"] = create_manager.original(workdir, config)
    return state["manager"]
  create_manager.original = checkpointing.create_manager

  def grad_step(*args, **kwargs):
    loss, metrics, grads = grad_step.original(*args, **kwargs)
    if not state["armed"]:
      return loss, metrics, grads
    factor = jnp.where(args[1].step == step - 1, jnp.nan, 1.0)  # (fns, state, batch): state.step counts from 0.
    return loss * factor, metrics, jax.tree.map(lambda g: g * factor.astype(g.dtype), grads)
  grad_step.original = steps.grad_step

  workload.Pretraining.load = loading(workload.Pretraining.load)
  workload.Finetuning.load = loading(workload.Finetuning.load)
  checkpointing.create_manager = create_manager
  if fault == "nan":
    steps.grad_step = grad_step
  if fault in ("kill_in_write", "kill_in_commit"):
    options = ocp.CheckpointManagerOptions
    ocp.CheckpointManagerOptions = functools.partial(
        options, temporary_path_class=_killing_temporary_path(fault, step, lambda: state["armed"]))


def _kill_once_data_appear(directory: pathlib.Path, step: int) -> None:
  """Polls the step's temporary directory and kills the process as soon as a file besides orbax's step metadata
  (the first array data or tree metadata) is there."""
  while True:
    written = [p for p in directory.rglob("*") if p.is_file() and p.name != "_CHECKPOINT_METADATA"]
    if written:
      _kill(f"while writing step {step}: {len(written)} files in {directory.name}")
    time.sleep(0.001)


def _killing_temporary_path(fault: str, step: int, armed) -> type:
  """Orbax's atomic-rename temporary directory, except for `step`'s save, which kills the process."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel

  class KillingTemporaryPath(ocp.path.atomicity.AtomicRenameTemporaryPath):
    def _targeted(self) -> bool:
      return armed() and self.get_final().name == str(step)

    async def create(self):
      path = await super().create()
      if self._targeted() and str(path).startswith("gs://"):
        raise RuntimeError(f"{fault} kills inside orbax's local rename commit; on GCS orbax commits with a file")
      if fault == "kill_in_write" and self._targeted():
        threading.Thread(target=_kill_once_data_appear, args=(pathlib.Path(path), step), daemon=True).start()
      return path

    async def finalize(self):
      if self._targeted() and fault == "kill_in_write":
        _kill(f"while writing step {step}: the commit began before the watcher saw data")
      if self._targeted() and fault == "kill_in_commit":
        temporary = self.get()
        rename = type(temporary).rename

        def killing_rename(path, target):
          if path == temporary:
            _kill(f"committing step {step}: metadata and commit_success.txt written, not yet renamed")
          return rename(path, target)

        type(temporary).rename = killing_rename
      await super().finalize()

  return KillingTemporaryPath
