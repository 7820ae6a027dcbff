"""HF PyTorch word vectors as a plain user computes them (the reference of benchmarks.embeddings).

`transformers.BertModel` on the same checkpoint, float32, under `torch.inference_mode`: the sentences in file order,
batches of 64 padded to each batch's longest (the fast tokenizer's `padding=True`, `truncation=True`, max length
128), `output_hidden_states=True`; each word's vector is the mean of its subwords' vectors in every layer (the word
ids of the fast tokenizer), [n_words, num_layers + 1, hidden] per sentence. It runs where JAX runs
(benchmarks.torch_device).
"""

from collections.abc import Iterator, Sequence

import numpy as np
import torch
import transformers

from benchmarks import torch_device


def load(model_dir) -> tuple:
  """(BertModel in eval mode on benchmarks.torch_device's device, its fast tokenizer)."""
  model = transformers.BertModel.from_pretrained(model_dir).eval()
  return model.to(torch_device.torch_device()), transformers.BertTokenizerFast.from_pretrained(model_dir)


def iter_encode_words(model, tokenizer, sentences: Sequence[Sequence[str]], *, batch_size: int = 64,
                      max_length: int = 128) -> Iterator[np.ndarray]:
  """Every layer's word vectors (mean of the subwords) of pre-tokenized sentences, one array per sentence in input
  order."""
  device = next(model.parameters()).device
  with torch.inference_mode():
    for first in range(0, len(sentences), batch_size):
      batch = [list(words) for words in sentences[first:first + batch_size]]
      inputs = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=max_length, padding=True,
                         return_tensors="pt")
      hidden = torch.stack(model(**inputs.to(device), output_hidden_states=True).hidden_states, dim=2)
      for row, words in enumerate(batch):  # hidden [batch, length, layers + 1, H]
        word_ids = inputs.word_ids(row)
        positions = [i for i, w in enumerate(word_ids) if w is not None]
        index = torch.tensor([word_ids[i] for i in positions], device=device)
        sums = torch.zeros((len(words),) + hidden.shape[2:], device=device).index_add_(0, index, hidden[row, positions])
        counts = torch.bincount(index, minlength=len(words)).clamp(min=1)
        yield (sums / counts[:, None, None]).cpu().numpy()
