"""The WSD evaluation framework of Raganato et al. (2017): `<name>.data.xml` sentences and `<name>.gold.key.txt` keys.

XML: `<corpus><text id><sentence id>` holding `<wf lemma pos>word</wf>` and `<instance id lemma pos>word</instance>`
(POS in the universal tagset: NOUN, VERB, ADJ, ADV for instances). Key files: one instance per line, `id key [key
...]` (several gold keys: a prediction is right when it is any of them). Errors name the file and line; a key file
naming an instance the XML lacks (or missing one) is an error, never a silently different score.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.parsers import expat

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.wordnet import parse_sense_key

DATASETS = ("senseval2", "senseval3", "semeval2007", "semeval2013", "semeval2015")
SHORT_NAMES = {"senseval2": "SE2", "senseval3": "SE3", "semeval2007": "SE07", "semeval2013": "SE13",
               "semeval2015": "SE15", "ALL": "ALL"}
WORDNET_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}  # Instance POS -> WordNet part of speech.
_PARENT = {"corpus": None, "text": "corpus", "sentence": "text", "wf": "sentence", "instance": "sentence"}


def read_raganato_xml(path: str | os.PathLike) -> list[dict]:
  """Sentences {"id", "words", "lemmas", "pos", "instances"}: instances a list of {"id", "index" (of the word),
  "lemma", "pos", "line"}; words keep their spaces ("New York")."""
  sentences: list[dict[str, Any]] = []
  stack: list[str] = []  # Open elements, innermost last.
  text: list[str] = []  # Character data of the open <wf> or <instance>.
  ids: dict[str, int] = {}  # Instance id -> its line.
  parser = expat.ParserCreate("UTF-8")

  def fail(expected: str):
    raise ReaderError(path, parser.CurrentLineNumber, expected)

  def start(tag: str, attributes: dict):
    if tag not in _PARENT or _PARENT[tag] != (stack[-1] if stack else None):
      fail(f"the structure corpus > text > sentence > wf | instance, got <{tag}> inside "
           f"{f'<{stack[-1]}>' if stack else 'no element'}")
    stack.append(tag)
    if tag == "sentence":
      sentences.append({"id": attributes.get("id", ""), "words": [], "lemmas": [], "pos": [], "instances": []})
    elif tag in ("wf", "instance"):
      text.clear()
      sentence = sentences[-1]
      if tag == "instance":
        missing = [name for name in ("id", "lemma", "pos") if not attributes.get(name)]
        if missing:
          fail(f"<instance> with id, lemma and pos attributes, missing {missing}")
        if attributes["id"] in ids:
          fail(f"unique instance ids, {attributes['id']!r} is also on line {ids[attributes['id']]}")
        if attributes["pos"] not in WORDNET_POS:
          fail(f"instance {attributes['id']}: pos one of {sorted(WORDNET_POS)}, got {attributes['pos']!r}")
        ids[attributes["id"]] = parser.CurrentLineNumber
        sentence["instances"].append({"id": attributes["id"], "index": len(sentence["words"]),
                                      "lemma": attributes["lemma"], "pos": attributes["pos"],
                                      "line": parser.CurrentLineNumber})
      sentence["lemmas"].append(attributes.get("lemma", ""))
      sentence["pos"].append(attributes.get("pos", ""))

  def end(tag: str):
    stack.pop()
    if tag in ("wf", "instance"):
      word = "".join(text).strip()
      if not word:
        fail(f"a non-empty word in <{tag}>")
      sentences[-1]["words"].append(word)
    elif tag == "sentence" and not sentences[-1]["words"]:
      fail(f"words in sentence {sentences[-1]['id']!r}")

  def characters(data: str):
    if stack and stack[-1] in ("wf", "instance"):
      text.append(data)
    elif data.strip():
      fail(f"text only inside <wf> or <instance>, got {data.strip()[:40]!r} in <{stack[-1] if stack else ''}>")

  parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, characters
  try:
    parser.Parse(Path(path).read_bytes(), True)
  except expat.ExpatError as err:
    raise ReaderError(path, err.lineno, f"well-formed XML ({expat.ErrorString(err.code)}, column "
                      f"{err.offset + 1})") from None
  return sentences


def read_key_file(path: str | os.PathLike) -> dict[str, tuple[str, ...]]:
  """Instance id -> its sense keys, from `id key [key ...]` lines (blank lines skipped); every key well formed."""
  keys = {}
  for number, line in numbered_lines(path):
    fields = line.split()
    if not fields:
      continue
    if len(fields) < 2:
      raise ReaderError(path, number, f"'instance_id sense_key [sense_key ...]', got {line!r}")
    if fields[0] in keys:
      raise ReaderError(path, number, f"each instance id once, got {fields[0]!r} again")
    for key in fields[1:]:
      try:
        parse_sense_key(key)
      except ValueError as err:
        raise ReaderError(path, number, f"sense keys for instance {fields[0]} ({err})") from None
    keys[fields[0]] = tuple(dict.fromkeys(fields[1:]))
  return keys


def check_same_instances(keys: dict[str, tuple[str, ...]], key_path: str | os.PathLike, sentences: list[dict],
                         xml_path: str | os.PathLike) -> None:
  """ValueError naming the first instance that the key file and the XML do not share."""
  xml_ids = {instance["id"] for sentence in sentences for instance in sentence["instances"]}
  extra = [i for i in keys if i not in xml_ids]
  if extra:
    raise errors.UserError(f"{key_path}: {len(extra)} instance ids that {xml_path} lacks, the first {extra[0]!r}: use "
                           "the key file of the same dataset")
  missing = [i for i in sorted(xml_ids) if i not in keys]
  if missing:
    raise errors.UserError(f"{key_path}: no keys for {len(missing)} instances of {xml_path}, the first {missing[0]!r}")


def dataset_paths(root: str | os.PathLike, name: str) -> tuple[Path, Path]:
  """(XML, gold key file) of one dataset ("semeval2007", ..., "ALL") under `Evaluation_Datasets`."""
  folder = Path(root) / "Evaluation_Datasets" / name
  if not folder.is_dir() and (Path(root) / name).is_dir():
    folder = Path(root) / name
  xml, gold = folder / f"{name}.data.xml", folder / f"{name}.gold.key.txt"
  for path in (xml, gold):
    if not path.is_file():
      raise FileNotFoundError(f"{path} not found: give the WSD_Evaluation_Framework directory (holding "
                              f"Evaluation_Datasets/{name}/)")
  return xml, gold


def read_dataset(root: str | os.PathLike, name: str) -> tuple[list[dict], dict[str, tuple[str, ...]]]:
  """Sentences and gold keys of one dataset, checked to name the same instances."""
  xml, gold_path = dataset_paths(root, name)
  sentences, gold = read_raganato_xml(xml), read_key_file(gold_path)
  check_same_instances(gold, gold_path, sentences, xml)
  return sentences, gold


def read_all(root: str | os.PathLike, names: Sequence[str] = DATASETS) -> tuple[list[dict], dict[str, tuple[str, ...]]]:
  """The datasets concatenated as the framework's ALL: instance ids prefixed `<dataset>.`, each sentence with its
  "dataset"; the gold keys must equal ALL.gold.key.txt's (when it exists and every dataset is read)."""
  sentences, gold = [], {}
  for name in names:
    part, keys = read_dataset(root, name)
    for sentence in part:
      instances = [{**instance, "id": f"{name}.{instance['id']}"} for instance in sentence["instances"]]
      sentences.append({**sentence, "dataset": name, "instances": instances})
    gold.update({f"{name}.{instance}": value for instance, value in keys.items()})
  all_gold = Path(root) / "Evaluation_Datasets" / "ALL" / "ALL.gold.key.txt"
  if set(names) == set(DATASETS) and all_gold.is_file():
    expected = read_key_file(all_gold)
    check_same_instances(expected, all_gold, sentences, "the five datasets' XML")
    different = [i for i in expected if set(expected[i]) != set(gold[i])]
    if different:
      raise errors.UserError(f"{all_gold}: the keys of {len(different)} instances differ from their dataset's gold key "
                             f"file, the first {different[0]!r}")
  return sentences, gold
