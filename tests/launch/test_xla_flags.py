"""GPU XLA defaults: added when absent, the user's own setting kept, other flags untouched."""

import os
import subprocess
import sys

from launch import xla_flags


def test_defaults_added_and_user_settings_kept():
  assert xla_flags.with_gpu_defaults("") == "--xla_gpu_enable_triton_gemm=false"
  assert xla_flags.with_gpu_defaults(" --xla_force_host_platform_device_count=8 ") == (
      "--xla_force_host_platform_device_count=8 --xla_gpu_enable_triton_gemm=false")
  assert xla_flags.with_gpu_defaults("--xla_gpu_enable_triton_gemm=true") == "--xla_gpu_enable_triton_gemm=true"


def test_the_cpu_backend_accepts_the_defaults():
  """XLA aborts on flags it does not know; these must not stop a CPU-only install."""
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_gpu_defaults(""), JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; print(float((jnp.ones(3) + 1).sum()))"],
                       env=env, capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "6.0"
