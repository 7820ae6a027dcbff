"""SentencePiece backend (unigram or BPE): train from text files, load a .model, segment with word indices.

Words are delimited by SentencePiece's "▁" marker: a piece starting with it opens a new word.
"""

import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from encoder import errors

WORD_START = "\u2581"  # "▁"
# Common SentencePiece spellings of the BERT specials, tried when the model lacks the bracketed form.
ALIASES = {"[PAD]": "<pad>", "[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>", "[MASK]": "<mask>"}
FILE_NAME = "sentencepiece.model"


class SentencePieceBackend:
  """Subword segmentation (no specials) by a `SentencePieceProcessor`; `Tokenizer` adds specials and truncation."""

  def __init__(self, model_proto: bytes, source: str, specials: Sequence[str]):
    try:
      self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    except (RuntimeError, OSError) as err:
      raise errors.ConfigError(f"{source}: not a SentencePiece model ({err})") from err
    self.proto = model_proto
    self.source = source
    self._starts_word = [self.sp.id_to_piece(i).startswith(WORD_START) for i in range(self.sp.get_piece_size())]
    missing = [token for token in specials if self.token_to_id(token) is None]
    if missing:
      raise errors.ConfigError(f"{source}: the SentencePiece model lacks the special token(s) {', '.join(missing)}; "
                               "train it with train_sentencepiece, or with pad_piece/unk_piece and "
                               "user_defined_symbols naming them")
    self.unk_id = self.token_to_id(specials[1])

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def token_to_id(self, token: str) -> int | None:
    for piece in (token, ALIASES.get(token)):
      if piece is not None:
        index = self.sp.piece_to_id(piece)  # Unknown pieces map to the unk id: check the round trip.
        if self.sp.id_to_piece(index) == piece:
          return index
    return None

  def id_to_token(self, token_id: int) -> str:
    return self.sp.id_to_piece(token_id)

  def tokenize(self, text: str) -> list[str]:
    return self.sp.encode(text, out_type=str)

  def decode(self, ids: Sequence[int]) -> str:
    return self.sp.decode(list(ids))

  def segments(self, items: list, pretokenized: bool) -> list[tuple[list[int], list[int | None]]]:
    """Ids and word indices of each text (words open at "▁") or word list (an empty word becomes [UNK])."""
    if not pretokenized:
      return [(ids, self._word_ids(ids)) for ids in self.sp.encode(items)]
    flat = self.sp.encode([word for words in items for word in words])
    out: list[tuple[list[int], list[int | None]]] = []
    position = 0
    for words in items:
      ids: list[int] = []
      word_ids: list[int | None] = []
      for word, pieces in enumerate(flat[position:position + len(words)]):
        pieces = pieces or [self.unk_id]
        ids += pieces
        word_ids += [word] * len(pieces)
      position += len(words)
      out.append((ids, word_ids))
    return out

  def _word_ids(self, ids: list[int]) -> list[int | None]:
    word_ids: list[int | None] = []
    word = -1
    for position, index in enumerate(ids):
      if self._starts_word[index] or position == 0:
        word += 1
      word_ids.append(word)
    return word_ids

  def save(self, directory: Path) -> None:
    (directory / FILE_NAME).write_bytes(self.proto)


def load_model(path: Path, specials: Sequence[str]) -> SentencePieceBackend:
  """A SentencePiece .model file."""
  return SentencePieceBackend(path.read_bytes(), str(path), specials)


def train_sentencepiece_backend(files: Iterable[str | Path], vocab_size: int, specials: Sequence[str], *,
                                model_type: str = "unigram", lowercase: bool = False,
                                character_coverage: float = 0.9995, num_threads: int = 1) -> SentencePieceBackend:
  """Train a unigram or BPE model; specials get ids 0.. in the order given ([PAD], [UNK], then the rest).

  Deterministic with one thread (all sentences are used, none sampled); more threads train faster.
  """
  if model_type not in ("unigram", "bpe"):
    raise errors.ConfigError(f"model_type {model_type!r} is not one of 'unigram', 'bpe'")
  paths = [Path(f) for f in files]
  for path in paths:
    if not path.is_file():
      raise FileNotFoundError(f"{path}: training text file not found")
  pad, unk, *others = specials
  proto = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        input=[str(p) for p in paths], model_writer=proto, vocab_size=vocab_size, model_type=model_type,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece=pad, unk_piece=unk, user_defined_symbols=others,
        normalization_rule_name="nmt_nfkc_cf" if lowercase else "nmt_nfkc", character_coverage=character_coverage,
        input_sentence_size=0, shuffle_input_sentence=False, max_sentence_length=1 << 16,
        num_threads=num_threads, minloglevel=2)
  except RuntimeError as err:  # E.g. "Vocabulary size too high": the message says the largest possible size.
    raise errors.ConfigError(f"SentencePiece training on {', '.join(map(str, paths))} failed: {err}") from err
  return SentencePieceBackend(proto.getvalue(), f"SentencePiece {model_type} trained on {paths[0]}", specials)
