"""CoNLL-2003-style column files -> tagging records {"words", "tags", "doc_index"}.

One token per line (`word POS chunk NER` for CoNLL-2003), a blank line between sentences, `-DOCSTART-` lines between
documents. Tags are returned raw (IOB1 or IOB2 as in the file); scheme conversion lives in `tasks.scoring.tag_schemes`.
"""

import os
from collections.abc import Iterator, Sequence

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.record_format import TAGGED_WORDS, RecordFormat

CONLL2003_COLUMNS = ("word", "pos", "chunk", "ner")
DOCSTART = "-DOCSTART-"


def column_index(column: str | int, columns: Sequence[str]) -> int:
  """Position of `column` (a name in `columns` or an index); a ValueError listing the choices otherwise."""
  if isinstance(column, int) and not isinstance(column, bool):
    if 0 <= column < len(columns):
      return column
  elif isinstance(column, str) and column in columns:
    return list(columns).index(column)
  raise errors.UserError(f"tag column {column!r} is not one of {list(columns)} or an index below {len(columns)}")


def read_conll(path: str | os.PathLike, *, columns: Sequence[str] = CONLL2003_COLUMNS, tag_column: str | int = "ner",
               delimiter: str | None = None, label_names: Sequence[str] | None = None) -> Iterator[dict]:
  """Yields one record per sentence: words (first column), tags (`tag_column`) and the 0-based document index.

  `delimiter=None` splits on any run of whitespace (CoNLL-2003); pass "\\t" for tab-separated files whose words may
  contain spaces. A document starts at the first sentence and at each `-DOCSTART-` line that follows a sentence, so a
  file with its first `-DOCSTART-` moved to the end (the IOB1 copy of CoNLL-2003) numbers documents the same way.
  With `label_names`, a tag outside them is an error at its line.
  """
  tag_at = column_index(tag_column, columns)
  allowed = None if label_names is None else set(label_names)
  words: list[str] = []
  tags: list[str] = []
  doc_index, doc_has_sentences = 0, False
  for number, line in numbered_lines(path):
    fields = line.split(delimiter)
    if not line.strip() or fields[0] == DOCSTART:
      if words:
        yield {"words": words, "tags": tags, "doc_index": doc_index}
        words, tags, doc_has_sentences = [], [], True
      if line.strip() and doc_has_sentences:
        doc_index, doc_has_sentences = doc_index + 1, False
      continue
    if len(fields) != len(columns):
      raise ReaderError(path, number, f"{len(columns)} columns ({' '.join(columns)}) separated by "
                        f"{'whitespace' if delimiter is None else repr(delimiter)}, got {len(fields)}: {line!r}")
    if not fields[0].strip() or not fields[tag_at].strip():
      raise ReaderError(path, number, f"a non-empty word and {columns[tag_at]} tag, got {line!r}")
    if allowed is not None and fields[tag_at] not in allowed:
      raise ReaderError(path, number, f"a {columns[tag_at]} tag of the task ({', '.join(sorted(allowed))}), got "
                        f"{fields[tag_at]!r}")
    words.append(fields[0])
    tags.append(fields[tag_at])
  if words:
    yield {"words": words, "tags": tags, "doc_index": doc_index}


CONLL = RecordFormat("conll", read_conll, TAGGED_WORDS)
