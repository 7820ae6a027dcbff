"""Model FLOPs per step and the measured matmul ceiling, for MFU (DESIGN, "Performance notes": count first).

Training FLOPs of the encoder, forward + backward = 3x the forward's 2 FLOPs per multiply-add:
  6 * [layers * (4 H^2 + 2 H I)] * rows * length     the layers' matmuls (QKV, attention output, FFN) at every token
                                                       (3 H I for a gated FFN: GeGLU/SwiGLU's input, gate and output)
  + 12 * layers * H * length^2 * rows                  attention QK^T and AV (local layers too: the encoder computes
                                                       every score and masks those outside the window)
When the last block runs only at the rows the heads read (Encoder's last_positions), that block counts its keys and
values at every token and the rest of its work (queries, QK^T and AV, output, FFN) at those rows alone.
Lookup tables cost no FLOPs; heads are left out (the engine's MFU is slightly conservative; the throughput benchmark
adds its heads' FLOPs on top).
"""

import time

import jax
import jax.numpy as jnp

from encoder import matmul
from encoder.config import EncoderConfig


def encoder_train_flops(cfg: EncoderConfig, rows: int, length: int, last_rows: float | None = None) -> float:
  """Forward + backward FLOPs of the encoder layers for `rows` sequences of `length` tokens, the last block at
  `last_rows` rows per sequence when given (module docstring)."""
  h = cfg.hidden_size
  feed_forward = (3 if cfg.gated_feed_forward else 2) * h * cfg.intermediate_size
  per_token = 4 * h * h + feed_forward + 2 * h * length  # Multiply-adds per token and layer.
  per_sequence = cfg.num_layers * per_token * length
  if last_rows is not None:  # Keys and values (2 H^2) stay at every token.
    per_sequence -= (per_token - 2 * h * h) * (length - last_rows)
  return 6.0 * per_sequence * rows


def matmul_ceiling(size: int | None = None, repeats: int = 5, dtype=jnp.float32) -> float:
  """FLOP/s of a jitted size^3 matmul of `dtype` operands with a float32 result on this process's devices (best of
  `repeats`): the MFU denominator.

  `size` defaults to 2048 on CPU and 8192 on accelerators (smaller products there time the launch, not the units). On
  CPU the devices share the same cores, so the ceiling is that of one device; elsewhere it is per device times the
  device count. The result is float32 as in mixed precision (bf16 operands, float32 accumulation and output): XLA CPU
  sends only such bf16 dots to its fast kernels and upcasts the others to float32. The operands are those the
  encoder's dots read (`encoder.matmul.dot_dtype`): on a CPU without bf16 matrix instructions bf16 compute multiplies
  float32 operands, so its ceiling is the float32 one.
  """
  size = size or (2048 if jax.default_backend() == "cpu" else 8192)
  a = jnp.ones((size, size), matmul.dot_dtype(dtype))
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
