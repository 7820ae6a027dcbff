"""The README's main job (`make demo`): load the packaged MiniLM BERT, encode sentences, show similarities."""

import jax
import jax.numpy as jnp
import numpy as np

from encoder import Encoder
from encoder.hf_checkpoint import load_hf_checkpoint
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer

SENTENCES = [
    "The water of Walden Pond is so beautifully clear.",
    "Walden Pond has wonderfully transparent water.",
    "Lunch was delicious.",
    "The stock market fell sharply on Monday.",
]


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """Average of the token vectors (padding excluded), L2-normalised: all-MiniLM-L6-v2's sentence embedding."""
  summed = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  return summed / np.linalg.norm(summed, axis=1, keepdims=True)


def main() -> None:
  path = minilm_path()
  print(f"checkpoint: {path}")
  cfg, params, _ = load_hf_checkpoint(path)
  tokenizer = load_tokenizer(path)
  print(f"encoder: {cfg.num_layers} layers, hidden {cfg.hidden_size}, {cfg.num_heads} heads, vocab {cfg.vocab_size}, "
        f"{sum(x.size for x in jax.tree.leaves(params)) / 1e6:.1f}M parameters")
  encodings = [tokenizer.encode(s) for s in SENTENCES]
  width = max(len(e.input_ids) for e in encodings)
  ids = np.full((len(encodings), width), tokenizer.pad_id, np.int32)
  for row, e in enumerate(encodings):
    ids[row, :len(e.input_ids)] = e.input_ids
  mask = (ids != tokenizer.pad_id).astype(np.int32)
  out = jax.jit(lambda x, m: Encoder(cfg).apply({"params": params}, x, attention_segments=m))(jnp.asarray(ids), mask)
  print(f"input_ids {ids.shape}; hidden states: {len(out.hidden_states)} x {tuple(out.last.shape)}; "
        f"[CLS] {tuple(out.cls.shape)}")
  print("subwords of the first sentence:", " ".join(tokenizer.ids_to_tokens(encodings[0].input_ids)))
  embeddings = mean_pool(np.asarray(out.last), mask)
  similarity = embeddings @ embeddings.T
  print("\ncosine similarity of mean-pooled sentence embeddings:")
  for i, sentence in enumerate(SENTENCES):
    print(f"  {' '.join(f'{s:5.2f}' for s in similarity[i])}  {sentence}")


if __name__ == "__main__":
  main()
