"""A linear-chain CRF over tag sequences (spec, "Sequence Labeling": a CRF layer on the per-token scores).

score(y) = start[y_0] + sum_t emissions[t, y_t] + sum_{t>0} transitions[y_{t-1}, y_t] + end[y_last];
p(y | x) = exp(score(y)) / Z. log Z comes from the forward algorithm and the best path from Viterbi, both
as `jax.lax.scan` over time in log space. Sequences are left-aligned in [batch, time] with a mask (or
lengths); rows of length 0 get log Z = score = 0. Transitions that a tag scheme forbids (B-X -> I-Y ...)
are set to FORBIDDEN, so decoding never takes them while any allowed path exists.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tasks.scoring import tag_schemes

Array = jax.Array
FORBIDDEN = -1e9  # Added score of a forbidden transition: exp() underflows to 0 against any real path.


def length_mask(lengths: Array, max_length: int) -> Array:
  """[batch] lengths -> [batch, max_length] bool mask of the first `length` positions."""
  return jnp.arange(max_length)[None, :] < jnp.asarray(lengths)[:, None]


def constrain(transitions: Array, start: Array, end: Array,
              allowed: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> tuple[Array, Array, Array]:
  """Sets forbidden transitions/starts/ends (from `tag_schemes.allowed_transitions`) to FORBIDDEN."""
  if allowed is None:
    return transitions, start, end
  transitions_ok, start_ok, end_ok = allowed
  return (jnp.where(jnp.asarray(transitions_ok), transitions, FORBIDDEN),
          jnp.where(jnp.asarray(start_ok), start, FORBIDDEN),
          jnp.where(jnp.asarray(end_ok), end, FORBIDDEN))


def _time_major(x: Array) -> Array:
  return jnp.swapaxes(x, 0, 1)


def log_partition(emissions: Array, mask: Array, transitions: Array, start: Array, end: Array) -> Array:
  """log Z [batch] by the forward algorithm; emissions [batch, time, tags], mask [batch, time] left-aligned."""
  emissions, mask = emissions.astype(jnp.float32), mask.astype(bool)

  def step(alpha, inputs):  # alpha: [batch, tags], log-sum of all prefixes ending in each tag.
    emission, on = inputs
    nxt = jax.nn.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + emission
    return jnp.where(on[:, None], nxt, alpha), None

  alpha0 = start[None] + emissions[:, 0]
  alpha, _ = jax.lax.scan(step, alpha0, (_time_major(emissions[:, 1:]), _time_major(mask[:, 1:])))
  return jnp.where(mask[:, 0], jax.nn.logsumexp(alpha + end[None], axis=-1), 0.0)


def path_score(emissions: Array, tags: Array, mask: Array, transitions: Array, start: Array, end: Array) -> Array:
  """score(y) [batch] of the tag paths `tags` [batch, time] (padding ignored)."""
  emissions, mask = emissions.astype(jnp.float32), mask.astype(bool)
  emit = jnp.take_along_axis(emissions, tags[..., None], axis=-1)[..., 0]
  moves = transitions[tags[:, :-1], tags[:, 1:]]
  lengths = mask.sum(axis=1)
  last = jnp.take_along_axis(tags, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
  score = (start[tags[:, 0]] + jnp.where(mask, emit, 0.0).sum(axis=1)
           + jnp.where(mask[:, 1:], moves, 0.0).sum(axis=1) + end[last])
  return jnp.where(lengths > 0, score, 0.0)


def negative_log_likelihood(emissions: Array, tags: Array, mask: Array, transitions: Array, start: Array,
                            end: Array) -> Array:
  """-log p(tags | x) [batch] = log Z - score(tags); 0 for empty rows."""
  return (log_partition(emissions, mask, transitions, start, end)
          - path_score(emissions, tags, mask, transitions, start, end))


def viterbi(emissions: Array, mask: Array, transitions: Array, start: Array, end: Array) -> tuple[Array, Array]:
  """Best paths [batch, time] int32 (0 at padding) and their scores [batch] (0 for empty rows)."""
  emissions, mask = emissions.astype(jnp.float32), mask.astype(bool)
  num_tags = emissions.shape[-1]

  def forward(best, inputs):  # best: [batch, tags], score of the best prefix ending in each tag.
    emission, on = inputs
    candidates = best[:, :, None] + transitions[None]  # [batch, previous, next]
    pointers = jnp.where(on[:, None], jnp.argmax(candidates, axis=1), jnp.arange(num_tags)[None])
    return jnp.where(on[:, None], jnp.max(candidates, axis=1) + emission, best), pointers

  best0 = start[None] + emissions[:, 0]
  best, pointers = jax.lax.scan(forward, best0, (_time_major(emissions[:, 1:]), _time_major(mask[:, 1:])))
  final = best + end[None]
  last = jnp.argmax(final, axis=-1)

  def backward(tag, pointer):  # Padding steps hold identity pointers, so the last real tag passes through.
    return jnp.take_along_axis(pointer, tag[:, None], axis=1)[:, 0], tag

  first, rest = jax.lax.scan(backward, last, pointers, reverse=True)
  paths = jnp.concatenate([first[None], rest], axis=0).T.astype(jnp.int32)
  return jnp.where(mask, paths, 0), jnp.where(mask[:, 0], jnp.max(final, axis=-1), 0.0)


class LinearChainCRF(nn.Module):
  """CRF parameters (transitions [K, K], start [K], end [K], zero-initialised) with optional scheme constraints."""
  tags: Sequence[str]  # The tag vocabulary, index order (e.g. tag_schemes.tag_vocab(types, "IOB2")).
  scheme: str | None = None  # Forbid transitions not well-formed in this scheme; None allows all.

  def setup(self):
    k = len(self.tags)
    self.transitions = self.param("transitions", nn.initializers.zeros, (k, k), jnp.float32)
    self.start = self.param("start", nn.initializers.zeros, (k,), jnp.float32)
    self.end = self.param("end", nn.initializers.zeros, (k,), jnp.float32)

  def constrained(self) -> tuple[Array, Array, Array]:
    """(transitions, start, end) with the scheme's forbidden entries set to FORBIDDEN."""
    allowed = None if self.scheme is None else tag_schemes.allowed_transitions(list(self.tags), self.scheme)
    return constrain(self.transitions, self.start, self.end, allowed)

  def __call__(self, emissions: Array, mask: Array) -> tuple[Array, Array]:
    """Viterbi decoding: best paths [batch, time] and scores [batch]."""
    return viterbi(emissions, mask, *self.constrained())

  def nll(self, emissions: Array, tags: Array, mask: Array) -> Array:
    """Negative log-likelihood [batch] of the gold paths."""
    return negative_log_likelihood(emissions, tags, mask, *self.constrained())

  def log_partition(self, emissions: Array, mask: Array) -> Array:
    """log Z [batch]."""
    return log_partition(emissions, mask, *self.constrained())
