"""The demo's POS part: its config reads the packaged UD English-EWT sample (small, licensed, EWT's own sentences, train
and held-out disjoint), and `launch.demo.main` at reduced size (2 MLM steps, a tiny random-init tagger) runs both
parts, reports the held-out accuracy its prediction file gives, tags a sentence through the Predictor, and resumes."""

import contextlib
import hashlib
import io
import re

import pytest

from configs import checks, demo as demo_config, finetune, samples
from encoder import errors
from launch import demo, predict
from tasks import finetune_data
from tasks.readers import read_conllu
from tests.conftest import require_data

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).

SENTENCE = "I can't believe it's not butter!"


def test_pos_config_is_the_ud_pos_recipe_on_the_packaged_sample():
  config = demo_config.get_config("pos")
  checks.check_config(config)
  preset = finetune.get_config("task=ud_pos")
  assert (config.task.name, config.task.labels, config.task.case_features, config.task.last_subword) == (
      preset.task.name, preset.task.labels, preset.task.case_features, preset.task.last_subword)
  assert config.init == "hf:all-MiniLM-L6-v2" and config.model.num_layers == 6
  dataset = finetune_data.dataset_of(config.task)
  assert dataset.format == "conllu" and dataset.files == {
      "train": str(samples.ud_sample_file("train")), "validation": str(samples.ud_sample_file("heldout"))}
  assert config.task.test_split == "" and config.eval_every_steps == 0  # Scored once, at the end: no choice on it.
  assert (config.epochs, config.batch_size, config.optimizer.learning_rate) == (4, 16, 3e-4)
  small = demo_config.get_config("pos,runlocal")
  assert small.init == "" and small.task.files == config.task.files and small.task.train_split == "train[:64]"
  with pytest.raises(ValueError, match="heldout"):
    samples.ud_sample_file("test")


def test_ud_sample_is_small_licensed_and_disjoint():
  train_file, heldout_file = samples.ud_sample_file("train"), samples.ud_sample_file("heldout")
  readme = (samples.UD_SAMPLE_DIR / "README.md").read_text(encoding="utf-8")
  for path, sentences in ((train_file, 314), (heldout_file, 208)):
    data = path.read_bytes()
    assert len(data) < 400_000 and hashlib.md5(data).hexdigest() in readme  # The README's checksums are the files'.
    assert f"{len(data):,} B" in readme
    assert len(list(read_conllu(path))) == sentences
  assert "Attribution-ShareAlike 4.0 International" in (samples.UD_SAMPLE_DIR / "LICENSE.txt").read_text()
  assert "CC BY-SA 4.0" in readme and "Silveira" in readme
  texts = lambda path: set(re.findall(r"^# text = (.*)$", path.read_text(encoding="utf-8"), re.MULTILINE))
  assert len(texts(train_file)) > 300 and not texts(train_file) & texts(heldout_file)
  tags = {tag for path in (train_file, heldout_file) for record in read_conllu(path) for tag in record["tags"]}
  assert tags <= set(finetune.UPOS) and len(tags) >= 15


def test_ud_sample_is_every_kth_sentence_of_ewt():
  """The README's recipe (awk paragraph mode) against the shared treebank, when it is here."""
  for split, source, k in (("train", "train", 40), ("heldout", "test", 10)):
    blocks = require_data(f"ud_english_ewt/en_ewt-ud-{source}.conllu").read_text(encoding="utf-8").strip().split("\n\n")
    expected = "".join(block + "\n\n" for block in blocks[::k])
    assert samples.ud_sample_file(split).read_text(encoding="utf-8") == expected


def _main(argv: list[str]) -> str:
  """What demo.main prints (its own lines; the engine's progress lines go to the stream bound at import)."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    demo.main(argv)
  return out.getvalue()


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
  """(workdir, output) of demo.main at reduced size: 2 MLM steps on the small held-out text, the POS run as a
  runlocal tiny tagger."""
  workdir = tmp_path_factory.mktemp("demo")
  mlm_config, pos_config = demo_config.mlm_config, demo_config.pos_config

  def small_mlm(steps):
    config = mlm_config(2)
    config.data.train_files = config.data.eval_files  # Tokenized in seconds.
    return config
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(demo_config, "mlm_config", small_mlm)
    patch.setattr(demo_config, "pos_config", lambda: pos_config(runlocal=True))
    yield workdir, _main(["--workdir", str(workdir), "--sentence", SENTENCE])


def test_demo_reports_accuracy_and_tags_a_sentence(demo_run):
  workdir, out = demo_run
  assert "held-out MLM" in out and "unigram baseline" in out and "top-5 fillers" in out
  rows = [line.split() for line in (workdir / "pos" / "predictions" / "dev.conll").read_text().splitlines() if line]
  accuracy = 100 * sum(gold == pred for _, gold, pred in rows) / len(rows)
  assert f"held-out UPOS accuracy (en_ewt-sample-test.conllu: {len(rows):,} words of EWT test" in out
  assert f"never trained on): {accuracy:.1f}%" in out
  tagged = out.split("tagged by the fine-tuned model (python -m launch.predict):\n  ")[1].splitlines()[0].split()
  words = predict.split_words(SENTENCE, split_hyphens=True)
  assert [pair.rsplit("/", 1)[0] for pair in tagged] == words == ["I", "ca", "n't", "believe", "it", "'s", "not",
                                                                  "butter", "!"]
  assert all(pair.rsplit("/", 1)[1] in finetune.UPOS for pair in tagged)
  for path in ("mlm/tensorboard", "pos/tensorboard", "pos/predictions/dev.jsonl", "pos/checkpoints"):
    assert (workdir / path).exists(), path
  assert f"--workdir {workdir / 'pos'} --input -" in out


def test_demo_rerun_shows_the_finished_runs_again_and_fresh_keeps_other_files(demo_run, tmp_path):
  workdir, first = demo_run
  logs = {run: (workdir / run / "metrics.jsonl").read_text() for run in demo.RUNS}
  again = _main(["--workdir", str(workdir), "--sentence", SENTENCE])
  assert {run: (workdir / run / "metrics.jsonl").read_text() for run in demo.RUNS} == logs  # Nothing trained.
  assert again == first
  (tmp_path / "mlm").mkdir()
  (tmp_path / "mlm" / "notes.txt").write_text("mine")
  with pytest.raises(errors.UserError, match=re.escape("holds no config.json")):
    demo.clear_runs(tmp_path)
  assert (tmp_path / "mlm" / "notes.txt").is_file()
