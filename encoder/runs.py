"""A training run's workdir as the readers below the engine see it (encoder.init_from: launch.predict, launch.export,
the embedding commands, `init=run:`): the encoder its regime trains (`regime_fields`: config.lora and config.adapters
made EncoderConfig's LoRA and adapter fields) and the frozen base of a run whose checkpoints hold the trainable part
alone (tasks.regimes.PARTIAL: lora, bitfit, adapters; docs/regimes.md, "Checkpoints of lora, bitfit and adapters
runs"): the encoder its `init` gives (hf:, run:, peft:) over the one its seed initialises, as the run started from it
(launch.steps.init_state), and the fingerprint that says the init's weights are still those the run trained on.
"""

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from encoder import files
from encoder.config import LORA_TARGETS, EncoderConfig, from_fields
from encoder.errors import ConfigError
from encoder.files import Path
from encoder.model import Encoder

FILE = "base_fingerprint.json"  # In a partial run's workdir: its `init` and that init's weights' fingerprint.


def layers_problem(spec: Any) -> str | None:
  """What is wrong with a `layers` field (config.lora.layers, config.adapters.layers) before the model is known."""
  ok = isinstance(spec, str) and (spec == "all" or re.fullmatch(r"top:\d+", spec) or re.fullmatch(r"\d+(,\d+)*",
                                                                                                   spec))
  return None if ok else "expected 'all', 'top:<k>' or layer indices '0,1,5'"


def layer_indices(spec: str, num_layers: int, field: str) -> tuple[int, ...]:
  """'all' | 'top:<k>' | '0,1,5' -> the layer indices, checked against num_layers (`field` names the config key)."""
  problem = layers_problem(spec)
  if problem:
    raise ConfigError(f"{field}={spec!r}: {problem}")
  if spec == "all":
    return tuple(range(num_layers))
  if spec.startswith("top:"):
    k = int(spec[4:])
    if not 1 <= k <= num_layers:
      raise ConfigError(f"{field}={spec!r}: expected top:1 to top:{num_layers} (config.model.num_layers)")
    return tuple(range(num_layers - k, num_layers))
  indices = tuple(int(i) for i in spec.split(","))
  if len(set(indices)) != len(indices) or max(indices) >= num_layers:
    raise ConfigError(f"{field}={spec!r}: expected distinct layer indices 0 to {num_layers - 1} "
                      "(config.model.num_layers)")
  return tuple(sorted(indices))


def regime_fields(config: Mapping[str, Any], num_layers: int) -> dict[str, Any]:
  """EncoderConfig's LoRA fields from config.lora (regime "lora") or its adapter fields from config.adapters (regime
  "adapters"); {} for every other regime. `config`: a run's config (a ConfigDict, or its config.json as a dict)."""
  regime = config.get("regime", "full")
  if regime == "lora":
    lora = config["lora"]
    targets = tuple(t.strip() for t in str(lora["targets"]).split(",") if t.strip())
    return dict(lora_rank=lora["rank"], lora_alpha=float(lora["alpha"]), lora_dropout=float(lora["dropout"]),
                lora_targets=tuple(t for t in LORA_TARGETS if t in targets) + tuple(
                    t for t in targets if t not in LORA_TARGETS),  # An unknown one: EncoderConfig names it.
                lora_layers=layer_indices(lora["layers"], num_layers, "config.lora.layers"))
  if regime == "adapters":
    adapters = config["adapters"]
    return dict(adapter_size=adapters["size"], adapter_placement=adapters["placement"],
                adapter_layers=layer_indices(adapters["layers"], num_layers, "config.adapters.layers"))
  return {}


def encoder_config(config: Mapping[str, Any], vocab_size: int) -> EncoderConfig:
  """The encoder a run trains: its config.model (vocab_size 0 takes `vocab_size`) with its regime's fields."""
  cfg = from_fields(dict(config["model"]), vocab_size)
  return cfg.replace(**regime_fields(config, cfg.num_layers))


def fingerprint(pretrained: Mapping[str, Any] | None, seed: int) -> str:
  """SHA-256 of the encoder a run reads from its `init` (every array's path, dtype, shape and bytes, in path order),
  or of the seed of a random init: what a checkpoint of the trainable part alone needs unchanged (the task heads
  always train, so the frozen rest is the encoder's)."""
  digest = hashlib.sha256()
  if pretrained is None:
    digest.update(f"random init, seed {seed}".encode())
  for path, leaf in sorted(flax.traverse_util.flatten_dict((pretrained or {}).get("encoder", {})).items()):
    array = np.ascontiguousarray(np.asarray(leaf))
    digest.update(f"{'/'.join(map(str, path))} {array.dtype} {array.shape}".encode())
    digest.update(array.tobytes())
  return digest.hexdigest()


def changed_base(workdir: Path, config: Mapping[str, Any], found: str, reading: bool) -> ConfigError | None:
  """The one-line error for a partial run whose `init`'s weights no longer have the fingerprint it recorded (None
  when they have, or the run recorded none: its checkpoints hold the whole state)."""
  path = workdir / FILE
  if not path.is_file():
    return None
  recorded = files.read_json(path)["fingerprint"]
  if recorded == found:
    return None
  then = ("read the run with the weights it trained on" if reading else "restore those, or use a new --workdir")
  return ConfigError(
      f"config.init={config['init']!r}: its weights changed since the run in {workdir} started (fingerprint "
      f"{found[:12]}, recorded {recorded[:12]} in {path}), and its checkpoints hold the {config['regime']!r} "
      f"parameters alone, trained on the old weights: {then}")


def is_partial(workdir: Path) -> bool:
  """Whether the run in `workdir` checkpoints its trainable part alone (it recorded its base's fingerprint)."""
  return (workdir / FILE).is_file()


def base_params(workdir: Path, init_encoder: Any, vocab_size: int) -> dict[str, Any]:
  """{"encoder": tree}: the frozen base of the partial run in `workdir` (its config.json), refused in one line when
  its init's weights changed. `init_encoder`: the encoder tree its `config.init` gives (None for a random init);
  the leaves it lacks are the ones the run's seed initialised (launch.steps.init_state's key and module path)."""
  config = files.read_json(workdir / "config.json")
  error = changed_base(workdir, config, fingerprint(None if init_encoder is None else {"encoder": init_encoder},
                                                    config["seed"]), reading=True)
  if error is not None:
    raise error
  cfg = encoder_config(config, vocab_size)

  class _Run(nn.Module):
    """The run's model as far as its encoder goes: the same module path, so the same initialisation."""
    @nn.compact
    def __call__(self, ids: jax.Array) -> Any:
      return Encoder(cfg, name="encoder")(ids)

  key = jax.random.split(jax.random.PRNGKey(config["seed"]))[0]  # launch.steps.init_state's init key.
  init = lambda: _Run().init(key, jnp.zeros((1, 2), jnp.int32))["params"]["encoder"]
  loaded = flax.traverse_util.flatten_dict(init_encoder or {})
  shapes = flax.traverse_util.flatten_dict(jax.eval_shape(init))
  fresh = {} if shapes.keys() <= loaded.keys() else flax.traverse_util.flatten_dict(jax.jit(init)())
  tree = {path: jnp.asarray(loaded[path], shape.dtype) if path in loaded else fresh[path]
          for path, shape in shapes.items()}
  return {"encoder": flax.traverse_util.unflatten_dict(tree)}
