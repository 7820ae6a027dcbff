"""The measured matmul ceiling MFU divides by (encoder.flops counts the FLOPs; DESIGN, "Performance notes")."""

import time

import jax
import jax.numpy as jnp

from encoder import matmul
from encoder.config import auto_bf16_dots, platform


def matmul_ceiling(size: int | None = None, repeats: int = 5, dtype=jnp.float32, bf16_dots: str | None = None
                   ) -> float:
  """FLOP/s of a jitted size^3 matmul of `dtype` operands with a float32 result on this process's devices (best of
  `repeats`): the MFU denominator.

  `size` defaults to 2048 on CPU and 8192 on accelerators (smaller products there time the launch, not the units). On
  CPU the devices share the same cores, so the ceiling is that of one device; elsewhere it is per device times the
  device count. The result is float32 as in mixed precision (bf16 operands, float32 accumulation and output): XLA CPU
  sends only such bf16 dots to its fast kernels and upcasts the others to float32. The operands are those the
  encoder's dots read (`encoder.matmul.dot_dtype` for `bf16_dots`, config.model.bf16_dots; None: this platform's,
  encoder.config.auto_bf16_dots): on a CPU without bf16 matrix instructions bf16 compute multiplies float32
  operands, so its ceiling is the float32 one.
  """
  size = size or (2048 if jax.default_backend() == "cpu" else 8192)
  native = (bf16_dots or auto_bf16_dots(platform())) == "native"
  a = jnp.ones((size, size), matmul.dot_dtype(dtype, matmul.Dots(pinned=False, bf16=native)))
  product = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))
  product(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    product(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  per_device = 2.0 * size**3 / best
  devices = jax.process_count() if jax.default_backend() == "cpu" else jax.device_count()
  return per_device * devices
