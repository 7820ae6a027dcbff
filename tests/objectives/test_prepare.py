"""Corpus preparation (objectives.prepare) and its reader (objectives.prepared) against the in-memory path."""

import filecmp
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from encoder import errors, paths
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer, train_sentencepiece, train_wordpiece
from objectives import corpus, pipeline, prepare, prepared
from tests.conftest import require_data

VALID = "wikitext-2/raw/wiki.valid.raw"


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer(minilm_path())


@pytest.fixture(scope="module")
def valid_dir(tmp_path_factory):
  """WikiText-2 valid prepared by one process in shards of 16 documents (60 documents: 4 shards)."""
  out = tmp_path_factory.mktemp("prepared") / "one"
  prepare.prepare([str(require_data(VALID))], str(minilm_path()), out, processes=1, shard_documents=16)
  return out


def _same_tree(a, b) -> None:
  names = sorted(p.name for p in a.iterdir())
  assert names == sorted(p.name for p in b.iterdir())
  assert len([n for n in names if n.endswith(".array_record")]) > 1
  _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
  assert not mismatch and not errors, mismatch + errors


def test_reads_back_the_in_memory_tokens(valid_dir, tok):
  memory = corpus.load_corpus([require_data(VALID)], tok)
  view = prepared.open_prepared(valid_dir, tok)
  np.testing.assert_array_equal(view.sentence_offsets, memory.sentence_offsets)
  np.testing.assert_array_equal(view.document_offsets, memory.document_offsets)
  np.testing.assert_array_equal(view.tokens[:], memory.tokens)
  np.testing.assert_array_equal(view.word_starts[:], memory.word_starts)
  for i in (0, 17, len(memory.sentence_offsets) - 2):
    np.testing.assert_array_equal(view.sentence(i), memory.sentence(i))
  starts = memory.sentence_offsets[memory.document_offsets]
  span = slice(int(starts[1]) - 3, int(starts[3]) + 5)  # Crosses two document boundaries.
  np.testing.assert_array_equal(view.tokens[span], memory.tokens[span])
  meta = view.metadata
  assert (meta["documents"], meta["sentences"], meta["tokens"]) == (
      len(memory.document_offsets) - 1, len(memory.sentence_offsets) - 1, len(memory.tokens))
  assert meta["words"] == sum(len(s.split()) for d in corpus.read_documents([require_data(VALID)]) for s in d)


# Documents as paragraphs of sentences where encoding a paragraph at once could differ from its sentences alone.
TRICKY = [
    [["ΟΔΟΣ.", "Σ starts this one, then ends with ΣΟΦΟΣ."], ["Café naïve ÉCOLE!", "漢字 mixed with text?"]],
    [["Control \x07 char.", "\x07", "Tabs\tand  spaces here."], ["unbelievably ##hash #tag x.", "(Bracket.)"]],
]


@pytest.mark.parametrize("name", ["minilm", "cased_wordpiece", "sentencepiece"])
def test_paragraph_encoding_gives_each_sentences_own_ids(tmp_path, tok, name, monkeypatch):
  text = tmp_path / "train.txt"
  text.write_text("\n".join(s for d in TRICKY for p in d for s in p) * 20 + "\nA literal inside.\n", encoding="utf-8")
  tokenizer = {"minilm": lambda: tok,
               "cased_wordpiece": lambda: train_wordpiece([text], 300, lowercase=False, min_frequency=1),
               "sentencepiece": lambda: train_sentencepiece([text], 60)}[name]()
  wiki = [[[s] for s in corpus.split_sentences(line)]
          for line in require_data(VALID).read_text(encoding="utf-8").splitlines()[:400] if line.strip()]
  literal_sep = [[["A literal [SEP] inside.", "After it."], ["Lone sentence"]]]  # Falls back to one per sentence.
  for documents in (TRICKY + wiki, literal_sep + TRICKY):
    with monkeypatch.context() as patch:
      if name != "sentencepiece" and documents[0] is TRICKY[0]:  # Joined, not the one-per-sentence fallback.
        patch.setattr(prepare, "_encode", lambda *_: pytest.fail("fell back to one encoding per sentence"))
      joined = prepare._encode_paragraphs(documents, tokenizer)  # pylint: disable=protected-access
    alone = corpus.tokenize_documents([[s for p in d for s in p] for d in documents], tokenizer)
    for field in ("tokens", "word_starts", "sentence_offsets", "document_offsets"):
      np.testing.assert_array_equal(getattr(joined, field), getattr(alone, field), err_msg=field)
  joiner = getattr(tokenizer.backend, "joined_segments", lambda *_: None)  # SentencePiece has none.
  assert (joiner([["a b.", "c"]], "[SEP]") is not None) == (name != "sentencepiece")
  if name != "sentencepiece":  # The literal [SEP] makes that batch fall back; without it, the paragraphs are joined.
    assert tokenizer.backend.joined_segments([["x."], ["y.", "z."]], "[SEP]") == [
        tokenizer.backend.segments(["x."], False)[0][0],
        tokenizer.backend.segments(["y."], False)[0][0] + [tokenizer.sep_id] + tokenizer.backend.segments(
            ["z."], False)[0][0]]


@pytest.mark.parametrize("packing", pipeline.PACKINGS)
def test_packed_rows_equal_the_in_memory_rows(valid_dir, tok, packing):
  kwargs = dict(tokenizer=tok, max_length=128, packing=packing, seed=3)
  memory = pipeline.pretraining_examples(files=[require_data(VALID)], **kwargs)
  from_shards = pipeline.pretraining_examples(files=(), prepared=valid_dir, **kwargs)
  np.testing.assert_array_equal(from_shards.chunks, memory.chunks)
  np.testing.assert_array_equal(from_shards.row_offsets, memory.row_offsets)
  assert len(from_shards) == len(memory) > 100
  for i in range(len(memory)):
    a, b = from_shards[i], memory[i]
    assert a.keys() == b.keys()
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=f"row {i} {key}")
  np.testing.assert_array_equal(pipeline.corpus_unigram_probs(from_shards, tok),
                                pipeline.corpus_unigram_probs(memory, tok))


def test_short_documents_are_filtered_as_in_memory(tmp_path, tok):
  text = tmp_path / "docs.txt"
  text.write_text("One sentence only here.\n\nFirst of two. Second of two.\n\nAlone again.\n\nA b. C d. E f.\n")
  out = tmp_path / "out"
  prepare.prepare([str(text)], str(minilm_path()), out, shard_documents=3)
  for short in ("skip", "error"):
    args = dict(min_document_sentences=2, short_documents=short)
    if short == "error":
      with pytest.raises(corpus.CorpusError, match=r"docs.txt:1: document has 1 sentence"):
        prepared.open_prepared(out, tok, **args)
      continue
    memory, view = corpus.load_corpus([text], tok, **args), prepared.open_prepared(out, tok, **args)
    np.testing.assert_array_equal(view.tokens[:], memory.tokens)
    np.testing.assert_array_equal(view.document_offsets, memory.document_offsets)
    expected = np.bincount(memory.tokens, minlength=tok.vocab_size)
    np.testing.assert_array_equal(view.token_counts, expected)


def test_any_number_of_processes_writes_the_same_bytes(valid_dir, tmp_path):
  out = tmp_path / "two"
  prepare.prepare([str(require_data(VALID))], str(minilm_path()), out, processes=2, shard_documents=16)
  _same_tree(valid_dir, out)


def test_an_interrupted_preparation_resumes_to_the_same_bytes(valid_dir, tmp_path):
  out = tmp_path / "resumed"
  args = ([str(require_data(VALID))], str(minilm_path()), out)
  assert prepare.prepare(*args, shard_documents=16, stop_after_shards=2) == {"stopped_after_shards": 2}
  assert not (out / "metadata.json").exists() and (out / "shard-00001.done.json").exists()
  assert not (out / "shard-00002.array_record").exists()
  finished = (out / "shard-00000.array_record").stat().st_mtime_ns
  (out / "shard-00001.done.json").unlink()  # A shard killed before its marker: rewritten from a truncated file.
  data = (out / "shard-00001.array_record").read_bytes()
  (out / "shard-00001.array_record").write_bytes(data[:len(data) // 2])
  (out / "shard-00002.array_record.999.tmp").write_bytes(b"a killed worker's partial file")
  prepare.prepare(*args, shard_documents=16)
  assert (out / "shard-00000.array_record").stat().st_mtime_ns == finished  # Skipped, not rewritten.
  _same_tree(valid_dir, out)
  with pytest.raises(corpus.CorpusError, match="other settings"):
    prepare.prepare(*args, shard_documents=8)


@pytest.mark.parametrize("content, expected", [
    (b"", r"empty.txt: empty corpus file: expected text, found no bytes"),
    (b"text\n\x00\x01binary", r"empty.txt:2: a NUL byte: expected UTF-8 text, found a binary file"),
    (b"caf\xe9\n", r"empty.txt:1: not valid UTF-8 \(byte 0xe9"),
])
def test_bad_files_are_one_line_errors(tmp_path, content, expected):
  (tmp_path / "empty.txt").write_bytes(content)
  with pytest.raises(corpus.CorpusError, match=expected):
    prepare.prepare([str(tmp_path / "empty.txt")], str(minilm_path()), tmp_path / "out")


def test_the_command_reports_no_matching_file_in_one_line(tmp_path):
  pattern = str(tmp_path / "missing" / "*.txt")
  done = subprocess.run([sys.executable, "-m", "objectives.prepare", "--input", pattern, "--tokenizer",
                         str(minilm_path()), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                        check=False)
  assert done.returncode == 1
  assert done.stderr.strip() == (f"error: --input {pattern!r}: no file matches it; expected text files (e.g. "
                                 "'corpus/*.txt') or tfds:NAME[:SPLIT]")


def test_a_missing_or_mismatched_directory_is_an_error(valid_dir, tmp_path):
  with pytest.raises(corpus.CorpusError, match=re.escape("no metadata.json")):
    prepared.open_prepared(tmp_path)
  shutil.copytree(valid_dir, tmp_path / "copy")
  other = load_tokenizer(minilm_path())
  other.ids_to_tokens = lambda ids: ["x"] * len(ids)  # A different vocabulary, so a different fingerprint.
  with pytest.raises(corpus.CorpusError, match="vocabulary differs"):
    prepared.open_prepared(tmp_path / "copy", other)


@pytest.mark.parametrize("damage, when, name", [
    ("flip", "read", "shard-00001.array_record"),  # Same size: found by its sha256 when the shard is first opened.
    ("truncate", "open", "shard-00001.array_record"),  # Found by its size at load.
    ("flip", "open", "shard-00002.index.npy"),
    ("delete", "open", "shard-00003.counts.npy"),
])
def test_a_damaged_shard_is_one_line_naming_it(valid_dir, tmp_path, damage, when, name):
  copy = tmp_path / "copy"
  shutil.copytree(valid_dir, copy)
  path = copy / name
  data = path.read_bytes()
  if damage == "delete":
    path.unlink()
  else:
    path.write_bytes(data[:len(data) // 2] if damage == "truncate" else data[:-9] + bytes([data[-9] ^ 1]) + data[-8:])

  def read() -> None:
    view = prepared.open_prepared(copy)
    if when == "read":
      view.tokens[:view.document_token_offsets[40]]  # Documents 0..39: shards 0..2.

  with pytest.raises(SystemExit) as stop:
    errors.run(read)
  message = str(stop.value)
  assert message.startswith(f"error: {path}: ") and "objectives.prepare again" in message and "\n" not in message


@pytest.mark.slow
def test_a_pretraining_config_reads_the_prepared_directory(valid_dir, tmp_path):
  from configs import pretrain  # pylint: disable=import-outside-toplevel  (JAX and grain only for this test)
  from launch import input_pipeline  # pylint: disable=import-outside-toplevel
  from objectives import data as pretraining_data  # pylint: disable=import-outside-toplevel
  config = pretrain.get_config("runlocal")
  config.data.train_files = str(require_data(VALID))  # The file that valid_dir was prepared from.
  memory = pretraining_data.load(config, cache_dir=tmp_path / "cache")
  config.data.prepared = str(valid_dir)
  config.data.train_files = "no/such/file.txt"  # Unused with a prepared directory.
  from_shards = pretraining_data.load(config, cache_dir=tmp_path / "cache")
  assert len(from_shards.train) == len(memory.train)
  np.testing.assert_array_equal(from_shards.mask_options["unigram_probs"], memory.mask_options["unigram_probs"])
  options = memory.mask_options
  batches = [next(input_pipeline.train_batches(data.train, options, global_batch=8, seed=1, start_step=5, prefetch=2))
             for data in (memory, from_shards)]
  for key in batches[0]:
    np.testing.assert_array_equal(batches[1][key], batches[0][key], err_msg=key)
  workers = input_pipeline.train_batches(from_shards.train, options, global_batch=8, seed=1, start_step=5, prefetch=2,
                                         workers=2)  # Worker processes (config.data.workers): the same batches.
  batch = next(workers)
  workers.close()
  for key in batches[0]:
    np.testing.assert_array_equal(batch[key], batches[0][key], err_msg=key)
  with pytest.raises(errors.ConfigError, match=r"config\.data\.workers=-2: expected -1 \(chosen for the host\)"):
    input_pipeline.train_batches(memory.train, options, global_batch=8, seed=1, start_step=0, prefetch=2, workers=-2)
  # -1 (the default): threads on this CPU; on a TPU host one worker per 8 cores, at most 32 (v4 240, v5e 112 vCPUs).
  assert config.data.workers == -1 and input_pipeline.worker_count(-1) == 0
  assert [input_pipeline.worker_count(-1, "tpu", cores) for cores in (240, 112, 180, 4, 448)] == [30, 14, 22, 1, 32]
  assert input_pipeline.worker_count(3, "tpu", 240) == 3 and input_pipeline.worker_count(-1, "gpu", 240) == 0


def test_a_relative_prepared_directory_is_found_under_the_data_directory(valid_dir, tmp_path, monkeypatch):
  """tpu_pod --data copies a bucket folder into every worker's $ENCODERLAB_DATA: `prepared=corpus` names it there (a
  path that exists from the working directory, or an absolute one, is taken as it is)."""
  (tmp_path / "corpus").symlink_to(valid_dir)
  monkeypatch.setenv("ENCODERLAB_DATA", str(tmp_path))
  assert paths.resolve_prepared("corpus") == tmp_path / "corpus"
  assert paths.resolve_prepared(str(valid_dir)) == valid_dir
  with pytest.raises(FileNotFoundError, match=r"prepared: .*elsewhere is not a directory written by objectives"):
    paths.resolve_prepared("elsewhere")


class EncoderlabTestText(tfds.core.GeneratorBasedBuilder):
  """WikiText-2 valid as a tfds text dataset: one record per article, its paragraphs joined by newlines."""
  VERSION = tfds.core.Version("1.0.0")
  code_path = None  # No checksums file (see tasks.tfds_builders.EncoderlabTasks).

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
                                 disable_shuffling=True)

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    documents = corpus.paragraph_documents(corpus.stream_lines(require_data(VALID)))
    for number, (_, paragraphs) in enumerate(documents):
      yield number, {"text": "\n".join(paragraphs)}


def test_a_tfds_dataset_by_name_gives_the_text_files_shards(valid_dir, tmp_path):
  data_dir = tmp_path / "tfds"
  EncoderlabTestText(data_dir=data_dir, file_format="array_record").download_and_prepare()
  out = tmp_path / "from_tfds"
  meta = prepare.prepare(["tfds:encoderlab_test_text"], str(minilm_path()), out, processes=1, shard_documents=16,
                         tfds_data_dir=str(data_dir))
  assert meta["inputs"][0] | {"data_dir": ""} == {"tfds": "encoderlab_test_text", "split": "train", "data_dir": "",
                                                 "version": "1.0.0", "examples": 60, "text_key": "text"}
  records = sorted(p.name for p in valid_dir.glob("*.array_record"))
  assert records == sorted(p.name for p in out.glob("*.array_record"))
  _, mismatch, errors = filecmp.cmpfiles(valid_dir, out, records + [r.replace(".array_record", ".counts.npy")
                                                                    for r in records], shallow=False)
  assert not mismatch and not errors, mismatch + errors
  with pytest.raises(corpus.CorpusError, match=r"tfds:no_such_set.*array_record"):
    prepare.prepare(["tfds:no_such_set"], str(minilm_path()), tmp_path / "x", tfds_data_dir=str(data_dir))
  with pytest.raises(corpus.CorpusError, match=r"record 0 has no 'body' feature.*--tfds-text-key"):
    prepare.prepare(["tfds:encoderlab_test_text"], str(minilm_path()), tmp_path / "y", tfds_data_dir=str(data_dir),
                    tfds_text_key="body")
