"""Encoder speed alone: our jitted `Encoder.apply` against HF `BertModel` (PyTorch) on the same MiniLM weights.

Batch 64 x 128 tokens of WikiText-2 validation text (full-length [CLS] A [SEP] B [SEP] rows of consecutive
paragraphs, no padding), every hidden state returned. Four modes, each timed for both frameworks:
  forward_f32   inference: ours jitted without dropout, HF under torch.inference_mode()
  train_f32     forward + backward of sum(last hidden state) with the checkpoint's dropout (0.1) active: our
                jax.grad with respect to every parameter, HF loss.backward() (gradients set to None before each)
  forward_bf16, train_bf16   the same in mixed precision: our EncoderConfig.dtype=bfloat16 (float32 parameters), HF
                under torch.autocast(bfloat16)
Timed rounds alternate the frameworks (order reversed every round) and each time is the median over rounds, so a noisy
shared machine biases no side. Ratios are ours over HF in throughput (HF seconds / our seconds: > 1 means ours is
faster). On a CPU without bf16 matrix instructions the bf16 modes time ours only (PyTorch's bf16 matmuls leave its
fast kernels there: benchmarks.torch_device.autocast_skip_reason) and their ratios are null; `forward_bf16_speedup`
and `train_bf16_speedup` (our float32 time over our bf16 time) are reported wherever both precisions ran.

Ceilings, measured in every round (median): the FLOP/s of one jitted size^3 matmul (2048 on CPU, 8192 on GPUs) in
float32 and with bfloat16 operands and a float32 result in XLA (launch.flops.matmul_ceiling: on a CPU without bf16
units, the float32 product bf16 compute runs there), and the same products in PyTorch (bfloat16 operands there give a
bfloat16 result, accumulated in float32). Beside them, `xla_layer_dots_gflops` / `torch_layer_dots_gflops`: one
layer's four dense products at the batch's rows in float32 (`layer_dots`), the kernels' speed at the encoder's own
shapes. A ratio is read against them: where a framework's matmuls alone are faster, so is its matmul-bound forward.

On a GPU, HF runs on CUDA beside us (benchmarks.torch_device, float32 matmul arithmetic mirroring JAX's: TF32 by
default); `--precision float32` forces full float32 in both.

`--attention A[,B...]` times our encoder on each attention path in the same rounds (EncoderConfig.attention: matmul,
xla, cudnn, or auto, the path the platform gets at start-up; `PATH:bfloat16` adds bf16 activations in the bf16 modes):
the first is "ours" (the ratios against HF), each other one "ours_<name>", with `attention_ms` {name: {mode: ms}} and
`attention_speedup` {name: {mode: the first's ms / its ms}} in the JSON line. Where a path other than matmul is
timed, every side runs without attention dropout (those paths have none; HF too), so all compute the same function.
`--no-hf` times ours only.

  python -m benchmarks.encoder_speed [--rounds 5] [--repeats N] [--modes forward_f32,...] [--batch 64] [--length 128]
                                     [--precision default|float32] [--attention auto,xla] [--no-hf]
Last line: one JSON object (forward_ratio_f32, train_ratio_f32, forward_ratio_bf16, train_ratio_bf16, the ms of each
side, forward_bf16_speedup, train_bf16_speedup, xla_f32_gflops, torch_f32_gflops, xla_bf16_gflops, torch_bf16_gflops,
xla_layer_dots_gflops, torch_layer_dots_gflops, bf16_reference, attention (the path of "ours" per precision),
attention_ms, attention_speedup, cpu, device).
"""

import argparse
import itertools
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import torch_device
from benchmarks.timing import timed
from encoder import Encoder, EncoderOutput, cli, errors, load_hf_checkpoint, load_tokenizer, matmul, minilm_path, paths
from encoder.config import DTYPE_NAMES, EncoderConfig, resolve_platform
from launch import flops, host_memory, xla_flags

MODES = ("forward_f32", "train_f32", "forward_bf16", "train_bf16")


def attention_variants(spec: str) -> list[tuple[str, str, str]]:
  """'auto,xla:bfloat16' -> [(name, attention choice, activation dtype name)]: the --attention variants (an attention
  path or auto, optionally :bfloat16 activations); a malformed or unknown item is a UserError."""
  variants = []
  for item in filter(None, spec.split(",")):
    choice, _, activation = item.partition(":")
    if choice not in ("auto", "matmul", "xla", "cudnn") or activation not in ("", "float32", "bfloat16"):
      raise errors.UserError(f"--attention {spec!r}: {item!r} is not auto, matmul, xla or cudnn, optionally followed "
                             "by :bfloat16 (bf16 activations)")
    variants.append((item, choice, activation or "float32"))
  if not variants or len({name for name, _, _ in variants}) < len(variants):
    raise errors.UserError(f"--attention {spec!r}: expected distinct comma-separated variants")
  return variants


ATTENTION = cli.Parsed(attention_variants, bad=("fast", "auto,auto"))  # The --attention flag's type.


def variant_config(cfg: EncoderConfig, choice: str, activation: str, dtype, no_attention_dropout: bool
                   ) -> EncoderConfig:
  """cfg in compute dtype `dtype` on attention `choice` (auto: this platform's path, resolved before tracing as the
  engine does, with the platform's kernels and bf16 dots), bf16 activations where asked and the dtype is bf16,
  attention dropout off if asked."""
  dropout = 0.0 if no_attention_dropout else cfg.attention_dropout
  fields = {"attention": choice, "dtype": DTYPE_NAMES[dtype], "attention_dropout": dropout,
            "hidden_size": cfg.hidden_size, "num_heads": cfg.num_heads}
  bf16_activations = activation == "bfloat16" and dtype == jnp.bfloat16
  return cfg.replace(dtype=dtype, attention_dropout=dropout, **resolve_platform(fields),
                     activation_dtype=jnp.bfloat16 if bf16_activations else jnp.float32)


def cpu_name() -> str:
  """The processor's model name, family/model and bf16 matrix features (/proc/cpuinfo on Linux): "AMD EPYC (family
  25 model 1; no bf16 matrix instructions)" (family 25 model 1 is Zen 3, model 17 Zen 4)."""
  cpuinfo = Path("/proc/cpuinfo")
  if not cpuinfo.is_file():
    return platform.processor() or platform.machine()
  text = cpuinfo.read_text(encoding="utf-8", errors="replace")
  fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
  features = sorted(matmul.cpu_bf16_flags(text))
  family = f"family {fields['cpu family']} model {fields.get('model', '?')}; " if "cpu family" in fields else ""
  return (f"{fields.get('model name', platform.machine())} ({family}"
          f"{', '.join(features) or 'no bf16 matrix instructions'})")


def text_batch(text: Path, tokenizer, rows: int, length: int) -> dict[str, np.ndarray]:
  """`rows` full-length rows: [CLS] paragraph [SEP] next paragraph [SEP], truncated to `length` tokens."""
  paragraphs = [p for p in (line.strip() for line in text.read_text(encoding="utf-8").splitlines())
                if p and not p.startswith("=")]
  encodings = (tokenizer.encode(a, b, max_length=length) for a, b in itertools.pairwise(paragraphs))
  full = [e for e in encodings if len(e.input_ids) == length][:rows]
  if len(full) < rows:
    raise errors.UserError(f"{text}: only {len(full)} paragraph pairs fill {length} tokens; {rows} needed")
  return dict(input_ids=np.asarray([e.input_ids for e in full], np.int32),
              type_ids=np.asarray([e.type_ids for e in full], np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32))


def torch_matmul_ceiling(device, dtype, size: int | None = None, repeats: int = 3, budget_s: float = 0.5) -> float:
  """FLOP/s of a size^3 PyTorch matmul in `dtype` on `device` (best of `repeats`; size 2048 on CPU, 8192 on CUDA),
  halved while a 256^3 probe says one product would take over `budget_s` (bf16 on a CPU without bf16 units: 0.3
  GFLOP/s, a minute per 2048^3 product)."""
  import torch  # pylint: disable=import-outside-toplevel  (benchmarks only)

  def seconds(n: int) -> float:
    a = torch.ones((n, n), dtype=dtype, device=device)
    start = time.perf_counter()
    a @ a  # pylint: disable=pointless-statement
    torch_device.synchronize(device)
    return time.perf_counter() - start

  with torch.inference_mode():
    seconds(256)
    probe_flops = 2.0 * 256**3 / seconds(256)
    size = size or (2048 if device.type == "cpu" else 8192)
    while size > 256 and 2.0 * size**3 / probe_flops > budget_s:
      size //= 2
    best = min(seconds(size) for _ in range(repeats + 1))  # The first product warms up.
  return 2.0 * size**3 / best


class Ours:
  """Jitted forward (every hidden state) and forward + backward (gradients of every parameter) of our encoder."""

  def __init__(self, cfg, params, batch: dict[str, np.ndarray]):
    encoder = Encoder(cfg)
    inputs = [jax.device_put(batch[k]) for k in ("input_ids", "type_ids", "positions", "attention_segments")]
    self.params = jax.device_put(params)
    key = jax.random.key(0)

    def loss(params):
      out = cast(EncoderOutput, encoder.apply({"params": params}, *inputs, train=True, rngs={"dropout": key}))
      return jnp.sum(out.last.astype(jnp.float32))

    self.forward_fn = jax.jit(
        lambda params: cast(EncoderOutput, encoder.apply({"params": params}, *inputs)).hidden_states)
    self.train_fn = jax.jit(jax.grad(loss))

  def forward(self) -> None:
    jax.block_until_ready(self.forward_fn(self.params))

  def train(self) -> None:
    jax.block_until_ready(self.train_fn(self.params))


class HF:
  """transformers.BertModel on the same checkpoint: inference forward and forward + backward, float32 or autocast."""

  def __init__(self, model_dir: Path, batch: dict[str, np.ndarray], bf16: bool, attention_dropout: float):
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    self.torch, self.device, self.bf16 = torch, torch_device.torch_device(), bf16
    self.model = transformers.BertModel.from_pretrained(
        model_dir, attention_probs_dropout_prob=attention_dropout).to(self.device)
    inputs = dict(input_ids=batch["input_ids"], token_type_ids=batch["type_ids"],
                  attention_mask=batch["attention_segments"] > 0)
    self.inputs = {k: torch.from_numpy(v.astype(np.int64)).to(self.device) for k, v in inputs.items()}

  def _autocast(self):
    return self.torch.autocast(self.device.type, dtype=self.torch.bfloat16, enabled=self.bf16)

  def forward(self) -> None:
    self.model.eval()
    with self.torch.inference_mode(), self._autocast():
      self.model(**self.inputs, output_hidden_states=True)
    torch_device.synchronize(self.device)

  def train(self) -> None:
    self.model.train()
    self.model.zero_grad(set_to_none=True)
    with self._autocast():
      loss = self.model(**self.inputs, output_hidden_states=True).last_hidden_state.float().sum()
    loss.backward()
    torch_device.synchronize(self.device)


def ceilings(device) -> dict[str, float]:
  """GFLOP/s of the four matmul ceilings (module docstring)."""
  import torch  # pylint: disable=import-outside-toplevel
  return {"xla_f32_gflops": flops.matmul_ceiling(repeats=3) / 1e9,
          "torch_f32_gflops": torch_matmul_ceiling(device, torch.float32) / 1e9,
          "xla_bf16_gflops": flops.matmul_ceiling(repeats=3, dtype=jnp.bfloat16) / 1e9,
          "torch_bf16_gflops": torch_matmul_ceiling(device, torch.bfloat16) / 1e9}


def layer_dots(cfg, rows: int, device, repeats: int = 3) -> dict[str, float]:
  """GFLOP/s of one layer's four dense products (QKV, attention output, FFN in, FFN out) at `rows` token rows, in
  float32, in XLA (`jnp.matmul`, the plain layout) and PyTorch (`F.linear`, nn.Linear's layout), best of `repeats`:
  the matmul speed at the encoder's own shapes, which a size^3 ceiling does not tell."""
  import torch  # pylint: disable=import-outside-toplevel
  h, i = cfg.hidden_size, cfg.intermediate_size
  shapes = ((h, 3 * h), (h, h), (h, i), (i, h))
  rng = np.random.default_rng(0)
  operands = [(rng.standard_normal((rows, k), np.float32), rng.standard_normal((k, n), np.float32))
              for k, n in shapes]
  xla_operands = [(jax.device_put(a), jax.device_put(w)) for a, w in operands]
  torch_operands = [(torch.from_numpy(a).to(device), torch.from_numpy(np.ascontiguousarray(w.T)).to(device))
                    for a, w in operands]
  product = jax.jit(lambda a, w: jnp.matmul(a, w, preferred_element_type=jnp.float32))

  def xla() -> None:
    jax.block_until_ready([product(a, w) for a, w in xla_operands])

  def pytorch() -> None:
    for a, w in torch_operands:
      torch.nn.functional.linear(a, w)
    torch_device.synchronize(device)

  layer_flops = 2.0 * rows * sum(k * n for k, n in shapes)
  with torch.inference_mode():
    return {f"{name}_layer_dots_gflops": layer_flops / min(timed(fn, repeats + 1)[1:]) / 1e9  # The first warms up.
            for name, fn in (("xla", xla), ("torch", pytorch))}


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.encoder_speed", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--text", type=Path, default=None, help="default: <data>/wikitext-2/raw/wiki.valid.raw")
  parser.add_argument("--batch", type=cli.integer(1), default=64)
  parser.add_argument("--length", type=cli.integer(4, 512), default=128, help="tokens per row (MiniLM: 512 positions)")
  parser.add_argument("--rounds", type=cli.integer(1), default=5,
                      help="timed rounds; each times every mode of both frameworks")
  parser.add_argument("--repeats", type=cli.integer(0), default=0, help="timed calls per mode and round (default 0: 2 "
                                                                        "on CPU, 20 on accelerators)")
  parser.add_argument("--modes", type=cli.Names(MODES), default=",".join(MODES),
                      help=f"comma-separated subset of {','.join(MODES)}")
  parser.add_argument("--precision", choices=("default", "float32"), default="default",
                      help="float32 matmuls: JAX's default (TF32 on recent NVIDIA GPUs, mirrored by HF) or full")
  parser.add_argument("--attention", type=ATTENTION, default="auto",
                      help="comma-separated attention variants of ours, timed in the same rounds: auto, matmul, xla, "
                           "cudnn, each optionally :bfloat16 (bf16 activations in the bf16 modes); the first is 'ours'")
  parser.add_argument("--no-hf", action="store_true", help="time ours only (ratios null)")
  args = parser.parse_args()
  host_memory.retain_freed_memory()  # Both frameworks, same process, same malloc.
  xla_flags.apply_gpu_defaults()
  variants, modes = args.attention, list(args.modes)
  if args.precision == "float32":
    jax.config.update("jax_default_matmul_precision", "float32")
  repeats = args.repeats or (2 if jax.default_backend() == "cpu" else 20)

  model_dir = minilm_path()
  cfg, params, _ = load_hf_checkpoint(model_dir)
  text = args.text or paths.data_file("wikitext-2/raw/wiki.valid.raw")
  batch = text_batch(text, load_tokenizer(model_dir), args.batch, args.length)
  no_dropout = any(choice != "matmul" for _, choice, _ in variants)  # "auto" may resolve to another path.
  dtypes = {"f32": jnp.float32, "bf16": jnp.bfloat16}
  configs = {(name, p): variant_config(cfg, choice, activation, dtypes[p], no_dropout)
             for name, choice, activation in variants for p in dtypes}
  ours = {key: Ours(c, params, batch) for key, c in configs.items()}
  sides = {name: "ours" if i == 0 else f"ours_{name}" for i, (name, _, _) in enumerate(variants)}
  dropout = 0.0 if no_dropout else cfg.attention_dropout
  hf = {} if args.no_hf else {p: HF(model_dir, batch, bf16=p == "bf16", attention_dropout=dropout) for p in dtypes}
  no_autocast = "--no-hf" if args.no_hf else torch_device.autocast_skip_reason(hf["f32"].device)
  if no_autocast and any(mode.endswith("_bf16") for mode in modes):
    print(f"bf16 modes: ours only; {no_autocast}", flush=True)
  print("ours: " + ", ".join(f"{sides[name]} = {name} ({p}: attention {c.attention}, activations "
                             f"{jnp.dtype(c.activation_dtype).name})" for (name, p), c in configs.items())
        + f"; attention dropout {dropout}", flush=True)
  runners = {}
  for mode in modes:
    kind, precision = mode.split("_")
    # Config -> its first variant: one whose config equals an earlier one's in this precision (bf16 activations in
    # f32 modes) is not run again.
    distinct: dict[EncoderConfig, str] = {}
    for name, _, _ in variants:
      distinct.setdefault(configs[name, precision], name)
    runners[mode] = {sides[name]: getattr(ours[name, precision], kind) for name in distinct.values()}
    if hf and not (precision == "bf16" and no_autocast):
      runners[mode]["hf"] = getattr(hf[precision], kind)

  warmup = {}
  for mode, pair in runners.items():  # Compilation and first calls outside the timed rounds.
    for side, fn in pair.items():
      warmup[f"{mode}_{side}"] = sum(timed(fn, 2))
  times: dict[tuple[str, str], list[float]] = {(mode, side): [] for mode, pair in runners.items() for side in pair}
  rounds, device = [], torch_device.torch_device()
  for round_index in range(args.rounds):
    for mode, pair in runners.items():
      for side in (list(pair) if round_index % 2 == 0 else reversed(pair)):
        times[mode, side] += timed(pair[side], repeats)
    rounds.append(ceilings(device) | layer_dots(cfg, args.batch * args.length, device))
    print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
        f"{mode} " + " ".join(f"{side} {statistics.median(times[mode, side][-repeats:]) * 1e3:.1f} ms"
                              for side in pair) for mode, pair in runners.items())
        + ", GFLOP/s " + ", ".join(f"{k.removesuffix('_gflops')} {v:.0f}" for k, v in rounds[-1].items()), flush=True)

  ms = {key: statistics.median(t) * 1e3 for key, t in times.items()}
  ceiling = {key: round(statistics.median(r[key] for r in rounds), 1) for key in rounds[0]}
  print(f"{'mode':14s} {'ours ms':>9s} {'HF ms':>9s} {'ratio':>7s} {'ours warm-up s':>15s}")
  for mode in runners:
    hf_ms = ms.get((mode, "hf"))
    print(f"{mode:14s} {ms[mode, 'ours']:9.1f} {hf_ms or float('nan'):9.1f} "
          f"{hf_ms / ms[mode, 'ours'] if hf_ms else float('nan'):7.3f} {warmup[f'{mode}_ours']:15.1f}")
  print("ceilings GFLOP/s: " + ", ".join(f"{k} {v}" for k, v in ceiling.items()))
  result: dict[str, Any] = {}
  for mode in MODES:
    kind, precision = mode.split("_")
    hf_ms, ours_ms = ms.get((mode, "hf")), ms.get((mode, "ours"))
    result[f"{kind}_ratio_{precision}"] = round(hf_ms / ours_ms, 3) if hf_ms and ours_ms else None
    result[f"{mode}_ms"] = round(ours_ms, 1) if ours_ms else None
    result[f"{mode}_hf_ms"] = round(hf_ms, 1) if hf_ms else None
  for kind in ("forward", "train"):  # Our bf16 against our float32 (> 1: bf16 faster), where both ran.
    f32, bf16 = ms.get((f"{kind}_f32", "ours")), ms.get((f"{kind}_bf16", "ours"))
    result[f"{kind}_bf16_speedup"] = round(f32 / bf16, 3) if f32 and bf16 else None
  result["attention"] = {p: configs[variants[0][0], p].attention for p in dtypes}
  result["attention_ms"] = {name: {mode: round(ms[mode, side], 1) for mode in runners if (mode, side) in ms}
                            for name, side in sides.items()}
  result["attention_speedup"] = {name: {mode: round(ms[mode, "ours"] / ms[mode, side], 3) for mode in runners
                                        if (mode, side) in ms} for name, side in sides.items() if side != "ours"}
  for side in sides.values():
    if side != "ours":
      print(f"{side}: " + ", ".join(f"{mode} {ms[mode, side]:.1f} ms ({ms[mode, 'ours'] / ms[mode, side]:.3f}x ours)"
                                    for mode in runners if (mode, side) in ms))
  print(json.dumps(result | ceiling | {"bf16_reference": no_autocast or "torch.autocast(bfloat16)",
      "cpu": cpu_name(), "device": jax.devices()[0].device_kind, "batch": args.batch, "length": args.length,
      "rounds": args.rounds, "repeats": repeats, "precision": args.precision}))


if __name__ == "__main__":
  errors.run(main)
