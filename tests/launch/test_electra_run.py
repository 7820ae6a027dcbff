"""objectives=electra through launch.main: a tiny run (factorized embeddings) trains, checkpoints and resumes bitwise
after a SIGTERM (benchmarks.determinism's runs), exports as ElectraForPreTraining + ElectraForMaskedLM whose
discriminator logits are ours, and a fine-tuning run starts from its discriminator."""

import jax
import numpy as np
import pytest

from benchmarks import determinism, electra_rtd
from configs import finetune
from encoder.config import PLATFORM_FIELDS, from_fields
from encoder.model import Encoder
from launch import export, predict, train
from objectives import electra, hf_heads
from tests.conftest import require_data, require_package

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIG = "configs/pretrain.py:runlocal,objectives=electra"
FACTORIZED = ("--config.model.embedding_size=32",)  # The runlocal model's hidden size is 64.


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """(root, cache): root/reference is an uninterrupted 20-step run."""
  root = tmp_path_factory.mktemp("electra")
  determinism.run(root / "reference", FACTORIZED, cache=root / "cache", config=CONFIG)
  return root, root / "cache"


def test_trains_and_resumes_bitwise(runs):
  root, cache = runs
  logged = {key: determinism.logged(root / "reference", f"train/{key}") for key in ("loss", "rtd_loss")}
  assert np.isfinite(logged["loss"]).all() and logged["loss"][-1] < logged["loss"][0]
  workdir = root / "sigterm"
  stopped = determinism.run(workdir, FACTORIZED, cache=cache, config=CONFIG, fault=("SIGTERM", 13))
  assert "SIGTERM: saved step 13" in stopped.stdout + stopped.stderr
  resumed = determinism.run(workdir, FACTORIZED, cache=cache, config=CONFIG)
  assert "resuming from checkpoint step 13" in resumed.stdout
  final = determinism.final_params(workdir)
  assert any(name.startswith("electra/generator/") for name in final)
  assert determinism.params_equal(final, determinism.final_params(root / "reference"))


def test_exports_discriminator_and_generator(runs, tmp_path):
  """HF's own ElectraForPreTraining (our discriminator's logits) and, in generator/, ElectraForMaskedLM load with
  nothing missing or unexpected, with a model card saying so."""
  root, _ = runs
  out = tmp_path / "out"
  assert export.export(root / "reference", out, "latest") == ("ElectraForPreTraining", "")
  config = predict.run_config(root / "reference", "")
  _, params = predict.restore_params(root / "reference", config, "latest")
  cfg, _, heads = hf_heads.load_hf_checkpoint(out)
  ours = from_fields(config.model.to_dict(), cfg.vocab_size)
  # An export holds no platform choices (attention path, kernels, bf16 dots: the loading machine's, resolved at its
  # start-up); every other field comes back.
  assert cfg.replace(**{name: getattr(ours, name) for name in PLATFORM_FIELDS}) == ours and cfg.embedding_size == 32
  rng = np.random.default_rng(0)
  ids = np.concatenate([np.full((2, 1), 101), rng.integers(1000, 20000, (2, 11))], axis=1)
  ids[1, 8:] = 0
  mask = (ids != 0).astype(np.int64)
  hidden = Encoder(cfg).apply({"params": params["encoder"]}, ids, attention_segments=mask).last
  ours = electra.DiscriminatorHead().apply({"params": params["electra"]["discriminator"]}, hidden)
  discriminator, report = transformers.AutoModelForPreTraining.from_pretrained(out, output_loading_info=True)
  assert type(discriminator).__name__ == "ElectraForPreTraining" and not any(report.values()), report
  discriminator.eval()
  with torch.no_grad():
    theirs = discriminator(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
  # Ours and HF's float32 discriminator (2 layers): a measured bound, as test_export's (HF's logits of exported runs
  # within 7.2e-7 of ours on Zen 3); a weight exported into the wrong place moves logits by O(1).
  assert np.abs(np.asarray(ours) - theirs)[mask > 0].max() <= 1e-4
  generator, report = transformers.AutoModelForMaskedLM.from_pretrained(out / "generator", output_loading_info=True)
  assert type(generator).__name__ == "ElectraForMaskedLM" and not any(report.values()), report
  assert generator.config.hidden_size == 16 and generator.config.embedding_size == 32  # 1/4 of 64; shared width.
  card = (out / export.CARD).read_text()
  assert 'AutoModelForPreTraining.from_pretrained("DIR")' in card and "`ElectraForPreTraining` is HF's own" in card
  without_pooler = lambda tree: {k: v for k, v in tree.items() if k != "pooler"}  # HF's ELECTRA has no pooler.
  assert jax.tree.all(jax.tree.map(np.array_equal, without_pooler(heads["electra"]["generator"]["encoder"]),
                                   without_pooler(jax.tree.map(np.asarray, params["electra"]["generator"]["encoder"]))))


def test_finetuning_starts_from_the_discriminator(runs, tmp_path):
  require_data("sick/SICK_train.txt")
  root, _ = runs
  config = finetune.get_config(f"task=sick,runlocal,init=run:{root / 'reference'}")
  with config.unlocked():
    config.optimizer.learning_rate = 0.0  # One step leaves the initial parameters as they were.
    config.num_train_steps = 1
    config.measure_mfu = False
  assert config.model.embedding_size == 32
  train.train_and_evaluate(config, tmp_path)
  start = {k: v for k, v in determinism.final_params(root / "reference").items() if k.startswith("encoder/")}
  tuned = {k: v for k, v in determinism.final_params(tmp_path).items() if k.startswith("encoder/")}
  assert determinism.params_equal(start, tuned)


def test_rtd_auc_of_a_run_equals_scikit_learns(runs):
  """benchmarks.electra_rtd scores the run's held-out batches: the replacements are the masked tokens' samples, and
  its AUC (ties counting half) equals scikit-learn's on the same logits, here and on tied scores."""
  metrics = require_package("sklearn.metrics")
  root, _ = runs
  logits, replaced = electra_rtd.discriminator_scores(root / "reference", batches=2)
  assert logits.shape == replaced.shape and 0.05 < replaced.mean() < 0.2  # 15% masked, a few sampled back.
  assert electra_rtd.auc(logits, replaced) == pytest.approx(metrics.roc_auc_score(replaced, logits), abs=1e-12)
  tied = np.round(logits, 1)
  assert electra_rtd.auc(tied, replaced) == pytest.approx(metrics.roc_auc_score(replaced, tied), abs=1e-12)
  train_logits, _ = electra_rtd.discriminator_scores(root / "reference", batches=2, split="train")
  assert train_logits.shape != logits.shape or not np.array_equal(train_logits, logits)  # Other rows were scored.
