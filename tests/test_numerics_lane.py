"""The Makefile's numerics lane (docs/testing.md): this jaxlib and torch accept its ISA cap. XLA aborts on an
unknown flag in XLA_FLAGS and only warns on an unknown ISA name ("Unknown CPU ISA"), which would leave the lane
uncapped without failing; PyTorch ignores an unknown ATEN_CPU_CAPABILITY the same way."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import require_package

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def lane_env() -> dict[str, str]:
  """The variables the Makefile's numerics lane sets (its NUMERICS_ENV line)."""
  (line,) = re.findall(r"^NUMERICS_ENV := (.*)$", MAKEFILE.read_text(), re.MULTILINE)
  return dict(word.split("=", 1) for word in line.split())


def lane_files() -> set[Path]:
  """The test files the Makefile's numerics lane collects (its NUMERICS_FILES line's shell command, run here)."""
  (command,) = re.findall(r"^NUMERICS_FILES = \$\(shell (.*)\)$", MAKEFILE.read_text(), re.MULTILINE)
  listed = subprocess.run(["bash", "-c", command], cwd=MAKEFILE.parent, capture_output=True, text=True, check=True)
  return {(MAKEFILE.parent / name).resolve() for name in listed.stdout.split()}


def test_the_lane_collects_every_file_with_a_test_marked_numerics(request):
  """Every test of this session marked numerics (the whole suite's under `make test`) is in a file the lane collects:
  a marker the lane's grep misses would leave the test out of the AVX2 rerun without an error."""
  marked = {item.path.resolve() for item in request.session.items if item.get_closest_marker("numerics")}
  files = lane_files()
  assert marked <= files, sorted(map(str, marked - files))
  assert Path(__file__).resolve().parent / "encoder" / "test_model.py" in files  # The grep finds what it should.


def _run(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], env=os.environ | lane_env(), capture_output=True, text=True,
                        timeout=120, check=False)


def test_the_lane_caps_xla_and_pytorch_at_avx2():
  assert lane_env() == {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
  done = _run("import jax.numpy as jnp; print(float(jnp.arange(4.0) @ jnp.arange(4.0)))")
  assert done.returncode == 0 and done.stdout.split() == ["14.0"], done.stderr[-2000:]
  assert "Unknown" not in done.stderr, done.stderr[-2000:]  # XLA's warning for an ISA name it does not know.
  require_package("torch")
  done = _run("import torch; print(torch.backends.cpu.get_cpu_capability())")
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-1] in ("AVX2", "DEFAULT"), done.stdout  # DEFAULT: a CPU without AVX2 itself.


def test_a_cap_below_bf16_instructions_routes_bf16_dots_as_on_a_cpu_without_them():
  """Under the lane's cap an AMX machine's bf16 dots take the float32 route of an AVX2-only CPU (encoder.matmul)."""
  from encoder.matmul import xla_isa_cap_allows_bf16  # pylint: disable=import-outside-toplevel
  assert not xla_isa_cap_allows_bf16(lane_env()["XLA_FLAGS"])
  assert not xla_isa_cap_allows_bf16("--xla_cpu_max_isa=amx --xla_cpu_max_isa=avx512")  # The last one counts.
  assert xla_isa_cap_allows_bf16("") and xla_isa_cap_allows_bf16("--xla_cpu_max_isa=AMX")
  assert xla_isa_cap_allows_bf16("--xla_force_host_platform_device_count=2")
