"""Fine-tuning regimes: which parameters train, at which rate, and the fields each regime reads.

`full` trains everything; `frozen` the head only; `top_k` the top `top_k` layers and the head; the minimal
adjustments train a small part beside a frozen encoder: `lora` (Hu et al., 2021) its `lora_<target>` low-rank
updates, `adapters` (Houlsby et al., 2019) its `adapter_<placement>` bottlenecks and the LayerNorms of the layers
holding them (the paper's Figure 2 trains them; AdapterHub's `train_adapter` freezes them), `bitfit` (Ben Zaken et
al., 2022) every bias of the encoder (LayerNorm biases included, as the paper's equations and its HF code's
`"bias" in name`). The task heads (every tree beside `encoder`) always train; under lora, adapters and bitfit the
pooler is part of the frozen encoder, as in HF PEFT (whose `modules_to_save` is the classifier alone).
`trainable` says which parameters train; `update_scales` adds layer-wise LR decay. The step differentiates, and the
optimizer keeps state for, the trainable part alone (`select`; launch/steps.py); frozen parts are constants.
Depth is read from parameter paths: embeddings 0, `layer_{i}` i + 1, anything above the encoder (pooler, final
LayerNorm, task heads) num_layers + 1.
"""

import re
from typing import Any

import flax.traverse_util
import jax
import ml_collections
import numpy as np
import optax

from encoder import errors, runs
from encoder.fields import POSITIVE_INT, PROBABILITY, Check, Choice, Field, Number, defaults

REGIMES = ("full", "frozen", "top_k", "lora", "bitfit", "adapters")
LORA_TARGETS = ("query", "key", "value", "attention_output", "intermediate", "output")
PLACEMENTS = ("attention", "feed_forward", "both")
_LAYER = re.compile(r"layer_(\d+)$")


def _targets_problem(spec: Any) -> str | None:
  names = spec.split(",") if isinstance(spec, str) else [None]
  unknown = [n for n in names if n not in LORA_TARGETS]
  return None if not unknown and len(set(names)) == len(names) else (
      f"expected distinct projections among {', '.join(LORA_TARGETS)} (comma-separated)")


LAYERS = Check(runs.layers_problem, "'all', 'top:<k>' or comma-separated layer indices", ("top:", "1,,2", "last"))
# The fields of config.lora and config.adapters (configs/finetune.py declares the blocks from these; configs/rules.py
# checks them; `check` adds the rules that need the model and the regime).
LORA_FIELDS = (
    Field("rank", 8, POSITIVE_INT, "LoRA's rank r (1 to the model's width)"),
    Field("alpha", 16.0, Number(0.0, low_open=True), "LoRA's scale numerator: the update B A x is scaled by alpha / r"),
    Field("dropout", 0.0, PROBABILITY, "dropout on LoRA's input x (the A B path only), while training"),
    Field("targets", "query,value", Check(_targets_problem, "comma-separated projections among "
                                          + ", ".join(LORA_TARGETS), ("query,query", "ffn")),
          "the projections LoRA adapts: query, key, value, attention_output, intermediate (FFN in), output (FFN out)"),
    Field("layers", "all", LAYERS, "the layers that get LoRA: 'all', 'top:<k>' or indices '0,1,5'"),
)
ADAPTER_FIELDS = (
    Field("size", 64, POSITIVE_INT, "the bottleneck width m of each adapter (down d -> m, up m -> d)"),
    Field("placement", "both", Choice(PLACEMENTS),
          "where adapters sit: after the attention block, after the feed-forward block, or both (Houlsby's two)"),
    Field("layers", "all", LAYERS, "the layers that get adapters: 'all', 'top:<k>' or indices '0,1,5'"),
)
# The regimes whose checkpoints hold the trainable part alone (launch/checkpointing.py), their frozen rest being the
# run's init (its fingerprint in workdir: encoder.runs); encoder.init_from.run_params puts them on that base.
PARTIAL: tuple[str, ...] = ("lora", "bitfit", "adapters")
BLOCKS = {"lora": LORA_FIELDS, "adapters": ADAPTER_FIELDS}  # Each block is read by the regime of its name only.


def config_blocks() -> dict[str, ml_collections.ConfigDict]:
  """{"lora": ..., "adapters": ...}: the regime blocks with their defaults (configs/finetune.py)."""
  return {name: ml_collections.ConfigDict(defaults(declared)) for name, declared in BLOCKS.items()}


def field_rules() -> dict[str, Any]:
  """{"lora.rank": rule, ...} for configs/rules.py."""
  return {f"{name}.{f.name}": f.rule for name, declared in BLOCKS.items() for f in declared}


def layer_indices(spec: str, num_layers: int, field: str) -> tuple[int, ...]:
  """'all' | 'top:<k>' | '0,1,5' -> the layer indices, checked against num_layers (`field` names the config key)."""
  return runs.layer_indices(spec, num_layers, field)


def check(config: ml_collections.ConfigDict, *, num_layers: int, width: int) -> None:
  """The regime's rules that need the model or another field, each a one-line ConfigError naming the field: top_k in
  1..num_layers, a LoRA rank of at most the width, known layers, and no field of another regime's block changed from
  its default (a field the chosen regime does not read is a mistake, not a no-op). A `top_k` the user sets under
  another regime is refused by configs/given.py (a task preset's own top_k is not the user's)."""
  regime = config.regime
  if regime not in REGIMES:
    raise errors.ConfigError(f"config.regime={regime!r}: expected one of {', '.join(map(repr, REGIMES))}")
  if regime == "top_k" and not 1 <= config.top_k <= num_layers:
    raise errors.ConfigError(f"config.top_k={config.top_k}: regime 'top_k' trains the top top_k layers, expected 1 to "
                             f"config.model.num_layers={num_layers}")
  for name, declared in BLOCKS.items():
    block = config.get(name)
    if block is None:
      continue
    if name != regime:
      for f in declared:
        if block[f.name] != f.default:
          raise errors.ConfigError(f"config.{name}.{f.name}={block[f.name]!r} is read by regime {name!r} only, and "
                                   f"config.regime={regime!r}: leave it at its default {f.default!r}")
      continue
    for f in declared:
      problem = f.rule.problem(block[f.name])
      if problem:
        raise errors.ConfigError(f"config.{name}.{f.name}={block[f.name]!r}: {problem}")
    layer_indices(block.layers, num_layers, f"config.{name}.layers")
  if regime == "lora" and config.lora.rank > width:
    raise errors.ConfigError(f"config.lora.rank={config.lora.rank}: expected 1 to the model's width "
                             f"(config.model.hidden_size={width})")


def _names(path: tuple) -> list[str]:
  return [str(getattr(k, "key", getattr(k, "name", k))) for k in path]


def _depth(path: tuple, num_layers: int) -> tuple[int, bool]:
  """(depth, inside the encoder body) of a parameter path."""
  for name in _names(path):
    if name == "embeddings":
      return 0, True
    match = _LAYER.match(name)
    if match:
      return int(match.group(1)) + 1, True
  return num_layers + 1, False


def trainable(params: Any, *, num_layers: int, regime: str = "full", top_k: int = 0) -> Any:
  """A pytree like `params` of bools: True for the parameters that `regime` trains (the module docstring)."""
  if regime not in REGIMES:
    raise errors.ConfigError(f"config.regime={regime!r}: expected one of {', '.join(map(repr, REGIMES))}")
  if regime == "top_k" and not 0 < top_k <= num_layers:
    raise errors.ConfigError(f"config.top_k={top_k}: regime 'top_k' needs 0 < top_k <= num_layers ({num_layers})")
  with_adapters = {
      names[names.index("encoder") + 1] for names in (_names(p) for p, _ in jax.tree_util.tree_leaves_with_path(params))
      if "encoder" in names and any(n.startswith("adapter_") for n in names)}

  def trains(path, _) -> bool:
    names = _names(path)
    if regime == "full" or names[0] != "encoder":  # The task heads always train.
      return True
    depth, in_body = _depth(path, num_layers)
    if regime == "frozen":
      return not in_body
    if regime == "top_k":
      return not in_body or depth > num_layers - top_k
    if regime == "lora":
      return any(n.startswith("lora_") for n in names)
    if regime == "bitfit":
      return names[-1] == "bias"
    # adapters: the bottlenecks, and the LayerNorms of the layers that hold some.
    return any(n.startswith("adapter_") for n in names) or (
        len(names) > 2 and names[1] in with_adapters and any("layer_norm" in n for n in names))
  return jax.tree_util.tree_map_with_path(trains, params)


def update_scales(params: Any, *, num_layers: int, regime: str = "full", top_k: int = 0,
                  layer_decay: float = 1.0) -> Any:
  """A pytree like `params` of per-parameter update factors: 0 for what the regime freezes, else the layer-wise decay
  layer_decay^(num_layers + 1 - depth)."""
  trains = trainable(params, num_layers=num_layers, regime=regime, top_k=top_k)
  return jax.tree_util.tree_map_with_path(
      lambda path, t: float(layer_decay ** (num_layers + 1 - _depth(path, num_layers)[0])) if t else 0.0, trains)


def select(tree: Any, mask: Any) -> dict:
  """The leaves of `tree` (a nested dict like the params) where `mask` is True, as a nested dict; subtrees left
  without a leaf are dropped. The step's gradients, the optimizer's state and a partial checkpoint have this shape."""
  flat, keep = flax.traverse_util.flatten_dict(tree), flax.traverse_util.flatten_dict(mask)
  return flax.traverse_util.unflatten_dict({path: leaf for path, leaf in flat.items() if keep[path]})


def merge(tree: Any, part: Any) -> dict:
  """`tree` with the leaves of `part` (a `select`ed subtree) in place of its own."""
  flat = flax.traverse_util.flatten_dict(tree)
  flat.update(flax.traverse_util.flatten_dict(part))
  return flax.traverse_util.unflatten_dict(flat)


def scale_updates(scales: Any) -> optax.GradientTransformation:
  """Multiply each update by its static factor (see `update_scales`)."""
  def update(updates, state, params=None):
    return jax.tree.map(lambda u, s: u * np.asarray(s, u.dtype), updates, scales), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def trainable_fraction(params: Any, scales: Any) -> float:
  """Share of parameters that receive updates (reported at start of a fine-tuning run)."""
  sizes = jax.tree.leaves(jax.tree.map(lambda p, s: (np.size(p), s > 0), params, scales),
                          is_leaf=lambda x: isinstance(x, tuple))
  total = sum(n for n, _ in sizes)
  return sum(n for n, live in sizes if live) / max(total, 1)
