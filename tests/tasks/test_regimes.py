"""Fine-tuning regimes: frozen parameters never move; top-k and layer-wise decay scale the right layers."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder.errors import ConfigError
from tasks import regimes

PARAMS = {"encoder": {"embeddings": {"w": jnp.ones(2)}, "layer_0": {"w": jnp.ones(2)}, "layer_1": {"w": jnp.ones(2)},
                      "pooler": {"w": jnp.ones(2)}},
          "heads": {"classification": {"w": jnp.ones(3)}}}


def _flat(tree):
  return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_frozen_updates_only_the_head():
  scales = _flat(regimes.update_scales(PARAMS, num_layers=2, regime="frozen"))
  assert scales["['encoder']['embeddings']['w']"] == 0 and scales["['encoder']['layer_1']['w']"] == 0
  assert scales["['heads']['classification']['w']"] == 1 and scales["['encoder']['pooler']['w']"] == 1


def test_top_k_and_layer_decay():
  scales = _flat(regimes.update_scales(PARAMS, num_layers=2, regime="top_k", top_k=1, layer_decay=0.5))
  assert scales["['encoder']['layer_0']['w']"] == 0 and scales["['encoder']['embeddings']['w']"] == 0
  assert scales["['encoder']['layer_1']['w']"] == 0.5
  full = _flat(regimes.update_scales(PARAMS, num_layers=2, layer_decay=0.5))
  assert full["['encoder']['embeddings']['w']"] == 0.125 and full["['encoder']['layer_0']['w']"] == 0.25
  assert regimes.trainable_fraction(PARAMS, regimes.update_scales(PARAMS, num_layers=2, regime="frozen")) == 5 / 11


def test_frozen_parameters_stay_bitwise_equal_under_adamw():
  scales = regimes.update_scales(PARAMS, num_layers=2, regime="frozen")
  optimizer = optax.chain(optax.adamw(1e-2, weight_decay=0.1), regimes.scale_updates(scales))
  params, state = PARAMS, optimizer.init(PARAMS)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), PARAMS)
  for _ in range(3):
    updates, state = optimizer.update(grads, state, params)
    params = optax.apply_updates(params, updates)
  np.testing.assert_array_equal(params["encoder"]["layer_1"]["w"], PARAMS["encoder"]["layer_1"]["w"])
  assert not np.allclose(params["heads"]["classification"]["w"], 1.0)  # Three updates moved it (a guard).


def test_bad_regime_names_the_choices():
  with pytest.raises(ConfigError, match=re.escape("config.regime='half': expected one of 'full', 'frozen', 'top_k', "
                                                  "'lora', 'bitfit', 'adapters'")):
    regimes.update_scales(PARAMS, num_layers=2, regime="half")
  with pytest.raises(ConfigError, match=re.escape("config.top_k=0")):
    regimes.update_scales(PARAMS, num_layers=2, regime="top_k", top_k=0)


@pytest.mark.parametrize("regime, top_k, layer_decay", [("full", 0, 0.8), ("top_k", 2, 1.0), ("frozen", 0, 0.9)])
def test_hf_reference_learning_rates_weight_decay_and_frozen_parameters_match_ours(regime, top_k, layer_decay):
  """benchmarks.finetune_reference's AdamW groups give every HF tensor the learning-rate factor (layer-wise decay),
  weight decay and freezing (no group, requires_grad off) that our update scales and decay mask give the same tensor
  of our tree."""
  import transformers  # pylint: disable=import-outside-toplevel

  from benchmarks import finetune_reference  # pylint: disable=import-outside-toplevel
  from encoder import config as encoder_config  # pylint: disable=import-outside-toplevel
  from encoder.hf import bert  # pylint: disable=import-outside-toplevel
  from launch import optimizer  # pylint: disable=import-outside-toplevel
  cfg = encoder_config.EncoderConfig(vocab_size=50, hidden_size=8, num_layers=3, num_heads=2, intermediate_size=16,
                                     max_positions=16)
  hf = transformers.BertForSequenceClassification(transformers.BertConfig(
      vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2, intermediate_size=16,
      max_position_embeddings=16, num_labels=3))
  groups = finetune_reference.parameter_groups(hf, 1e-3, 0.01, layer_decay, regime, top_k)
  of_tensor = {id(p): (g["lr"] / 1e-3, g["weight_decay"] > 0) for g in groups for p in g["params"]}
  hf_names = dict(hf.named_parameters())
  ours = {}
  for t in bert.encoder_tensors(cfg):
    tree = ours
    for key in ("encoder",) + t.path[:-1]:
      tree = tree.setdefault(key, {})
    tree[t.path[-1]] = (t.hf_names, np.zeros(t.shape))
  ours["heads"] = {"classification": {"classifier": {"kernel": (("classifier.weight",), np.zeros((8, 3))),
                                                     "bias": (("classifier.bias",), np.zeros(3))}}}
  names = jax.tree.map(lambda leaf: leaf[0], ours, is_leaf=lambda x: isinstance(x, tuple))
  params = jax.tree.map(lambda leaf: leaf[1], ours, is_leaf=lambda x: isinstance(x, tuple))
  scales = regimes.update_scales(params, num_layers=3, regime=regime, top_k=top_k, layer_decay=layer_decay)
  decays = optimizer.decay_mask(params)
  checked = 0
  for hf_group, scale, decay in zip(jax.tree.leaves(names, is_leaf=lambda x: isinstance(x, tuple)),
                                    jax.tree.leaves(scales), jax.tree.leaves(decays)):
    for name in hf_group:
      parameter = hf_names[name if name.startswith("classifier") else "bert." + name]
      assert parameter.requires_grad == (scale > 0) == (id(parameter) in of_tensor), name
      if scale > 0:
        factor, decayed = of_tensor[id(parameter)]
        np.testing.assert_allclose(factor, scale, rtol=1e-12, err_msg=name)  # Float64 powers of the decay: ~1e-16.
        assert decayed == decay, name
      checked += 1
  assert checked == len(hf_names) and len(of_tensor) == sum(p.requires_grad for p in hf_names.values())
  assert 0 < len(of_tensor) < len(hf_names) if regime != "full" else len(of_tensor) == len(hf_names)


# A layer as the encoder builds it under lora (query and value targeted) and adapters (both placements): the module
# names the regimes select by (`lora_<target>`, `adapter_<placement>`).
LAYER = {"attention": {"qkv": {"kernel": jnp.ones((4, 3, 2, 2)), "bias": jnp.ones((3, 2, 2))},
                       "output": {"kernel": jnp.ones((2, 2, 4)), "bias": jnp.ones(4)},
                       "lora_query": {"a": jnp.ones((4, 1)), "b": jnp.zeros((1, 4))},
                       "lora_value": {"a": jnp.ones((4, 1)), "b": jnp.zeros((1, 4))}},
         "attention_layer_norm": {"scale": jnp.ones(4), "bias": jnp.zeros(4)},
         "adapter_attention": {"down": {"kernel": jnp.ones((4, 2)), "bias": jnp.zeros(2)},
                               "up": {"kernel": jnp.zeros((2, 4)), "bias": jnp.zeros(4)}},
         "mlp": {"intermediate": {"kernel": jnp.ones((4, 8)), "bias": jnp.ones(8)},
                 "output": {"kernel": jnp.ones((8, 4)), "bias": jnp.ones(4)}},
         "output_layer_norm": {"scale": jnp.ones(4), "bias": jnp.zeros(4)}}
TREE = {"encoder": {"embeddings": {"word_embeddings": {"embedding": jnp.ones((10, 4))},
                                   "layer_norm": {"scale": jnp.ones(4), "bias": jnp.zeros(4)}},
                    "layer_0": {k: v for k, v in LAYER.items() if k != "adapter_attention"}, "layer_1": LAYER,
                    "pooler": {"kernel": jnp.ones((4, 4)), "bias": jnp.zeros(4)}},
        "classification": {"classifier": {"kernel": jnp.ones((4, 2)), "bias": jnp.zeros(2)}}}


def _trained(regime: str) -> set[str]:
  flat = _flat(regimes.trainable(TREE, num_layers=2, regime=regime))
  return {path.replace("']['", "/").strip("[']") for path, trains in flat.items() if trains}


def test_each_regime_trains_its_own_parameters_and_the_head():
  head = {"classification/classifier/kernel", "classification/classifier/bias"}
  lora = {f"encoder/layer_{i}/attention/lora_{t}/{m}" for i in (0, 1) for t in ("query", "value") for m in "ab"}
  assert _trained("lora") == head | lora
  assert _trained("bitfit") == head | {p for p in _trained("full") if p.startswith("encoder") and p.endswith("/bias")}
  assert "encoder/layer_1/attention/qkv/bias" in _trained("bitfit")
  assert "encoder/layer_1/attention_layer_norm/bias" in _trained("bitfit")  # LayerNorm biases: BitFit's b_LN.
  adapters = {f"encoder/layer_1/adapter_attention/{m}/{w}" for m in ("down", "up") for w in ("kernel", "bias")}
  norms = {f"encoder/layer_1/{n}/{w}" for n in ("attention_layer_norm", "output_layer_norm") for w in ("scale", "bias")}
  assert _trained("adapters") == head | adapters | norms  # layer_0 holds no adapter: its LayerNorms stay.
  assert "encoder/pooler/kernel" in _trained("frozen") and "encoder/pooler/kernel" not in _trained("lora")


def test_select_and_merge_split_and_rejoin_the_tree():
  mask = regimes.trainable(TREE, num_layers=2, regime="lora")
  part = regimes.select(TREE, mask)
  assert set(part) == {"encoder", "classification"} and set(part["encoder"]) == {"layer_0", "layer_1"}
  moved = jax.tree.map(lambda x: x + 1, part)
  merged = regimes.merge(TREE, moved)
  assert jax.tree.structure(merged) == jax.tree.structure(TREE)
  np.testing.assert_array_equal(merged["encoder"]["layer_1"]["attention"]["lora_query"]["b"], 1.0)
  assert merged["encoder"]["layer_1"]["attention"]["qkv"]["kernel"] is TREE["encoder"]["layer_1"]["attention"]["qkv"][
      "kernel"]  # Frozen leaves: the very arrays, not copies.


def _config(**fields):
  from configs import finetune  # pylint: disable=import-outside-toplevel
  config = finetune.get_config("task=sst2,runlocal").unlock()
  for key, value in fields.items():
    *blocks, name = key.split(".")
    block = config
    for b in blocks:
      block = block[b]
    block[name] = value
  return config


@pytest.mark.parametrize("fields, message", [
    ({"regime": "lora", "lora.rank": 0}, "config.lora.rank=0: expected an integer >= 1"),
    ({"regime": "lora", "lora.rank": 65}, "config.lora.rank=65: expected 1 to the model's width "
                                          "(config.model.hidden_size=64)"),
    ({"regime": "lora", "lora.targets": "query,ffn"}, "config.lora.targets='query,ffn': expected distinct projections"),
    ({"regime": "lora", "lora.layers": "top:9"}, "config.lora.layers='top:9': expected top:1 to top:2"),
    ({"regime": "adapters", "adapters.size": 0}, "config.adapters.size=0: expected an integer >= 1"),
    ({"regime": "adapters", "adapters.placement": "ffn"}, "config.adapters.placement='ffn': expected one of"),
    ({"regime": "bitfit", "lora.rank": 4}, "config.lora.rank=4 is read by regime 'lora' only, and "
                                           "config.regime='bitfit': leave it at its default 8"),
    ({"regime": "lora", "adapters.size": 16}, "config.adapters.size=16 is read by regime 'adapters' only"),
    ({"regime": "top_k", "top_k": 3}, "config.top_k=3: regime 'top_k' trains the top top_k layers, expected 1 to"),
])
def test_bad_regime_fields_end_in_one_line_naming_the_field(fields, message):
  from configs import checks  # pylint: disable=import-outside-toplevel
  config = _config(**fields)
  with pytest.raises(ConfigError, match=re.escape(message)) as raised:
    checks.check_config(config)
  assert "\n" not in str(raised.value)


def test_top_k_given_with_lora_is_refused_naming_the_field():
  """A top_k the user gives under another regime (configs/given.py, which refuses fields a run does not read)."""
  from configs import given  # pylint: disable=import-outside-toplevel
  config = _config(regime="lora", top_k=2)
  with pytest.raises(ConfigError, match=re.escape("config.top_k=2 (--config.top_k on the command line) has no effect: "
                                                  "config.regime='lora'")):
    given.check(config, given.from_command_line("configs/finetune.py:task=sst2,runlocal", ["top_k", "regime"], config),
                "configs/finetune.py:task=sst2,runlocal")


def test_a_regime_block_field_given_under_another_regime_is_refused_naming_its_regime():
  """configs/given.py's REGIME_READERS lists every field of the regime blocks (it cannot import them: JAX)."""
  from configs import given  # pylint: disable=import-outside-toplevel
  assert {k for k in given.REGIME_READERS if "." in k} == set(regimes.field_rules())
  config = _config(regime="bitfit", **{"adapters.size": 16})
  with pytest.raises(ConfigError, match=re.escape(
      "config.adapters.size=16 (--config.adapters.size on the command line) has no effect: config.regime='bitfit' "
      "(--config.regime on the command line) does not read it (read by regime 'adapters')")):
    given.check(config, given.from_command_line("configs/finetune.py:task=sst2,runlocal", ["adapters.size", "regime"],
                                                config), "configs/finetune.py:task=sst2,runlocal")


def test_the_optimizer_of_a_regime_keeps_state_for_the_trainable_part_and_evaluates_the_whole_tree():
  """make_optimizer with frozen factors works on `select`'s part (moments and the parameter EMA alike);
  evaluation_params puts the EMA of that part on the frozen rest."""
  from configs import common  # pylint: disable=import-outside-toplevel
  from launch import optimizer, steps  # pylint: disable=import-outside-toplevel
  scales = regimes.update_scales(TREE, num_layers=2, regime="bitfit")
  part = regimes.select(TREE, jax.tree.map(lambda s: s > 0, scales))
  tx = optimizer.make_optimizer(common.optimizer_config(warmup_steps=1, ema_decay=0.5), 10, scales)
  opt_state = tx.init(part)
  assert len(jax.tree.leaves(opt_state.ema)) == len(jax.tree.leaves(part)) < len(jax.tree.leaves(TREE))
  for _ in range(2):  # The first step's learning rate is warm-up's 0.
    updates, opt_state = tx.update(jax.tree.map(jnp.ones_like, part), opt_state, part)
    part = optax.apply_updates(part, updates)
  state = steps.TrainState(step=jnp.zeros((), jnp.int32), params=regimes.merge(TREE, part), opt_state=opt_state,
                           rng=jnp.zeros(2, jnp.uint32))
  evaluated = optimizer.evaluation_params(state)
  assert jax.tree.structure(evaluated) == jax.tree.structure(TREE)
  np.testing.assert_array_equal(evaluated["encoder"]["pooler"]["kernel"], TREE["encoder"]["pooler"]["kernel"])
  assert not np.array_equal(evaluated["encoder"]["pooler"]["bias"], TREE["encoder"]["pooler"]["bias"])
