"""Multi-host start-up: jax.distributed.initialize when a coordinator is given by flag or environment.

Every host runs the same command. The coordinator address, process count and process id come from
--coordinator_address/--num_processes/--process_id, else JAX_COORDINATOR_ADDRESS/JAX_NUM_PROCESSES/JAX_PROCESS_ID;
on a TPU pod or a SLURM cluster `--distributed` alone lets JAX detect them.
"""

import os
from typing import Any

import jax

from encoder import errors

ENV = {"coordinator_address": "JAX_COORDINATOR_ADDRESS", "num_processes": "JAX_NUM_PROCESSES",
       "process_id": "JAX_PROCESS_ID"}


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, auto_detect: bool = False) -> bool:
  """Connects this process to the others; returns whether it did (False: a single-process run)."""
  # jax.distributed.initialize's keyword arguments: the address a str, the others ints; None while not given.
  given: dict[str, Any] = {"coordinator_address": coordinator_address, "num_processes": num_processes,
                           "process_id": process_id}
  for key, variable in ENV.items():
    if given[key] is None and os.environ.get(variable):
      given[key] = os.environ[variable] if key == "coordinator_address" else int(os.environ[variable])
  if given["coordinator_address"] is None and not auto_detect:
    return False
  missing = [key for key in ("num_processes", "process_id") if given[key] is None]
  if given["coordinator_address"] is not None and missing:
    raise errors.ConfigError(f"a multi-process run needs {missing} too (flags --{' --'.join(missing)} or "
                             f"{', '.join(ENV[k] for k in missing)})")
  jax.distributed.initialize(**{k: v for k, v in given.items() if v is not None})
  return True
