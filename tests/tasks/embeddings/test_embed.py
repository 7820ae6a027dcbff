"""python -m tasks.embeddings.embed: the store's rows and index against the Embedder, byte-identical resume,
bad-input errors."""

import contextlib
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from encoder import errors
from encoder.config import EncoderConfig
from encoder.hf import save_hf_checkpoint
from encoder.model import Encoder
from encoder.pretrained import minilm_path
from tasks.embeddings import embed, store
from tasks.embeddings.extract import Embedder

LINES = ["The bank of the river .", "", "He went to the bank to deposit money .", "Café déjà vu , don't !",
         "", "   ", "a b c", "Tokenization of antidisestablishmentarianism works ."]  # Shard 2 (2 lines) is blank.


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A random 2-layer encoder saved as an HF checkpoint with the MiniLM tokenizer."""
  cfg = EncoderConfig(vocab_size=30522, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)
  params = Encoder(cfg).init(jax.random.PRNGKey(0), np.zeros((1, 8), np.int32))["params"]
  directory = tmp_path_factory.mktemp("tiny")
  save_hf_checkpoint(directory, cfg, jax.tree.map(np.asarray, params),
                     tokenizer_files=[minilm_path() / "tokenizer.json", minilm_path() / "vocab.txt"])
  return directory


@pytest.fixture(scope="module")
def text(tmp_path_factory):
  path = tmp_path_factory.mktemp("text") / "text.txt"
  path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
  return path


def run(checkpoint, text, out, *extra):
  errors.run(embed.main, ["--init", f"hf:{checkpoint}", "--input", str(text), "--out", str(out), "--quiet",
                                "--lines-per-shard", "2", "--buckets", "8,16", "--batch-size", "2", *extra])


@contextlib.contextmanager
def stopped_after(shards: int):
  """The run inside stops as a kill between two shards would: once `shards` shards are committed (the test wraps
  `store.ShardWriter.commit`; the product has no hook)."""
  commit, committed = store.ShardWriter.commit, []

  def commit_then_stop(writer, entries):
    commit(writer, entries)
    committed.append(writer)
    if len(committed) == shards:
      raise SystemExit(f"stopped after {shards} shard(s)")

  with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit, match=f"stopped after {shards} shard"):
    patch.setattr(store.ShardWriter, "commit", commit_then_stop)
    yield


def files(directory) -> dict[str, bytes]:
  return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def complete(checkpoint, text, tmp_path_factory):
  """An uninterrupted run (--words, all layers, subword-mean)."""
  out = tmp_path_factory.mktemp("store") / "complete"
  run(checkpoint, text, out, "--words", "--layers", "all")
  return out


@pytest.mark.slow
def test_rows_and_index_equal_the_embedder_in_input_order(checkpoint, text, complete):
  words = [line.split() for line in LINES]
  expected = Embedder.from_init(f"hf:{checkpoint}").encode_words(words, layers="all")
  # The same MiniLM encoder on other batches (summation order only); measured as test_extract's bound.
  np.testing.assert_allclose(store.load_vectors(complete), np.concatenate(expected), rtol=1e-5, atol=1e-5)
  index = list(store.read_index(complete))
  assert [(e["line"], e["word"], e["text"]) for e in index] == [
      (number, i, word) for number, ws in enumerate(words, 1) for i, word in enumerate(ws)]
  shards = list(store.iter_shards(complete))
  assert [len(shard) > 0 for shard in shards] == [True, True, False, True]
  assert all(np.array_equal(shards[e["shard"]][e["row"]], v) for e, v in zip(index, store.load_vectors(complete)))
  meta = store.read_meta(complete)
  assert meta["complete"] and meta["feature_shape"] == [3, 16] and meta["rows"] == len(index)


def test_an_interrupted_run_resumes_to_byte_identical_files(checkpoint, text, complete, tmp_path):
  out = tmp_path / "resumed"
  with stopped_after(1):
    run(checkpoint, text, out, "--words", "--layers", "all")
  assert store.complete_shards(out) == 1 and not store.read_meta(out)["complete"]
  # A kill in the middle of shard 3: its partial file and index lines are there, the shard is not.
  with stopped_after(3):
    run(checkpoint, text, out, "--words", "--layers", "all")
  store.shard_path(out, 3).rename(out / "shard-00003.npy.partial")
  assert len(list(store.read_index(out))) > sum(store.shard_rows(store.shard_path(out, k)) for k in range(3))
  run(checkpoint, text, out, "--words", "--layers", "all")
  assert files(out) == files(complete)


def test_resuming_with_other_options_is_refused(checkpoint, text, complete):
  with pytest.raises(SystemExit) as stop:
    run(checkpoint, text, complete, "--words", "--layers", "last")
  assert "error:" in str(stop.value) and "layers" in str(stop.value) and "settings" in str(stop.value)


def test_raw_text_lines_are_split_by_the_pre_tokenizer(checkpoint, text, tmp_path, capsys):
  run(checkpoint, text, tmp_path / "raw", "--layers", "last2_mean", "--pooling", "first", "--dtype", "float16")
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  index = list(store.read_index(tmp_path / "raw"))
  assert [e["text"] for e in index if e["line"] == 4] == ["Café", "déjà", "vu", ",", "don", "'", "t", "!"]
  vectors = store.load_vectors(tmp_path / "raw")
  assert vectors.dtype == np.float16 and vectors.shape == (len(index), 16) and summary["rows"] == len(index)


def test_subword_rows_are_indexed_with_their_word(checkpoint, text, tmp_path):
  run(checkpoint, text, tmp_path / "sub", "--words", "--layers", "last", "--pooling", "subword")
  index = list(store.read_index(tmp_path / "sub"))
  line = [(e["word"], e["subword"], e["text"]) for e in index if e["line"] == 8]
  assert line[:3] == [(0, 0, "token"), (0, 1, "##ization"), (1, 2, "of")]
  assert store.load_vectors(tmp_path / "sub").shape == (len(index), 16)


@pytest.mark.parametrize("content,expected", [
    (None, "missing.txt: no such file"),
    (b"", "bad.txt:1: expected one text per line, found an empty file"),
    (b"\n  \n\t\n", "bad.txt:3: expected at least one line with text"),
    (b"fine\nnot \xff utf-8\n", "bad.txt:2: expected UTF-8 text"),
])
def test_bad_input_is_one_error_line_naming_file_and_line(checkpoint, tmp_path, content, expected):
  path = tmp_path / ("missing.txt" if content is None else "bad.txt")
  if content is not None:
    path.write_bytes(content)
  with pytest.raises(SystemExit) as stop:
    run(checkpoint, path, tmp_path / "out")
  assert str(stop.value).startswith("error: ") and expected in str(stop.value) and "\n" not in str(stop.value)


def test_the_command_reports_bad_input_without_a_traceback(checkpoint, tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"ok\n\xc3\x28\n")
  done = subprocess.run([sys.executable, "-m", "tasks.embeddings.embed", "--init", f"hf:{checkpoint}", "--input",
                         str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True, check=False)
  assert done.returncode != 0 and "Traceback" not in done.stderr
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: {path}:2: expected UTF-8 text")


def test_an_out_path_that_is_a_file_is_refused_and_kept(checkpoint, text, tmp_path):
  taken = tmp_path / "taken"
  taken.write_text("keep me\n")
  with pytest.raises(SystemExit) as stop:
    run(checkpoint, text, taken, "--layers", "last")
  assert str(stop.value) == (f"error: {taken}: --out must be a directory for the store, found a file; give "
                             "another --out")
  assert taken.read_text() == "keep me\n"
