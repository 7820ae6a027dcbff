"""Whether each attention path computes the function of the "matmul" path on this device (EncoderConfig.attention).

The CPU tests prove "xla" equal to "matmul" in float32 (tests/encoder/test_attention_paths.py); "cudnn" cannot even
be traced without cuDNN, so it is proven here, on a GPU. An encoder of --size (BERT-base's width by default, 2 layers)
with random weights (LayerNorm parameters too), rows of --length tokens (one full sequence, three packed, one padded,
repeated to --batch rows), no dropout: its hidden states at real tokens and the pooled [CLS] (`output`), and the
gradient of every parameter of a loss reading them (`gradient`), on each path, against the "matmul" path in float32 at
full float32 matmul precision (the reference). Error = max over arrays of max |a - reference| / max |reference|.

- float32 paths ("xla", "matmul" at JAX's default precision, TF32 on recent NVIDIA GPUs): reported;
  `xla_f32_equal`: "xla" at full float32 precision within 1e-5 of the reference (the CPU tests' bound).
- bf16 paths (bf16 operands; `:bfloat16` also bf16 activations): each error beside the "matmul" bf16 path's, today's
  mixed precision; `equal[variant]`: its errors at most twice the "matmul" bf16 path's (the same function to bf16
  rounding: a different function, a wrong mask or scale, errs by far more). A variant that cannot run here (cudnn
  without cuDNN) is null with the reason in `skipped`.

  python -m benchmarks.attention_check [--size base] [--layers 2] [--batch 16] [--length 128] [--tiny]
Last line: one JSON object (errors {variant: {output, gradient}}, equal, xla_f32_equal, skipped, device).
"""

import argparse
import json
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from encoder import Encoder, EncoderOutput, cli, errors
from encoder.config import PRESETS, preset, resolve_platform
from launch import xla_flags

F32, BF16 = jnp.float32, jnp.bfloat16
# (name, attention path, compute dtype, activation dtype); "matmul" (bf16) is the bf16 variants' yardstick.
VARIANTS = (("xla float32", "xla", F32, F32), ("matmul float32", "matmul", F32, F32), ("matmul", "matmul", BF16, F32),
            ("xla", "xla", BF16, F32), ("cudnn", "cudnn", BF16, F32), ("cudnn:bfloat16", "cudnn", BF16, BF16),
            ("xla:bfloat16", "xla", BF16, BF16))
TOLERANCE_F32 = 1e-5  # tests/encoder/test_attention_paths.py's bound.
BF16_FACTOR = 2.0  # A bf16 variant may err at most this many times the matmul bf16 path.


def rows(batch: int, length: int, vocab: int) -> tuple[np.ndarray, ...]:
  """(ids, types, positions, segments) [batch, length]: a full row, three packed sequences and padding, one sequence
  and padding, repeated."""
  third = length // 3
  segments = np.stack([np.ones(length, np.int32),
                       np.repeat([1, 2, 3, 0], [third, third, length - 2 * third - 2, 2]).astype(np.int32),
                       (np.arange(length) < length * 2 // 3).astype(np.int32)])
  positions = np.stack([np.arange(length), np.concatenate([np.arange(third), np.arange(third),
                                                           np.arange(length - 2 * third)]), np.arange(length)])
  segments, positions = (np.resize(a, (batch, length)) for a in (segments, positions))
  rng = np.random.default_rng(0)
  ids = np.where(segments > 0, rng.integers(1, vocab, segments.shape), 0).astype(np.int32)
  return ids, np.zeros_like(ids), positions.astype(np.int32), segments


def results(cfg, params, inputs) -> list[np.ndarray]:
  """[hidden states at real tokens..., pooled, every gradient...] of `cfg` on `inputs` as float64 arrays."""
  ids, types, positions, segments = inputs
  real = jnp.asarray(segments > 0)[..., None]
  model = Encoder(cfg)

  def loss(params):
    out = cast(EncoderOutput, model.apply({"params": params}, ids, types, positions, segments, train=True))
    return jnp.sum(jnp.sin(out.last) * real) + jnp.sum(out.pooled ** 2), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  arrays = [h * real for h in out.hidden_states] + [out.pooled] + jax.tree.leaves(grads)
  return [np.asarray(a, np.float64) for a in arrays]


def error(got: list[np.ndarray], want: list[np.ndarray], outputs: int) -> dict[str, float]:
  """{"output", "gradient"}: the largest max |a - b| / max |b| over the output arrays and over the gradients."""
  relative = [float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(got, want)]
  return {"output": max(relative[:outputs]), "gradient": max(relative[outputs:])}


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.attention_check", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--size", default="base", choices=sorted(PRESETS), help="encoder.config preset (its width)")
  parser.add_argument("--layers", type=cli.integer(1), default=2)
  parser.add_argument("--batch", type=cli.integer(1), default=16)
  parser.add_argument("--length", type=cli.integer(1), default=128)
  parser.add_argument("--tiny", action="store_true", help="the tiny preset, 8 rows of 32 tokens (CPU mechanics)")
  args = parser.parse_args()
  xla_flags.apply_gpu_defaults()
  size, batch, length = ("tiny", 8, 32) if args.tiny else (args.size, args.batch, args.length)
  base = preset(size, num_layers=args.layers, vocab_size=1000, max_positions=max(512, length), hidden_dropout=0.0,
                attention_dropout=0.0, **resolve_platform({}))  # This platform's kernels, as a run's start-up.
  inputs = rows(batch, length, base.vocab_size)
  init = Encoder(base).init(jax.random.key(0), inputs[0])["params"]
  rng = np.random.default_rng(1)
  params = jax.tree.map(lambda a: np.asarray(a) + rng.normal(0.0, 0.05, a.shape).astype(np.float32), init)
  outputs = base.num_layers + 2  # Hidden states and the pooled [CLS] come first in `results`.
  with jax.default_matmul_precision("float32"):
    reference = results(base, params, inputs)
    full_xla = error(results(base.replace(attention="xla"), params, inputs), reference, outputs)
  found: dict[str, dict[str, float] | None] = {}
  skipped: dict[str, str] = {}
  for variant, path, dtype, activation in VARIANTS:
    cfg = base.replace(attention=path, dtype=dtype, activation_dtype=activation)
    try:
      found[variant] = error(results(cfg, params, inputs), reference, outputs)
    except Exception as err:  # noqa: BLE001  (cuDNN absent or refusing a shape: reported, not fatal)
      skipped[variant], found[variant] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}", None
    measured = found[variant]
    print(f"{variant:16s} " + (f"output {measured['output']:.2e}, gradient {measured['gradient']:.2e}"
                               if measured else f"skipped: {skipped[variant]}"), flush=True)
  yardstick = found["matmul"]
  if yardstick is None:
    raise RuntimeError(f"the matmul bf16 path, the yardstick of the others, failed: {skipped['matmul']}")
  bound = {key: BF16_FACTOR * value for key, value in yardstick.items()}
  equal = {variant: None if (measured := found[variant]) is None else all(measured[k] <= bound[k] for k in bound)
           for variant, _, dtype, _ in VARIANTS if dtype == BF16 and variant != "matmul"}
  print(f"xla at full float32 precision: output {full_xla['output']:.2e}, gradient {full_xla['gradient']:.2e}")
  print(json.dumps({"errors": found, "equal": equal, "bf16_bound": bound, "xla_f32_full": full_xla,
                    "xla_f32_equal": max(full_xla.values()) <= TOLERANCE_F32, "skipped": skipped, "size": size,
                    "layers": args.layers, "batch": batch, "length": length,
                    "device": jax.devices()[0].device_kind}))


if __name__ == "__main__":
  errors.run(main)
