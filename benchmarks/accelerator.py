"""Every figure of the accelerator benchmarks, from one command per section that fits one GPU call (at most 10 minutes).

  python -m benchmarks.accelerator --section pretraining   # attention paths checked, MFU and HF ratio per
                                                            # path (base, large), remat, profile, MLM quality
  python -m benchmarks.accelerator --section finetuning    # encoder speed, embeddings, fine-tuning, predict,
                                                            # a bucket's compile cost
  ... [--tiny] [--only part,part] [--budget-s 480] [--out DIR] [--plan]

Each part is an existing benchmark module run in its own process (benchmarks.attention_check, pretrain_throughput,
remat_memory, step_profile, pretrain_quality, encoder_speed, embeddings, finetune, predict_speed, compile_cost): its
output is streamed here, its last JSON line is read back. A process per part means that one part's crash,
out-of-memory or hang costs only that part, that each part has the whole device memory to itself, and that this
process never touches the device. Parts run in the order listed, each killed at min(its budget, what is left of
--budget-s); a part that does not start because the budget is spent is `skipped`. `--only` reruns some parts (e.g.
on a second GPU call). `--tiny` runs the same parts at tiny sizes, a few steps and a little data: the mechanics, in
minutes on a CPU (each part bounded by what is left of --budget-s only: the parts' budgets are the GPU's).
`--plan` prints the parts, their commands and budgets, and the JSON line with every figure null, running nothing.
(In --tiny, "xla" stands in for "cudnn", which needs cuDNN to be traced at all.)

The pretraining parts run the encoder on each attention path (EncoderConfig.attention): NEW_ATTENTION (cuDNN's fused
attention on [batch, length, heads, dim], bf16 activations) is the step of the headline figures (`mfu_peak`,
`ratio`, ...); the base part times every variant of BASE_VARIANTS in the same rounds (`attention_mfu_peak` and
`attention_tokens_per_s` by variant, "matmul" being the step before the paths existed, without attention dropout as
every variant and HF then run); remat measures NEW_ATTENTION's rows at length 512; profile traces NEW_ATTENTION's step
(and the matmul one with --profile-matmul; `profile_transpose_share` by variant). `attention_check` first proves each
path computes the matmul path's function on the device (benchmarks.attention_check).

The last line is one JSON object: the section's figures (null where not measured, with the reason in `reasons`), the
device, the software versions, the CPU, and per part its status (ok, error, timeout, skipped), seconds and error.
It is also written to <out>/<section>.json. <out> is --out, else $OUT (the GPU machine's folder that comes back),
else runs/accelerator; each invocation writes into a fresh <out>/<section>-<time>/ (fine-tuning runs, traces).
"""

import argparse
import dataclasses
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.encoder_speed import cpu_name
from configs import samples
from encoder import cli, errors

ROOT = Path(__file__).resolve().parents[1]
MIN_START_S = 20  # A part is not started with less of the section's budget left.
NO_PREALLOCATION = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # JAX and PyTorch share the device in one process.
MOST_MEMORY = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}  # JAX alone: the remat search fits batches to this.
REMAT_POLICIES = ("none", "dots_saveable", "full")
NEW_ATTENTION = "cudnn:bfloat16"  # benchmarks.encoder_speed's variant syntax: attention path:activation dtype.
BASE_VARIANTS = (NEW_ATTENTION, "xla:bfloat16", "matmul")
PROFILE_VARIANTS = (NEW_ATTENTION,)  # The matmul step's profile: docs/gpu.md (H200, 2026-11-26), or --profile-matmul.
FINETUNE_TINY = ["--set", "task.train_split=train[:64]", "--set", "task.eval_split=validation[:32]",
                 "--set", "task.test_split=test[:32]", "--set", "epochs=1", "--set", "task.max_length=32"]


class PartFailed(Exception):  # noqa: N818  (its name is recorded in results: `type(err).__name__`)
  """A part's process failed or printed no JSON line; the message says how."""


@dataclasses.dataclass
class Context:
  """What the parts of one invocation share: the mode, the folder, the deadline, and the figures so far."""
  tiny: bool
  remat_policies: tuple[str, ...]
  profile_variants: tuple[str, ...]
  out: Path
  deadline: float
  plan: bool
  figures: dict = dataclasses.field(default_factory=dict)
  # (part, command line) in the order run or planned.
  commands: list[tuple[str, str]] = dataclasses.field(default_factory=list)

  def child(self, part: str, module: str, args: list[str], cap_s: float, env: dict | None = None) -> dict:
    """Runs `python -m benchmarks.<module> args` for at most cap_s (and the deadline), its output streamed, and
    returns its last JSON line; in plan mode only records the command."""
    command = [sys.executable, "-m", f"benchmarks.{module}", *args]
    flags = f"XLA_FLAGS='{env['XLA_FLAGS']}' " if env and env.get("XLA_FLAGS") else ""
    self.commands.append((part, flags + " ".join(command[1:])))
    if self.plan:
      return {}
    left = self.deadline - time.monotonic()
    timeout = left if self.tiny else min(cap_s, left)  # The caps are the GPU's; a tiny CPU run has --budget-s only.
    print(f"-- {part}: python {' '.join(command[1:])}  (at most {timeout:.0f} s)", flush=True)
    measured = run_child(command, timeout, env or {})
    self.figures.setdefault("device", measured.get("device"))
    return measured


@dataclasses.dataclass(frozen=True)
class Part:
  """One measurement: `run(context, tiny)` returns the section figures it measured (figure -> value)."""
  name: str
  budget_s: float
  keys: tuple[str, ...]  # The section figures it fills.
  run: Callable[[Context], dict]


def run_child(command: list[str], timeout: float, env: dict) -> dict:
  """The command's last JSON line; its output streamed; killed (its whole process group) at `timeout` seconds."""
  environment = os.environ | env | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                              os.environ.get("PYTHONPATH")]))}
  process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
  timer = threading.Timer(timeout, os.killpg, (process.pid, signal.SIGKILL))
  timer.start()
  lines = []
  assert process.stdout is not None  # stdout=PIPE
  try:
    for line in process.stdout:
      print("   " + line, end="", flush=True)
      lines.append(line.strip())
  finally:
    timer.cancel()
  code = process.wait()
  if code == -signal.SIGKILL:
    raise TimeoutError(f"killed after {timeout:.0f} s")
  last = next((line for line in reversed(lines) if line.startswith("{")), None)
  if code != 0 or last is None:
    tail = cli.child_error(lines) or " | ".join(lines[-3:])
    raise PartFailed(f"exit status {code}" + (f": {tail}" if tail else ""))
  return json.loads(last)


def pick(measured: dict, names: dict[str, str]) -> dict:
  """{figure: measured[key]} for names {figure: key}."""
  return {figure: measured.get(key) for figure, key in names.items()}


def variants(ctx: Context, names: tuple[str, ...]) -> str:
  """The --attention argument of a part: `names`, with "xla" for "cudnn" in --tiny (a CPU cannot trace cuDNN)."""
  return ",".join(dict.fromkeys(name.replace("cudnn", "xla") if ctx.tiny else name for name in names))


# The attention paths on this device.

ATTENTION_KEYS = {"attention_equal": "equal", "attention_errors": "errors", "attention_bf16_bound": "bf16_bound",
                  "attention_xla_f32_equal": "xla_f32_equal", "attention_skipped": "skipped"}


def attention_check(ctx: Context) -> dict:
  """Each path's outputs and gradients against the float32 matmul path (cuDNN's proof of equality)."""
  measured = ctx.child("attention_check", "attention_check", ["--tiny"] if ctx.tiny else [], 90)
  return pick(measured, ATTENTION_KEYS)


# Pretraining at scale.

THROUGHPUT_KEYS = {"mfu_peak": "mfu_peak", "mfu": "mfu", "ratio": "ratio", "tokens_per_s": "tokens_per_s",
                   "hf_tokens_per_s": "hf_torch_tokens_per_s", "step_s": "step_s", "hf_step_s": "hf_step_s",
                   "bf16_speedup": "bf16_speedup", "ceiling_gflops": "ceiling_gflops", "peak_tflops": "peak_tflops",
                   "bf16_reference": "bf16_reference", "attention": "attention",
                   "attention_tokens_per_s": "attention_tokens_per_s", "attention_mfu_peak": "attention_mfu_peak",
                   "attention_mfu": "attention_mfu", "attention_failed": "attention_errors"}
LARGE_KEYS = {f"large_{k}": v for k, v in THROUGHPUT_KEYS.items()
              if k not in ("bf16_speedup", "bf16_reference") and not k.startswith("attention_")}


def tiny_text(ctx: Context) -> list[str]:
  """--tiny's text for pretrain_throughput: the corpus sample that ships with the package (no data directory)."""
  return ["--text", str(samples.sample_file("heldout"))] if ctx.tiny else []


def throughput_base(ctx: Context) -> dict:
  """BERT-base, seq 128, batch 256, bf16, every BASE_VARIANTS attention variant and HF under autocast in the same
  rounds; our TF32 step too in --tiny only (bf16_speedup): on the H200 it made the part miss its budget."""
  sizes = ["--size", "tiny", "--seq", "64", "--batch", "8", "--rounds", "2", "--steps", "1"] if ctx.tiny else \
      ["--size", "base", "--seq", "128", "--batch", "256", "--rounds", "3", "--steps", "5", "--no-f32"]
  measured = ctx.child("throughput_base", "pretrain_throughput", sizes + tiny_text(ctx) + [
      "--precision", "bfloat16", "--no-dense", "--attention", variants(ctx, BASE_VARIANTS)], 180, NO_PREALLOCATION)
  return pick(measured, THROUGHPUT_KEYS)


# XLA GPU flags that might pay (issue 57), each in its own process on NEW_ATTENTION's base step, ours only; "" is the
# step with the defaults (launch.xla_flags), the yardstick in the same call. A flag XLA does not know fails its run.
XLA_FLAG_SETS = ("", "--xla_gpu_enable_cudnn_layer_norm=true", "--xla_gpu_enable_cublaslt=true",
                 "--xla_gpu_autotune_level=2")


def xla_flag_sets(ctx: Context) -> dict:
  """Step time and MFU of the base bf16 step on NEW_ATTENTION under each XLA_FLAG_SETS entry (None where a run
  failed, with its error in xla_flags_failed)."""
  sizes = ["--size", "tiny", "--seq", "64", "--batch", "8", "--rounds", "1", "--steps", "1"] if ctx.tiny else \
      ["--size", "base", "--seq", "128", "--batch", "256", "--rounds", "2", "--steps", "5"]
  step_s, mfu, failed = {}, {}, {}
  for flags in XLA_FLAG_SETS:
    env = {"XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), flags]))}
    try:
      result = ctx.child("xla_flags", "pretrain_throughput", sizes + tiny_text(ctx) + [
          "--precision", "bfloat16", "--no-dense", "--no-f32", "--no-hf", "--attention",
          variants(ctx, (NEW_ATTENTION,))], 75, env | NO_PREALLOCATION)
      step_s[flags or "defaults"], mfu[flags or "defaults"] = result.get("step_s"), result.get("mfu_peak")
    except (PartFailed, TimeoutError) as err:
      failed[flags or "defaults"] = str(err)[:300]
  return {} if ctx.plan else {"xla_flags_step_s": step_s, "xla_flags_mfu_peak": mfu, "xla_flags_failed": failed}


def throughput_large(ctx: Context) -> dict:
  """BERT-large, seq 512, batch 32, bf16, NEW_ATTENTION, against HF under autocast."""
  sizes = ["--size", "mini", "--seq", "128", "--batch", "4", "--rounds", "1", "--steps", "1"] if ctx.tiny else \
      ["--size", "large", "--seq", "512", "--batch", "32", "--rounds", "3", "--steps", "3"]
  measured = ctx.child("throughput_large", "pretrain_throughput", sizes + tiny_text(ctx) + [
      "--precision", "bfloat16", "--no-dense", "--no-f32", "--attention", variants(ctx, (NEW_ATTENTION,))], 120,
                       NO_PREALLOCATION)
  return pick(measured, LARGE_KEYS)


def remat(ctx: Context) -> dict:
  """Per policy: the largest batch of base at seq 512 on NEW_ATTENTION, and the step at the largest batch `none`
  fits (its tokens/s and mfu_peak)."""
  sizes = ["--size", "tiny", "--seq", "64", "--probe-batch", "2", "--memory-limit-mb", "64", "--steps", "2"] \
      if ctx.tiny else ["--size", "base", "--seq", "512", "--probe-batch", "8", "--steps", "3"]
  sizes += ["--attention", variants(ctx, (NEW_ATTENTION,))]
  started, measured, batch = time.monotonic(), {}, "-1"
  for policy in ctx.remat_policies:
    left = 300 - (time.monotonic() - started)
    measured[policy] = ctx.child("remat", "remat_memory", ["--policy", policy, *sizes, "--time-batch", batch], left,
                                 MOST_MEMORY)
    if policy == "none":
      if not (ctx.plan or measured[policy].get("max_batch")):
        raise PartFailed(f"no batch fits without remat: {measured[policy].get('max_batch_note')}")
      batch = str(measured[policy].get("max_batch") or "<none's max_batch>")
  if ctx.plan:
    return {}
  none, full = measured["none"], measured.get("full", {})
  per_policy = lambda key, scale=None: {p: m.get(key) and (round(m[key] / scale, 3) if scale else m[key])
                                        for p, m in measured.items()}
  return {"remat_batch_gain": round(full["max_batch"] / none["max_batch"], 3)
          if full.get("max_batch") and none.get("max_batch") else None,
          "remat_time_cost": round(full["seconds_per_token"] / none["seconds_per_token"] - 1, 3)
          if full.get("seconds_per_token") and none.get("seconds_per_token") else None,
          "remat_time_batch": none.get("time_batch"), "remat_max_batch": per_policy("max_batch"),
          "remat_step_s": per_policy("step_s"), "remat_peak_gib": per_policy("peak_bytes_in_use", 2**30),
          "remat_memory_limit_gib": round(none["memory_limit_bytes"] / 2**30, 2),
          "remat_bytes_per_row_mib": per_policy("bytes_per_row", 2**20),
          "remat_tokens_per_s": per_policy("tokens_per_s"), "remat_mfu_peak": per_policy("mfu_peak"),
          "remat_attention": f"{none.get('attention')}, {none.get('activation_dtype')} activations"}


def profile(ctx: Context) -> dict:
  """jax.profiler traces of the base bf16 step on each PROFILE_VARIANTS attention variant: their top operations and
  the share of transposes."""
  sizes = ["--size", "tiny", "--seq", "64", "--batch", "8", "--steps", "2"] if ctx.tiny else \
      ["--size", "base", "--seq", "128", "--batch", "256", "--steps", "3"]
  measured = ctx.child("profile", "step_profile", sizes + ["--trace-dir", str(ctx.out / "profile"), "--attention",
                                                           variants(ctx, ctx.profile_variants)],
                       80 * len(ctx.profile_variants))
  by_variant = measured.get("variants") or {}
  per_variant = lambda key: {name: v.get(key) for name, v in by_variant.items()} or None
  return pick(measured, {"profile_top": "top", "profile_traced_ms_per_step": "traced_ms_per_step",
                         "profile_trace": "trace"}) | {
      "profile_transpose_share": per_variant("transpose_share"), "profile_step_s": per_variant("step_s"),
      "profile_top_by_variant": per_variant("top")}


def quality(ctx: Context) -> dict:
  """Held-out MLM accuracy of ours and HF after the same wall clock (the mini model, WikiText-2)."""
  minutes = 0.05 if ctx.tiny else 1.0
  sizes = ["--calibration_steps", "3", "--warmup_steps", "5", "--eval_batches", "2", "--batch_size", "8"] \
      if ctx.tiny else ["--eval_batches", "40"]
  measured = ctx.child("quality", "pretrain_quality", ["--minutes", str(minutes), "--reference", "--runs", "mlm",
                                                       "--workdir", str(ctx.out / "quality"), *sizes], 240,
                       NO_PREALLOCATION)
  return {"quality_minutes": minutes, "quality_accuracy": measured.get("mlm", {}).get("accuracy"),
          "quality_hf_accuracy": measured.get("reference", {}).get("accuracy")}


# Fine-tuning, encoding and prediction.

def encoder_speed(ctx: Context) -> dict:
  """MiniLM forward and forward+backward, TF32/float32 and bf16, against HF under autocast with SDPA."""
  sizes = ["--batch", "8", "--length", "64", "--rounds", "1", "--repeats", "1"] if ctx.tiny else ["--rounds", "3"]
  measured = ctx.child("encoder_speed", "encoder_speed", sizes, 100, NO_PREALLOCATION)
  return pick(measured, {f"encoder_{kind}_ratio_{p}": f"{kind}_ratio_{p}"
                         for kind in ("forward", "train") for p in ("bf16", "f32")}
              | {"encoder_bf16_reference": "bf16_reference"})


def embeddings(ctx: Context) -> dict:
  """Word vectors of WikiText-2 validation, ours against HF's plain loop."""
  sizes = ["--limit", "100", "--rounds", "1"] if ctx.tiny else ["--rounds", "2"]
  measured = ctx.child("embeddings", "embeddings",
                       ["--reference", "--skip", "anisotropy,wic,wsd,picture", *sizes], 90, NO_PREALLOCATION)
  return pick(measured, {"embed_words_per_s_ratio": "ratio", "embed_words_per_s": "words_per_s",
                         "embed_hf_words_per_s": "hf_words_per_s"})


def finetune(task: str, prefix: str) -> Callable[[Context], dict]:
  """The part fine-tuning `task` in bf16 against the HF reference (its run kept under <out>/<task>)."""
  def run(ctx: Context) -> dict:
    args = ["--task", task, "--reference", "--precision", "bfloat16", "--workdir", str(ctx.out / task)]
    measured = ctx.child(f"finetune_{task}", "finetune", args + (FINETUNE_TINY if ctx.tiny else []), 240,
                         NO_PREALLOCATION)
    return pick(measured, {f"{prefix}speedup": "speedup", f"{prefix}score": "score",
                           f"{prefix}reference_score": "reference_score", f"{prefix}p_value": "p_value",
                           f"{prefix}examples_per_s": "examples_per_s",
                           f"{prefix}reference_examples_per_s": "reference_examples_per_s",
                           f"{prefix}train_seconds": "train_seconds", f"{prefix}wall_seconds": "wall_seconds"})
  return run


def compile_cost(ctx: Context) -> dict:
  """One more fine-tuning bucket's compilation in padded columns of a step (the data.compile_cost figure)."""
  args = ["--precision", "bfloat16"] + (["--lengths", "16,32", "--batch", "4", "--steps", "2"] if ctx.tiny else [])
  measured = ctx.child("compile_cost", "compile_cost", args, 90, NO_PREALLOCATION)
  return pick(measured, {"compile_cost": "compile_cost", "compile_cost_compile_s": "compile_s",
                         "compile_cost_column_ms": "column_ms"})


def predict(ctx: Context) -> dict:
  """launch.predict on CoNLL-2003 test sentences with the conll2003_crf run, against an HF pipeline."""
  workdir = ctx.out / "conll2003_crf"
  if not ctx.plan and not (workdir / "results.json").is_file():
    raise PartFailed(f"no finished conll2003_crf run in {workdir} (part finetune_conll2003_crf)")
  count = "200" if ctx.tiny else "10000"
  measured = ctx.child("predict", "predict_speed", ["--workdir", str(workdir), "--sentences", count], 90,
                       NO_PREALLOCATION)
  return pick(measured, {"predict_sentences_per_s": "predict_sentences_per_s",
                         "predict_hf_pipeline_sentences_per_s": "hf_pipeline_sentences_per_s",
                         "predict_ratio": "ratio", "predict_sentences_per_s_cold": "sentences_per_s_cold"})


SECTIONS: dict[str, tuple[Part, ...]] = {
    "pretraining": (
        Part("attention_check", 90, tuple(ATTENTION_KEYS), attention_check),
        Part("throughput_base", 180, tuple(THROUGHPUT_KEYS), throughput_base),
        Part("remat", 300, ("remat_batch_gain", "remat_time_cost", "remat_time_batch", "remat_max_batch",
                            "remat_step_s", "remat_peak_gib", "remat_memory_limit_gib", "remat_bytes_per_row_mib",
                            "remat_tokens_per_s", "remat_mfu_peak", "remat_attention"), remat),
        Part("profile", 80, ("profile_top", "profile_traced_ms_per_step", "profile_trace", "profile_transpose_share",
                              "profile_step_s", "profile_top_by_variant"), profile),
        Part("throughput_large", 120, tuple(LARGE_KEYS), throughput_large),
        Part("xla_flags", 75 * len(XLA_FLAG_SETS), ("xla_flags_step_s", "xla_flags_mfu_peak", "xla_flags_failed"),
             xla_flag_sets),
        Part("quality", 240, ("quality_minutes", "quality_accuracy", "quality_hf_accuracy"), quality)),
    "finetuning": (
        Part("encoder_speed", 100, tuple(f"encoder_{k}_ratio_{p}" for k in ("forward", "train")
                                         for p in ("bf16", "f32")) + ("encoder_bf16_reference",), encoder_speed),
        Part("embeddings", 90, ("embed_words_per_s_ratio", "embed_words_per_s", "embed_hf_words_per_s"), embeddings),
        Part("finetune_sick", 240, tuple(f"finetune_{k}" for k in (
            "speedup", "score", "reference_score", "p_value", "examples_per_s", "reference_examples_per_s",
            "train_seconds", "wall_seconds")), finetune("sick", "finetune_")),
        Part("finetune_conll2003_crf", 240, tuple(f"finetune_crf_{k}" for k in (
            "speedup", "score", "reference_score", "p_value", "examples_per_s", "reference_examples_per_s",
            "train_seconds", "wall_seconds")), finetune("conll2003_crf", "finetune_crf_")),
        Part("predict", 90, ("predict_sentences_per_s", "predict_hf_pipeline_sentences_per_s", "predict_ratio",
                             "predict_sentences_per_s_cold"), predict),
        Part("compile_cost", 90, ("compile_cost", "compile_cost_compile_s", "compile_cost_column_ms"), compile_cost)),
}


def versions() -> dict[str, str | None]:
  """Installed versions of the frameworks the figures depend on."""
  def version(name: str) -> str | None:
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      return None
  return {name: version(name) for name in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "torch",
                                           "transformers")}


def run_part(part: Part, ctx: Context) -> dict:
  """The part's figures and its record (status, seconds, error or reason); never raises."""
  left = ctx.deadline - time.monotonic()
  if not ctx.plan and left < MIN_START_S:
    return {"status": "skipped", "reason": f"section budget spent ({left:.0f} s left)"}
  started = time.monotonic()
  try:
    figures = part.run(ctx)
  except Exception as err:  # noqa: BLE001  (one failing part must not cost the others)
    status = "timeout" if isinstance(err, TimeoutError) else "error"
    return {"status": status, "seconds": round(time.monotonic() - started, 1), "error": f"{type(err).__name__}: {err}"}
  ctx.figures |= figures
  return {"status": "planned" if ctx.plan else "ok", "seconds": round(time.monotonic() - started, 1),
          "budget_s": part.budget_s}


def reasons(parts: tuple[Part, ...], records: dict[str, dict], figures: dict) -> dict[str, str]:
  """Why each null figure is null: its part's error or skip, an HF reference not run, or not reported."""
  why = {}
  for part in parts:
    record = records.get(part.name, {"status": "not selected (--only)"})
    for key in part.keys:
      if figures.get(key) is not None:
        continue
      if record.get("status") == "ok" and key.endswith(("mfu_peak", "peak_tflops")):
        why[key] = f"no dense datasheet peak known for {figures.get('device')} (pretrain_throughput.PEAK_TFLOPS)"
      elif record.get("status") == "ok":
        reference = figures.get("bf16_reference") or figures.get("encoder_bf16_reference") or ""
        why[key] = (f"HF reference not run: {reference}" if reference and not reference.startswith("torch.autocast")
                    else f"{part.name} did not report it (see its output)")
      else:
        why[key] = f"{part.name}: {record.get('error') or record.get('reason') or record['status']}"
  return why


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  """The command line (module docstring)."""
  parser = cli.ArgumentParser(prog="python -m benchmarks.accelerator", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--section", required=True, choices=sorted(SECTIONS))
  parser.add_argument("--tiny", action="store_true", help="tiny sizes, few steps, little data (CPU mechanics)")
  parser.add_argument("--only", default="", help="comma-separated parts to run (default: all of the section)")
  parser.add_argument("--budget-s", type=cli.number(0, low_open=True), default=480.0,
                      help="the section's wall-clock budget")
  parser.add_argument("--out", type=Path, default=None, help="default: $OUT, else runs/accelerator")
  parser.add_argument("--remat-policies", default=",".join(REMAT_POLICIES),
                      help="the remat part's policies, none first (a short GPU call: none,full)")
  parser.add_argument("--profile-matmul", action="store_true",
                      help="the profile part also traces the matmul attention step (about 80 s more on a GPU)")
  parser.add_argument("--plan", action="store_true", help="print the parts and their commands; run nothing")
  args = parser.parse_args(argv)
  names = [part.name for part in SECTIONS[args.section]]
  args.only = [name for name in args.only.split(",") if name] or names
  if unknown := sorted(set(args.only) - set(names)):
    parser.error(f"--only {unknown}: the {args.section} section's parts are {', '.join(names)}")
  policies = tuple(name for name in args.remat_policies.split(",") if name)
  if policies[:1] != ("none",) or set(policies) - set(REMAT_POLICIES):
    parser.error(f"--remat-policies {args.remat_policies}: expected 'none' first, then some of {REMAT_POLICIES[1:]}")
  args.remat_policies = policies
  return args


def main(argv: list[str] | None = None) -> dict:
  """Runs (or plans) the section's parts; prints and returns the JSON summary."""
  args = parse_args(argv)
  started = time.monotonic()
  root = args.out or Path(os.environ.get("OUT") or "runs/accelerator")
  out = (root / f"{args.section}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
  ctx = Context(tiny=args.tiny, remat_policies=args.remat_policies,
                profile_variants=PROFILE_VARIANTS + (("matmul",) if args.profile_matmul else ()), out=out,
                deadline=started + args.budget_s, plan=args.plan)
  parts = SECTIONS[args.section]
  records = {part.name: run_part(part, ctx) for part in parts if part.name in args.only}
  figures = {key: ctx.figures.get(key) for part in parts for key in part.keys}
  print(f"\n{'part':24s} {'status':8s} {'seconds':>8s}  command")
  commands: dict[str, list[str]] = {}
  for name, command in ctx.commands:
    commands.setdefault(name, []).append(command)
  for name, record in records.items():
    lines = commands.get(name) or [""]
    print(f"{name:24s} {record['status']:8s} {record.get('seconds', 0):8.1f}  " + f"\n{'':44s}".join(lines))
  summary = {"section": args.section, "tiny": args.tiny, **figures,
             "reasons": reasons(parts, records, figures | {"device": ctx.figures.get("device")}),
             "device": ctx.figures.get("device") or None,
             "versions": versions(), "cpu": cpu_name(), "parts": records, "out": str(out),
             "budget_s": args.budget_s, "wall_s": round(time.monotonic() - started, 1)}
  if not args.plan:
    out.mkdir(parents=True, exist_ok=True)
    (root / f"{args.section}.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
  print(json.dumps(summary))
  return summary


if __name__ == "__main__":
  errors.run(main)
