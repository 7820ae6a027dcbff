"""Pretraining throughput (MLM + NSP, AdamW, fp32) of our engine step vs HF BertForPreTraining (PyTorch), same batch.

MiniLM-size encoder by default (6 layers, hidden 384, 12 heads, vocab 30,522; --size names any encoder.config
preset, e.g. base or large), rows of 128 tokens (--seq), batch 32 (--batch), dropout 0.1 in both. One batch of
WikiText-2 validation text is tokenized with the MiniLM vocabulary, paired for NSP (IsNext / NotNext halves of
paragraphs) and masked with objectives.masking.mask_example (15%, max_predictions 20); HF gets the
same corrupted ids with dense labels (-100 at unmasked positions). Timed rounds alternate the frameworks (order
reversed every round) and the result is the median step time of each, so a noisy shared machine biases no side.

Our step is the engine's (launch.train): jit(launch.steps.grad_step) then jit(launch.steps.apply_step)
(EncoderWithHeads, clipping + AdamW with warmup, on-device metric sums, donated state). HF computes the vocabulary
projection at all 4,096 positions, ours only at the ~600 masked ones (DESIGN, "Performance notes");
`tokens_per_s_dense_head` is our step with the projection at every position too, so one can see how much of the
ratio comes from that algorithmic choice.

Useful FLOPs per step (`useful_flops`), forward + backward = 3x the forward's 2 FLOPs per multiply-add:
  encoder.flops.encoder_train_flops                     encoder matmuls at every token + attention QK^T and AV,
                                                        the last block's only at [CLS] and the masked tokens
  + 6 * (H^2 + H V) * masked                            MLM transform + tied vocabulary projection, masked tokens only
  + 6 * (H^2 + 2 H) * rows                              pooler + NSP classifier on [CLS]
mfu = useful_flops / median step time / ceiling, ceiling = FLOP/s of a jitted 2048^3 (CPU) or 8192^3 (GPU) matmul in
the run's compute dtype with a float32 result, measured in the same run (launch.flops.matmul_ceiling, best of 3, once
per round; the median over rounds). `mfu_peak` divides by the device's dense datasheet peak in the run's compute
dtype instead (PEAK_TFLOPS, or --peak-tflops; null where neither knows the device, as on CPUs).

On a GPU, HF runs on CUDA beside us (benchmarks.torch_device). --precision sets both frameworks' arithmetic: `default`
is JAX's float32 default (full float32 on CPU, TF32 on recent NVIDIA GPUs; the reference mirrors it), `float32` forces
full float32 matmuls, `bfloat16` is mixed precision (our EncoderConfig.dtype, HF under torch.autocast; float32 params).
With `bfloat16` our float32 step (JAX's default float32 arithmetic) runs in the same rounds too, unless --no-f32
(`f32_step_s` beside `bf16_step_s`, `bf16_speedup` their ratio), and both matmul ceilings are measured
(`f32_ceiling_gflops`, `bf16_ceiling_gflops`): bf16 can pay only where the second is well above the first. On a
CPU without bf16 matrix instructions HF is not run under autocast (`ratio` null, `bf16_reference` says why:
benchmarks.torch_device.autocast_skip_reason) and `bf16_speedup` is the figure to read.

--arch NAME sets one of encoder.config.ARCHITECTURES' switch sets on the size (rope, geglu, swiglu, no_bias,
local_global, pre_ln, modernbert: that recipe's dropout 0 included); the plain (BERT) encoder of the same size then
runs in the same rounds (`bert_step_s`, `arch_speedup` = its step time / the variant's) and HF, whose
BertForPreTraining computes another model, is not run. Its FLOPs count a gated feed-forward's third matrix; local
attention layers compute every score, so they count them all (encoder.flops).

--electra also times ELECTRA's step (objectives=electra: the generator at --generator-size of the encoder's width,
sampling, replaced-token detection; objectives/electra.py) and an MLM-only step on the same encoder and batch, in the
same rounds: `electra_vs_mlm` is the ratio of their median step times (ELECTRA's step cost relative to MLM's).

--attention A[,B...] runs our step on each attention variant in the same rounds (benchmarks.encoder_speed's syntax:
auto, matmul, xla or cudnn, optionally :bfloat16 for bf16 activations; auto is the path the engine resolves at
start-up): the first is "ours" (every figure above), the others "ours_<name>", and `attention` {name: path},
`attention_step_s`, `attention_tokens_per_s`, `attention_mfu`, `attention_mfu_peak` ({name: value}) cover all. Where
a path other than matmul runs, every side (HF too) has no attention dropout, so all compute the same function.

  python -m benchmarks.pretrain_throughput [--size minilm] [--arch bert] [--seq 128] [--batch 32] [--rounds 5]
      [--steps 2] [--gelu exact|tanh] [--precision P] [--peak-tflops T] [--no-hf] [--no-f32]
      [--electra [--generator-size 0.25]] [--attention auto]
  python -m benchmarks.pretrain_throughput --size base --seq 128 --batch 256 --precision bfloat16   # accelerators
  python -m benchmarks.pretrain_throughput --size electra-small --electra --no-hf --no-dense   # ELECTRA vs MLM
Last line: one JSON object (tokens_per_s, hf_torch_tokens_per_s, ratio, mfu, ...).
"""

import argparse
import functools
import json
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import torch_device
from benchmarks.encoder_speed import ATTENTION, variant_config
from benchmarks.timing import timed
from configs import common
from encoder import cli, errors, flops as encoder_flops, paths
from encoder.config import ARCHITECTURES, PRESETS, preset
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch import flops, host_memory, optimizer, steps, xla_flags
from launch.model import EncoderWithHeads, term_weights
from objectives import masking, registry
from tasks.readers.lines import numbered_lines

# Dense (no sparsity) datasheet peaks in TFLOP/s by device kind: (bfloat16, JAX's default float32 arithmetic: TF32
# on NVIDIA GPUs; --precision float32 has no entry).
PEAK_TFLOPS = {"NVIDIA H100 80GB HBM3": (989.0, 494.0), "NVIDIA H200": (989.0, 494.0),
               "NVIDIA A100-SXM4-80GB": (312.0, 156.0), "NVIDIA A100-SXM4-40GB": (312.0, 156.0),
               "TPU v4": (275.0, None), "TPU v5 lite": (197.0, None), "TPU v5": (459.0, None)}


def useful_flops(cfg, rows: int, length: int, masked: int) -> float:
  """Training FLOPs of one step that do useful work (module docstring): the encoder's (encoder.flops) plus the
  heads'."""
  h, v = cfg.hidden_size, cfg.vocab_size
  return (encoder_flops.encoder_train_flops(cfg, rows, length, last_rows=1 + masked / rows)
          + 6.0 * (h * h + h * v) * masked + 6.0 * (h * h + 2 * h) * rows)


def nsp_batch(text: Path, tokenizer, rows: int, length: int, seed: int) -> dict[str, np.ndarray]:
  """`rows` full-length [CLS] A [SEP] B [SEP] pairs from WikiText: consecutive paragraphs of one article joined until
  they have `length` words (rows of 512 tokens need several), A the first half of their sentences, B the second half
  (label 0, IsNext) or another block's second half (label 1, NotNext); no padding."""
  rng = np.random.default_rng(seed)
  blocks: list[list[str]] = []
  sentences: list[str] = []
  for _, line in numbered_lines(text):  # A non-UTF-8 line is an error naming it.
    line = line.strip()
    if line.startswith("= ") and not line.startswith("= = "):  # A new article: its text is not joined to the last.
      sentences = []
    elif line and not line.startswith("=") and line.count(" . ") >= 3:
      sentences += line.split(" . ")
      if sum(len(s.split()) for s in sentences) >= length:
        blocks.append(sentences)
        sentences = []
  halves = [(" . ".join(s[:len(s) // 2]) + " .", " . ".join(s[len(s) // 2:])) for s in blocks]
  ids, types, labels = [], [], []
  for index, (first, second) in enumerate(halves):
    label = int(rng.random() < 0.5)
    other = halves[(index + 1 + int(rng.integers(len(halves) - 1))) % len(halves)][1] if label else second
    encoding = tokenizer.encode(first, other, max_length=length)
    if len(encoding) == length and encoding.type_ids.count(0) > 2 and encoding.type_ids.count(1) > 1:
      ids.append(encoding.input_ids)
      types.append(encoding.type_ids)
      labels.append(label)
    if len(ids) == rows:
      break
  if len(ids) < rows:
    raise SystemExit(f"{text}: only {len(ids)} paragraph blocks fill {length} tokens; {rows} needed")
  return dict(input_ids=np.asarray(ids, np.int32), type_ids=np.asarray(types, np.int32),
              positions=np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy(),
              attention_segments=np.ones((rows, length), np.int32), nsp_label=np.asarray(labels, np.int32))


def mask_batch(batch: dict[str, np.ndarray], tokenizer, max_predictions: int, seed: int) -> dict[str, np.ndarray]:
  """BERT masking of every row (objectives.masking: 15%, 80/10/10, unigram replacements from this batch)."""
  probs = masking.unigram_probs([batch["input_ids"]], tokenizer.vocab_size, tokenizer.special_ids)
  rows = [masking.mask_example({"input_ids": ids, "attention_segments": segments}, masking.example_rng(seed, row),
                               mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
                               special_ids=sorted(tokenizer.special_ids), max_predictions=max_predictions,
                               unigram_probs=probs)
          for row, (ids, segments) in enumerate(zip(batch["input_ids"], batch["attention_segments"]))]
  return batch | {key: np.stack([r[key] for r in rows]) for key in rows[0] if key != "attention_segments"}


def dense_head_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The same targets with the MLM head at every position (weights 0 at unmasked ones): HF's dense computation."""
  rows, length = batch["input_ids"].shape
  positions = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length)).copy()
  ids, weights = np.zeros((rows, length), np.int32), np.zeros((rows, length), np.float32)
  real = batch["masked_weights"] > 0
  for row in range(rows):
    ids[row, batch["masked_positions"][row, real[row]]] = batch["masked_ids"][row, real[row]]
    weights[row, batch["masked_positions"][row, real[row]]] = 1.0
  return batch | dict(masked_positions=positions, masked_ids=ids, masked_weights=weights)


def hf_labels(batch: dict[str, np.ndarray]) -> np.ndarray:
  """Dense MLM labels: the original id at masked positions, -100 (ignored) elsewhere."""
  labels = np.full(batch["input_ids"].shape, -100, np.int64)
  for row, (positions, ids, weights) in enumerate(zip(batch["masked_positions"], batch["masked_ids"],
                                                      batch["masked_weights"])):
    labels[row, positions[weights > 0]] = ids[weights > 0]
  return labels


def step_fns(cfg, num_steps: int, names: tuple[str, ...] = ("mlm", "nsp"),
             generator_size: float = 0.25) -> steps.StepFns:
  """The `names` objectives' heads (default MLM + NSP) on the encoder `cfg`, AdamW with a warmup of a tenth of
  `num_steps`: the engine's step pieces."""
  options = {"hidden_act": cfg.hidden_act, "embedding_size": cfg.embedding_size, "generator_size": generator_size}
  objectives = [registry.build(name, options) for name in names]
  tx = optimizer.make_optimizer(common.optimizer_config(warmup_steps=max(num_steps // 10, 1)), num_steps)
  return steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                       weights=term_weights(objectives, dict.fromkeys(names, 1.0)), tx=tx)


def hlo_text(compiled: jax.stages.Compiled) -> str:
  """A compiled program's optimized HLO, as XLA compiled it (an error on a backend that does not give it)."""
  text = compiled.as_text()
  if text is None:
    raise RuntimeError(f"XLA gives no text of compiled programs on this backend ({jax.default_backend()})")
  return text


class OurStep:
  """The engine's jitted train step on one batch; `__call__` runs one step and waits for it."""

  def __init__(self, cfg, batch: dict[str, np.ndarray], num_steps: int, seed: int = 0,
               names: tuple[str, ...] = ("mlm", "nsp"), generator_size: float = 0.25):
    fns = step_fns(cfg, num_steps, names, generator_size)
    self.batch = jax.device_put(batch)
    self.state = jax.jit(functools.partial(steps.init_state, fns, seed=seed))(self.batch)
    self.acc = steps.zero_metrics(functools.partial(steps.train_step, fns, accum=1), self.state,
                                  self.batch)
    self.grad_step = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
    self.apply_step = jax.jit(functools.partial(steps.apply_step, fns), donate_argnums=(0, 1))

  def __call__(self) -> None:
    self.state, self.acc = self.apply_step(self.state, self.acc, *self.grad_step(self.state, self.batch))
    jax.block_until_ready((self.state, self.acc))

  def compiled_text(self) -> list[str]:
    """The optimized HLO of the step's two programs (gradients, update), as XLA compiled them."""
    grads = hlo_text(self.grad_step.lower(self.state, self.batch).compile())
    update = self.apply_step.lower(self.state, self.acc, *jax.eval_shape(self.grad_step, self.state, self.batch))
    return [grads, hlo_text(update.compile())]

  def mean_losses(self) -> dict[str, float]:
    acc = jax.device_get(self.acc)
    return {k: float(v[0] / max(v[1], 1.0)) for k, v in acc.items() if k.endswith("_loss")}


class HFStep:
  """transformers.BertForPreTraining + torch AdamW (decay off biases/LayerNorm, clipping 1.0, linear warmup)."""

  def __init__(self, cfg, batch: dict[str, np.ndarray], num_steps: int, seed: int = 0):
    import torch  # Benchmarks may use the references; the library never does.
    import transformers
    torch.manual_seed(seed)
    self.torch, self.device = torch, torch_device.torch_device()
    self.autocast = cfg.dtype == jnp.bfloat16
    config = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_positions, type_vocab_size=cfg.type_vocab_size,
        hidden_act="gelu" if cfg.hidden_act == "gelu" else "gelu_new", hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout, layer_norm_eps=cfg.layer_norm_eps)
    self.model = transformers.BertForPreTraining(config).train().to(self.device)
    named = list(self.model.named_parameters())
    no_decay = lambda name: name.endswith("bias") or "LayerNorm" in name
    opt = common.optimizer_config()
    self.optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in named if not no_decay(n)], "weight_decay": opt.weight_decay},
         {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0}],
        lr=opt.learning_rate, betas=(opt.b1, opt.b2), eps=opt.eps)
    warmup = max(num_steps // 10, 1)
    self.schedule = torch.optim.lr_scheduler.LambdaLR(
        self.optimizer, lambda s: min((s + 1) / warmup, max(0.0, (num_steps - s) / max(num_steps - warmup, 1))))
    inputs = dict(input_ids=batch["input_ids"], token_type_ids=batch["type_ids"],
                  attention_mask=batch["attention_segments"] > 0, labels=hf_labels(batch),
                  next_sentence_label=batch["nsp_label"])
    self.inputs = {k: torch.from_numpy(v.astype(np.int64)).to(self.device) for k, v in inputs.items()}
    self.loss = float("nan")

  def __call__(self) -> None:
    self.optimizer.zero_grad(set_to_none=True)
    with self.torch.autocast(self.device.type, dtype=self.torch.bfloat16, enabled=self.autocast):
      loss = self.model(**self.inputs).loss
    loss.backward()
    self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
    self.optimizer.step()
    self.schedule.step()
    torch_device.synchronize(self.device)
    self.loss = float(loss.detach())


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.pretrain_throughput", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--text", type=Path, default=None, help="default: <data>/wikitext-2/raw/wiki.valid.raw")
  parser.add_argument("--size", default="minilm", choices=sorted(PRESETS), help="encoder.config preset")
  parser.add_argument("--arch", default="bert", choices=sorted(ARCHITECTURES),
                      help="encoder.config.ARCHITECTURES switch set on the size, timed against the plain encoder")
  parser.add_argument("--batch", type=cli.integer(1), default=32)
  parser.add_argument("--seq", "--length", dest="length", type=cli.integer(8), default=128, help="tokens per row")
  parser.add_argument("--max-predictions", type=cli.integer(1), default=20)
  parser.add_argument("--rounds", type=cli.integer(1), default=5, help="timed rounds; each times every framework")
  parser.add_argument("--steps", type=cli.integer(1), default=2, help="timed steps per framework per round")
  parser.add_argument("--gelu", choices=("exact", "tanh"), default="exact",
                      help="exact erf GELU (BERT, HF parity; default) or the tanh approximation, in both frameworks")
  parser.add_argument("--precision", choices=("default", "float32", "bfloat16"), default="default",
                      help="matmul arithmetic of both frameworks (module docstring)")
  parser.add_argument("--peak-tflops", type=cli.number(0, low_open=True), default=None,
                      help="the device's dense peak in the compute dtype, for mfu_peak (default: PEAK_TFLOPS)")
  parser.add_argument("--no-hf", action="store_true", help="skip HF PyTorch (ratio is then null)")
  parser.add_argument("--no-dense", action="store_true", help="skip our dense-head variant")
  parser.add_argument("--no-f32", action="store_true",
                      help="with --precision bfloat16: skip our float32 step (bf16_speedup is then null)")
  parser.add_argument("--electra", action="store_true",
                      help="also time ELECTRA's step and an MLM-only step (electra_vs_mlm: their step-time ratio)")
  parser.add_argument("--generator-size", type=cli.number(0, 1, low_open=True), default=0.25,
                      help="with --electra: the generator's width / the encoder's (the paper's 1/4 by default)")
  parser.add_argument("--attention", type=ATTENTION, default="auto",
                      help="comma-separated attention variants of our step (auto, matmul, xla, cudnn, each optionally "
                           ":bfloat16 activations), timed in the same rounds; the first is 'ours'")
  args = parser.parse_args()
  host_memory.retain_freed_memory()  # Both frameworks, same process, same malloc.
  xla_flags.apply_gpu_defaults()
  variants = args.attention

  if args.precision == "float32":
    jax.config.update("jax_default_matmul_precision", "float32")
  dtype = jnp.bfloat16 if args.precision == "bfloat16" else jnp.float32
  arch = ARCHITECTURES[args.arch]
  gelu = "gelu" if args.gelu == "exact" else "gelu_tanh"
  plain = preset(args.size, max_positions=max(512, args.length), dtype=dtype, hidden_act=gelu)
  cfg = plain.replace(**arch | {"hidden_act": gelu if arch.get("hidden_act", "gelu") == "gelu" else arch["hidden_act"]})
  no_dropout = any(choice != "matmul" for _, choice, _ in variants)  # "auto" may resolve to another path.
  configs = {name: variant_config(cfg, choice, activation, dtype, no_dropout) for name, choice, activation in variants}
  tokenizer = load_tokenizer(minilm_path())
  text = args.text or paths.data_file("wikitext-2/raw/wiki.valid.raw")
  batch = mask_batch(nsp_batch(text, tokenizer, args.batch, args.length, seed=0), tokenizer, args.max_predictions,
                     seed=0)
  masked = int(batch["masked_weights"].sum())
  tokens = args.batch * args.length
  total_steps = 2 + args.rounds * args.steps

  if cfg.embedding_width != cfg.hidden_size and not args.no_hf:
    raise SystemExit(f"--size {args.size} has factorized embeddings, which HF's BERT lacks: pass --no-hf")
  runners: dict[str, OurStep | HFStep] = {}
  compile_s: dict[str, float] = {}
  sides: dict[str, str] = {}
  attention_errors: dict[str, str] = {}
  for name, variant in configs.items():  # Compiled and warmed up first: one the device refuses is reported, not fatal.
    try:
      step = OurStep(variant, batch, total_steps)
      seconds = sum(timed(step, 2))
    except Exception as err:  # noqa: BLE001  (cuDNN refusing a shape must not cost the other paths)
      attention_errors[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
      print(f"{name}: failed ({attention_errors[name]})", flush=True)
      continue
    sides[name] = "ours" if not sides else f"ours_{name}"
    runners[sides[name]], compile_s[sides[name]] = step, seconds
    print(f"{sides[name]} = {name} (attention {variant.attention}, activations "
          f"{jnp.dtype(variant.activation_dtype).name}, attention dropout {variant.attention_dropout}): compiled and "
          f"warmed up in {seconds:.1f} s", flush=True)
  if not sides:
    raise errors.UserError(f"no --attention variant ran: {attention_errors}")
  cfg = configs[next(iter(sides))]
  plain = plain.replace(attention=cfg.attention, attention_dropout=cfg.attention_dropout,
                        activation_dtype=cfg.activation_dtype)
  if args.arch != "bert":
    runners["ours_bert"] = OurStep(plain, batch, total_steps)
  if args.electra:
    runners["ours_mlm"] = OurStep(cfg, batch, total_steps, names=("mlm",))
    runners["ours_electra"] = OurStep(cfg, batch, total_steps, names=("electra",),
                                      generator_size=args.generator_size)
  if dtype == jnp.bfloat16 and not args.no_f32:
    choice = {name: choice for name, choice, _ in variants}[next(iter(sides))]
    runners["ours_f32"] = OurStep(variant_config(cfg, choice, "float32", jnp.float32, no_dropout), batch, total_steps)
  if not args.no_dense:
    runners["ours_dense_head"] = OurStep(cfg, dense_head_batch(batch), total_steps)
  no_autocast = torch_device.autocast_skip_reason(torch_device.torch_device()) if dtype == jnp.bfloat16 else None
  if no_autocast and not args.no_hf:
    print(f"HF reference skipped: {no_autocast}; our bf16 step is compared with our float32 one", flush=True)
  if not (args.no_hf or no_autocast or args.arch != "bert"):
    runners["hf_torch"] = HFStep(cfg, batch, total_steps)
  for name, runner in runners.items():  # Compilation and warm-up (first steps) outside the timed rounds.
    if name in compile_s:
      continue
    compile_s[name] = sum(timed(runner, 2))
    print(f"{name}: compiled and warmed up in {compile_s[name]:.1f} s", flush=True)
  for name in reversed(runners):  # One untimed alternation: the shared heap settles to every runner's blocks.
    runners[name]()
  times: dict[str, list[float]] = {name: [] for name in runners}
  ceilings, f32_ceilings = [], []
  for round_index in range(args.rounds):
    order = list(runners) if round_index % 2 == 0 else list(reversed(runners))
    for name in order:
      times[name] += timed(runners[name], args.steps)
    ceilings.append(flops.matmul_ceiling(repeats=3, dtype=dtype))
    if "ours_f32" in runners:
      f32_ceilings.append(flops.matmul_ceiling(repeats=3))
    print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
        f"{name} {statistics.median(t[-args.steps:]):.2f} s/step" for name, t in times.items())
        + f", matmul {ceilings[-1] / 1e9:.0f} GFLOP/s", flush=True)

  step_s = {name: statistics.median(t) for name, t in times.items()}
  ceiling = statistics.median(ceilings)
  work = useful_flops(cfg, args.batch, args.length, masked)
  kind = jax.devices()[0].device_kind
  peaks = PEAK_TFLOPS.get(kind, (None, None))
  peak = args.peak_tflops or {"bfloat16": peaks[0], "default": peaks[1]}.get(args.precision)
  per_s = {name: tokens / s for name, s in step_s.items()}
  result = {
      "tokens_per_s": round(per_s["ours"], 1),
      "hf_torch_tokens_per_s": round(per_s["hf_torch"], 1) if "hf_torch" in per_s else None,
      "ratio": round(per_s["ours"] / per_s["hf_torch"], 3) if "hf_torch" in per_s else None,
      "mfu": round(work / step_s["ours"] / ceiling, 3),
      "mfu_peak": round(work / step_s["ours"] / (peak * 1e12), 3) if peak else None,
      "peak_tflops": peak, "size": args.size, "arch": args.arch,
      "bert_step_s": round(step_s["ours_bert"], 3) if "ours_bert" in step_s else None,
      "arch_speedup": round(step_s["ours_bert"] / step_s["ours"], 3) if "ours_bert" in step_s else None,
      "tokens_per_s_dense_head": round(per_s["ours_dense_head"], 1) if "ours_dense_head" in per_s else None,
      "ratio_dense_head": (round(per_s["ours_dense_head"] / per_s["hf_torch"], 3)
                           if "ours_dense_head" in per_s and "hf_torch" in per_s else None),
      "step_s": round(step_s["ours"], 3),
      "hf_step_s": round(step_s["hf_torch"], 3) if "hf_torch" in step_s else None,
      "useful_gflop_per_step": round(work / 1e9, 1),
      "ceiling_gflops": round(ceiling / 1e9, 1),
      "masked_tokens": masked, "tokens_per_step": tokens, "gelu": args.gelu, "precision": args.precision,
      "device": kind,
      "rounds": args.rounds, "steps_per_round": args.steps,
      "note": "HF projects onto the vocabulary at every position, ours at the masked ones only (DESIGN); "
              "tokens_per_s_dense_head is ours with the dense projection",
      "attention": {name: configs[name].attention for name in sides},
      "activation_dtype": {name: jnp.dtype(configs[name].activation_dtype).name for name in sides},
      "attention_dropout": cfg.attention_dropout,
      "attention_step_s": {name: round(step_s[side], 4) for name, side in sides.items()},
      "attention_tokens_per_s": {name: round(per_s[side], 1) for name, side in sides.items()},
      "attention_mfu": {name: round(work / step_s[side] / ceiling, 3) for name, side in sides.items()},
      "attention_mfu_peak": {name: round(work / step_s[side] / (peak * 1e12), 3) if peak else None
                             for name, side in sides.items()},
      "attention_errors": attention_errors,
  }
  if args.electra:
    result.update(mlm_step_s=round(step_s["ours_mlm"], 3), electra_step_s=round(step_s["ours_electra"], 3),
                  electra_vs_mlm=round(step_s["ours_electra"] / step_s["ours_mlm"], 3),
                  generator_size=args.generator_size)
  if dtype == jnp.bfloat16:
    f32 = "ours_f32" in step_s
    result.update(bf16_step_s=round(step_s["ours"], 3), f32_step_s=round(step_s["ours_f32"], 3) if f32 else None,
                  bf16_speedup=round(step_s["ours_f32"] / step_s["ours"], 3) if f32 else None,
                  bf16_ceiling_gflops=round(ceiling / 1e9, 1),
                  f32_ceiling_gflops=round(statistics.median(f32_ceilings) / 1e9, 1) if f32 else None,
                  bf16_reference=no_autocast or "torch.autocast(bfloat16)")
  print(f"{'':16s} {'s/step':>8s} {'tokens/s':>9s} {'min s':>7s} {'max s':>7s} {'warm-up s':>9s}")
  for name in runners:
    print(f"{name:16s} {step_s[name]:8.3f} {per_s[name]:9.1f} {min(times[name]):7.3f} {max(times[name]):7.3f} "
          f"{compile_s[name]:9.1f}")
  first, reference = runners["ours"], runners.get("hf_torch")
  assert isinstance(first, OurStep)  # The first variant's step.
  losses = first.mean_losses()
  if isinstance(reference, HFStep):
    losses["hf_torch_loss"] = reference.loss
  print(f"useful GFLOP/step {work / 1e9:.1f}, ceiling {ceiling / 1e9:.0f} GFLOP/s, losses "
        + ", ".join(f"{k} {v:.3f}" for k, v in losses.items()))
  print(json.dumps(result))


if __name__ == "__main__":
  errors.run(main)
