"""What an objective knows of a run is its own (issue 73, part 3): the held-out metric a run keeps its best
checkpoint by (`Objective.best`, gathered by `objectives.registry.best_checkpoint` into configs/pretrain.py's
best_metric) and the encoders its head can run on (`Objective.check`, which configs.checks calls through the
registry: ELECTRA's generator)."""

import pytest

from configs import checks, pretrain
from encoder.config import EncoderConfig
from encoder.errors import ConfigError
from objectives import electra, registry


@pytest.mark.parametrize("names,best", [
    (["mlm"], ("eval/mlm_accuracy", "max")), (["nsp", "mlm"], ("eval/mlm_accuracy", "max")),
    (["electra"], ("eval/loss", "min")), (["nsp", "sbo"], ("eval/loss", "min")), (["no_such"], ("eval/loss", "min"))])
def test_the_objectives_name_the_metric_of_the_best_checkpoint(names, best):
  assert registry.best_checkpoint(names) == best
  if "no_such" not in names:
    config = pretrain.get_config(f"runlocal,objectives={'+'.join(names)}")
    assert (config.best_metric, config.best_mode) == best


def test_electra_checks_its_generator_on_the_runs_encoder():
  cfg = EncoderConfig(vocab_size=8, hidden_size=64, num_heads=4, intermediate_size=128, num_layers=2,
                      position_embedding="rotary")
  assert [name for name in registry.OBJECTIVES if registry.build(name).check] == ["electra"]  # The others: none.
  electra.build({"generator_size": 0.25}).check(cfg)  # A head of 16: even, as rotary positions need.
  with pytest.raises(ConfigError, match="head size hidden_size / num_heads must be even"):
    electra.build({"generator_size": 0.3}).check(cfg)  # One head of 19.


def test_check_config_reaches_the_objectives_check():
  config = pretrain.get_config("runlocal,objectives=electra").unlock()
  config.model.position_embedding, config.electra.generator_size = "rotary", 0.3
  with pytest.raises(ConfigError, match="must be even"):
    checks.check_config(config)
  config.electra.generator_size = 0.25
  assert [o.name for o in checks.check_config(config).objectives] == ["electra"]
