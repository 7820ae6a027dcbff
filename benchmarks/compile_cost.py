"""What one more fine-tuning length bucket costs on this backend: the `data.compile_cost` that bucket pruning reads.

Fine-tuning compiles its gradient program once per padded batch length (tasks.batching.prune_buckets keeps a bucket
only where the padding it saves outweighs one more compilation). Both sides are measured here on the fine-tuning
step itself (MiniLM's shape, a sequence classification head, config.batch_size rows, float32 or bf16): the seconds
to compile `launch.steps.grad_step` for each length (persistent compilation cache off, so a real compilation), and
the step's seconds at each length, whose slope between the shortest and the longest is the time of one padded
token column. compile_cost = compilation seconds / seconds per column, the unit prune_buckets counts in; the
figure for this backend goes into tasks.batching.COMPILE_COSTS, which `data.compile_cost=-1` (auto) reads.

  python -m benchmarks.compile_cost [--lengths 32,128] [--batch 32] [--precision float32] [--steps 10]
Last line: one JSON object (compile_s, step_s per length, column_s, compile_cost, table: the current entry).
"""

import functools
import json
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.timing import timed
from configs import common
from encoder import cli, errors
from encoder.config import platform, preset, resolve_platform
from launch import optimizer, steps
from launch.model import EncoderWithHeads
from tasks import batching, registry

VOCAB = 30522  # MiniLM's (the uncased WordPiece vocabulary).


def batch_of(rows: int, length: int, seed: int = 0) -> dict[str, np.ndarray]:
  """A sentence-classification batch of `rows` full rows of `length` tokens (timing does not depend on the ids)."""
  rng = np.random.default_rng(seed)
  return dict(input_ids=rng.integers(5, VOCAB, (rows, length)).astype(np.int32),
              type_ids=np.zeros((rows, length), np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32),
              label=rng.integers(0, 3, rows).astype(np.int32), example_mask=np.ones(rows, np.float32))


def measure(lengths: list[int], rows: int, dtype: str, count: int) -> dict:
  """Compilation seconds and median step seconds of the fine-tuning gradient program at each length."""
  jax.config.update("jax_enable_compilation_cache", False)  # Real compilations, not loads from a warm cache.
  cfg = preset("minilm", vocab_size=VOCAB, max_positions=max(lengths), dtype=jnp.dtype(dtype),
               **resolve_platform({}))
  objectives = [registry.family({"name": "classification", "labels": ["a", "b", "c"]}).objective()]
  fns = steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                      weights={o.name: 1.0 for o in objectives},
                      tx=optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 10))
  state = jax.jit(functools.partial(steps.init_state, fns, seed=0))(batch_of(rows, lengths[0]))
  compile_s, step_s = {}, {}
  for length in lengths:
    batch = jax.device_put(batch_of(rows, length))
    program = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
    compile_s[length] = min(timed(lambda: program.lower(state, batch).compile(), 1))  # noqa: B023  (called now)
    compiled = program.lower(state, batch).compile()
    jax.block_until_ready(compiled(state, batch))  # Warm-up.
    step_s[length] = statistics.median(timed(lambda: jax.block_until_ready(compiled(state, batch)), count))  # noqa: B023  (called now)
  return {"compile_s": compile_s, "step_s": step_s}


def main(argv: list[str] | None = None) -> dict:
  parser = cli.ArgumentParser(prog="python -m benchmarks.compile_cost", description=__doc__.split("\n\n")[0])
  parser.add_argument("--lengths", type=cli.integers(1), default="32,128",
                      help="padded lengths measured (the slope is between the ends)")
  parser.add_argument("--batch", type=cli.integer(1), default=32,
                      help="rows per step (the fine-tuning config's batch_size)")
  parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--steps", type=cli.integer(1), default=10, help="timed steps per length (median)")
  args = parser.parse_args(argv)
  lengths = sorted(set(args.lengths))
  if len(lengths) < 2:
    parser.error(f"argument --lengths: expected two lengths or more (the slope is between the ends), got "
                 f"{','.join(map(str, lengths))}")
  measured = measure(lengths, args.batch, args.precision, args.steps)
  short, long = lengths[0], lengths[-1]
  column_s = (measured["step_s"][long] - measured["step_s"][short]) / (long - short)
  where = platform()
  compile_s = statistics.mean(measured["compile_s"].values())
  result = measured | {
      "column_s": column_s, "column_ms": column_s * 1e3, "compile_cost": compile_s / column_s,
      "table": batching.COMPILE_COSTS.get(where), "platform": where, "device": jax.devices()[0].device_kind,
      "precision": args.precision, "batch": args.batch}
  for length in lengths:
    print(f"length {length}: compile {measured['compile_s'][length]:.2f} s, "
          f"step {measured['step_s'][length] * 1e3:.2f} ms")
  print(f"one padded column: {column_s * 1e3:.3f} ms; compile_cost = {result['compile_cost']:,.0f} columns "
        f"(tasks.batching.COMPILE_COSTS[{where!r}] = {result['table']})")
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  errors.run(main)
