"""HF PyTorch BertForMaskedLM pretraining on our exact batches (the reference of benchmarks.pretrain_quality).

Plain HF practice: a dense vocabulary head (logits at every position, loss on the labeled ones: -100 elsewhere),
AdamW without weight decay on biases and LayerNorm, linear warmup then linear decay to 0
(transformers.get_linear_schedule_with_warmup), global-norm clipping. The masked batches come from our input
pipeline (objectives.masking on objectives.pipeline rows), turned into dense labels, so both systems see the same
tokens and masks step by step.
"""

import time
from collections.abc import Iterator
from typing import Any

import ml_collections
import numpy as np
import torch
import transformers


def build_model(model: ml_collections.ConfigDict, vocab_size: int, seed: int) -> transformers.BertForMaskedLM:
  """A freshly initialized BertForMaskedLM of config.model's shape (tied input/output embeddings, as ours)."""
  torch.manual_seed(seed)
  config = transformers.BertConfig(
      vocab_size=model.vocab_size or vocab_size, hidden_size=model.hidden_size, num_hidden_layers=model.num_layers,
      num_attention_heads=model.num_heads, intermediate_size=model.intermediate_size,
      max_position_embeddings=model.max_positions, type_vocab_size=model.type_vocab_size,
      layer_norm_eps=model.layer_norm_eps, hidden_dropout_prob=model.hidden_dropout,
      attention_probs_dropout_prob=model.attention_dropout, hidden_act=model.hidden_act,
      initializer_range=model.initializer_range, pad_token_id=model.pad_token_id, tie_word_embeddings=True)
  return transformers.BertForMaskedLM(config)


def model_inputs(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
  """Our batch -> BertForMaskedLM inputs (one sequence per row: attention mask = not padding)."""
  return {"input_ids": torch.from_numpy(batch["input_ids"]).long(),
          "token_type_ids": torch.from_numpy(batch["type_ids"]).long(),
          "position_ids": torch.from_numpy(np.ascontiguousarray(batch["positions"])).long(),
          "attention_mask": torch.from_numpy((batch["attention_segments"] > 0).astype(np.int64))}


def dense_labels(batch: dict[str, np.ndarray]) -> np.ndarray:
  """[B, L] labels: the original token at each real masked position, -100 (ignored) everywhere else."""
  labels = np.full(batch["input_ids"].shape, -100, np.int64)
  rows, slots = np.nonzero(batch["masked_weights"] > 0)
  labels[rows, batch["masked_positions"][rows, slots]] = batch["masked_ids"][rows, slots]
  return labels


def train(model: transformers.BertForMaskedLM, batches: Iterator[dict[str, np.ndarray]], *,
          opt: ml_collections.ConfigDict, schedule_steps: int, max_steps: int, seconds: float) -> dict[str, Any]:
  """Trains in place for max_steps steps or `seconds` of wall clock, whichever ends first; the schedule is laid out
  over schedule_steps. Returns steps, train_seconds, steps_per_second and the last step's loss."""
  no_decay = lambda name: name.endswith("bias") or "LayerNorm" in name
  groups = [{"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": opt.weight_decay},
            {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=opt.learning_rate, betas=(opt.b1, opt.b2), eps=opt.eps)
  scheduler = transformers.get_linear_schedule_with_warmup(optimizer, min(opt.warmup_steps, schedule_steps),
                                                           schedule_steps)
  model.train()
  start, steps, loss = time.perf_counter(), 0, float("nan")
  while steps < max_steps and time.perf_counter() - start < seconds:
    batch = next(batches)
    output = model(**model_inputs(batch), labels=torch.from_numpy(dense_labels(batch)))
    output.loss.backward()
    if opt.clip_norm > 0:
      torch.nn.utils.clip_grad_norm_(model.parameters(), opt.clip_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    steps += 1
    loss = output.loss.item()
  elapsed = time.perf_counter() - start
  return {"steps": steps, "train_seconds": elapsed, "steps_per_second": steps / elapsed, "train_loss": loss}


@torch.no_grad()
def masked_logits(model: transformers.BertForMaskedLM, batch: dict[str, np.ndarray]) -> np.ndarray:
  """[B, P, V] vocabulary logits at the batch's masked_positions (eval mode: no dropout)."""
  model.eval()
  logits = model(**model_inputs(batch)).logits
  positions = torch.from_numpy(batch["masked_positions"]).long()
  return torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1])).numpy()
