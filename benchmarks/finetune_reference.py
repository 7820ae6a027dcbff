"""HF PyTorch fine-tuning of the same checkpoint on the same encoded examples and batches (benchmark reference).

Sequence tasks use `BertForSequenceClassification`, word tasks `BertForTokenClassification` (first-subword labels,
-100 elsewhere, argmax at first subwords): plain HF practice, AdamW with no decay on biases/LayerNorm, linear warmup
and decay. Batches hold the examples `tasks.batching.length_bucketed_batches` draws for our engine, padded HF's way:
to the longest sequence of the batch (eager PyTorch needs no fixed shapes; our jit rounds up to config.data.buckets).
It runs where JAX runs (benchmarks.torch_device: CUDA beside a GPU, with JAX's float32 matmul arithmetic).
"""

import time
from typing import Any, Sequence

import numpy as np
import torch
import transformers

from benchmarks import torch_device
from tasks import batching


def _tensors(batch: dict[str, np.ndarray], device) -> dict[str, torch.Tensor]:
  return {"input_ids": torch.from_numpy(batch["input_ids"]).long().to(device),
          "token_type_ids": torch.from_numpy(batch["type_ids"]).long().to(device),
          "attention_mask": torch.from_numpy(batch["attention_segments"]).long().to(device)}


def build_model(kind: str, model_dir, num_labels: int, seed: int):
  """A fresh HF model with a `num_labels` head on the checkpoint (`kind`: "sequence" or "token"), on
  benchmarks.torch_device's device."""
  torch.manual_seed(seed)
  cls = (transformers.BertForSequenceClassification if kind == "sequence"
         else transformers.BertForTokenClassification)
  return cls.from_pretrained(model_dir, num_labels=num_labels).to(torch_device.torch_device())


def _collate(examples: Sequence[dict]) -> dict[str, np.ndarray]:
  """Dynamic padding to the batch's longest sequence."""
  return batching.collate(examples, [max(len(e["input_ids"]) for e in examples)])


def train(kind: str, model, examples: Sequence[dict], *, epochs: int, batch_size: int, learning_rate: float,
          warmup_fraction: float, weight_decay: float, seed: int, rdrop: float = 0.0) -> dict[str, float]:
  """Fine-tunes in place; returns train_seconds and examples_per_s. rdrop > 0 ("sequence"): R-Drop with that alpha,
  as tasks.classification.rdrop_loss (each example twice in the batch, adjacent)."""
  lengths = batching.lengths_of(examples)
  schedule_steps = sum(len(batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=e))
                       for e in range(epochs))
  no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
  decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
  optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=learning_rate)
  scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(warmup_fraction * schedule_steps),
                                                           schedule_steps)
  model.train()
  device = next(model.parameters()).device
  start, seen = time.perf_counter(), 0
  for epoch in range(epochs):
    for indices in batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch):
      batch = _collate([examples[i] for i in indices])
      inputs = _tensors(batch, device)
      labels = batch["label"] if kind == "sequence" else np.where(batch["label_ids"] >= 0, batch["label_ids"], -100)
      labels = torch.from_numpy(labels).long().to(device)
      if rdrop > 0 and kind == "sequence":
        loss = rdrop_loss(model, inputs, labels, rdrop)
      else:
        loss = model(**inputs, labels=labels).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      scheduler.step()
      optimizer.zero_grad(set_to_none=True)
      seen += len(indices)
  torch_device.synchronize(device)
  seconds = time.perf_counter() - start
  return {"train_seconds": seconds, "examples_per_s": seen / seconds}


def rdrop_loss(model, inputs: dict[str, torch.Tensor], labels: torch.Tensor, alpha: float) -> torch.Tensor:
  """Mean cross-entropy of two dropout samples per example plus alpha * their symmetric KL / 2 (per pair, over the
  rows)."""
  logits = model(**{k: v.repeat_interleave(2, dim=0) for k, v in inputs.items()}).logits.float()
  log_p = torch.log_softmax(logits, -1)
  cross_entropy = torch.nn.functional.nll_loss(log_p, labels.repeat_interleave(2), reduction="sum")
  first, second = log_p[0::2], log_p[1::2]
  kl = 0.5 * ((first.exp() - second.exp()) * (first - second)).sum()
  return (cross_entropy + alpha * kl) / logits.shape[0]


def predict(kind: str, model, examples: Sequence[dict], *, batch_size: int) -> list[Any]:
  """Class index per example ("sequence") or word-level tag indices at first subwords ("token"), in input order."""
  model.eval()
  device = next(model.parameters()).device
  out: list[Any] = [None] * len(examples)
  with torch.no_grad():
    for indices in batching.length_bucketed_batches(batching.lengths_of(examples), batch_size, seed=0, epoch=0,
                                                    shuffle=False):
      batch = _collate([examples[i] for i in indices])
      logits = model(**_tensors(batch, device)).logits.float().cpu().numpy()
      for row, i in enumerate(indices):
        if kind == "sequence":
          out[i] = int(logits[row].argmax())
        else:
          positions = examples[i]["word_positions"]
          out[i] = logits[row, positions].argmax(-1).tolist()
  return out
