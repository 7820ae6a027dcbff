"""Matrix products that stay on XLA CPU's fast kernels forward and backward, in float32 or mixed precision.

XLA CPU sends a dot to its library kernel (a YNNPACK fusion) in the plain layout only: lhs [..., M, K] contracting its
last axis, rhs [..., K, N] contracting the one before its last, batch axes leading; a bfloat16 dot also needs a float32
result, or it is upcast to float32 (../shared/notes/bf16-on-xla-cpu.md). Autodiff of `a @ b` contracts transposed
operands (dA = G B^T, dB = A^T G), and XLA folds a plain transpose into the dot, so the backward products, and every
attention product written as an einsum, leave that path. `matmul` has a custom VJP whose three products are all
plain, on transposes that `transpose` materializes; its operands are rounded to the compute dtype, its result and
gradients are float32 (mixed precision: bf16 operands, float32 accumulation). Other backends (GPU, TPU) fold
transposes into their GEMMs for free, so `transpose` is a plain one there and only the dtype policy applies.

A CPU without bf16 matrix instructions (AVX2-only x86 such as AMD Zen 3) runs bf16 dots about 1.3x slower than
float32 ones; there the operands are rounded to bf16 and multiplied as float32: the same products (a bf16 x bf16
product is exact in float32, both accumulate in float32), at float32 speed.

Both choices are `Dots`, explicit arguments made from the model's config (EncoderConfig.kernels and .bf16_dots, set
once at start-up from the platform and /proc/cpuinfo: `auto_bf16_dots`), never read from the process while tracing.
"""

import functools
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class Dots(NamedTuple):
  """How the products are computed (EncoderConfig.dots): the same values to float32 rounding either way."""
  pinned: bool  # Transposes materialized, so that every dot reads XLA CPU's plain layout (EncoderConfig.kernels "cpu").
  bf16: bool  # bf16 operands as they are; False: rounded to bf16, multiplied in float32 (EncoderConfig.bf16_dots).


def _pinned(y: Array, dots: Dots) -> Array:
  """y, through `_pin` with `dots.pinned`."""
  return _pin(y) if dots.pinned else y


def _pin(y: Array) -> Array:
  """y unchanged, through a select on two iotas that XLA cannot move a transpose across, so the transpose producing
  y is materialized in memory rather than folded into the dot that reads it."""
  index = jax.lax.broadcasted_iota(jnp.int32, y.shape, y.ndim - 1) + jax.lax.broadcasted_iota(
      jnp.int32, y.shape, y.ndim - 2)
  return jnp.where(index >= 0, y, jnp.zeros((), y.dtype))


def transpose(x: Array, dots: Dots, axes: tuple[int, ...] | None = None) -> Array:
  """jnp.transpose(x, axes) (default: swap the last two axes), materialized with `dots.pinned` so that a dot reads it
  plainly; its gradient (the inverse transpose of the cotangent) is materialized too."""
  axes = tuple(axes or tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))
  return _pinned_transpose(x, axes) if dots.pinned else jnp.transpose(x, axes)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _pinned_transpose(x: Array, axes: tuple[int, ...]) -> Array:
  return _pin(jnp.transpose(x, axes))


def _pinned_transpose_fwd(x, axes):
  return _pinned_transpose(x, axes), None


def _pinned_transpose_bwd(axes, _, g):
  inverse = tuple(sorted(range(len(axes)), key=axes.__getitem__))
  return (_pin(jnp.transpose(g, inverse)),)


_pinned_transpose.defvjp(_pinned_transpose_fwd, _pinned_transpose_bwd)


BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # /proc/cpuinfo's names (x86; Arm's "Features").


def cpu_bf16_flags(cpuinfo: str) -> set[str]:
  """The bf16 matrix instruction flags a /proc/cpuinfo text lists (x86 "flags", Arm "Features" lines)."""
  return {flag for line in cpuinfo.splitlines() if line.startswith(("flags", "Features"))
          for flag in line.split(":", 1)[-1].split()} & BF16_FLAGS


# XLA's CPU ISA names below the first with bf16 matrix instructions (xla/tsl cpu_features: AVX512_BF16, AMX).
ISAS_WITHOUT_BF16 = frozenset({"SSE4_2", "AVX", "AVX2", "AVX512", "AVX512_VNNI"})


def xla_isa_cap_allows_bf16(xla_flags: str) -> bool:
  """False where XLA_FLAGS caps XLA's CPU code at an ISA without bf16 matrix instructions (the last
  --xla_cpu_max_isa wins; `make test`'s numerics lane sets AVX2, docs/testing.md): XLA then computes as on a CPU
  without them."""
  caps = re.findall(r"--xla_cpu_max_isa=(\S+)", xla_flags)
  return not caps or caps[-1].upper() not in ISAS_WITHOUT_BF16


def native_bf16_dots(where: str) -> bool:
  """Whether dots on platform `where` ("cpu", "cuda", "tpu", ...) should take bf16 operands as they are: off CPU
  always; on a CPU only where /proc/cpuinfo lists bf16 matrix instructions and XLA_FLAGS does not cap XLA below
  them (elsewhere, or where /proc/cpuinfo cannot be read, the bf16-rounded operands multiply in float32). Read once,
  at start-up (encoder.config.auto_bf16_dots), never while tracing."""
  if where != "cpu":
    return True
  try:
    flags = cpu_bf16_flags(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
  except OSError:
    return False
  return bool(flags) and xla_isa_cap_allows_bf16(os.environ.get("XLA_FLAGS", ""))


def dot_dtype(dtype, dots: Dots) -> jnp.dtype:
  """The dtype a dot reads for compute dtype `dtype`: float32 for bf16 without `dots.bf16`, else `dtype`."""
  dtype = jnp.dtype(dtype)
  return dtype if dtype == jnp.float32 or dots.bf16 else jnp.dtype(jnp.float32)


def _operand(x: Array, dtype, dots: Dots) -> Array:
  """x rounded to the compute dtype, in the dtype the dot reads (`dot_dtype`)."""
  return x.astype(dtype).astype(dot_dtype(dtype, dots))


def _dot(a: Array, b: Array) -> Array:
  """[..., M, K] @ [..., K, N] -> float32 [..., M, N], a plain (batched) dot."""
  batch = tuple(range(a.ndim - 2))
  return jax.lax.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 2,)), (batch, batch)),
                             preferred_element_type=jnp.float32)


def _times_transposed(x: Array, y: Array, dots: Dots) -> Array:
  """x @ y^T ([..., M, K], [..., N, K] -> [..., M, N]) as a plain product: y^T materialized, or (y @ x^T)^T when
  transposing x and the float32 result moves fewer bytes."""
  m, k, n, size = x.shape[-2], x.shape[-1], y.shape[-2], x.dtype.itemsize
  if n * k * size <= m * k * size + m * n * 4:
    return _dot(x, transpose(y, dots))
  # Pinned on both sides: XLA would fold it into the dot.
  return transpose(_pinned(_dot(y, transpose(x, dots)), dots), dots)


def _transposed_times(x: Array, y: Array, dots: Dots) -> Array:
  """x^T @ y ([..., M, K], [..., M, N] -> [..., K, N]) as a plain product: x^T materialized, or (y^T @ x)^T when
  transposing y and the float32 result moves fewer bytes."""
  m, k, n, size = x.shape[-2], x.shape[-1], y.shape[-1], x.dtype.itemsize
  if m * k * size <= m * n * size + k * n * 4:
    return _dot(transpose(x, dots), y)
  return transpose(_pinned(_dot(transpose(y, dots), x), dots), dots)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5))
def _matmul(a: Array, b: Array, dtype, dots: Dots, transpose_b: bool, input_dtypes) -> Array:
  return _matmul_fwd(a, b, dtype, dots, transpose_b, input_dtypes)[0]


def _matmul_fwd(a, b, dtype, dots, transpose_b, input_dtypes):
  del input_dtypes
  a, b = _operand(a, dtype, dots), _operand(b, dtype, dots)
  return (_times_transposed(a, b, dots) if transpose_b else _dot(a, b)), (a, b)


def _matmul_bwd(dtype, dots, transpose_b, input_dtypes, residuals, g):
  a, b = residuals
  g = _operand(g, dtype, dots)
  if transpose_b:  # C = A B^T: dA = G B, dB = G^T A.
    grads = _dot(g, b), _transposed_times(g, a, dots)
  else:  # C = A B: dA = G B^T, dB = A^T G.
    grads = _times_transposed(g, b, dots), _transposed_times(a, g, dots)
  return tuple(grad.astype(t) for grad, t in zip(grads, input_dtypes))


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


def matmul(a: Array, b: Array, dtype, dots: Dots, transpose_b: bool = False) -> Array:
  """a [..., M, K] @ b [..., K, N] (or b^T for b [..., N, K] when transpose_b) -> float32 [..., M, N], both operands
  rounded to `dtype` (and computed as `dots` says), batch axes leading; the backward's products are plain too, their
  gradients float32."""
  return _matmul(a, b, dtype, dots, transpose_b, (a.dtype, b.dtype))


def dense_dot_general(dtype, dots: Dots):
  """A `dot_general` for flax's Dense / DenseGeneral (their `dot_general=` field) computed by `matmul` in `dtype`:
  the input's trailing axes contract the kernel's leading ones, no batch axes (what those layers ask for)."""

  def dense_dot(inputs: Array, kernel: Array, dimension_numbers, precision=None) -> Array:
    del precision  # matmul's products are float32-accumulated; XLA's default precision applies.
    (contract_in, contract_kernel), batch = dimension_numbers
    n = len(contract_in)
    if batch != ((), ()) or tuple(contract_in) != tuple(range(inputs.ndim - n, inputs.ndim)) or tuple(
        contract_kernel) != tuple(range(n)):
      raise ValueError(f"dense layer contracts input axes {contract_in} with kernel axes {contract_kernel} "
                       f"(batch {batch}); expected the input's trailing axes and the kernel's leading ones")
    inner = math.prod(kernel.shape[:n])
    y = matmul(inputs.reshape((-1, inner)), kernel.reshape((inner, -1)), dtype, dots)
    return y.reshape(inputs.shape[:inputs.ndim - n] + kernel.shape[n:])

  return dense_dot
