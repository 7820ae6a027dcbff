"""XLA defaults for GPUs, set in XLA_FLAGS at an entry point before JAX starts its backend.

On an H100 (jax 0.11.2), compiling the MiniLM training step with XLA's Triton GEMM autotuning did not finish within
150-240 s; with cuBLAS GEMMs only (`--xla_gpu_enable_triton_gemm=false`) it compiled in ~37 s and ran at 8 ms/step
(README, "On a GPU"). A flag the user already put in XLA_FLAGS wins. CPU backends accept and ignore these flags.
"""

import os

GPU_DEFAULTS = ("--xla_gpu_enable_triton_gemm=false",)


def with_gpu_defaults(flags: str) -> str:
  """`flags` plus each default whose name it does not already set."""
  names = {flag.split("=", 1)[0] for flag in flags.split()}
  return " ".join([flags.strip(), *[d for d in GPU_DEFAULTS if d.split("=", 1)[0] not in names]]).strip()


def apply_gpu_defaults() -> None:
  """Adds the defaults to os.environ["XLA_FLAGS"] (call before the first JAX computation)."""
  os.environ["XLA_FLAGS"] = with_gpu_defaults(os.environ.get("XLA_FLAGS", ""))
