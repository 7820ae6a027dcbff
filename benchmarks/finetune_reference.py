"""HF PyTorch fine-tuning of the same checkpoint on the same encoded examples and batches (benchmark reference).

Sequence tasks use `BertForSequenceClassification` (one output and the mean squared error for regression), word
tasks `BertForTokenClassification` (first-subword labels, -100 elsewhere, argmax at first subwords), extractive QA
`BertForQuestionAnswering` on the same windows (its own loss on start/end positions; the start and end logits are
decoded by our family, so both sides share windows and decoding): plain HF practice, AdamW with no decay on
biases/LayerNorm, linear warmup and decay. Batches hold the examples `tasks.batching.length_bucketed_batches` draws
for our engine, padded HF's way: to the longest sequence of the batch (eager PyTorch needs no fixed shapes; our jit
rounds up to config.data.buckets).
It runs where JAX runs (benchmarks.torch_device: CUDA beside a GPU, with JAX's float32 matmul arithmetic).
"""

import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import transformers

from benchmarks import torch_device
from tasks import batching, tagging


def _tensors(batch: dict[str, np.ndarray], device) -> dict[str, torch.Tensor]:
  return {"input_ids": torch.from_numpy(batch["input_ids"]).long().to(device),
          "token_type_ids": torch.from_numpy(batch["type_ids"]).long().to(device),
          "attention_mask": torch.from_numpy(batch["attention_segments"]).long().to(device)}


def build_model(kind: str, model_dir, num_labels: int, seed: int, score_bias: float | None = None):
  """A fresh HF model with a `num_labels` head on the checkpoint (`kind`: "sequence", "regression", "token" or "span":
  BertForQuestionAnswering), on benchmarks.torch_device's device. `score_bias`: the initial bias of the last output
  (the score, as ours starts)."""
  torch.manual_seed(seed)
  if kind == "span":
    return transformers.BertForQuestionAnswering.from_pretrained(model_dir).to(torch_device.torch_device())
  cls = (transformers.BertForTokenClassification if kind == "token"
         else transformers.BertForSequenceClassification)
  model = cls.from_pretrained(model_dir, num_labels=1 if kind == "regression" else num_labels)
  if score_bias is not None:
    assert isinstance(model.classifier, torch.nn.Linear)  # Both heads end in one Linear layer.
    with torch.no_grad():
      model.classifier.bias[-1] = score_bias
  return model.to(torch_device.torch_device())


def _collate(examples: Sequence[dict]) -> dict[str, np.ndarray]:
  """Dynamic padding to the batch's longest sequence, with tagging's pad values (its token labels: -1, no label; the
  fields of the sentence tasks pad as in every layout)."""
  return batching.collate(examples, [max(len(e["input_ids"]) for e in examples)], layout=tagging.LAYOUT)


def train(kind: str, model, examples: Sequence[dict], *, epochs: int, batch_size: int, learning_rate: float,
          warmup_fraction: float, weight_decay: float, seed: int, layer_decay: float = 1.0, regime: str = "full",
          top_k: int = 0, rdrop: float = 0.0, score_weight: float = 0.0, bf16: bool = False) -> dict[str, float]:
  """Fine-tunes in place; returns train_seconds and examples_per_s. Learning rates per layer and frozen parameters
  (layer_decay, regime, top_k) as `parameter_groups`. rdrop > 0 ("sequence"): R-Drop with that alpha, as
  tasks.classification.rdrop_loss (each example twice in the batch, adjacent). score_weight > 0 ("sequence"): the
  model's last output regresses the example's score, as tasks.classification.with_score. bf16: mixed precision, the
  forward under torch.autocast(bfloat16) (float32 parameters and optimizer state)."""
  lengths = batching.lengths_of(examples)
  schedule_steps = sum(len(batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=e))
                       for e in range(epochs))
  optimizer = torch.optim.AdamW(parameter_groups(model, learning_rate, weight_decay, layer_decay, regime, top_k),
                                lr=learning_rate)
  scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(warmup_fraction * schedule_steps),
                                                           schedule_steps)
  model.train()
  device = next(model.parameters()).device
  start, seen = time.perf_counter(), 0
  for epoch in range(epochs):
    for indices in batching.length_bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch):
      batch = _collate([examples[i] for i in indices])
      inputs = _tensors(batch, device)
      with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        if kind == "span":  # HF's (start + end cross-entropy) / 2.
          loss = model(**inputs, start_positions=torch.from_numpy(batch["start_position"]).long().to(device),
                       end_positions=torch.from_numpy(batch["end_position"]).long().to(device)).loss
        elif kind == "regression":  # num_labels 1 and float labels: HF's mean squared error.
          loss = model(**inputs, labels=torch.from_numpy(batch["score"]).float().to(device)).loss
        elif kind == "sequence" and (rdrop > 0 or score_weight > 0):
          labels = torch.from_numpy(batch["label"]).long().to(device)
          scores = torch.from_numpy(batch["score"]).float().to(device) if score_weight > 0 else None
          loss = classification_loss(model, inputs, labels, rdrop=rdrop, scores=scores, score_weight=score_weight)
        else:
          targets = batch["label"] if kind == "sequence" else np.where(batch["label_ids"] >= 0, batch["label_ids"],
                                                                       -100)
          loss = model(**inputs, labels=torch.from_numpy(targets).long().to(device)).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      scheduler.step()
      optimizer.zero_grad(set_to_none=True)
      seen += len(indices)
  torch_device.synchronize(device)
  seconds = time.perf_counter() - start
  return {"train_seconds": seconds, "examples_per_s": seen / seconds}


def parameter_groups(model, learning_rate: float, weight_decay: float, layer_decay: float = 1.0,
                     regime: str = "full", top_k: int = 0) -> list[dict]:
  """AdamW groups as tasks.regimes.update_scales and launch.optimizer.decay_mask: learning rate *
  layer_decay^(num_layers + 1 - depth) with depth 0 for the embeddings, i + 1 for encoder layer i and num_layers + 1
  above (pooler, classifier); no weight decay on biases and LayerNorm; parameters the regime freezes ("frozen": the
  encoder, "top_k": all but its top k layers) get requires_grad False and no group."""
  num_layers = model.config.num_hidden_layers
  groups: dict[tuple[bool, int], list] = {}
  for name, parameter in model.named_parameters():
    layer = re.search(r"\.encoder\.layer\.(\d+)\.", name)
    depth = 0 if ".embeddings." in name else int(layer.group(1)) + 1 if layer else num_layers + 1
    frozen = {"full": False, "frozen": depth <= num_layers, "top_k": depth <= num_layers - top_k}[regime]
    parameter.requires_grad_(not frozen)
    if not frozen:
      groups.setdefault((not (name.endswith("bias") or "LayerNorm" in name), depth), []).append(parameter)
  return [{"params": params, "weight_decay": weight_decay if decays else 0.0,
           "lr": learning_rate * layer_decay ** (num_layers + 1 - depth)}
          for (decays, depth), params in sorted(groups.items())]


def classification_loss(model, inputs: dict[str, torch.Tensor], labels: torch.Tensor, *, rdrop: float = 0.0,
                        scores: torch.Tensor | None = None, score_weight: float = 0.0) -> torch.Tensor:
  """Mean cross-entropy per row; with rdrop > 0 each example runs twice (adjacent rows) and alpha * the symmetric
  KL / 2 of each pair is added; with score_weight > 0 the last logit regresses `scores` (+ weight * squared error)."""
  copies = 2 if rdrop > 0 else 1
  outputs = model(**{k: v.repeat_interleave(copies, dim=0) for k, v in inputs.items()}).logits.float()
  logits = outputs[:, :-1] if score_weight > 0 else outputs
  log_p = torch.log_softmax(logits, -1)
  total = torch.nn.functional.nll_loss(log_p, labels.repeat_interleave(copies), reduction="sum")
  if rdrop > 0:
    first, second = log_p[0::2], log_p[1::2]
    total = total + rdrop * 0.5 * ((first.exp() - second.exp()) * (first - second)).sum()
  if score_weight > 0:
    if scores is None:
      raise ValueError("classification_loss: score_weight > 0 needs the examples' scores (scores=)")
    total = total + score_weight * torch.square(outputs[:, -1] - scores.repeat_interleave(copies)).sum()
  return total / logits.shape[0]


def predict(kind: str, model, examples: Sequence[dict], *, batch_size: int, num_labels: int = 0,
            bf16: bool = False) -> list[Any]:
  """Class index per example ("sequence": argmax of the first `num_labels` outputs, 0 = all), the score
  ("regression"), word-level tag indices at first subwords ("token") or the start and end logits [tokens, 2] ("span"),
  in input order (bf16: under autocast)."""
  model.eval()
  device = next(model.parameters()).device
  out: list[Any] = [None] * len(examples)
  with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
    for indices in batching.length_bucketed_batches(batching.lengths_of(examples), batch_size, seed=0, epoch=0,
                                                    shuffle=False):
      batch = _collate([examples[i] for i in indices])
      output = model(**_tensors(batch, device))
      if kind == "span":
        logits = torch.stack([output.start_logits, output.end_logits], -1).float().cpu().numpy()
        for row, i in enumerate(indices):
          out[i] = logits[row, :len(examples[i]["input_ids"])]
        continue
      logits = output.logits.float().cpu().numpy()
      for row, i in enumerate(indices):
        if kind == "sequence":
          out[i] = int(logits[row, :num_labels or None].argmax())
        elif kind == "regression":
          out[i] = float(logits[row, 0])
        else:
          positions = examples[i]["word_positions"]
          out[i] = logits[row, positions].argmax(-1).tolist()
  return out
