"""tfds builders: array_record round trips equal the readers' records, in file order, without TensorFlow."""

import pickle
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

from tasks import tfds_builders
from tasks.readers import FORMATS, ReaderError, read_conll, read_conllu, read_spans_jsonl, read_tsv
from tasks.tfds_builders import PRESETS, custom, load_split, prepare
from tests.conftest import require_data, require_package

SPANS = ('{"words": ["New", "York", "Times"], "spans": [{"start": 0, "end": 2, "label": "LOC"}, '
         '{"start": 0, "end": 3, "label": "ORG"}]}\n{"words": ["no", "entity"], "spans": []}\n')
CONLL = "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n-DOCSTART- -X- -X- O\n\nHi UH B-INTJ O\n"
CONLLU = ("# newdoc\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t0\troot\t_\t_\n"
          "2\tn't\tnot\tPART\tRB\t_\t1\tadvmod\t_\t_\n2.1\tx\tx\tX\tX\t_\t_\t_\t0:root\t_\n")
TSV = "s1\ts2\tgold\tscore\nA man \tA person\tyes\t0.1\r\nA cat\tA dog\tno\t4.7\r\n"
VERSION = str(tfds_builders.EncoderlabTasks.VERSION)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds_cache")


@pytest.fixture(scope="module")
def sick(cache):
  """The SICK preset prepared once; split -> (RecordSource, records read directly)."""
  paths = {split: require_data(name) for split, name in PRESETS["sick"].files.items()}
  options = dict(PRESETS["sick"].options)
  return {split: (load_split("sick", split, cache_dir=cache), list(read_tsv(path, **options)))
          for split, path in paths.items()}


def test_sick_round_trip_in_file_order_without_tensorflow(sick, cache):
  assert {split: len(source) for split, (source, _) in sick.items()} == {
      "train": 4500, "validation": 500, "test": 4927}
  for source, records in sick.values():
    assert [source[i] for i in range(len(source))] == records
    assert source.config.options["label_names"] == ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
  assert all(isinstance(r["score"], float) for _, records in sick.values() for r in records)  # SICK relatedness.
  assert sorted(p.name for p in (cache / "encoderlab_tasks" / "sick" / VERSION).glob("*.array_record-*")) == [
      f"encoderlab_tasks-{split}.array_record-00000-of-00001" for split in ("test", "train", "validation")]
  assert "tensorflow" not in sys.modules  # tfds imports TensorFlow lazily; nothing here needed it.


def test_sick_reads_back_with_plain_tfds_and_split_slices(sick, cache):
  records = sick["validation"][1]
  by_directory = tfds.builder_from_directory(cache / "encoderlab_tasks" / "sick" / VERSION)
  example = {k: v.decode() for k, v in by_directory.as_data_source(split="validation")[3].items()}
  assert example | {"score": float(example["score"])} == records[3]  # Scores are stored as text, exactly.
  assert len(tfds.data_source("encoderlab_tasks/sick", split="test", data_dir=cache)) == 4927
  head = load_split("sick", "validation[:10]", cache_dir=cache)
  assert [head[i] for i in range(10)] == records[:10]
  assert head.__getitems__([9, 2]) == [records[9], records[2]]
  assert pickle.loads(pickle.dumps(head))[5] == records[5]  # grain worker processes pickle their source.


def test_grain_reads_a_record_source(sick):
  grain = require_package("grain")
  source, records = sick["test"]
  assert list(grain.MapDataset.source(source)[:4]) == records[:4]


@pytest.mark.parametrize("file_format,name,text,options,reader", [
    ("spans", "nested.jsonl", SPANS, {}, read_spans_jsonl),
    ("conll", "tiny.conll", CONLL, {"tag_column": "chunk"}, read_conll),
    ("conllu", "tiny.conllu", CONLLU, {"tag_column": "xpos"}, read_conllu),
    ("tsv", "pairs.tsv", TSV, {"text_a": "s1", "text_b": "s2", "label": "gold"}, read_tsv),
    ("tsv", "single.tsv", TSV, {"text_a": 1}, read_tsv),
    ("tsv", "scores.tsv", TSV, {"text_a": "s1", "text_b": "s2", "score": "score"}, read_tsv),
], ids=["spans", "conll", "conllu", "tsv-pair", "tsv-single", "tsv-score"])
def test_custom_files_round_trip(tmp_path, cache, file_format, name, text, options, reader):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  source = load_split(custom(file_format, {"train": path, "test": path}, **options), "test", cache_dir=cache)
  assert [source[i] for i in range(len(source))] == list(reader(path, **options))


def test_custom_file_edits_and_malformed_lines(tmp_path, cache):
  path = tmp_path / "pairs.tsv"
  path.write_text(TSV, encoding="utf-8")
  first = custom("tsv", {"train": path}, text_a="s1", label="gold", label_names=("yes", "no"))
  assert len(load_split(first, "train", cache_dir=cache)) == 2
  path.write_text(TSV + "A bird\tA fish\tno\t2.0\n", encoding="utf-8")
  second = custom("tsv", {"train": path}, text_a="s1", label="gold", label_names=("yes", "no"))
  assert second.name != first.name and len(load_split(second, "train", cache_dir=cache)) == 3
  path.write_text(TSV + "A bird\tA fish\tmaybe\t2.0\n", encoding="utf-8")
  with pytest.raises(ReaderError, match=rf"^{path}:4: expected a label in column 'gold' that is one of"):
    load_split(custom("tsv", {"train": path}, text_a="s1", label="gold", label_names=("yes", "no")), "train",
               cache_dir=cache)


@pytest.mark.slow
def test_processes_preparing_one_dataset_at_once_all_get_it(tmp_path):
  """Three processes prepare the same files into one empty cache at the same moment (two jobs, two test workers):
  one prepares, the others wait for it, and every one reads the records."""
  path = tmp_path / "pairs.tsv"
  path.write_text(TSV + "A bird\tA fish\tno\t2.0\n" * 30_000, encoding="utf-8")  # Preparing takes a while.
  code = ("import sys; from tasks.tfds_builders import custom, load_split; "
          "dataset = custom('tsv', {'train': sys.argv[1]}, text_a='s1'); "
          "print(len(load_split(dataset, 'train', cache_dir=sys.argv[2])))")
  processes = [subprocess.Popen([sys.executable, "-c", code, str(path), str(tmp_path / "cache")], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
  outputs = [p.communicate(timeout=300) for p in processes]
  assert [(p.returncode, out.strip()) for p, (out, _) in zip(processes, outputs)] == [(0, "30002")] * 3, outputs


def test_user_errors(tmp_path):
  with pytest.raises(ValueError, match=r"unknown dataset 'conll2030' \(did you mean \['conll2003'"):
    load_split("conll2030", "train", cache_dir=tmp_path)
  with pytest.raises(ValueError, match="format 'csv' is not one of"):
    custom("csv", {"train": tmp_path})
  with pytest.raises(ValueError, match="inside the data directory"):
    prepare("sick", data_dir=tmp_path, cache_dir=tmp_path / "cache")


def test_presets_read_the_first_record_of_every_split():
  # Every format has a preset, but those with no data in the data directory (their tests write their files).
  assert {config.format for config in PRESETS.values()} == set(FORMATS) - {"jsonl", "choices"}
  for config in PRESETS.values():  # The GENIA sample has no test split.
    assert set(config.files) == {"train", "validation"} | ({"test"} if not config.name.startswith("genia") else set())
    for split, path in config.files.items():
      options = {**config.options, **config.split_options.get(split, {})}
      record = next(FORMATS[config.format].read(require_data(path), **options))
      text = record["words"] if "words" in record else record["question"] if "question" in record else record["text_a"]
      assert text, (config.name, split)
