"""Parity of our stack with HuggingFace on the real MiniLM checkpoint (foundation issue).

Prints a table and, as its last line, one JSON object:
  max_abs_diff              all 7 hidden states, our Flax encoder vs transformers.BertModel (PyTorch), fp32
  tokens_identical_fraction our WordPiece ids vs the pure-Python BertTokenizerLegacy, per line
  roundtrip_max_abs_diff    import -> export -> BertModel.from_pretrained -> weights and outputs vs the original
  modernbert_max_abs_diff   all hidden states of our encoder with the ModernBERT switches vs
                            transformers.ModernBertModel on the same random weights (HF's seeded init; ModernBERT-base's
                            recipe at 6 layers, hidden 256: global attention in layers 0 and 3, a 128-token window in
                            the others, so tokens more than 64 apart do not see each other there), the same lines
  modernbert_roundtrip_bitwise  that checkpoint imported and exported again: every tensor bit for bit
  electra_max_abs_diff      ELECTRA (objectives/electra.py) on random weights (ELECTRA-small's shape: 12 layers, E=128,
                            H=256, generator 1/4) imported from HF, fp32, the same padded text batches masked 15%:
                            our generator's MLM logits vs ElectraForMaskedLM, our discriminator's vs
                            ElectraForPreTraining fed the replacements we sampled (the larger of the two)
  electra_loss_rel_diff     |our ELECTRA loss - HF's| / HF's, HF's = its generator MLM loss + 50 x its RTD loss
Usage: python -m benchmarks.parity [--text FILE] [--lines 256] [--max-length 128] [--batch 32]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import jax
import numpy as np
import safetensors.numpy
import torch
import transformers
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from encoder import Encoder, EncoderOutput, cli, errors, paths
from encoder.hf import GENERATOR_DIRECTORY
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch.model import EncoderWithHeads
from objectives import electra
from objectives.hf_heads import load_hf_checkpoint, save_hf_checkpoint
from tasks.readers.lines import numbered_lines


def read_lines(path: Path, count: int) -> list[str]:
  lines = [line.strip() for _, line in numbered_lines(path)]  # A non-UTF-8 line is an error naming it.
  lines = [line for line in lines if line]
  if len(lines) < count:
    raise SystemExit(f"{path}: only {len(lines)} non-empty lines, {count} requested")
  return lines[:count]


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  width = max(map(len, sequences))
  ids = np.full((len(sequences), width), pad_id, np.int32)
  mask = np.zeros((len(sequences), width), np.int32)
  for row, seq in enumerate(sequences):
    ids[row, :len(seq)], mask[row, :len(seq)] = seq, 1
  return ids, mask


def hf_hidden_states(model, ids: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long(),
                output_hidden_states=True)
  return [h.numpy() for h in out.hidden_states]


def modernbert_parity(directory: Path, sequences: list[list[int]], vocab_size: int, pad_id: int, batch: int
                      ) -> tuple[float, bool]:
  """(max |ours - ModernBertModel| over every hidden state at real tokens, whether import -> export is bitwise) on a
  random ModernBERT (module docstring) saved in `directory`."""
  torch.manual_seed(0)
  config = transformers.ModernBertConfig(  # type: ignore[call-arg]  # Typed as a dataclass without its extra **kwargs.
      vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=384,
      pad_token_id=pad_id, bos_token_id=None, eos_token_id=None, cls_token_id=None, sep_token_id=None,
      attn_implementation="sdpa")
  reference = transformers.ModernBertModel(config).eval()
  reference.save_pretrained(directory / "hf")
  cfg, params, heads = load_hf_checkpoint(directory / "hf")
  save_hf_checkpoint(directory / "ours", cfg, params, heads)
  original, exported = (safetensors.numpy.load_file(directory / d / "model.safetensors") for d in ("hf", "ours"))
  bitwise = original.keys() == exported.keys() and all(np.array_equal(original[k], exported[k]) for k in original)
  encoder = Encoder(cfg)
  apply = jax.jit(lambda ids: cast(EncoderOutput, encoder.apply({"params": params}, ids)).hidden_states)
  diff = 0.0
  for start in range(0, len(sequences), batch):
    ids, mask = pad_batch(sequences[start:start + batch], pad_id)
    with torch.no_grad():
      out = reference(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long(),
                      output_hidden_states=True)
    theirs = [h.numpy() for h in out.hidden_states[:-1]] + [out.last_hidden_state.numpy()]
    real = mask.astype(bool)
    diff = max([diff] + [float(np.abs(np.asarray(a) - b)[real].max()) for a, b in zip(apply(ids), theirs)])
  return diff, bitwise


def random_electra(directory: Path, vocab_size: int) -> tuple:
  """HF ElectraForPreTraining + ElectraForMaskedLM (in generator/) of ELECTRA-small's shape with random weights
  (std 0.05), the generator's embeddings the discriminator's, saved in `directory`."""
  torch.manual_seed(0)
  shape: dict[str, Any] = dict(vocab_size=vocab_size, embedding_size=128, hidden_size=256, num_hidden_layers=12,
                               num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512)
  models = []
  for cls, config in ((transformers.ElectraForPreTraining, shape),
                      (transformers.ElectraForMaskedLM, shape | dict(hidden_size=64, num_attention_heads=1,
                                                                     intermediate_size=256))):
    model = cls(transformers.ElectraConfig(  # type: ignore[call-arg]  # Typed as a dataclass without its extra **kwargs.
        **config, attn_implementation="eager")).eval()
    with torch.no_grad():
      for param in model.parameters():
        param.normal_(0.0, 0.05)
    models.append(model)
  discriminator, generator = models
  generator.electra.embeddings.load_state_dict(discriminator.electra.embeddings.state_dict())
  discriminator.save_pretrained(directory)
  generator.save_pretrained(directory / GENERATOR_DIRECTORY)
  return discriminator, generator


def mask_rows(ids: np.ndarray, mask: np.ndarray, mask_id: int, width: int, seed: int) -> dict[str, np.ndarray]:
  """Our masked batch of padded rows: 15% of each row's non-special tokens (at most `width`) become [MASK]."""
  rng = np.random.default_rng(seed)
  rows = ids.shape[0]
  batch = {"input_ids": ids.copy(), "type_ids": np.zeros_like(ids), "attention_segments": mask,
           "positions": np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32), ids.shape).copy(),
           "masked_positions": np.zeros((rows, width), np.int32), "masked_ids": np.zeros((rows, width), np.int32),
           "masked_weights": np.zeros((rows, width), np.float32)}
  for row in range(rows):
    candidates = np.arange(1, mask[row].sum() - 1)
    k = min(width, max(1, round(0.15 * len(candidates))))
    chosen = np.sort(rng.choice(candidates, k, replace=False))
    batch["masked_positions"][row, :k], batch["masked_ids"][row, :k] = chosen, ids[row, chosen]
    batch["masked_weights"][row, :k] = 1.0
    batch["input_ids"][row, chosen] = mask_id
  return batch


def electra_parity(batches: list[tuple[np.ndarray, np.ndarray]], mask_id: int, vocab_size: int) -> dict[str, float]:
  """Max |ours - HF| of the generator and discriminator logits and the relative loss difference (module docstring)."""
  with tempfile.TemporaryDirectory() as tmp:
    discriminator, generator = random_electra(Path(tmp), vocab_size)
    cfg, params, heads = load_hf_checkpoint(tmp)
  objective = electra.build({"rtd_weight": 50.0})
  model = EncoderWithHeads(cfg, (objective,))
  apply = jax.jit(lambda p, b: cast(dict[str, Any], model.apply({"params": p}, b, train=False))["electra"])
  params = {"encoder": params, **heads}
  diffs = {"generator": 0.0, "discriminator": 0.0, "loss_rel": 0.0}
  for index, (ids, mask) in enumerate(batches):
    batch = mask_rows(ids, mask, mask_id, 20, seed=index)
    predictions = jax.device_get(apply(params, batch))
    real, valid = batch["masked_weights"] > 0, mask > 0
    labels = np.full(ids.shape, -100)
    for row in range(ids.shape[0]):
      labels[row, batch["masked_positions"][row][real[row]]] = batch["masked_ids"][row][real[row]]
    long = lambda a: torch.tensor(np.asarray(a), dtype=torch.long)
    with torch.no_grad():
      gen = generator(input_ids=long(batch["input_ids"]), attention_mask=long(mask), labels=long(labels))
      disc = discriminator(input_ids=long(predictions["input_ids"]), attention_mask=long(mask),
                           labels=long(predictions["input_ids"] != ids))
    gen_logits = np.take_along_axis(gen.logits.numpy(), batch["masked_positions"][..., None], axis=1)
    diffs["generator"] = max(diffs["generator"], float(np.abs(predictions["generator"] - gen_logits)[real].max()))
    diffs["discriminator"] = max(diffs["discriminator"],
                                 float(np.abs(predictions["discriminator"] - disc.logits.numpy())[valid].max()))
    reference = gen.loss.item() + 50.0 * disc.loss.item()
    loss = float(objective.loss(predictions, batch)[0])  # type: ignore[arg-type]  # a numpy batch: the jnp loss takes it
    diffs["loss_rel"] = max(diffs["loss_rel"], abs(loss - reference) / abs(reference))
  return diffs


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.parity", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--text", type=Path, default=None, help="default: <data>/wikitext-2/raw/wiki.valid.raw")
  parser.add_argument("--lines", type=cli.integer(1), default=256)
  parser.add_argument("--max-length", type=cli.integer(4, 512), default=128, help="MiniLM: 512 positions")
  parser.add_argument("--batch", type=cli.integer(1), default=32)
  args = parser.parse_args()
  text = args.text or paths.data_file("wikitext-2/raw/wiki.valid.raw")
  lines = read_lines(text, args.lines)
  model_dir = minilm_path()

  # Tokenizer: ours vs the independent pure-Python implementation, full (untruncated) sequences.
  ours = load_tokenizer(model_dir)
  legacy = BertTokenizerLegacy(str(model_dir / "vocab.txt"), do_lower_case=True)
  our_ids = [ours.encode(line).input_ids for line in lines]
  legacy_ids = [legacy.encode(line, add_special_tokens=True) for line in lines]
  identical = sum(a == b for a, b in zip(our_ids, legacy_ids))
  tokens_identical_fraction = identical / len(lines)

  # Encoder: ours vs transformers.BertModel on the same weights, padded batches of truncated lines.
  cfg, params, _ = load_hf_checkpoint(model_dir)
  encoder = Encoder(cfg)
  apply = jax.jit(lambda ids, segs: cast(EncoderOutput, encoder.apply({"params": params}, ids,
                                                                    attention_segments=segs)).hidden_states)
  reference = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
  truncated = [ours.encode(line, max_length=args.max_length).input_ids for line in lines]
  per_layer = np.zeros(cfg.num_layers + 1)
  ours_seconds = ref_seconds = 0.0
  for start in range(0, len(truncated), args.batch):
    ids, mask = pad_batch(truncated[start:start + args.batch], ours.pad_id)
    t0 = time.perf_counter()
    flax_states = [np.asarray(h) for h in apply(ids, mask)]
    t1 = time.perf_counter()
    torch_states = hf_hidden_states(reference, ids, mask)
    ours_seconds, ref_seconds = ours_seconds + t1 - t0, ref_seconds + time.perf_counter() - t1
    real = mask.astype(bool)
    for layer, (a, b) in enumerate(zip(flax_states, torch_states)):
      per_layer[layer] = max(per_layer[layer], float(np.abs(a - b)[real].max()))

  # Round trip: import -> export -> load in transformers -> weights and outputs vs the original.
  with tempfile.TemporaryDirectory() as tmp:
    save_hf_checkpoint(tmp, cfg, params, tokenizer_files=[model_dir / "vocab.txt", model_dir / "tokenizer.json"])
    reloaded = transformers.BertModel.from_pretrained(tmp, attn_implementation="eager").eval()
  original_state, reloaded_state = reference.state_dict(), reloaded.state_dict()
  weight_diff = max(float((original_state[k] - reloaded_state[k]).abs().max()) for k in original_state)
  ids, mask = pad_batch(truncated[:args.batch], ours.pad_id)
  output_diff = max(float(np.abs(a - b).max()) for a, b in
                    zip(hf_hidden_states(reference, ids, mask), hf_hidden_states(reloaded, ids, mask)))

  with tempfile.TemporaryDirectory() as tmp:
    modernbert_diff, modernbert_bitwise = modernbert_parity(Path(tmp), truncated, cfg.vocab_size, ours.pad_id,
                                                            args.batch)

  print(f"{len(lines)} lines of {text}, max length {args.max_length}, batch {args.batch}, checkpoint {model_dir}")
  print(f"{'hidden state':<14}{'max |ours - HF|':>18}")
  for layer, diff in enumerate(per_layer):
    print(f"{'embeddings' if layer == 0 else f'layer {layer}':<14}{diff:>18.3e}")
  print(f"tokenizer: {identical}/{len(lines)} lines identical to BertTokenizerLegacy")
  print(f"round trip: weights max diff {weight_diff:.3e}, outputs max diff {output_diff:.3e}")
  electra_diffs = electra_parity([pad_batch(truncated[start:start + args.batch], ours.pad_id)
                                  for start in range(0, len(truncated), args.batch)], ours.mask_id, cfg.vocab_size)
  print("ELECTRA-small shape, random weights: max |ours - HF| generator logits "
        f"{electra_diffs['generator']:.3e}, discriminator logits {electra_diffs['discriminator']:.3e}; "
        f"loss relative diff {electra_diffs['loss_rel']:.3e}")
  print(f"forward seconds: ours (jit, incl. compile) {ours_seconds:.2f}, HF PyTorch {ref_seconds:.2f}")
  print(f"ModernBERT switches vs ModernBertModel (random weights): max diff {modernbert_diff:.3e}, import -> export "
        f"{'bitwise' if modernbert_bitwise else 'NOT bitwise'}")
  print(json.dumps({"max_abs_diff": float(per_layer.max()), "tokens_identical_fraction": tokens_identical_fraction,
                    "roundtrip_max_abs_diff": max(weight_diff, output_diff), "lines": len(lines),
                    "modernbert_max_abs_diff": modernbert_diff, "modernbert_roundtrip_bitwise": modernbert_bitwise,
                    "electra_max_abs_diff": max(electra_diffs["generator"], electra_diffs["discriminator"]),
                    "electra_loss_rel_diff": electra_diffs["loss_rel"]}))


if __name__ == "__main__":
  errors.run(main)
