"""Multilingual α-sampling (spec, "Training Regimes", eq. for q_i): q_i = p_i^α / Σ_j p_j^α with p_i = n_i / Σ_k n_k.

α < 1 upweights languages with little data (α = 0.3 as XLM-R). The same law picks the language of each pretraining
example (`AlphaMixture`, deterministic per (seed, index)) and the sentences of a tokenizer-training text
(`write_sampled_text`), whose output feeds encoder.tokenizer.train_wordpiece / train_sentencepiece.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from encoder import errors


def language_probs(sizes: Sequence[float], alpha: float = 0.3) -> np.ndarray:
  """q [N] from corpus sizes n_i (sentences) by the spec's α-smoothing; α = 1 keeps the data proportions."""
  counts = np.asarray(sizes, np.float64)
  if counts.ndim != 1 or len(counts) == 0 or (counts < 0).any() or counts.sum() <= 0:
    raise errors.ConfigError(f"language sizes must be non-negative counts with a positive total, got {counts.tolist()}")
  if alpha < 0:
    raise errors.ConfigError(f"alpha must be >= 0 (0.3 in XLM-R; 1 keeps the data proportions), got {alpha}")
  p = counts / counts.sum()
  weights = np.where(p > 0, p ** alpha, 0.0)  # An empty corpus keeps probability 0, also at α = 0.
  return weights / weights.sum()


class AlphaMixture:
  """Random-access mixture of N example sequences: item i comes from corpus c ~ q and is drawn uniformly from it.

  The draw is a pure function of (seed, i), so it is resumable and identical for any device count.
  """

  def __init__(self, sources: Sequence[Sequence], alpha: float = 0.3, seed: int = 0, length: int | None = None):
    self.sources, self.seed = sources, seed
    self.probs = language_probs([len(s) for s in sources], alpha)
    self.length = length if length is not None else sum(len(s) for s in sources)

  def __len__(self) -> int:
    return self.length

  def source_of(self, index: int) -> tuple[int, int]:
    """(corpus, item within it) of mixture item `index`."""
    rng = np.random.default_rng([self.seed, index])
    corpus = int(rng.choice(len(self.probs), p=self.probs))
    return corpus, int(rng.integers(len(self.sources[corpus])))

  def __getitem__(self, index: int):
    corpus, item = self.source_of(index)
    return self.sources[corpus][item]


def conllu_sentences(path: str | Path) -> list[str]:
  """The `# text = ...` sentences of a CoNLL-U file (UD treebanks)."""
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"CoNLL-U file {path} does not exist")
  sentences = []
  with open(path, encoding="utf-8") as handle:
    for number, line in enumerate(handle, 1):
      if line.startswith("# text"):
        _, sep, text = line.partition("=")
        if not sep:
          raise errors.ConfigError(f"{path}:{number}: a '# text' line without '=': expected '# text = <sentence>'")
        sentences.append(text.strip())
  if not sentences:
    raise errors.ConfigError(f"{path}: no '# text = ...' lines; is it a CoNLL-U file with sentence text comments?")
  return sentences


def write_sampled_text(corpora: dict[str, Sequence[str]], path: str | Path, num_sentences: int, *,
                       alpha: float = 0.3, seed: int = 0) -> dict[str, int]:
  """Writes `num_sentences` lines sampled with the α-law across corpora (a tokenizer-training text); returns how
  many lines each corpus got. Within a corpus, sentences are drawn without replacement while they last."""
  names = list(corpora)
  for name in names:
    if not corpora[name]:
      raise errors.ConfigError(f"corpus {name!r} has no sentences")
  probs = language_probs([len(corpora[name]) for name in names], alpha)
  rng = np.random.default_rng(seed)
  counts = rng.multinomial(num_sentences, probs)
  lines = []
  for name, count in zip(names, counts):
    if count == 0:
      continue
    sentences = corpora[name]
    order = np.concatenate([rng.permutation(len(sentences)) for _ in range(-(-count // len(sentences)))])
    lines += [sentences[i] for i in order[:count]]
  lines = [lines[i] for i in rng.permutation(len(lines))]
  Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return dict(zip(names, counts.tolist()))
