"""Where the PyTorch references run: beside JAX on the same kind of chip, with the same float32 matmul arithmetic.

On CPU both compute float32 matmuls in full precision. On a recent NVIDIA GPU JAX's default float32 matmul is TF32
(its `jax_default_matmul_precision`, settable by flag or environment), PyTorch's is full float32: the reference is
set to do what JAX does, so a speed or score ratio compares implementations, not arithmetic.
"""

import jax

from encoder import matmul

FULL_FLOAT32 = ("highest", "float32", "F32_F32_F32")


def jax_full_float32() -> bool:
  """Whether JAX computes float32 matmuls in full precision here (always on CPU; on GPU only when asked to)."""
  precision = jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]  # JAX adds options at run time
  return jax.default_backend() == "cpu" or precision in FULL_FLOAT32


def torch_device():
  """torch.device("cuda") when JAX runs on a GPU (TF32 allowed iff JAX uses it), else the CPU."""
  import torch  # pylint: disable=import-outside-toplevel  (benchmarks only)
  if jax.default_backend() != "gpu":
    return torch.device("cpu")
  if not torch.cuda.is_available():
    raise SystemExit("JAX runs on a GPU but torch sees no CUDA device: install a CUDA build of torch for the reference")
  tf32 = not jax_full_float32()
  torch.backends.cuda.matmul.allow_tf32 = tf32
  torch.backends.cudnn.allow_tf32 = tf32
  return torch.device("cuda")


def synchronize(device) -> None:
  """Waits for the device's queued work (timings of CUDA steps end here)."""
  import torch  # pylint: disable=import-outside-toplevel
  if device.type == "cuda":
    torch.cuda.synchronize(device)


def autocast_skip_reason(device) -> str | None:
  """Why the reference does not run under torch.autocast(bfloat16) on `device`, or None where it can: on a CPU without
  bf16 matrix instructions PyTorch's bf16 matmuls leave its fast kernels (2048^3: 0.3 GFLOP/s against 140 in float32
  on an AVX2-only AMD EPYC, Zen 3), so one reference step would take tens of minutes."""
  if device.type != "cpu" or matmul.native_bf16_dots("cpu"):
    return None
  return ("this CPU has no bf16 matrix instructions (/proc/cpuinfo lists none of "
          f"{', '.join(sorted(matmul.BF16_FLAGS))}): PyTorch's bf16 matmuls run hundreds of times slower than its "
          "float32 ones here, so the HF reference is not run under autocast")
