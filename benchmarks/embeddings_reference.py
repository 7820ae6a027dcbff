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
  return model.to(torch_device.torch_device()), transformers.BertTokenizer.from_pretrained(model_dir)


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


class HFEmbedder:
  """HF word vectors behind the interface the WiC and WSD evaluations read (num_layers, hidden_size, params,
  encode_words, iter_encode_words with layers="all"), so that `benchmarks.embeddings --reference` scores HF's vectors
  with the same methods as ours. Sentences up to the checkpoint's 512 positions are encoded whole (no truncation at
  128: WiC and SemCor sentences are longer at times)."""

  def __init__(self, model_dir, *, batch_size: int = 64, max_length: int = 512):
    self.model, self.tokenizer = load(model_dir)
    self.batch_size, self.max_length = batch_size, max_length
    self.num_layers, self.hidden_size = self.model.config.num_hidden_layers, self.model.config.hidden_size
    self.params = {name: tensor.detach().cpu().numpy() for name, tensor in self.model.state_dict().items()}

  def iter_encode_words(self, sentences: Sequence[Sequence[str]], *, layers: str = "all", pooling: str = "mean"):
    """(sentence index, [n_words, num_layers + 1, hidden]) in input order; mean pooling over subwords only."""
    if layers != "all" or pooling != "mean":
      raise ValueError(f"the HF reference computes layers='all', pooling='mean' only, got {layers!r}, {pooling!r}")
    sentences = list(sentences)
    vectors = iter_encode_words(self.model, self.tokenizer, sentences, batch_size=self.batch_size,
                                max_length=self.max_length)
    yield from enumerate(vectors)

  def encode_words(self, sentences: Sequence[Sequence[str]], *, layers: str = "all", pooling: str = "mean"):
    """One array [n_words, num_layers + 1, hidden] per sentence, in input order."""
    return [vectors for _, vectors in self.iter_encode_words(sentences, layers=layers, pooling=pooling)]
