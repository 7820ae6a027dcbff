"""One tokenizer interface over WordPiece (HF `tokenizers`) and SentencePiece (unigram/BPE).

Encodes texts, pre-tokenized word lists and pairs into `[CLS] A [SEP] (B [SEP])` with type ids and word ids
(subword -> word index within its segment, None for the added specials), truncating pairs longest-first.
"""

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from encoder import errors, pretrained, sentencepiece_tokenizer, wordpiece

# The special tokens in the order a newly trained vocabulary gives them ids 0..4.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # Pickle protocols 2+; zip (torch.save) archives.
# The tokenizer files of a HuggingFace directory (what transformers' AutoTokenizer reads).
HF_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")

Text = str | Sequence[str]  # Raw text, or a pre-tokenized list of words.


@dataclasses.dataclass(frozen=True)
class Encoding:
  """One encoded sequence: vocabulary ids, segment (type) ids and each id's word index (None for added specials)."""
  input_ids: list[int]
  type_ids: list[int]
  word_ids: list[int | None]

  def __len__(self) -> int:
    return len(self.input_ids)


def truncate_pair(a_len: int, b_len: int, max_tokens: int) -> tuple[int, int]:
  """Kept lengths of a pair under HF's "longest_first": the shorter keeps min(len, max//2), the longer the rest.

  Equal lengths count the first as the shorter, so `[CLS] A [SEP] B [SEP]` keeps B one longer for odd budgets
  (as the `tokenizers` library; the old pure-Python HF tokenizer favoured A on ties).
  """
  if max_tokens < 0:
    raise ValueError(f"max_tokens {max_tokens} is negative")
  if a_len + b_len <= max_tokens:
    return a_len, b_len
  if a_len <= b_len:
    a_keep = min(a_len, max_tokens // 2)
    return a_keep, min(b_len, max_tokens - a_keep)
  b_keep = min(b_len, max_tokens // 2)
  return min(a_len, max_tokens - b_keep), b_keep


def _key(item: Text):
  """A text, or a word list as a tuple; None for what `_segment` refuses (its error then names the input)."""
  if isinstance(item, str):
    return item
  if isinstance(item, (list, tuple)) and all(isinstance(word, str) for word in item):
    return tuple(item)
  return None


def _special_id(backend: "wordpiece.WordPieceBackend | sentencepiece_tokenizer.SentencePieceBackend", token: str
                ) -> int:
  """The id of one of SPECIAL_TOKENS, which every backend has (both refuse a vocabulary that lacks one)."""
  token_id = backend.token_to_id(token)
  assert token_id is not None, f"{backend.source}: no {token} (the backend checks its special tokens)"
  return token_id


class Tokenizer:
  """A WordPiece or SentencePiece tokenizer with uniform specials, pair encoding, truncation and word ids."""

  def __init__(self, backend: "wordpiece.WordPieceBackend | sentencepiece_tokenizer.SentencePieceBackend"):
    self.backend = backend
    self._batch: dict | None = None  # Inside `batched`: {"pending": items not segmented yet, "memo": key -> segments}.
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        _special_id(backend, token) for token in SPECIAL_TOKENS)

  @property
  def vocab_size(self) -> int:
    return self.backend.vocab_size

  @property
  def special_ids(self) -> frozenset[int]:
    return frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))

  def __repr__(self) -> str:
    return f"Tokenizer({self.backend.source}, vocab_size={self.vocab_size})"

  def encode(self, text: Text, pair: Text | None = None, *, max_length: int | None = None,
             add_special_tokens: bool = True) -> Encoding:
    """Encode a text or word list (and an optional second segment); `max_length` counts the specials."""
    return self.encode_batch([text], None if pair is None else [pair], max_length=max_length,
                             add_special_tokens=add_special_tokens)[0]

  def encode_batch(self, texts: Sequence[Text], pairs: Sequence[Text] | None = None, *,
                   max_length: int | None = None, add_special_tokens: bool = True) -> list[Encoding]:
    """Encode many texts (or word lists) at once; the backends segment a whole batch in one native call."""
    firsts = self._segments(texts)
    if pairs is None:
      return [self._assemble(a, None, max_length, add_special_tokens) for a in firsts]
    if len(pairs) != len(texts):
      raise errors.UserError(f"{len(texts)} texts but {len(pairs)} pairs: give one second segment per text")
    return [self._assemble(a, b, max_length, add_special_tokens) for a, b in zip(firsts, self._segments(pairs))]

  @contextlib.contextmanager
  def batched(self, items: Iterable[Text]) -> Iterator[None]:
    """Within the block, the first `encode` of one of `items` segments all of them in one native call (one per kind:
    raw texts, word lists) and later ones reuse it: a split encoded record by record (tasks.finetune_data) otherwise
    pays a native call per record (~40 us each; SICK's 10k records 0.8 s of 1.2 s on a 2-core Zen 3). A block where
    no `encode` asks (extractive QA reads offsets) segments nothing. The encodings are the same either way."""
    self._batch = {"pending": [item for item in items if _key(item) is not None], "memo": {}}
    try:
      yield
    finally:
      self._batch = None

  def _segments(self, items: Sequence[Text]):
    items = list(items)
    if self._batch is not None:
      keys = [_key(item) for item in items]
      if self._batch["pending"] and any(key is not None and key not in self._batch["memo"] for key in keys):
        pending, self._batch["pending"] = self._batch["pending"], []
        for kind in (str, tuple):
          group = list(dict.fromkeys(key for key in map(_key, pending) if isinstance(key, kind)))
          if group:
            self._batch["memo"].update(zip(group, self._segment(group)))
      if all(key in self._batch["memo"] for key in keys):
        return [self._batch["memo"][key] for key in keys]
    return self._segment(items)

  def _segment(self, items: list) -> list:
    kinds = {isinstance(item, str) for item in items}
    if len(kinds) > 1:
      raise errors.UserError("a batch mixes raw texts (str) and word lists; encode them separately")
    pretokenized = kinds == {False}
    if pretokenized:
      items = [list(words) for words in items]
      for words in items:
        if not all(isinstance(w, str) for w in words):
          raise errors.UserError(f"pre-tokenized input must be a list of str words, got {words[:5]!r}")
    return self.backend.segments(items, pretokenized)

  def _assemble(self, a, b, max_length, add_special_tokens) -> Encoding:
    """[CLS] A [SEP] (B [SEP]) with type ids 0 for the first part and 1 for B [SEP]; truncation keeps specials."""
    (a_ids, a_words), (b_ids, b_words) = a, (b or ([], []))
    num_specials = (2 if b is None else 3) if add_special_tokens else 0
    if max_length is not None:
      if max_length < num_specials:
        raise errors.UserError(f"max_length {max_length} leaves no room for the {num_specials} special tokens")
      a_keep, b_keep = truncate_pair(len(a_ids), len(b_ids), max_length - num_specials)
      a_ids, a_words, b_ids, b_words = a_ids[:a_keep], a_words[:a_keep], b_ids[:b_keep], b_words[:b_keep]
    if not add_special_tokens:
      return Encoding(a_ids + b_ids, [0] * len(a_ids) + [1] * len(b_ids), a_words + b_words)
    ids = [self.cls_id, *a_ids, self.sep_id]
    words = [None, *a_words, None]
    type_ids = [0] * len(ids)
    if b is not None:
      ids += [*b_ids, self.sep_id]
      words += [*b_words, None]
      type_ids += [1] * (len(b_ids) + 1)
    return Encoding(ids, type_ids, words)

  def subwords_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Each raw text's subword ids (no specials, no truncation) and each id's character span [start, end) in the
    text as given: what extractive QA maps predicted subwords back to answer text with."""
    if not hasattr(self.backend, "offsets"):
      raise errors.UserError(f"{self.backend.source}: a SentencePiece tokenizer gives no character offsets; extractive "
                                   "QA needs a WordPiece tokenizer (tokenizer.json or vocab.txt)")
    return self.backend.offsets(list(texts))

  def tokenize(self, text: str) -> list[str]:
    """The subword strings of a text (no specials)."""
    return self.backend.tokenize(text)

  def ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    """The vocabulary entry of each id; an id with none is an error (a WordPiece vocabulary's gap, or past its end)."""
    tokens = []
    for i in ids:
      token = self.backend.id_to_token(int(i))
      if token is None:
        raise errors.UserError(f"{self.backend.source}: token id {int(i)} has no vocabulary entry (of "
                               f"{self.vocab_size}; a vocab.txt listing a token twice leaves a gap)")
      tokens.append(token)
    return tokens

  def token_to_id(self, token: str) -> int | None:
    """The id of a vocabulary entry, None if absent."""
    return self.backend.token_to_id(token)

  def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
    """Text of ids (specials, incl. padding, dropped unless asked; [UNK] is always kept)."""
    dropped = self.special_ids - {self.unk_id} if skip_special_tokens else frozenset()
    return self.backend.decode([int(i) for i in ids if int(i) not in dropped])

  def save(self, directory: str | Path) -> Path:
    """Write the tokenizer files (tokenizer.json + vocab.txt, or sentencepiece.model) that `load_tokenizer` reads."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self.backend.save(directory)
    return directory


class TokenizerError(errors.UserError):
  """A tokenizer file that is not loaded (a pickle, an unknown format); the message names the file."""


def tokenizer_file(path: str | Path) -> Path:
  """The file `load_tokenizer(path)` reads: a packaged checkpoint's or a directory's tokenizer.json, else vocab.txt,
  else its one *.model; or `path` itself."""
  path = pretrained.pretrained_path(str(path)) if str(path) in pretrained.PACKAGED else Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{path}: no such tokenizer file or directory")
  if not path.is_dir():
    return path
  candidates = [path / "tokenizer.json", path / "vocab.txt"]
  found = [c for c in candidates if c.is_file()] or sorted(path.glob("*.model"))
  if not found or (found[0].suffix == ".model" and len(found) > 1):
    raise FileNotFoundError(f"{path}: expected tokenizer.json, vocab.txt or exactly one *.model file, found "
                            f"{sorted(p.name for p in path.iterdir())[:10]}")
  return found[0]


def tokenizer_files(path: str | Path) -> list[Path]:
  """The tokenizer's files as a HuggingFace directory holds them: the file `load_tokenizer(path)` reads and those of
  tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json that lie beside it (what
  transformers' AutoTokenizer reads, e.g. do_lower_case)."""
  main = tokenizer_file(path)
  beside = [main.parent / name for name in HF_TOKENIZER_FILES if name != main.name]
  return [main] + [file for file in beside if file.is_file()]


def load_tokenizer(path: str | Path, *, lowercase: bool | None = None) -> Tokenizer:
  """A tokenizer from a packaged checkpoint's name (encoder.pretrained.PACKAGED, e.g. "all-MiniLM-L6-v2"), a
  directory (tokenizer.json, else vocab.txt, else one *.model) or one of those files.

  `lowercase` applies to a bare vocab.txt only; by default a tokenizer_config.json beside it decides, else the
  vocabulary (an uncased vocabulary has no uppercase entries). tokenizer.json and .model files carry their own.
  """
  path = tokenizer_file(path)
  with open(path, "rb") as handle:
    head = handle.read(4)
  if head.startswith(_PICKLE_MAGIC):
    raise TokenizerError(f"{path}: looks like a pickle/zip archive, which is not loaded (it can run code); "
                     "give a tokenizer.json, vocab.txt or SentencePiece .model")
  if path.suffix == ".json":
    return Tokenizer(wordpiece.load_tokenizer_json(path, SPECIAL_TOKENS))
  if path.suffix == ".txt":
    return Tokenizer(wordpiece.load_vocab_txt(path, SPECIAL_TOKENS, lowercase))
  if path.suffix == ".model":
    return Tokenizer(sentencepiece_tokenizer.load_model(path, SPECIAL_TOKENS))
  raise TokenizerError(f"{path}: unknown tokenizer format {path.suffix!r}; give a tokenizer.json, a vocab.txt "
                       "or a SentencePiece .model (or a directory holding one)")


def train_wordpiece(files: Iterable[str | Path], vocab_size: int, *, lowercase: bool = True,
                    min_frequency: int = 2) -> Tokenizer:
  """Train a BERT WordPiece vocabulary (deterministic) on text files; specials get ids 0..4 (SPECIAL_TOKENS)."""
  return Tokenizer(wordpiece.train_wordpiece_backend(
      files, vocab_size, SPECIAL_TOKENS, lowercase=lowercase, min_frequency=min_frequency))


def train_sentencepiece(files: Iterable[str | Path], vocab_size: int, *, model_type: str = "unigram",
                        lowercase: bool = False, character_coverage: float = 0.9995,
                        num_threads: int = 1) -> Tokenizer:
  """Train a SentencePiece unigram or BPE model on text files; specials get ids 0..4 (SPECIAL_TOKENS).

  Deterministic with `num_threads=1`; `save(directory)` writes the .model.
  """
  return Tokenizer(sentencepiece_tokenizer.train_sentencepiece_backend(
      files, vocab_size, SPECIAL_TOKENS, model_type=model_type, lowercase=lowercase,
      character_coverage=character_coverage, num_threads=num_threads))
