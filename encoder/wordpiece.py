"""WordPiece backend on the HuggingFace `tokenizers` library: load vocab.txt/tokenizer.json, train a vocabulary.

Normalization and pre-tokenization are BERT's (clean text, CJK splitting, lowercasing + accent stripping when
uncased, whitespace/punctuation split), which gives ids identical to the reference Python BERT tokenizer.
"""

import collections
import functools
import heapq
import itertools
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers

from encoder import errors

PREFIX = "##"  # WordPiece's continuation marker.


class WordPieceBackend:
  """Subword segmentation (no specials) by a `tokenizers.Tokenizer`; `Tokenizer` adds specials and truncation."""

  def __init__(self, tokenizer: tokenizers.Tokenizer, source: str, specials: Sequence[str]):
    missing = [token for token in specials if tokenizer.token_to_id(token) is None]
    if missing:
      raise errors.UserError(f"{source}: the vocabulary lacks the special token(s) {', '.join(missing)}; add them "
                             "to the vocabulary (BERT vocabularies have them) or train one with train_wordpiece")
    tokenizer.no_truncation()  # Truncation and padding are ours (Tokenizer.encode); a checkpoint's are ignored.
    tokenizer.no_padding()
    tokenizer.add_special_tokens(list(specials))  # Already in the vocabulary: only marks them as unsplittable.
    self.hf = tokenizer
    self.source = source
    unk_id = tokenizer.token_to_id(specials[1])
    assert unk_id is not None, "the specials are checked above"
    self.unk_id = unk_id

  @property
  def vocab_size(self) -> int:
    return self.hf.get_vocab_size()

  def token_to_id(self, token: str) -> int | None:
    return self.hf.token_to_id(token)

  def id_to_token(self, token_id: int) -> str | None:
    """The entry of `token_id`; None for an id no entry has (a vocab.txt's repeated line leaves such a gap)."""
    return self.hf.id_to_token(token_id)

  def tokenize(self, text: str) -> list[str]:
    return self.hf.encode(text, add_special_tokens=False).tokens

  def joined_segments(self, groups: list[list[str]], separator: str) -> list[list[int]] | None:
    """Each group's texts encoded as one text, joined by the special token `separator`: the ids of every text in
    order, each followed by the separator's id but the last; None where that is not the texts' own ids.

    With BERT's pipeline (BertPreTokenizer: no piece crosses whitespace; normalizers that look at one character, or
    at its neighbours within a word) encoding "a [SEP] b" gives a's ids, [SEP], b's ids, in one native call per group
    instead of one per text (objectives.prepare tokenizes paragraphs, not sentences: about 25% faster)."""
    if not self._joinable:
      return None
    return [e.ids for e in self.hf.encode_batch([f" {separator} ".join(texts) for texts in groups],
                                                add_special_tokens=False)]

  @functools.cached_property
  def _joinable(self) -> bool:
    spec = json.loads(self.hf.to_str())
    normalizer = spec.get("normalizer") or {}
    steps = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    return ((spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer" and spec["model"]["type"] == "WordPiece"
            and all(step.get("type") in _LOCAL_NORMALIZERS or step == _FINAL_SIGMA_JSON for step in steps if step))

  @functools.cached_property
  def continuation(self) -> np.ndarray:
    """bool [vocab]: the token continues a word (WordPiece's `##` prefix), i.e. never starts one."""
    prefix = json.loads(self.hf.to_str())["model"].get("continuing_subword_prefix", PREFIX)
    return np.array([(self.hf.id_to_token(i) or "").startswith(prefix) for i in range(self.vocab_size)])

  def decode(self, ids: Sequence[int]) -> str:
    return self.hf.decode(list(ids), skip_special_tokens=False)

  def segments(self, items: list, pretokenized: bool) -> list[tuple[list[int], list[int | None]]]:
    """Ids and word indices of each text (or word list); with words, a word yielding no piece becomes [UNK]."""
    encodings = self.hf.encode_batch(items, is_pretokenized=pretokenized, add_special_tokens=False)
    out = [(e.ids, e.word_ids) for e in encodings]
    if pretokenized:
      out = [_unk_for_empty_words(ids, word_ids, len(words), self.unk_id)
             for (ids, word_ids), words in zip(out, items)]
    return out

  def offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Ids of each raw text and every id's character span (start, end) in the text as given (before normalization:
    accents, case and whitespace runs map back to the original characters)."""
    return [(e.ids, e.offsets) for e in self.hf.encode_batch(texts, add_special_tokens=False)]

  def save(self, directory: Path) -> None:
    self.hf.save(str(directory / "tokenizer.json"))
    if isinstance(self.hf.model, models.WordPiece):
      self.hf.model.save(str(directory))  # vocab.txt, for tools that read only that.


def _unk_for_empty_words(ids: list[int], word_ids: list[int | None], num_words: int, unk_id: int
                         ) -> tuple[list[int], list[int | None]]:
  """Insert [UNK] for words that produced no subword (e.g. only control characters) so each word maps somewhere."""
  if len(set(word_ids)) == num_words:
    return ids, word_ids
  new_ids: list[int] = []
  new_words: list[int | None] = []
  position = 0
  for word in range(num_words):
    start = position
    while position < len(ids) and word_ids[position] == word:
      position += 1
    new_ids += ids[start:position] if position > start else [unk_id]
    new_words += word_ids[start:position] if position > start else [word]
  return new_ids, new_words


# Python's str.lower() (used by the original BERT) writes a word-final capital sigma as "ς"; Rust's per-character
# lowercasing writes "σ". This rewrites final sigmas first (Unicode's Final_Sigma context: after a cased letter and
# case-ignorable characters, not followed by case-ignorables and a cased letter).
_CASE_IGNORABLE = ("[\\p{Mn}\\p{Me}\\p{Cf}\\p{Lm}\\p{Sk}"
                   "'.:\u00b7\u0387\u055f\u05f4\u2018\u2019\u2024\u2027\ufe13\ufe52\ufe55\uff07\uff0e\uff1a]")
_FINAL_SIGMA_PATTERN = f"(?<=\\p{{Cased}}{_CASE_IGNORABLE}*)\u03a3(?!{_CASE_IGNORABLE}*\\p{{Cased}})"
_FINAL_SIGMA = tokenizers.Regex(_FINAL_SIGMA_PATTERN)
_FINAL_SIGMA_JSON = {"type": "Replace", "pattern": {"Regex": _FINAL_SIGMA_PATTERN}, "content": "\u03c2"}
# Normalizers whose output for a text does not depend on text beyond the whitespace around it (see joined_segments).
_LOCAL_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD"})


def bert_normalizer(lowercase: bool, strip_accents: bool | None = None, clean_text: bool = True,
                    handle_chinese_chars: bool = True) -> normalizers.Normalizer:
  """BERT's normalizer (accents stripped when lowercasing unless `strip_accents` says otherwise), Python-exact."""
  bert = normalizers.BertNormalizer(clean_text=clean_text, handle_chinese_chars=handle_chinese_chars,
                                    strip_accents=strip_accents, lowercase=lowercase)
  if not lowercase:
    return bert
  return normalizers.Sequence([
      normalizers.BertNormalizer(clean_text=clean_text, handle_chinese_chars=handle_chinese_chars,
                                 strip_accents=False, lowercase=False),
      normalizers.Replace(_FINAL_SIGMA, "\u03c2"),
      normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=strip_accents,
                                 lowercase=True)])


def bert_pipeline(model, lowercase: bool, strip_accents: bool | None = None) -> tokenizers.Tokenizer:
  """A `tokenizers.Tokenizer` with BERT's normalizer, pre-tokenizer and decoder around a WordPiece model."""
  tokenizer = tokenizers.Tokenizer(model)
  tokenizer.normalizer = bert_normalizer(lowercase, strip_accents)
  tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tokenizer.decoder = decoders.WordPiece(prefix=PREFIX)
  return tokenizer


def load_vocab_txt(path: Path, specials: Sequence[str], lowercase: bool | None = None) -> WordPieceBackend:
  """A BERT vocab.txt; casing from `lowercase`, else a tokenizer_config.json beside it, else the vocabulary itself."""
  tokens = path.read_text(encoding="utf-8").split("\n")
  if tokens and tokens[-1] == "":
    tokens.pop()
  strip_accents = None
  config = path.parent / "tokenizer_config.json"
  if lowercase is None and config.is_file():
    settings = json.loads(config.read_text(encoding="utf-8"))
    lowercase, strip_accents = settings.get("do_lower_case"), settings.get("strip_accents")
  if lowercase is None:  # Uncased vocabularies (e.g. bert-base-uncased, MiniLM) have no uppercase entries.
    lowercase = not any(t != t.lower() for t in tokens if not (t.startswith("[") and t.endswith("]")))
  vocab: dict[str, int] = {}
  for index, token in enumerate(tokens):
    vocab.setdefault(token, index)
  model = models.WordPiece(vocab, unk_token=specials[1], max_input_chars_per_word=100)
  return WordPieceBackend(bert_pipeline(model, lowercase, strip_accents), str(path), specials)


def load_tokenizer_json(path: Path, specials: Sequence[str]) -> WordPieceBackend:
  """A HuggingFace tokenizer.json (its normalizer, e.g. lowercasing, is kept; its truncation/padding are not)."""
  try:
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
  except Exception as err:  # tokenizers raises a bare Exception on malformed files.
    raise errors.UserError(f"{path}: not a readable HuggingFace tokenizer.json ({err})") from err
  normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
  if normalizer.get("type") == "BertNormalizer" and normalizer.get("lowercase"):  # Make it Python-exact (sigma).
    tokenizer.normalizer = bert_normalizer(True, normalizer.get("strip_accents"), normalizer.get("clean_text", True),
                                           normalizer.get("handle_chinese_chars", True))
  return WordPieceBackend(tokenizer, str(path), specials)


def _is_punctuation(char: str) -> bool:
  """BERT's punctuation: ASCII punctuation or any Unicode P* category (as BertPreTokenizer)."""
  return (char.isascii() and not char.isalnum() and char.isprintable() and not char.isspace()) or (
      unicodedata.category(char).startswith("P"))


def _count_words(files: Sequence[Path], normalizer: normalizers.Normalizer) -> collections.Counter[str]:
  """Word counts after BERT normalization and pre-tokenization (whitespace split, punctuation isolated).

  The split is a regex equal to BertPreTokenizer on normalized text; it runs far faster than pre_tokenize_str.
  """
  counts: collections.Counter[str] = collections.Counter()
  for path in files:
    with open(path, encoding="utf-8") as handle:
      while chunk := handle.readlines(1 << 20):
        text = normalizer.normalize_str("".join(chunk))
        punctuation = re.escape("".join(sorted(c for c in set(text) if _is_punctuation(c))))
        pattern = f"[{punctuation}]|[^\\s{punctuation}]+" if punctuation else r"\S+"
        counts.update(re.findall(pattern, text))
  return counts


def learn_vocab(counts: dict[str, int], vocab_size: int, min_frequency: int,
                specials: Sequence[str]) -> list[str]:
  """WordPiece vocabulary by greedy pair merging (as HF's WordPieceTrainer), most frequent pair first.

  Deterministic (ties go to the lexicographically smallest pair), unlike the Rust trainer whose tie order follows
  hash order. The vocabulary is the specials, every character (bare, and `##`-prefixed where it occurs inside a
  word), then merged pieces until `vocab_size` or until the best pair occurs fewer than `min_frequency` times.
  """
  words = [[word[0]] + [PREFIX + c for c in word[1:]] for word in sorted(counts)]
  freqs = [counts[word] for word in sorted(counts)]
  alphabet = sorted({c for word in counts for c in word}) + sorted({s for w in words for s in w[1:]})
  vocab = list(specials) + [s for s in alphabet if s not in specials]
  known = set(vocab)
  pair_counts: collections.Counter[tuple[str, str]] = collections.Counter()
  where: collections.defaultdict[tuple[str, str], set[int]] = collections.defaultdict(set)
  for index, (symbols, freq) in enumerate(zip(words, freqs)):
    for pair in itertools.pairwise(symbols):
      pair_counts[pair] += freq
      where[pair].add(index)
  heap = [(-count, pair) for pair, count in pair_counts.items()]
  heapq.heapify(heap)
  while len(vocab) < vocab_size and heap:
    negative, pair = heapq.heappop(heap)
    count = pair_counts.get(pair, 0)
    if count != -negative:  # Stale entry (the count fell since it was pushed): requeue with the current count.
      if count > 0:
        heapq.heappush(heap, (-count, pair))
      continue
    if count < min_frequency:
      break
    merged = pair[0] + pair[1].removeprefix(PREFIX)
    if merged not in known:
      known.add(merged)
      vocab.append(merged)
    fresh = set()
    for index in sorted(where.pop(pair)):
      symbols, freq = words[index], freqs[index]
      for old in itertools.pairwise(symbols):
        pair_counts[old] -= freq
      words[index] = symbols = _merge(symbols, pair, merged)
      for new in itertools.pairwise(symbols):
        pair_counts[new] += freq
        if merged in new:  # Only pairs with the new symbol are new to this word (others are indexed already).
          where[new].add(index)
          fresh.add(new)
    for new in sorted(fresh):
      heapq.heappush(heap, (-pair_counts[new], new))
    del pair_counts[pair]
  return vocab


def _merge(symbols: list[str], pair: tuple[str, str], merged: str) -> list[str]:
  out, i = [], 0
  while i < len(symbols):
    if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
      out.append(merged)
      i += 2
    else:
      out.append(symbols[i])
      i += 1
  return out


def train_wordpiece_backend(files: Iterable[str | Path], vocab_size: int, specials: Sequence[str], *,
                            lowercase: bool = True, min_frequency: int = 2) -> WordPieceBackend:
  """Learn a WordPiece vocabulary from text files with BERT's normalization (see `learn_vocab`)."""
  paths = [Path(f) for f in files]
  for path in paths:
    if not path.is_file():
      raise FileNotFoundError(f"{path}: training text file not found")
  counts = _count_words(paths, bert_normalizer(lowercase))
  if not counts:
    raise errors.UserError(f"{', '.join(map(str, paths))}: no words to train a WordPiece vocabulary on")
  vocab = learn_vocab(counts, vocab_size, min_frequency, specials)
  model = models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token=specials[1],
                           max_input_chars_per_word=100)
  return WordPieceBackend(bert_pipeline(model, lowercase), f"WordPiece trained on {paths[0]}", specials)
