"""WordNet 3.0 database files -> sense keys, the candidate senses of a lemma, synsets, hypernyms, lexicographer files.

Only what word-sense disambiguation needs: `index.sense` (sense key -> synset offset, sense number, tag count),
`lexnames` (lexicographer file names) and the hypernym pointers (`@`, `@i`) of `data.noun` / `data.verb`.
A sense key is `lemma%ss_type:lex_filenum:lex_id:head_word:head_id` (WordNet's senseidx(5WN)); ss_type 1-5 is
noun, verb, adjective, adverb, satellite adjective. Adjectives and satellites share `data.adj` and one sense
numbering per lemma, so both are part of speech "a" here. Synsets are named `{offset:08d}{pos}` ("01926311v").
"""

import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines

POS_OF_SS_TYPE = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}  # Satellites (5) merged with adjectives (3).
_SENSE_KEY = re.compile(r"([^\s%]+)%([1-5]):([0-9]{2}):([0-9]{2}):([^\s:]*):([0-9]{2})?")
_OFFSET = re.compile(r"[0-9]{8}")
_POS_LETTER = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r"}  # Part of speech in a data file -> ours.


class SenseKey(NamedTuple):
  """The fields of a sense key."""
  lemma: str
  pos: str  # "n", "v", "a" (adjective or satellite) or "r".
  ss_type: str  # "1".."5".
  lex_filenum: int
  lex_id: int
  head_word: str  # Satellites only: the head adjective, else "".


class Sense(NamedTuple):
  """One `index.sense` line."""
  synset: str  # "{offset:08d}{pos}".
  number: int  # 1-based sense number of the lemma in its part of speech (1 = most frequent in WordNet's order).
  tag_count: int


def parse_sense_key(key: str) -> SenseKey:
  """The fields of `lemma%ss_type:lex_filenum:lex_id:head_word:head_id`; ValueError when malformed."""
  match = _SENSE_KEY.fullmatch(key)
  if not match:
    raise errors.UserError(f"malformed sense key {key!r}: expected lemma%ss_type:lex_filenum:lex_id:head_word:head_id "
                           "as in 'art%1:09:00::' or 'previous%5:00:00:preceding:00'")
  lemma, ss_type, lex_filenum, lex_id, head_word, head_id = match.groups()
  if (ss_type == "5") != bool(head_word) or bool(head_word) != bool(head_id):
    raise errors.UserError(f"malformed sense key {key!r}: a head word and head id are given for satellite adjectives "
                           "(ss_type 5) and only for them")
  return SenseKey(lemma, POS_OF_SS_TYPE[ss_type], ss_type, int(lex_filenum), int(lex_id), head_word)


def read_index_sense(path: str | os.PathLike) -> dict[str, Sense]:
  """Every line `sense_key synset_offset sense_number tag_cnt` of `index.sense`, by sense key."""
  senses = {}
  for number, line in numbered_lines(path):
    fields = line.split()
    if len(fields) != 4 or not _OFFSET.fullmatch(fields[1]) or not fields[2].isdigit() or not fields[3].isdigit():
      raise ReaderError(path, number, f"'sense_key synset_offset sense_number tag_cnt', got {line!r}")
    try:
      key = parse_sense_key(fields[0])
    except ValueError as err:
      raise ReaderError(path, number, f"a well-formed sense key ({err})") from None
    if fields[0] in senses:
      raise ReaderError(path, number, f"each sense key once, got {fields[0]!r} again")
    senses[fields[0]] = Sense(fields[1] + key.pos, int(fields[2]), int(fields[3]))
  return senses


def read_hypernyms(path: str | os.PathLike) -> dict[str, tuple[str, ...]]:
  """Synset -> its hypernyms and instance hypernyms (pointers `@`, `@i`) from a `data.noun` / `data.verb` file."""
  hypernyms = {}
  for number, fields in _data_lines(path):
    try:
      words = int(fields[3], 16)
      at = 4 + 2 * words
      pointers = int(fields[at])
      triples = [fields[at + 1 + 4 * i: at + 4 + 4 * i] for i in range(pointers)]
    except (IndexError, ValueError):
      raise ReaderError(path, number, "a synset line 'offset lex_filenum ss_type w_cnt word lex_id... p_cnt "
                        "pointer...'") from None
    if any(len(t) != 3 or not _OFFSET.fullmatch(t[1]) for t in triples):
      raise ReaderError(path, number, f"{pointers} pointers 'symbol offset pos source/target'")
    if any(t[2] not in _POS_LETTER for t in triples):
      raise ReaderError(path, number, f"pointer parts of speech among {sorted(_POS_LETTER)}")
    hypernyms[fields[0] + fields[2]] = tuple(offset + _POS_LETTER[pos] for symbol, offset, pos in triples
                                             if symbol in ("@", "@i"))
  return hypernyms


def _data_lines(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
  """(line number, whitespace-split fields before the gloss) of the synset lines (the license lines start with
  two spaces)."""
  for number, line in numbered_lines(path):
    if line.startswith("  ") or not line.strip():
      continue
    fields = line.split(" | ", 1)[0].split()
    if len(fields) < 4 or not _OFFSET.fullmatch(fields[0]) or fields[2] not in ("n", "v"):
      raise ReaderError(path, number, f"a noun or verb synset line starting 'offset lex_filenum n|v', got "
                        f"{line[:60]!r}")
    yield number, fields


def read_lexnames(path: str | os.PathLike) -> dict[int, str]:
  """Lexicographer file number -> name ("noun.artifact") from `lexnames`."""
  names = {}
  for number, line in numbered_lines(path):
    fields = line.split()
    if len(fields) != 3 or not fields[0].isdigit():
      raise ReaderError(path, number, f"'number name syntactic_category', got {line!r}")
    names[int(fields[0])] = fields[1]
  return names


@dataclasses.dataclass(frozen=True)
class WordNet:
  """Sense inventory and the relations used to extend sense embeddings (LMMS: synset, hypernyms, lexnames)."""
  senses: dict[str, Sense]
  hypernyms: dict[str, tuple[str, ...]]
  lexnames: dict[int, str]
  by_lemma: dict[tuple[str, str], tuple[str, ...]]  # (lemma, pos) -> sense keys in sense-number order.
  by_synset: dict[str, tuple[str, ...]]  # synset -> its sense keys.

  def candidates(self, lemma: str, pos: str) -> tuple[str, ...]:
    """Sense keys of a lemma ("n", "v", "a" or "r"), ordered by sense number; () when WordNet lacks it."""
    return self.by_lemma.get((lemma.lower().replace(" ", "_"), pos), ())

  def most_frequent_sense(self, lemma: str, pos: str) -> str | None:
    """WordNet's sense number 1 of the lemma, or None."""
    candidates = self.candidates(lemma, pos)
    return candidates[0] if candidates else None

  def lexname(self, key: str) -> str:
    """The lexicographer file of a sense ("noun.artifact")."""
    return self.lexnames[parse_sense_key(key).lex_filenum]


def load_wordnet(directory: str | os.PathLike) -> WordNet:
  """`index.sense`, `lexnames` and the noun/verb hypernyms of a WordNet 3.0 `dict` directory."""
  directory = Path(directory)
  senses = read_index_sense(directory / "index.sense")
  keys_by_lemma: dict[tuple[str, str], list[str]] = {}
  keys_by_synset: dict[str, list[str]] = {}
  for key, sense in senses.items():
    keys_by_lemma.setdefault((key.split("%", 1)[0], sense.synset[-1]), []).append(key)
    keys_by_synset.setdefault(sense.synset, []).append(key)
  by_lemma = {lemma: tuple(sorted(keys, key=lambda k: senses[k].number)) for lemma, keys in keys_by_lemma.items()}
  hypernyms = read_hypernyms(directory / "data.noun") | read_hypernyms(directory / "data.verb")
  return WordNet(senses, hypernyms, read_lexnames(directory / "lexnames"), by_lemma,
                 {synset: tuple(keys) for synset, keys in keys_by_synset.items()})
