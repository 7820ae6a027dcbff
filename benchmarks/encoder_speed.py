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
faster).

Ceilings, measured in every round (median): the FLOP/s of one jitted size^3 matmul (2048 on CPU, 8192 on GPUs) in
float32 and with bfloat16 operands and a float32 result in XLA (launch.flops.matmul_ceiling), and the same products
in PyTorch (bfloat16 operands there give a bfloat16 result, accumulated in float32). A ratio is read against them:
where a framework's ceiling is higher, its matmuls alone are faster.

On a GPU, HF runs on CUDA beside us (benchmarks.torch_device, float32 matmul arithmetic mirroring JAX's: TF32 by
default); `--precision float32` forces full float32 in both.

  python -m benchmarks.encoder_speed [--rounds 5] [--repeats N] [--modes forward_f32,...] [--batch 64] [--length 128]
                                     [--precision default|float32]
Last line: one JSON object (forward_ratio_f32, train_ratio_f32, forward_ratio_bf16, train_ratio_bf16, the ms of each
side, xla_f32_gflops, torch_f32_gflops, xla_bf16_gflops, torch_bf16_gflops, cpu, device).
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import torch_device
from benchmarks.timing import timed
from configs import paths
from encoder import Encoder, load_hf_checkpoint, load_tokenizer, minilm_path
from launch import cli, flops, host_memory, xla_flags

MODES = ("forward_f32", "train_f32", "forward_bf16", "train_bf16")


def cpu_name() -> str:
  """The processor's model name and its bf16 matrix features (/proc/cpuinfo on Linux): "AMD EPYC (avx512_bf16)"."""
  cpuinfo = Path("/proc/cpuinfo")
  if not cpuinfo.is_file():
    return platform.processor() or platform.machine()
  fields = dict(line.split(":", 1) for line in cpuinfo.read_text().splitlines() if ":" in line)
  fields = {k.strip(): v.strip() for k, v in fields.items()}
  features = [f for f in ("avx512_bf16", "amx_bf16") if f in fields.get("flags", "").split()]
  return f"{fields.get('model name', platform.machine())} ({', '.join(features) or 'no bf16 matrix instructions'})"


def text_batch(text: Path, tokenizer, rows: int, length: int) -> dict[str, np.ndarray]:
  """`rows` full-length rows: [CLS] paragraph [SEP] next paragraph [SEP], truncated to `length` tokens."""
  paragraphs = [p for p in (line.strip() for line in text.read_text(encoding="utf-8").splitlines())
                if p and not p.startswith("=")]
  encodings = (tokenizer.encode(a, b, max_length=length) for a, b in zip(paragraphs, paragraphs[1:]))
  full = [e for e in encodings if len(e.input_ids) == length][:rows]
  if len(full) < rows:
    raise cli.UserError(f"{text}: only {len(full)} paragraph pairs fill {length} tokens; {rows} needed")
  return dict(input_ids=np.asarray([e.input_ids for e in full], np.int32),
              type_ids=np.asarray([e.type_ids for e in full], np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32))


def torch_matmul_ceiling(device, dtype, size: int | None = None, repeats: int = 3) -> float:
  """FLOP/s of a size^3 PyTorch matmul in `dtype` on `device` (best of `repeats`; size 2048 on CPU, 8192 on CUDA)."""
  import torch  # pylint: disable=import-outside-toplevel  (benchmarks only)
  size = size or (2048 if device.type == "cpu" else 8192)
  a = torch.ones((size, size), dtype=dtype, device=device)
  best = float("inf")
  with torch.inference_mode():
    for index in range(repeats + 1):
      start = time.perf_counter()
      a @ a  # pylint: disable=pointless-statement
      torch_device.synchronize(device)
      if index:  # The first product warms up.
        best = min(best, time.perf_counter() - start)
  return 2.0 * size**3 / best


class Ours:
  """Jitted forward (every hidden state) and forward + backward (gradients of every parameter) of our encoder."""

  def __init__(self, cfg, params, batch: dict[str, np.ndarray]):
    encoder = Encoder(cfg)
    inputs = [jax.device_put(batch[k]) for k in ("input_ids", "type_ids", "positions", "attention_segments")]
    self.params = jax.device_put(params)
    key = jax.random.key(0)

    def loss(params):
      out = encoder.apply({"params": params}, *inputs, train=True, rngs={"dropout": key})
      return jnp.sum(out.last.astype(jnp.float32))

    self.forward_fn = jax.jit(lambda params: encoder.apply({"params": params}, *inputs).hidden_states)
    self.train_fn = jax.jit(jax.grad(loss))

  def forward(self) -> None:
    jax.block_until_ready(self.forward_fn(self.params))

  def train(self) -> None:
    jax.block_until_ready(self.train_fn(self.params))


class HF:
  """transformers.BertModel on the same checkpoint: inference forward and forward + backward, float32 or autocast."""

  def __init__(self, model_dir: Path, batch: dict[str, np.ndarray], bf16: bool):
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    self.torch, self.device, self.bf16 = torch, torch_device.torch_device(), bf16
    self.model = transformers.BertModel.from_pretrained(model_dir).to(self.device)
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


def main() -> None:
  host_memory.retain_freed_memory()  # Both frameworks, same process, same malloc.
  xla_flags.apply_gpu_defaults()
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--text", type=Path, default=None, help="default: <data>/wikitext-2/raw/wiki.valid.raw")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--length", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=5, help="timed rounds; each times every mode of both frameworks")
  parser.add_argument("--repeats", type=int, default=0, help="timed calls per mode and round (default: 2 on CPU, "
                                                             "20 on accelerators)")
  parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
  parser.add_argument("--precision", choices=("default", "float32"), default="default",
                      help="float32 matmuls: JAX's default (TF32 on recent NVIDIA GPUs, mirrored by HF) or full")
  args = parser.parse_args()
  modes = args.modes.split(",")
  if set(modes) - set(MODES):
    raise cli.UserError(f"--modes {args.modes!r}: unknown {sorted(set(modes) - set(MODES))}; known: {', '.join(MODES)}")
  if args.precision == "float32":
    jax.config.update("jax_default_matmul_precision", "float32")
  repeats = args.repeats or (2 if jax.default_backend() == "cpu" else 20)

  model_dir = minilm_path()
  cfg, params, _ = load_hf_checkpoint(model_dir)
  text = args.text or paths.data_file("wikitext-2/raw/wiki.valid.raw")
  batch = text_batch(text, load_tokenizer(model_dir), args.batch, args.length)
  ours = {"f32": Ours(cfg, params, batch), "bf16": Ours(cfg.replace(dtype=jnp.bfloat16), params, batch)}
  hf = {"f32": HF(model_dir, batch, bf16=False), "bf16": HF(model_dir, batch, bf16=True)}
  runners = {}
  for mode in modes:
    kind, precision = mode.split("_")
    runners[mode] = {"ours": getattr(ours[precision], kind), "hf": getattr(hf[precision], kind)}

  warmup = {}
  for mode, pair in runners.items():  # Compilation and first calls outside the timed rounds.
    for side, fn in pair.items():
      warmup[f"{mode}_{side}"] = sum(timed(fn, 2))
  times = {(mode, side): [] for mode in runners for side in ("ours", "hf")}
  rounds = []
  for round_index in range(args.rounds):
    for mode, pair in runners.items():
      for side in (("ours", "hf") if round_index % 2 == 0 else ("hf", "ours")):
        times[mode, side] += timed(pair[side], repeats)
    rounds.append(ceilings(hf["f32"].device))
    print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
        f"{mode} ours {statistics.median(times[mode, 'ours'][-repeats:]) * 1e3:.1f} ms "
        f"hf {statistics.median(times[mode, 'hf'][-repeats:]) * 1e3:.1f} ms" for mode in runners)
        + ", GFLOP/s " + ", ".join(f"{k.removesuffix('_gflops')} {v:.0f}" for k, v in rounds[-1].items()), flush=True)

  ms = {key: statistics.median(t) * 1e3 for key, t in times.items()}
  ceiling = {key: round(statistics.median(r[key] for r in rounds), 1) for key in rounds[0]}
  print(f"{'mode':14s} {'ours ms':>9s} {'HF ms':>9s} {'ratio':>7s} {'ours warm-up s':>15s}")
  for mode in runners:
    print(f"{mode:14s} {ms[mode, 'ours']:9.1f} {ms[mode, 'hf']:9.1f} {ms[mode, 'hf'] / ms[mode, 'ours']:7.3f} "
          f"{warmup[f'{mode}_ours']:15.1f}")
  print("ceilings GFLOP/s: " + ", ".join(f"{k} {v}" for k, v in ceiling.items()))
  result = {}
  for mode in MODES:
    kind, precision = mode.split("_")
    present = mode in runners
    result[f"{kind}_ratio_{precision}"] = round(ms[mode, "hf"] / ms[mode, "ours"], 3) if present else None
    result[f"{mode}_ms"] = round(ms[mode, "ours"], 1) if present else None
    result[f"{mode}_hf_ms"] = round(ms[mode, "hf"], 1) if present else None
  print(json.dumps(result | ceiling | {
      "cpu": cpu_name(), "device": jax.devices()[0].device_kind, "batch": args.batch, "length": args.length,
      "rounds": args.rounds, "repeats": repeats, "precision": args.precision}))


if __name__ == "__main__":
  cli.run(main)
