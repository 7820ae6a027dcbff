"""LoRA and bottleneck adapters in the encoder (docs/regimes.md, "LoRA and adapters"): their parameters sit where the
regimes expect them, at their initialisation (LoRA's B zero, adapters' up projection zero) the encoder computes the
plain encoder's outputs bit for bit (float32 and bf16, packed, remat, training's dropout masks), and LoRA merged into
the dense weights computes what the branches do."""

import json

import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import finetune
from encoder import Encoder, peft_format, preset
from encoder.config import LORA_TARGETS
from encoder.errors import ConfigError
from encoder.model import Adapter, LoRA
from encoder.peft_format import base_config, merge_lora
from launch.model import run_encoder_config
from tests.tolerances import U32, assert_within

TINY = preset("tiny", vocab_size=97, max_positions=64, hidden_size=64, num_heads=4, intermediate_size=96,
              hidden_dropout=0.0, attention_dropout=0.0)
LORA = dict(lora_rank=4, lora_alpha=8.0, lora_targets=LORA_TARGETS, lora_layers=(1,))
ADAPTERS = dict(adapter_size=8, adapter_placement="both", adapter_layers=(0, 1))


def _leaves(tree) -> dict[str, tuple]:
  return {"/".join(k.key for k in path): leaf.shape for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _abstract(cfg):
  return jax.eval_shape(Encoder(cfg).init, jax.random.key(0), jnp.ones((1, 8), jnp.int32))["params"]


def _shapes(cfg):
  return _leaves(_abstract(cfg))


def _random(cfg, seed=0, identity=True):
  """Encoder(cfg)'s parameters, random everywhere (no compiled init); identity: LoRA's b and the adapters' up
  projections zero, as at initialisation."""
  rng = np.random.default_rng(seed)
  zero = lambda path: identity and (path[-1].key == "b" or "up" in [k.key for k in path])
  return jax.tree_util.tree_map_with_path(
      lambda path, x: np.zeros(x.shape, np.float32) if zero(path) else rng.normal(0, 0.1, x.shape).astype(np.float32),
      _abstract(cfg))


def _with_base(params, base):
  """params with every array the plain encoder also has taken from `base`."""
  if isinstance(params, dict):
    return {k: _with_base(v, base[k]) if k in base else v for k, v in params.items()}
  return base


def _packed_batch(seed=1):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, TINY.vocab_size, size=(2, 24))
  positions = np.concatenate([np.arange(10), np.arange(11), np.zeros(3, int)])
  segments = np.concatenate([np.full(10, 1), np.full(11, 2), np.zeros(3, int)])
  return ids, np.stack([positions, np.arange(24)]), np.stack([segments, np.ones(24, int)])


def test_parameters_sit_where_the_regimes_expect_them():
  """lora_<target>/{a, b} beside each targeted projection of the chosen layers only; adapter_<sublayer>/{down, up}
  with biases in the block."""
  plain, ours = _shapes(TINY), _shapes(TINY.replace(**LORA, **ADAPTERS))
  added = {k: v for k, v in ours.items() if k not in plain}
  assert {k: v for k, v in ours.items() if k in plain} == plain
  h, i, r = 64, 96, 4
  expected = {f"layer_1/attention/lora_{t}/a": (h, r) for t in ("query", "key", "value", "attention_output")}
  expected |= {f"layer_1/attention/lora_{t}/b": (r, h) for t in ("query", "key", "value", "attention_output")}
  expected |= {"layer_1/mlp/lora_intermediate/a": (h, r), "layer_1/mlp/lora_intermediate/b": (r, i),
               "layer_1/mlp/lora_output/a": (i, r), "layer_1/mlp/lora_output/b": (r, h)}
  for layer in (0, 1):
    for sublayer in ("attention", "feed_forward"):
      at = f"layer_{layer}/adapter_{sublayer}"
      expected |= {f"{at}/down/kernel": (h, 8), f"{at}/down/bias": (8,), f"{at}/up/kernel": (8, h),
                   f"{at}/up/bias": (h,)}
  assert added == expected


def test_lora_a_is_initialised_as_peft_does():
  """A ~ U(-1/sqrt(in), 1/sqrt(in)) (torch's kaiming_uniform_(a=sqrt(5)), PEFT's default); B = 0; an adapter's up
  projection 0."""
  cfg = TINY.replace(lora_rank=16, lora_targets=("query",), lora_layers=(0,), **ADAPTERS)
  lora = LoRA(cfg, 64).init(jax.random.key(0), jnp.ones((3, 64)), False)["params"]
  a, bound = np.asarray(lora["a"]), 1 / np.sqrt(64)
  assert a.shape == (64, 16) and np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound
  assert abs(a.std() - bound / np.sqrt(3)) < 0.1 * bound and not np.any(np.asarray(lora["b"]))
  up = Adapter(cfg).init(jax.random.key(0), jnp.ones((1, 3, 64)))["params"]["up"]
  assert not np.any(np.asarray(up["kernel"])) and not np.any(np.asarray(up["bias"]))


@pytest.mark.slow  # Two compiled encoders per case (~3 s each on an idle 2-core Zen 3): the point needs both.
@pytest.mark.parametrize("switches", [
    dict(remat="full", attention="xla"),
    dict(dtype=jnp.bfloat16, activation_dtype=jnp.bfloat16, pre_layer_norm=True, hidden_dropout=0.2, lora_dropout=0.3),
], ids=["float32_remat_xla_attention", "bf16_pre_ln_training"])
def test_at_initialisation_outputs_equal_the_plain_encoder_bit_for_bit(switches):
  """B = 0 and up = 0: every hidden state equals the plain encoder's exactly, under jit, on packed rows (with
  last_positions), and in training the dropout masks are the plain encoder's."""
  plain_cfg = TINY.replace(**switches)  # lora_dropout means nothing without LoRA.
  cfg = plain_cfg.replace(**LORA, **ADAPTERS)
  base = _random(plain_cfg)
  params = _with_base(_random(cfg, seed=3), base)
  ids, positions, segments = _packed_batch()
  train = "hidden_dropout" in switches
  last = None if train else jnp.asarray([[0, 10], [0, 5]])

  def run(c, p):
    fn = lambda p: Encoder(c).apply({"params": p}, ids, None, positions, segments, train=train, last_positions=last,
                                    rngs={"dropout": jax.random.key(7)} if train else None)
    return jax.jit(fn)(p)
  ours, theirs = run(cfg, params), run(plain_cfg, base)
  for a, b in zip(ours.hidden_states, theirs.hidden_states):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(ours.pooled), np.asarray(theirs.pooled))


def test_merged_lora_computes_what_the_branches_do():
  """Random B on every target: the encoder with its branches and the plain encoder with W + (alpha / r) A B agree to
  float32 rounding of the reassociated products."""
  cfg = TINY.replace(**LORA | dict(lora_layers=(0, 1)))
  params = _random(cfg, seed=2, identity=False)
  merged = merge_lora(cfg, params)
  change = np.abs(merged["layer_0"]["attention"]["qkv"]["kernel"] - params["layer_0"]["attention"]["qkv"]["kernel"])
  assert all(change[:, i].max() > 1e-2 for i in range(3))  # Each of query, key, value moved.
  assert _leaves(merged) == _shapes(base_config(cfg))
  ids, positions, segments = _packed_batch()
  apply = lambda c, p: jax.jit(lambda p: Encoder(c).apply({"params": p}, ids, None, positions, segments).last)(p)
  ours, plain = apply(cfg, params), apply(base_config(cfg), merged)
  # Each dense output sums ~96 products in another association ((x A) B vs x (A B)) through 2 blocks of post-LN (unit
  # scale): a few hundred float32 roundings of O(1) terms (measured 8.9e-8 on Zen 3, 1/340 of the bound); a branch on
  # the wrong slice or transposed moves the states by O(0.1).
  print(f"max |branches - merged| {np.abs(np.asarray(ours) - np.asarray(plain)).max():.3g}")
  assert_within(ours, plain, 512 * U32, 1.0, "merged LoRA vs branches")


@pytest.mark.parametrize("changes, field", [
    (dict(lora_rank=4, lora_targets=("query", "ffn")), "config.lora.targets"),
    (dict(lora_rank=65, lora_targets=("query",)), "config.lora.rank=65"),
    (dict(adapter_size=-1), "config.adapters.size=-1"),
    (dict(adapter_size=4, adapter_placement="middle"), "config.adapters.placement='middle'"),
    (dict(lora_rank=4, lora_targets=("query",), lora_layers=(2,)), "config.lora.layers"),
])
def test_bad_regime_fields_are_one_line_errors(changes, field):
  with pytest.raises(ConfigError, match=field.replace("(", r"\(").replace(".", r"\.")) as err:
    TINY.replace(**changes)
  assert "\n" not in str(err.value)


def test_peft_format_round_trip_and_refusals(tmp_path):
  """write_adapter -> read_adapter gives the branches and fields back exactly; an adapter for another base (a layer
  the encoder lacks, another width), another peft_type, or adapters to merge are refused with one line naming the
  tensor or field."""
  cfg = TINY.replace(lora_rank=4, lora_alpha=8.0, lora_targets=("query", "output"), lora_layers=(0, 1))
  params = _random(cfg, seed=1, identity=False)
  peft_format.write_adapter(tmp_path, cfg, params, base="all-MiniLM-L6-v2")
  fields, branches = peft_format.read_adapter(tmp_path, base_config(cfg))
  assert fields == {k: getattr(cfg, k) for k in fields}
  flat = flax.traverse_util.flatten_dict(branches)
  assert flat.keys() == {k for k in flax.traverse_util.flatten_dict(params) if any("lora_" in n for n in k)}
  for key, value in flat.items():
    np.testing.assert_array_equal(value, flax.traverse_util.flatten_dict(params)[key])
  narrow = TINY.replace(hidden_size=32, num_heads=4)
  shallow = TINY.replace(num_layers=1)
  for other, message in ((narrow, r"tensor base_model\.model\.encoder\.layer\.0\.attention\.self\.query\.lora_A\."
                                  r"weight has shape \[4, 64\], expected \[4, 32\].*hidden_size=32"),
                         (shallow, r"encoder\.layer\.1\..* layer 1, but the run's encoder has 1 layers")):
    with pytest.raises(ConfigError, match=message) as err:
      peft_format.read_adapter(tmp_path, other)
    assert "\n" not in str(err.value)
  config = json.loads((tmp_path / peft_format.CONFIG).read_text())
  (tmp_path / peft_format.CONFIG).write_text(json.dumps(config | {"peft_type": "IA3"}))
  with pytest.raises(ConfigError, match=r"adapter_config\.json: peft_type='IA3'; only plain LoRA"):
    peft_format.read_adapter(tmp_path, base_config(cfg))
  with pytest.raises(ConfigError, match=r"bottleneck adapters .* do not merge"):
    merge_lora(TINY.replace(**ADAPTERS), {})


def test_a_runs_regime_becomes_the_encoders_fields(tmp_path):
  """config.lora / config.adapters -> EncoderConfig's fields where the run builds its encoder (only under their
  regime); starting from init=peft:DIR, config.lora must agree with the adapter (one line naming the field)."""
  config = finetune.get_config("task=mrpc,runlocal")
  plain = run_encoder_config(config, 100)  # Regime "full": neither, whatever config.lora and config.adapters say.
  assert plain.lora_rank == plain.adapter_size == 0
  config.regime, config.lora.targets, config.lora.layers = "lora", "value,query", "top:1"
  cfg = run_encoder_config(config, 100)
  assert (cfg.lora_rank, cfg.lora_targets, cfg.lora_layers, cfg.adapter_size) == (8, ("query", "value"), (1,), 0)
  peft_format.write_adapter(tmp_path, cfg.replace(lora_rank=4), _random(cfg.replace(lora_rank=4)), base=None)
  config.init = f"peft:{tmp_path}"
  with pytest.raises(ConfigError, match=r"^config\.lora\.rank=8: the adapter of config\.init=.* has 4"):
    run_encoder_config(config, 100, starting=True)
  config.regime, config.adapters.placement, config.adapters.layers = "adapters", "feed_forward", "0"
  cfg = run_encoder_config(config, 100)
  assert (cfg.adapter_size, cfg.adapter_placement, cfg.adapter_layers, cfg.lora_rank) == (64, "feed_forward", (0,), 0)


@pytest.mark.slow  # Two compiled training forwards (full and last_positions): the point needs both.
def test_last_positions_keep_loras_dropout_masks():
  """Training with LoRA dropout, the last block computed at last_positions only gives the full block's rows there (its
  LoRA dropout masks are the full block's at those rows), as tests/encoder/test_model.py's plain block does."""
  cfg = TINY.replace(**LORA, lora_dropout=0.3, hidden_dropout=0.3)
  params = _random(cfg, seed=4, identity=False)
  ids, positions, segments = _packed_batch()
  wanted = jnp.asarray([[0, 3, 12], [0, 5, 20]])
  run = jax.jit(lambda last: Encoder(cfg).apply({"params": params}, ids, None, positions, segments, train=True,
                                                last_positions=last, rngs={"dropout": jax.random.key(2)}).last)
  full, part = np.asarray(run(None)), np.asarray(run(wanted))
  # Other summation orders on fewer query rows only (test_model.py's bound); a different mask moves rows by O(1).
  np.testing.assert_allclose(part, np.take_along_axis(full, np.asarray(wanted)[..., None], axis=1), rtol=1e-5,
                             atol=1e-5 * float(np.abs(full).max()))
