"""The matmul ceiling MFU divides by times the operands the encoder's dots read."""

import jax.numpy as jnp
import pytest

from encoder import matmul
from launch import flops


@pytest.mark.parametrize("units", [True, False])
def test_matmul_ceiling_times_the_operands_the_encoder_multiplies(units, monkeypatch):
  """bf16 compute's ceiling is that of the dots it runs: bf16 operands with bf16 units (config.model.bf16_dots
  "native"), float32 ones without ("float32"); unnamed, this platform's choice."""
  seen = []
  product = jnp.matmul
  monkeypatch.setattr(jnp, "matmul", lambda a, b, **kw: seen.append(a.dtype) or product(a, b, **kw))
  bf16_dots = "native" if units else "float32"
  assert flops.matmul_ceiling(size=64, repeats=1, dtype=jnp.bfloat16, bf16_dots=bf16_dots) > 0
  assert flops.matmul_ceiling(size=64, repeats=1, bf16_dots=bf16_dots) > 0
  monkeypatch.setattr(matmul, "native_bf16_dots", lambda where: units)
  assert flops.matmul_ceiling(size=64, repeats=1, dtype=jnp.bfloat16) > 0
  want = jnp.dtype(jnp.bfloat16 if units else jnp.float32)
  assert seen == [want, jnp.dtype(jnp.float32), want]
