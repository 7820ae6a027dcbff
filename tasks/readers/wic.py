"""WiC (Pilehvar & Camacho-Collados, 2019) -> word-in-context records, with `path:line:` errors.

`{split}.data.txt`: `lemma<TAB>POS<TAB>i-j<TAB>sentence_1<TAB>sentence_2`, sentences whitespace-tokenized, i and j
the 0-based positions of the target word in each; `{split}.gold.txt`: `T` or `F` on the same line number. Records:
{"lemma", "pos", "words_a", "words_b", "index_a", "index_b", "label" (True = same sense, None without gold),
"line"}.
"""

import os
from collections.abc import Iterator
from pathlib import Path

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines

WIC_POS = ("N", "V")
_GOLD = {"T": True, "F": False}


def wic_files(data_dir: str | os.PathLike, split: str) -> tuple[Path, Path]:
  """(data, gold) paths of a split laid out as the WiC package: `DIR/train/train.data.txt`, ..."""
  folder = Path(data_dir) / split
  data, gold = folder / f"{split}.data.txt", folder / f"{split}.gold.txt"
  if not data.is_file():
    raise FileNotFoundError(f"{data} does not exist: expected the WiC layout DIR/{split}/{split}.data.txt")
  return data, gold


def read_wic(data_path: str | os.PathLike, gold_path: str | os.PathLike | None = None) -> Iterator[dict]:
  """Yields one record per line of `data_path`, labelled from `gold_path` (same number of lines) when given."""
  gold_lines = numbered_lines(gold_path) if gold_path is not None else None
  number = 0
  for number, line in numbered_lines(data_path):
    record = _parse(data_path, number, line)
    if gold_lines is not None:
      assert gold_path is not None  # gold_lines exists only with a gold_path.
      gold = next(gold_lines, None)
      if gold is None:
        raise ReaderError(gold_path, number, f"a T/F label for {data_path} line {number}, but the gold file ended "
                          f"after {number - 1} lines (the files must have the same number of lines)")
      gold_number, text = gold
      if text.strip() not in _GOLD:
        raise ReaderError(gold_path, gold_number, f"T or F, got {text!r}")
      record["label"] = _GOLD[text.strip()]
    yield record
  if gold_lines is not None:
    assert gold_path is not None  # gold_lines exists only with a gold_path.
    extra = next(gold_lines, None)
    if extra is not None:
      raise ReaderError(gold_path, extra[0], f"no more labels: {data_path} has {number} lines, this line is extra "
                        f"(the files must have the same number of lines)")


def read_wic_split(data_dir: str | os.PathLike, split: str, *, labelled: bool = True) -> list[dict]:
  """All records of `DIR/{split}/{split}.{data,gold}.txt`, labelled: a missing gold file is a UserError (nothing is
  scored without gold), unless labelled=False, which reads the data alone when gold is absent (labels None)."""
  data, gold = wic_files(data_dir, split)
  if gold.is_file():
    return list(read_wic(data, gold))
  if labelled:
    raise errors.UserError(f"{gold}: no such file: the {split} split needs its gold labels (T or F per line of "
                           f"{data}) to be scored")
  return list(read_wic(data))


def _parse(path, number: int, line: str) -> dict:
  """One data line -> record (label None); every field checked."""
  fields = line.split("\t")
  if len(fields) != 5:
    raise ReaderError(path, number, f"5 tab-separated fields (lemma, POS, i-j, sentence_1, sentence_2), "
                      f"got {len(fields)}: {line!r}")
  lemma, pos, indices, text_a, text_b = (field.strip() for field in fields)
  if not lemma:
    raise ReaderError(path, number, "a non-empty target lemma in field 1")
  if pos not in WIC_POS:
    raise ReaderError(path, number, f"a part of speech in {list(WIC_POS)} in field 2, got {pos!r}")
  parts = indices.split("-")
  if len(parts) != 2 or not all(part.isdigit() for part in parts):
    raise ReaderError(path, number, f"two 0-based word indices 'i-j' in field 3, got {indices!r}")
  record = {"lemma": lemma, "pos": pos, "line": number, "label": None}
  for side, (text, index) in enumerate(zip((text_a, text_b), map(int, parts))):
    words, name = text.split(), "ab"[side]
    if not words:
      raise ReaderError(path, number, f"a non-empty sentence {side + 1} (field {side + 4}), got {text!r}")
    if index >= len(words):
      raise ReaderError(path, number, f"word index {index} of sentence {side + 1} inside its {len(words)} words "
                        f"(0-based, at most {len(words) - 1})")
    record[f"words_{name}"], record[f"index_{name}"] = words, index
  return record
