"""Where one pretraining step's time goes: a `jax.profiler` trace of benchmarks.pretrain_throughput's step and the
operations that took the most device time, each with the model code it comes from.

The step (MLM + NSP, AdamW) runs twice to compile and warm up, then --steps times under `jax.profiler.trace`. The trace
(an .xplane.pb file TensorBoard's profile plugin and xprof open) is kept under --trace-dir; its events are summed by
name with `jax.profiler.ProfileData`: on a GPU the "XLA Ops" line of the device's plane (HLO operations, e.g.
`fusion.123`, `custom-call.4` for cuBLAS/cuDNN), else its kernel streams; on a CPU the XLA client threads (an
operation's time on the thread that ran it: the helper threads of a parallel loop are not counted, so shares are
approximate there). Each operation's source is the `op_name` XLA keeps from the jaxpr
(`jvp(...)` forward, `transpose(jvp(...))` backward, e.g. `Encoder/layer_3/attention/dot_general`), read from the
compiled programs' HLO; a second table sums the operations by source with the layers merged (`layer_N`).

--attention A[,B...] profiles the step on each attention variant in turn (benchmarks.encoder_speed's syntax: auto,
matmul, xla or cudnn, optionally :bfloat16 activations; a path other than matmul runs without attention dropout, and
so does every variant then), each in its own trace: the figures above are the first's, `variants` holds every one's
({name: {attention, top, top_sources, traced_ms_per_step, step_s, transpose_share, trace}}), `transpose_share` being
the share of device time in operations named for a transpose (XLA's `*transpose*` fusions and copies).

  python -m benchmarks.step_profile [--size base] [--seq 128] [--batch 256] [--precision bfloat16] [--steps 3]
                                    [--attention auto]
Last line: one JSON object (top: [[name, ms per step, share, source], ...], top_sources: [[source, ms, share], ...],
traced_ms_per_step, step_s, transpose_share, trace, variants, device).
"""

import argparse
import collections
import json
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.profiler import ProfileData

from benchmarks import pretrain_throughput
from benchmarks.encoder_speed import ATTENTION, variant_config
from benchmarks.timing import timed
from encoder import cli, errors, paths
from encoder.config import PRESETS, preset
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch import xla_flags

# XLA CPU's thread-pool bookkeeping, the spans that enclose its operations and their end markers: not operations.
IGNORED_PREFIXES = ("ThreadpoolListener", "ThunkExecutor", "end: ")


def op_lines(profile: ProfileData) -> list:
  """The trace lines whose events are the step's operations (module docstring)."""
  devices = [plane for plane in profile.planes if plane.name.startswith("/device:")]
  for plane in devices:
    ops = [line for line in plane.lines if line.name == "XLA Ops"]
    if ops:
      return ops
  if devices:
    return [line for plane in devices for line in plane.lines if line.name.startswith("Stream")]
  return [line for plane in profile.planes if plane.name == "/host:CPU"
          for line in plane.lines if line.name.startswith(("tf_XLAPjRtCpuClient", "tf_XLAEigen"))]


def op_sources(hlo_texts: Sequence[str]) -> dict[tuple[str, str], str]:
  """(HLO module, instruction) -> the instruction's source: its op_name metadata without the `jit(...)/` prefix and
  the gradient-accumulation loop's `while/body/closed_call/`, layer numbers as `layer_N`; where XLA kept no op_name
  (conversions, copies it added), the result's shape in parentheses. From compiled programs' HLO text."""
  sources = {}
  for text in hlo_texts:
    module = re.match(r"HloModule ([\w.\-]+)", text)
    for line in text.splitlines():
      instruction = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ", line)
      if instruction:
        op = re.search(r'op_name="([^"]*)"', line)
        source = re.sub(r"^(jit\([^)]*\)/)?(while/body/)?(closed_call/)?", "", op.group(1)) if op else ""
        sources[(module.group(1) if module else "", instruction.group(1))] = (
            re.sub(r"layer_\d+", "layer_N", source) or f"({instruction.group(2)})")
  return sources


def top_ops(trace: Path, count: int, steps: int, sources: dict[tuple[str, str], str] | None = None
            ) -> tuple[list[list], list[list], float]:
  """From the newest .xplane.pb under `trace`: the `count` operations with the most time per step ([name, ms, share
  of the traced time, source]), the `count` sources with the most ([source, ms, share]) and the traced ms per step."""
  path = max(trace.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
  totals: collections.Counter[str] = collections.Counter()  # Operation name -> nanoseconds.
  source_of: dict[str, str] = {}
  for line in op_lines(ProfileData.from_file(str(path))):
    for event in line.events:
      if event.duration_ns > 0 and not event.name.startswith(IGNORED_PREFIXES):
        totals[event.name] += event.duration_ns
        module = dict(event.stats).get("hlo_module", "")
        source_of[event.name] = (sources or {}).get((module, event.name), "")
  by_source: collections.Counter[str] = collections.Counter()
  for name, ns in totals.items():
    by_source[source_of[name] or "(no source)"] += ns
  traced = sum(totals.values()) or 1.0
  row = lambda ns: [round(ns / steps / 1e6, 3), round(ns / traced, 3)]
  return ([[name, *row(ns), source_of[name]] for name, ns in totals.most_common(count)],
          [[source, *row(ns)] for source, ns in by_source.most_common(count)], traced / steps / 1e6)


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--size", default="base", choices=sorted(PRESETS), help="encoder.config preset")
  parser.add_argument("--seq", type=cli.integer(8), default=128, help="tokens per row")
  parser.add_argument("--batch", type=cli.integer(1), default=256)
  parser.add_argument("--precision", choices=("default", "bfloat16"), default="bfloat16")
  parser.add_argument("--steps", type=cli.integer(1), default=3, help="traced steps")
  parser.add_argument("--top", type=cli.integer(1), default=15, help="operations listed")
  parser.add_argument("--trace-dir", type=Path, default=Path("runs/step_profile"))
  parser.add_argument("--attention", type=ATTENTION, default="auto",
                      help="comma-separated attention variants, profiled in turn (auto, matmul, xla, cudnn, "
                           "optionally :bfloat16)")
  args = parser.parse_args()
  xla_flags.apply_gpu_defaults()
  variants = args.attention

  dtype = jnp.bfloat16 if args.precision == "bfloat16" else jnp.float32
  no_dropout = any(choice != "matmul" for _, choice, _ in variants)
  tokenizer = load_tokenizer(minilm_path())
  text = paths.data_file("wikitext-2/raw/wiki.valid.raw")
  batch = pretrain_throughput.mask_batch(pretrain_throughput.nsp_batch(text, tokenizer, args.batch, args.seq, seed=0),
                                         tokenizer, max_predictions=20, seed=0)
  profiles = {}
  for name, choice, activation in variants:
    cfg = variant_config(preset(args.size, max_positions=max(512, args.seq)), choice, activation, dtype, no_dropout)
    print(f"-- {name}: attention {cfg.attention}, activations {jnp.dtype(cfg.activation_dtype).name}", flush=True)
    profiles[name] = profile(cfg, batch, args, args.trace_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}")
  first = profiles[variants[0][0]]
  print(json.dumps({key: first[key] for key in ("top", "top_sources", "traced_ms_per_step", "step_s",
                                                 "transpose_share", "trace")}
                   | {"variants": profiles, "size": args.size, "seq": args.seq, "batch": args.batch,
                      "precision": args.precision, "device": jax.devices()[0].device_kind}))


def profile(cfg, batch: dict, args: argparse.Namespace, trace: Path) -> dict:
  """One variant's traced steps, its tables printed: {attention, top, top_sources, traced_ms_per_step, step_s,
  transpose_share, trace}."""
  step = pretrain_throughput.OurStep(cfg, batch, num_steps=args.steps + 2)
  timed(step, 2)
  with jax.profiler.trace(str(trace)):
    seconds = timed(step, args.steps)
  top, top_sources, traced_ms = top_ops(trace, args.top, args.steps, op_sources(step.compiled_text()))
  transposes = top_ops(trace, 10**6, args.steps)[0]
  transpose_share = sum(share for name, _, share, _ in transposes if "transpose" in name.lower())
  print(f"{'operation':28s} {'ms/step':>9s} {'share':>6s}  source")
  for name, ms, share, source in top:
    print(f"{name[:28]:28s} {ms:9.3f} {share:6.1%}  {source[:100]}")
  print(f"\n{'source (layers merged)':100s} {'ms/step':>9s} {'share':>6s}")
  for source, ms, share in top_sources:
    print(f"{source[:100]:100s} {ms:9.3f} {share:6.1%}")
  step_s = statistics.median(seconds)
  print(f"step {step_s * 1e3:.1f} ms (traced), operations {traced_ms:.1f} ms per step, transposes "
        f"{transpose_share:.1%}; trace {trace}")
  return {"attention": cfg.attention, "activation_dtype": jnp.dtype(cfg.activation_dtype).name, "top": top,
          "top_sources": top_sources, "traced_ms_per_step": round(traced_ms, 3), "step_s": round(step_s, 4),
          "transpose_share": round(transpose_share, 4), "trace": str(trace)}


if __name__ == "__main__":
  errors.run(main)
