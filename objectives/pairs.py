"""NSP sentence pairs (spec, "Next Sentence Prediction", "Training Regimes"), following BERT's
create_pretraining_data.py: create_instances_from_document and truncate_seq_pair.

Per document, sentences accumulate until the target length; a random split gives A; B is the true continuation
(label 0, IsNext) or, half of the time, a run of sentences from another random document (label 1, NotNext), and
then the unused sentences are put back. The pair is trimmed to max_length - 3 tokens by removing one token at a
time from the longer side, from its front or back at random. Each A and B is a contiguous token range.
"""

import numpy as np

from encoder import errors
from objectives.prepared import Corpus

IS_NEXT, NOT_NEXT = 0, 1


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
  """BERT's truncate_seq_pair on [start, end) ranges, in place."""
  while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
    longer = a if a[1] - a[0] > b[1] - b[0] else b
    if rng.random() < 0.5:
      longer[0] += 1
    else:
      longer[1] -= 1


def nsp_layout(corpus: Corpus, max_length: int, rng: np.random.Generator, *, short_seq_prob: float = 0.1,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Chunks [C, 4] (start, end, type id, sequence 1), row offsets [R+1] and nsp labels [R] of BERT's NSP pairs."""
  num_documents = len(corpus.document_offsets) - 1
  max_tokens = max_length - 3  # [CLS] A [SEP] B [SEP]
  offsets = corpus.sentence_offsets
  nonempty = np.diff(offsets) > 0
  sentences_of = [np.flatnonzero(nonempty[corpus.document_offsets[d]:corpus.document_offsets[d + 1]])
                  + corpus.document_offsets[d] for d in range(num_documents)]
  length = lambda s: int(offsets[s + 1] - offsets[s])
  eligible = np.flatnonzero([len(sentences) > 0 for sentences in sentences_of])
  if len(eligible) < 2:
    raise errors.UserError("nsp_pairs needs at least 2 non-empty documents (random second segments come from another "
                           "one)")
  chunks, labels = [], []
  for document, sentences in enumerate(sentences_of):
    target = max_tokens
    if rng.random() < short_seq_prob:
      target = int(rng.integers(2, max_tokens + 1))
    current, current_length, i = [], 0, 0
    while i < len(sentences):
      current.append(sentences[i])
      current_length += length(sentences[i])
      if i == len(sentences) - 1 or current_length >= target:
        a_end = int(rng.integers(1, len(current))) if len(current) >= 2 else 1
        a = [int(offsets[current[0]]), int(offsets[current[a_end - 1] + 1])]
        if len(current) == 1 or rng.random() < 0.5:
          label = NOT_NEXT
          target_b = target - (a[1] - a[0])
          # BERT retries until it finds another document; drawing among the others directly is the same law.
          j = int(rng.integers(len(eligible) - 1))
          other = int(eligible[j + (j >= np.searchsorted(eligible, document))])
          start = int(rng.integers(len(sentences_of[other])))
          b_sentences, b_length = [], 0
          for s in sentences_of[other][start:]:
            b_sentences.append(s)
            b_length += length(s)
            if b_length >= target_b:
              break
          b = [int(offsets[b_sentences[0]]), int(offsets[b_sentences[-1] + 1])]
          i -= len(current) - a_end  # Put the unused sentences back.
        else:
          label = IS_NEXT
          b = [int(offsets[current[a_end]]), int(offsets[current[-1] + 1])]
        _truncate_pair(a, b, max_tokens, rng)
        if a[1] > a[0] and b[1] > b[0]:
          chunks += [[a[0], a[1], 0, 1], [b[0], b[1], 1, 1]]
          labels.append(label)
        current, current_length = [], 0
      i += 1
  row_offsets = np.arange(0, 2 * len(labels) + 1, 2, dtype=np.int64)
  return np.asarray(chunks, np.int64).reshape(-1, 4), row_offsets, np.asarray(labels, np.int32)


def nsp_rows(corpus: Corpus, max_length: int, rng: np.random.Generator, *, short_seq_prob: float = 0.1
             ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
  """The "nsp_pairs" packing's layout (objectives.pipeline.PACKINGS): `nsp_layout`, its labels as the rows' field
  "nsp_label" (what the NSP head's loss reads)."""
  chunks, row_offsets, labels = nsp_layout(corpus, max_length, rng, short_seq_prob=short_seq_prob)
  return chunks, row_offsets, {"nsp_label": labels}
