"""SemCor 3.0, original per-file release -> sentences of words with their WordNet 3.0 sense keys.

One token per line in an SGML-like markup with unquoted attributes (`<wf cmd=done pos=VB lemma=say wnsn=1
lexsn=2:32:00::>said</wf>`, `<punc>.</punc>`) inside `<s snum=N>` ... `</s>`. A sense key is `lemma%lexsn` with the
satellite head-word marker `(a)`, `(p)` or `(ip)` removed (`previous` + `5:00:00:preceding(a):00` ->
`previous%5:00:00:preceding:00`). A token may carry several senses (`wnsn=1;2 lexsn=2:32:00::;2:38:00::`): each is
a key. `wnsn=0` (no WordNet 3.0 equivalent) gives no key; tokens without `wnsn` (`cmd=ignore`, `ot=notag`, ...) have
none either. Multiword units are joined by `_` (`took_place`); words are returned with spaces (`took place`) so a
subword tokenizer sees the words, not underscores. The counts are in the data's SOURCE.md.
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines

SEMCOR_PARTS = ("brown1", "brown2", "brownv")
_MARKUP = re.compile(r"</?(contextfile|context|p)\b[^<>]*>")
_SENTENCE = re.compile(r"<s snum=([0-9]+)>")
_WORD = re.compile(r"<wf((?: [a-z]+=(?:\"[^\"]*\"|[^\s\"<>]*))*)>([^<>]*)</wf>")
_PUNCTUATION = re.compile(r"<punc>([^<>]*)</punc>")
_ATTRIBUTE = re.compile(r" ([a-z]+)=(?:\"([^\"]*)\"|([^\s\"<>]*))")
_LEXSN = re.compile(r"[1-5]:[0-9]{2}:[0-9]{2}:[^\s:]*:(?:[0-9]{2})?")
_HEAD_MARKER = re.compile(r"\((?:a|p|ip)\)(?=:)")


def sense_keys(lemma: str, wnsn: str, lexsn: str) -> list[str]:
  """WordNet 3.0 sense keys of one token's `lemma`, `wnsn` and `lexsn` attributes (none for `wnsn=0` parts)."""
  numbers, lexsns = wnsn.split(";"), lexsn.split(";")
  if len(numbers) != len(lexsns):
    raise errors.UserError(f"as many ';'-separated wnsn as lexsn values, got wnsn={wnsn} lexsn={lexsn}")
  keys = []
  for number, sense in zip(numbers, lexsns):
    if not number.isdigit() or not _LEXSN.fullmatch(_HEAD_MARKER.sub("", sense)):
      raise errors.UserError(f"wnsn a sense number and lexsn 'ss_type:lex_filenum:lex_id:head_word:head_id', got "
                             f"wnsn={number} lexsn={sense}")
    if int(number) != 0:
      keys.append(f"{lemma}%{_HEAD_MARKER.sub('', sense)}")
  return keys


def read_semcor_file(path: str | os.PathLike) -> Iterator[dict]:
  """Yields one record per `<s>`: {"doc", "snum", "words", "pos", "keys", "lines"} (keys: a list per word, empty
  for untagged words and punctuation; lines: the 1-based line of each word)."""
  doc = Path(path).name
  sentence: dict[str, Any] | None = None
  for number, line in numbered_lines(path):
    line = line.strip()
    if match := _WORD.fullmatch(line):
      attributes = {m[0]: m[1] or m[2] for m in _ATTRIBUTE.findall(match[1])}
      keys = []
      if "wnsn" in attributes:
        if "lemma" not in attributes or "lexsn" not in attributes:
          raise ReaderError(path, number, f"lemma= and lexsn= with wnsn=, got {line!r}")
        try:
          keys = sense_keys(attributes["lemma"], attributes["wnsn"], attributes["lexsn"])
        except ValueError as err:
          raise ReaderError(path, number, str(err)) from None
      word, pos = match[2].replace("_", " "), attributes.get("pos", "")
    elif match := _PUNCTUATION.fullmatch(line):
      word, pos, keys = match[1], "punc", []
    elif match := _SENTENCE.fullmatch(line):
      if sentence is not None:
        raise ReaderError(path, number, f"</s> before the next <s> (sentence {sentence['snum']} is still open)")
      sentence = {"doc": doc, "snum": int(match[1]), "words": [], "pos": [], "keys": [], "lines": []}
      continue
    elif line == "</s>":
      if sentence is None or not sentence["words"]:
        raise ReaderError(path, number, "</s> closing a sentence with words")
      yield sentence
      sentence = None
      continue
    elif _MARKUP.fullmatch(line):
      if sentence is not None:
        raise ReaderError(path, number, f"<wf>, <punc> or </s> inside sentence {sentence['snum']}, got {line!r}")
      continue
    else:
      raise ReaderError(path, number, f"one <wf ...>word</wf>, <punc>...</punc>, <s snum=N>, </s> or "
                        f"<context|contextfile|p ...> per line, got {line[:80]!r}")
    if sentence is None:
      raise ReaderError(path, number, f"words inside <s snum=N> ... </s>, got {line[:80]!r} outside a sentence")
    for field, value in zip(("words", "pos", "keys", "lines"), (word, pos, keys, number)):
      sentence[field].append(value)
  if sentence is not None:
    raise ReaderError(path, number, f"</s> closing sentence {sentence['snum']} before the end of the file")


def semcor_files(root: str | os.PathLike) -> list[Path]:
  """The tag files of a SemCor 3.0 directory (`brown1`, `brown2`, `brownv` / `tagfiles`), in name order."""
  root = Path(root)
  files = [path for part in SEMCOR_PARTS for path in sorted((root / part / "tagfiles").glob("br-*"))]
  if not files:
    raise FileNotFoundError(f"{root}: no SemCor tag files {root}/{{{','.join(SEMCOR_PARTS)}}}/tagfiles/br-*; "
                            "give the semcor3.0 directory")
  return files


def read_semcor(root: str | os.PathLike) -> Iterator[dict]:
  """Yields the sentences of every SemCor 3.0 tag file under `root` (records as `read_semcor_file`, plus "path")."""
  for path in semcor_files(root):
    for sentence in read_semcor_file(path):
      yield {"path": str(path), **sentence}
