"""Which encoder layers a contextual embedding is taken from, and their mix (spec, "Contextual Embeddings").

A layer spec names one layer ("last", "0".."L", "-1"), several kept separate ("3,4,5", "all") or a reduction
("last4_mean", "last4_sum", "mean:3,4,5", "sum:3,4,5"). Layer 0 is the embedding output, layer L the last block, as
`EncoderOutput.hidden_states`; negative numbers count from the end. The same code selects from numpy arrays on the
host and jax arrays inside a jitted function, so the mix is computed where the hidden states are.
"""

import dataclasses
from typing import Any

import jax.numpy as jnp

from encoder import errors

FORMS = ('"last", a layer number "0".."L" (0 = embeddings) or "-1", several "3,4,5" (kept separate), "all", '
         '"last4_mean", "last4_sum", "mean:3,4,5", "sum:3,4,5"')


@dataclasses.dataclass(frozen=True)
class LayerSpec:
  """Layers by number (negative from the end; None = every layer) and how they combine.

  reduce: "one" (a single layer, [..., H]), "stack" (kept separate, [..., k, H]), "mean" or "sum" ([..., H]).
  """
  layers: tuple[int, ...] | None
  reduce: str
  text: str = ""  # The spec as written (for messages and metadata).

  def indices(self, num_layers: int) -> tuple[int, ...]:
    """The selected layers as indices 0..num_layers into the num_layers + 1 hidden states."""
    if self.layers is None:
      return tuple(range(num_layers + 1))
    out = []
    for layer in self.layers:
      index = layer + num_layers + 1 if layer < 0 else layer
      if not 0 <= index <= num_layers:
        raise errors.UserError(f"layer spec {self.text!r}: layer {layer} does not exist in an encoder of "
                               f"{num_layers} layers (0..{num_layers}, or -{num_layers + 1}..-1 from the end)")
      out.append(index)
    return tuple(out)

  def width(self, num_layers: int) -> int | None:
    """How many layers stay separate in the result (None: one vector per position, [..., H])."""
    return len(self.indices(num_layers)) if self.reduce == "stack" else None


def _numbers(spec: str, text: str) -> tuple[int, ...]:
  try:
    numbers = tuple(int(part) for part in text.split(","))
  except ValueError:
    raise errors.UserError(f"bad layer spec {spec!r}: {text!r} is not a comma-separated list of layer numbers; "
                           f"accepted forms: {FORMS}") from None
  if len(set(numbers)) != len(numbers):
    raise errors.UserError(f"bad layer spec {spec!r}: a layer is listed twice; accepted forms: {FORMS}")
  return numbers


def parse_layers(spec: "str | LayerSpec") -> LayerSpec:
  """A layer spec string (module docstring) -> LayerSpec; a bad one raises UserError naming the accepted forms."""
  if isinstance(spec, LayerSpec):
    return spec
  text = str(spec).strip().lower()
  if text == "last":
    return LayerSpec((-1,), "one", spec)
  if text == "all":
    return LayerSpec(None, "stack", spec)
  if text.startswith("last") and text[4:].partition("_")[2] in ("mean", "sum"):
    count, _, reduce = text[4:].partition("_")
    if not count.isdigit() or int(count) < 1:
      raise errors.UserError(f"bad layer spec {spec!r}: expected lastN_mean or lastN_sum with N >= 1 (e.g. "
                             f"last4_mean); accepted forms: {FORMS}")
    return LayerSpec(tuple(range(-int(count), 0)), reduce, spec)
  reduce, colon, numbers = text.partition(":")
  if colon:
    if reduce not in ("mean", "sum") or not numbers:
      raise errors.UserError(f"bad layer spec {spec!r}: expected mean:<layers> or sum:<layers>; accepted forms: "
                             f"{FORMS}")
    return LayerSpec(_numbers(spec, numbers), reduce, spec)
  if not text:
    raise errors.UserError(f"empty layer spec; accepted forms: {FORMS}")
  layers = _numbers(spec, text)
  return LayerSpec(layers, "one" if len(layers) == 1 and "," not in text else "stack", spec)


def select_layers(hidden: Any, spec: "str | LayerSpec") -> Any:
  """hidden [..., num_layers + 1, H] (numpy or jax) -> [..., H] (one layer, mean, sum) or [..., k, H] (several).

  spec: a string for `parse_layers` or a LayerSpec. Mean and sum are over the selected layers (e.g. the last four,
  spec "last4_mean").
  """
  spec = parse_layers(spec)
  indices = spec.indices(hidden.shape[-2] - 1)
  if spec.reduce == "one":
    return hidden[..., indices[0], :]
  taken = hidden if spec.layers is None else hidden[..., list(indices), :]
  if spec.reduce == "stack":
    return taken
  return taken.mean(axis=-2) if spec.reduce == "mean" else taken.sum(axis=-2)


def select_from_states(hidden_states: "tuple | list", spec: "str | LayerSpec") -> Any:
  """The same selection from the encoder's tuple of num_layers + 1 arrays [..., H] (jax inside jit): stacks only
  the selected layers, so a single layer or the last four never materialize the rest."""
  spec = parse_layers(spec)
  indices = spec.indices(len(hidden_states) - 1)
  if spec.reduce == "one":
    return hidden_states[indices[0]]
  taken = jnp.stack([hidden_states[i] for i in indices], axis=-2)
  if spec.reduce == "stack":
    return taken
  return taken.mean(axis=-2) if spec.reduce == "mean" else taken.sum(axis=-2)
