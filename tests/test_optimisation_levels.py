"""The suite compiles at XLA's lowest optimisation level, and as users' runs do where float results are the point:
each test marked `numerics` with the fixtures it uses, and inside `optimised` (tests/conftest.py; docs/testing.md)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from tests.conftest import _COMPILE_EVENTS, OPTIMISATIONS_ENV, optimised

FLAG = "jax_disable_most_optimizations"
CHILD = "import jax; print(jax.config.values['jax_disable_most_optimizations'])"


def child_flag() -> str:
  """The flag a subprocess started now sees (it reads the inherited environment)."""
  return subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def level_of_a_module_fixture_a_numerics_test_uses():
  """Whether this module fixture was built at -O0 (the unmarked test below asks for it first)."""
  return jax.config.values[FLAG]


@pytest.fixture(scope="module")
def level_of_a_module_fixture_only_unmarked_tests_use():
  return jax.config.values[FLAG]


@pytest.fixture
def level_of_a_test_fixture():
  return jax.config.values[FLAG]


def test_an_unmarked_test_compiles_at_o0_and_so_do_its_subprocesses(level_of_a_module_fixture_a_numerics_test_uses,
                                                                    level_of_a_module_fixture_only_unmarked_tests_use,
                                                                    level_of_a_test_fixture):
  assert jax.config.values[FLAG] is True
  assert os.environ[OPTIMISATIONS_ENV] == "1"
  assert child_flag() == "True"
  assert level_of_a_test_fixture is True and level_of_a_module_fixture_only_unmarked_tests_use is True
  # Built for this test first, but at the default optimisations: the marked test below compares what it holds.
  assert level_of_a_module_fixture_a_numerics_test_uses is False


@pytest.mark.numerics
def test_a_test_marked_numerics_and_its_fixtures_compile_as_users_do(level_of_a_module_fixture_a_numerics_test_uses,
                                                                     level_of_a_test_fixture):
  assert jax.config.values[FLAG] is False
  assert os.environ[OPTIMISATIONS_ENV] == "0"
  assert child_flag() == "False"
  assert level_of_a_test_fixture is False and level_of_a_module_fixture_a_numerics_test_uses is False


def test_a_program_compiled_at_o0_is_compiled_again_inside_optimised():
  """JAX's in-memory caches do not key on the level: `optimised` empties them, or a jitted function (a module
  fixture's, say) first called by an unmarked test would run its -O0 program in a marked one."""
  levels = []  # jax_disable_most_optimizations at each compilation (or persistent-cache request).
  note = lambda event, *_, **__: levels.append(jax.config.values[FLAG]) if event in _COMPILE_EVENTS else None
  x = jnp.arange(5.0)
  f = jax.jit(lambda x: jnp.sin(x) * 3.0 + x)
  f(x)
  jax.monitoring.register_event_listener(note)
  jax.monitoring.register_event_duration_secs_listener(note)
  try:
    f(x)  # Its -O0 program, from memory.
    with optimised():
      f(x)
      f(x)
    f(x)  # The default level's program, from memory: harmless where float results are not the point.
  finally:
    jax.monitoring.unregister_event_listener(note)
    jax.monitoring.unregister_event_duration_listener(note)
  assert levels and set(levels) == {False}, levels


def test_optimised_compiles_as_users_do_inside_and_restores_after():
  with optimised():
    assert jax.config.values[FLAG] is False
    assert child_flag() == "False"
  assert jax.config.values[FLAG] is True and os.environ[OPTIMISATIONS_ENV] == "1"
  # tests/encoder/test_speed_paths.py checks the level from inside a marked test of a file of both kinds.
