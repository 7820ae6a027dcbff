"""Readers for the fine-tuning formats: plain-dict records, lazily, with `path:line:` errors for malformed input.

Records: classification {"text_a", "text_b", "label"}; tagging {"words", "tags", "doc_index"}; spans {"words",
"spans": [{"start", "end", "label"}]} (token offsets, end exclusive).
"""

from tasks.readers.conll import CONLL2003_COLUMNS, read_conll
from tasks.readers.conllu import CONLLU_COLUMNS, read_conllu
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.spans import read_spans_jsonl, spans_to_tagging, tagging_to_spans
from tasks.readers.tsv import read_tsv

READERS = {"conll": read_conll, "tsv": read_tsv, "conllu": read_conllu, "spans": read_spans_jsonl}

__all__ = [
    "CONLL2003_COLUMNS", "CONLLU_COLUMNS", "READERS", "ReaderError", "numbered_lines", "read_conll", "read_conllu",
    "read_spans_jsonl", "read_tsv", "spans_to_tagging", "tagging_to_spans",
]
