"""A stop request (SIGTERM: `tpu_pod --stop`, a maintenance event, Autocheckpoint, a scheduler) ends a run saved.

`install()` (launch.main, before anything else) takes SIGTERM for the process: during start-up and compilation,
where there is nothing to save yet, the process ends at once (a watcher thread reads the signal through
`signal.set_wakeup_fd`, so a compilation that holds the main thread for minutes does not delay it) with exit status
`stop_status()`; once the training loop `begin_loop()`s, the signal only sets `requested`, which the loop reads after
every step (a host-side flag: no device synchronization) and answers by saving and returning. With several
processes the hosts agree on the step to save at (`agreed_stop`): the first to see a request posts it in
jax.distributed's key-value store, whose key every host reads after every step; all then meet at a barrier, and the
largest step any of them has reached is the one all save. Grain's input worker processes ignore SIGTERM
(`ignore_sigterm`), so a signal sent to the whole process group does not end them before the save; the loop stops
them after it.

The exit status of a stop: 0 (results.json says stopped_early), or, when ENCODERLAB_STOP_EXIT is set (the pod
supervisor sets it to STOPPED_EXIT), that status, so a supervisor tells "stopped, resumable" from a finished run or a
failure without reading the workdir. Imports only the standard library (the supervisor imports it).
"""

import os
import signal
import sys
import threading
from typing import Any

STOP_EXIT_ENV = "ENCODERLAB_STOP_EXIT"
STOPPED_EXIT = 75  # EX_TEMPFAIL (sysexits.h): stopped on request, run again to resume.
STOP_KEY = "encoderlab/stop"  # Set by the first process that sees a request.
STEPS_DIR = "encoderlab/stop_steps/"  # Each process's step when it joined the agreement.

requested = threading.Event()
_state: dict[str, Any] = {"installed": False, "in_loop": False, "pipe": None}


def stop_status() -> int:
  """The exit status of a stopped run (module docstring)."""
  value = os.environ.get(STOP_EXIT_ENV, "")
  return int(value) if value.isdigit() else 0


def _startup_exit() -> None:
  print("SIGTERM during start-up: stopped before training began (nothing to save); run again to resume",
        file=sys.stderr, flush=True)
  os._exit(stop_status() or 128 + signal.SIGTERM)  # pylint: disable=protected-access  (no cleanup to wait for)


def _watch(read_fd: int) -> None:
  while True:
    try:
      data = os.read(read_fd, 64)
    except OSError:
      return
    if signal.SIGTERM in data:
      requested.set()
      if not _state["in_loop"]:
        _startup_exit()


def install() -> None:
  """Takes SIGTERM for this process (main thread only): see the module docstring. Called again after
  jax.distributed.initialize, whose preemption notifier takes SIGTERM for itself (a C handler only it reads)."""
  if threading.current_thread() is not threading.main_thread():
    return
  signal.signal(signal.SIGTERM, lambda *_: requested.set())  # Python's C handler also writes the wakeup fd.
  if _state["installed"]:
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  threading.Thread(target=_watch, args=(read_fd,), daemon=True, name="sigterm-watcher").start()
  _state.update(installed=True, pipe=(read_fd, write_fd))


def installed() -> bool:
  return bool(_state["installed"])


def begin_loop() -> None:
  """From here a SIGTERM is answered by the loop (saved), not by ending the process."""
  _state["in_loop"] = True


def end_loop() -> None:
  """Back to ending the process at once (after the loop's last save has been written)."""
  _state["in_loop"] = False


def ignore_sigterm(*_: Any) -> None:
  """grain's worker_init_fn: an input worker ignores SIGTERM (the main process stops it after saving)."""
  signal.signal(signal.SIGTERM, signal.SIG_IGN)


def distributed_client() -> Any:
  """jax.distributed's client (its key-value store and barriers), None in a single-process run."""
  from jax._src import distributed  # pylint: disable=import-outside-toplevel  (no public accessor in jax 0.10)
  return distributed.global_state.client


class Agreement:
  """The step every process stops at (module docstring); one per training loop. Single-process: the flag itself."""

  def __init__(self, processes: int, client: Any = None, timeout_ms: int = 120_000):
    self.processes, self.client, self.timeout_ms = processes, client, timeout_ms
    self.stop_at: int | None = None
    self.gave_up = False

  def should_stop(self, done: int, process: int = 0) -> bool:
    """Whether to save and stop after step `done` (called after every step, on every process)."""
    if self.processes == 1 or self.client is None:
      return requested.is_set()
    if self.stop_at is None and not self.gave_up:
      if requested.is_set():
        self.client.key_value_set(STOP_KEY, str(process), allow_overwrite=True)
      elif not self._posted():
        return False
      self.client.key_value_set(f"{STEPS_DIR}{process}", str(done))
      try:
        self.client.wait_at_barrier(STOP_KEY, self.timeout_ms)
      except Exception:  # pylint: disable=broad-except  # noqa: BLE001  a peer ended its loop before the request
        # came (it had taken its last step): this process trains to the end too, whose step is saved anyway.
        print(f"warning: a stop was requested at step {done}, but not every process joined within "
              f"{self.timeout_ms / 1000:g} s (one had finished its last step): training to the end",
              file=sys.stderr, flush=True)
        self.gave_up = True
        return False
      self.stop_at = max(int(value) for _, value in self.client.key_value_dir_get(STEPS_DIR))
      requested.set()
    return self.stop_at is not None and done >= self.stop_at

  def _posted(self) -> bool:
    try:
      self.client.key_value_try_get(STOP_KEY)
    except Exception:  # pylint: disable=broad-except  # noqa: BLE001  jax raises JaxRuntimeError NOT_FOUND while unset
      return False
    return True
