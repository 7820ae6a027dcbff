"""Readers for the fine-tuning and embedding formats: plain-dict records, with `path:line:` errors for malformed input.

Fine-tuning formats are `FORMATS` (each a `RecordFormat`: its reader and the kind of its records, record_format.py).
Records: classification {"text_a", "text_b", "label"} (tsv, jsonl); tagging {"words", "tags", "doc_index"} (conll,
conllu); spans {"words", "spans": [{"start", "end", "label"}]} (token offsets, end exclusive); questions {"id",
"title", "question", "context", "answers": [{"text", "start"}], "is_impossible"} (SQuAD JSON); multiple choice
{"context", "choices", "label"} (choices). Contextual
embeddings: WiC pairs, SemCor sentences with sense keys, WordNet 3.0's index.sense and relations, the Raganato et al.
(2017) WSD XML + gold keys.
"""

from collections.abc import Iterable

from tasks.readers import choices, conll, conllu, jsonl, spans, squad, tsv
from tasks.readers.conll import CONLL2003_COLUMNS, read_conll
from tasks.readers.conllu import CONLLU_COLUMNS, read_conllu
from tasks.readers.jsonl import read_jsonl
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.raganato import read_all, read_dataset, read_key_file, read_raganato_xml
from tasks.readers.record_format import RecordFormat, RecordKind
from tasks.readers.semcor import read_semcor, read_semcor_file
from tasks.readers.spans import outermost_spans, overlaps, read_spans_jsonl, spans_to_tagging, tagging_to_spans
from tasks.readers.squad import read_squad
from tasks.readers.tsv import read_tsv
from tasks.readers.wic import WIC_POS, read_wic, read_wic_split, wic_files
from tasks.readers.wordnet import WordNet, load_wordnet, parse_sense_key, read_index_sense

# The fine-tuning formats by name (config.task.format): one line each.
FORMATS: dict[str, RecordFormat] = {f.name: f for f in (
    conll.CONLL,
    tsv.TSV,
    conllu.CONLLU,
    spans.SPANS_JSONL,
    squad.SQUAD,
    jsonl.JSONL,
    choices.CHOICES,  # Multiple choice: {"context", "choices", "label"} JSON lines (tasks.multiple_choice).
)}
# The formats whose words are UD's (hyphenated words split: "Al - Zaman"), so raw text given to a run trained on them is
# split into words the same way (`launch.predict.split_words`, an HF export's pipeline).
UD_WORDS = tuple(name for name, f in FORMATS.items() if f.ud_words)


def same_records(names: Iterable[str]) -> tuple[str, ...]:
  """The formats whose records are of the kind of one of the formats `names` (a family that trains on tsv trains on
  jsonl too)."""
  kinds = {FORMATS[name].records.name for name in names}
  return tuple(name for name, f in FORMATS.items() if f.records.name in kinds)


__all__ = [
    "CONLL2003_COLUMNS", "CONLLU_COLUMNS", "FORMATS", "UD_WORDS", "WIC_POS", "ReaderError", "RecordFormat",
    "RecordKind", "WordNet", "load_wordnet", "numbered_lines", "outermost_spans", "overlaps", "parse_sense_key",
    "read_all", "read_conll", "read_conllu", "read_dataset", "read_index_sense", "read_jsonl", "read_key_file",
    "read_raganato_xml", "read_semcor", "read_semcor_file", "read_spans_jsonl", "read_squad", "read_tsv", "read_wic",
    "read_wic_split", "same_records", "spans_to_tagging", "tagging_to_spans", "wic_files",
]
