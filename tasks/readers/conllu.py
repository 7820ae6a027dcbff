"""CoNLL-U (Universal Dependencies) -> tagging records {"words", "tags", "doc_index"}.

Words are the FORM column of the integer-ID lines; multiword-token ranges (`N-M`, e.g. "don't") and empty nodes
(`N.M`, enhanced graphs) are skipped, as are `#` comments. Fields are tab-separated: a FORM may contain spaces
(Vietnamese-VTB "chủ tịch").
"""

import os
import re
from collections.abc import Iterator, Sequence

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.record_format import TAGGED_WORDS, RecordFormat

CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
_RANGE = re.compile(r"[1-9][0-9]*-[1-9][0-9]*")
_EMPTY_NODE = re.compile(r"[0-9]+\.[1-9][0-9]*")


def read_conllu(path: str | os.PathLike, *, tag_column: str = "upos",
                label_names: Sequence[str] | None = None) -> Iterator[dict]:
  """Yields one record per sentence: FORMs and the `tag_column` values ("upos", "xpos", "deprel", ...).

  Checks 10 tab-separated columns, word IDs 1, 2, 3, ... in each sentence, a non-empty FORM and tag, and with
  `label_names` that the tag is one of them. Documents are counted from `# newdoc` comments (0-based; sentences
  before the first one are in document 0).
  """
  if tag_column not in CONLLU_COLUMNS[2:]:
    raise errors.UserError(f"tag_column {tag_column!r} is not one of {list(CONLLU_COLUMNS[2:])}")
  tag_at = CONLLU_COLUMNS.index(tag_column)
  allowed = None if label_names is None else set(label_names)
  words: list[str] = []
  tags: list[str] = []
  doc_index, doc_has_sentences = 0, False
  for number, line in numbered_lines(path):
    if not line.strip():
      if words:
        yield {"words": words, "tags": tags, "doc_index": doc_index}
        words, tags, doc_has_sentences = [], [], True
      continue
    if line.startswith("#"):
      if re.match(r"#\s*newdoc\b", line) and doc_has_sentences and not words:
        doc_index, doc_has_sentences = doc_index + 1, False
      continue
    fields = line.split("\t")
    if len(fields) != len(CONLLU_COLUMNS):
      raise ReaderError(path, number, f"10 tab-separated CoNLL-U columns, got {len(fields)}: {line!r}")
    token_id = fields[0]
    if _RANGE.fullmatch(token_id) or _EMPTY_NODE.fullmatch(token_id):
      continue
    if token_id != str(len(words) + 1):
      raise ReaderError(path, number, f"word ID {len(words) + 1} (or a range N-M, or an empty node N.M), "
                        f"got {token_id!r}")
    if not fields[1] or not fields[tag_at]:
      raise ReaderError(path, number, f"a non-empty FORM and {tag_column.upper()}, got {line!r}")
    if allowed is not None and fields[tag_at] not in allowed:
      raise ReaderError(path, number, f"a {tag_column.upper()} of the task ({', '.join(sorted(allowed))}) in column "
                        f"{tag_at + 1}, got {fields[tag_at]!r}")
    words.append(fields[1])
    tags.append(fields[tag_at])
  if words:
    yield {"words": words, "tags": tags, "doc_index": doc_index}


CONLLU = RecordFormat("conllu", read_conllu, TAGGED_WORDS, ud_words=True)
