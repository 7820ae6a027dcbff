"""Model FLOPs per step and the measured matmul ceiling, for MFU (DESIGN, "Performance notes": count first).

Model FLOPs = 6 * N * tokens + 12 * layers * hidden * length^2 * rows (attention scores and mixing, forward and
backward), N = the non-embedding parameters (lookup tables cost no FLOPs). The sparse vocabulary projection of the
MLM/SBO heads on the masked positions is not counted, so MFU is slightly conservative.
"""

import time

import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from encoder.config import EncoderConfig


def non_embedding_params(params) -> int:
  """Parameters outside embedding tables (any leaf under a name containing 'embedding')."""
  flat = flax.traverse_util.flatten_dict(params)
  return sum(int(np.prod(v.shape)) for path, v in flat.items() if not any("embedding" in p for p in path))


def train_flops_per_step(params, cfg: EncoderConfig, rows: int, length: int) -> float:
  """6 N T + attention for one optimizer step over `rows` sequences of `length` tokens."""
  tokens = rows * length
  return 6.0 * non_embedding_params(params) * tokens + 12.0 * cfg.num_layers * cfg.hidden_size * length**2 * rows


def matmul_ceiling(size: int = 2048, repeats: int = 5) -> float:
  """FLOP/s of a jitted f32 size^3 matmul on this process's devices (best of `repeats`): the MFU denominator.

  On CPU the devices share the same cores, so the ceiling is that of one device; elsewhere it is per device times the
  device count.
  """
  a = jnp.ones((size, size), jnp.float32)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  per_device = 2.0 * size**3 / best
  devices = jax.process_count() if jax.default_backend() == "cpu" else jax.device_count()
  return per_device * devices
