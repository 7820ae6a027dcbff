"""The suite compiles at XLA's lowest optimisation level, and as users' runs do where float results are the point
(tests/conftest.py, `optimised`; docs/testing.md)."""

import os
import subprocess
import sys

import jax

from tests.conftest import OPTIMISATIONS_ENV, optimised

FLAG = "jax_disable_most_optimizations"
CHILD = "import jax; print(jax.config.values['jax_disable_most_optimizations'])"


def child_flag() -> str:
  """The flag a subprocess started now sees (it reads the inherited environment)."""
  return subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True).stdout.strip()


def test_a_file_without_numerics_compiles_at_o0_and_so_do_its_subprocesses():
  assert jax.config.values[FLAG] is True
  assert os.environ[OPTIMISATIONS_ENV] == "1"
  assert child_flag() == "True"


def test_optimised_compiles_as_users_do_inside_and_restores_after():
  with optimised():
    assert jax.config.values[FLAG] is False
    assert child_flag() == "False"
  assert jax.config.values[FLAG] is True and os.environ[OPTIMISATIONS_ENV] == "1"
  # A file marked numerics compiles as users do: tests/encoder/test_speed_paths.py checks it from inside.
