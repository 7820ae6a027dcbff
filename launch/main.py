"""Command line: `python -m launch.main --config configs/pretrain.py:size=mini --workdir runs/mini [--config.x=v]`.

Overrides are checked before they are applied: a mistyped key names its close matches, a wrong type names the
expected one. Every user error (config, data, checkpoint, corpus) is one line `error: ...` (encoder.errors; --debug or
ENCODERLAB_DEBUG=1 shows the traceback). Multi-host: pass --coordinator_address/--num_processes/--process_id (or set
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID) on every host.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from configs import checks
from encoder import errors
from launch import compilation_cache, distributed, host_memory, stopping, xla_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/pretrain.py:size=mini.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config.json, checkpoints, logs, results.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host runs).", lower_bound=1)
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's id, 0..num_processes-1 (multi-host runs).",
                                     lower_bound=0)
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Let JAX detect the cluster (TPU pods, SLURM).")
flags.mark_flags_as_required(["config", "workdir"])


def parse_flags(argv: list[str]) -> list[str]:
  """absl parsing after the override check. The check builds the config once, so an error of get_config (an
  `init=hf:` directory without config.json, an unknown task) surfaces as itself, not wrapped in an absl flag error;
  absl's own errors (a missing --workdir, an unknown flag) become a ConfigError."""
  checks.check_command_line(argv)
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as err:
    raise errors.ConfigError(f"{err} (python -m launch.main --helpshort lists the flags)") from None
  if len(rest) > 1:
    raise errors.ConfigError(f"unexpected arguments {rest[1:]}: launch.main takes flags only (a flag's value with a "
                             "space in it? quote it; python -m launch.main --helpshort lists the flags)")
  return rest


def main(argv: list[str]) -> int:
  """Trains; exits 0 when done, stopping.stop_status() when a SIGTERM stopped it (saved, resumable)."""
  del argv  # Only the program's name: parse_flags refused any other argument.
  stopping.install()  # SIGTERM: ends the start-up at once; saves once training runs (launch/stopping.py).
  host_memory.retain_freed_memory()  # Before the first JAX computation starts XLA's threads.
  xla_flags.apply_gpu_defaults()
  compilation_cache.enable(_CONFIG.value.compilation_cache)  # Before the first compilation.
  logging.set_verbosity(logging.WARNING)  # Orbax and grain log every save/read at INFO.
  distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, _DISTRIBUTED.value)
  stopping.install()  # Again: jax.distributed's preemption notifier took SIGTERM.
  from launch import train  # pylint: disable=import-outside-toplevel  (after jax.distributed is set up)
  workdir = _WORKDIR.value
  assert workdir is not None  # A required flag: absl refuses a command line without it.
  results = train.train_and_evaluate(_CONFIG.value, workdir)
  return stopping.stop_status() if results.get("stopped_early") else 0


if __name__ == "__main__":
  errors.run(app.run, main, flags_parser=parse_flags)
