"""Linear-chain CRF against brute force over all K^T paths: log Z, Viterbi, NLL, constraints, jit, gradients.

The CRF runs in float32, the brute force in float64. A path score sums 2T + 1 terms and the forward algorithm adds at
most (K + 3) u of the partial scores' magnitude per step (a logsumexp of K terms, an addition), so over T <= 5 steps
of K <= 5 tags with partial scores below ~20 the error is at most T (K + 3) u 20 = 5e-5 in the worst case (u = 2^-24,
tests/tolerances.py), within rtol 1e-5 of |log Z| ~ 10 plus atol 1e-5; measured at most 1.7e-6 on Zen 3 (1.3% of the
bounds). A wrong transition, start or end score, or a padded step counted, moves a score by O(1).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import crf
from tasks.scoring import tag_schemes

BATCH, TIME, TAGS = 5, 4, 3
LENGTHS = np.array([4, 3, 2, 1, 0])


@pytest.fixture(scope="module")
def problem():
  rng = np.random.default_rng(0)
  emissions = rng.normal(size=(BATCH, TIME, TAGS)).astype(np.float32) * 2
  params = [rng.normal(size=s).astype(np.float32) for s in ((TAGS, TAGS), (TAGS,), (TAGS,))]
  return emissions, np.asarray(crf.length_mask(LENGTHS, TIME)), params


@pytest.fixture(scope="module")
def jitted():
  return dict(log_z=jax.jit(crf.log_partition), viterbi=jax.jit(crf.viterbi),
              nll=jax.jit(crf.negative_log_likelihood), score=jax.jit(crf.path_score))


def brute_force(emissions, length, transitions, start, end, allowed=None):
  """{path: score} over every path of `length` tags (those with only allowed moves when `allowed` is given)."""
  scores = {}
  for path in itertools.product(range(emissions.shape[-1]), repeat=length):
    moves = list(itertools.pairwise(path))
    if allowed is not None and not (allowed[1][path[0]] and allowed[2][path[-1]]
                                    and all(allowed[0][i, j] for i, j in moves)):
      continue
    scores[path] = (start[path[0]] + sum(emissions[t, y] for t, y in enumerate(path))
                    + sum(transitions[i, j] for i, j in moves) + end[path[-1]])
  return scores


def logsumexp(values):
  values = np.array(list(values), np.float64)
  return values.max() + np.log(np.exp(values - values.max()).sum())


def test_log_partition_and_viterbi_equal_brute_force(problem, jitted):
  emissions, mask, params = problem
  log_z = jitted["log_z"](emissions, mask, *params)
  paths, best = jitted["viterbi"](emissions, mask, *params)
  for b, length in enumerate(LENGTHS):
    if length == 0:
      assert log_z[b] == 0 and best[b] == 0 and not paths[b].any()
      continue
    scores = brute_force(emissions[b], length, *params)
    winner = max(scores, key=scores.get)
    np.testing.assert_allclose(log_z[b], logsumexp(scores.values()), rtol=1e-5, atol=1e-5)
    assert tuple(np.asarray(paths[b, :length])) == winner and not paths[b, length:].any()
    np.testing.assert_allclose(best[b], scores[winner], rtol=1e-5, atol=1e-5)


def test_nll_is_a_normalised_distribution_over_paths(problem, jitted):
  emissions, mask, params = problem
  b, length = 1, LENGTHS[1]
  paths = np.array(list(itertools.product(range(TAGS), repeat=length)))  # [K^T, length]
  tags = np.zeros((len(paths), TIME), np.int32)
  tags[:, :length] = paths
  many = lambda x: np.repeat(x[b:b + 1], len(paths), axis=0)
  nll = jitted["nll"](many(emissions), tags, many(mask), *params)
  # 27 probabilities from float32 NLLs, each off by at most the 5e-5 above (relative): the sum is 1 within 5e-5.
  np.testing.assert_allclose(np.exp(-np.asarray(nll, np.float64)).sum(), 1.0, rtol=1e-4)
  scores = brute_force(emissions[b], length, *params)
  np.testing.assert_allclose(jitted["score"](many(emissions), tags, many(mask), *params),
                             [scores[tuple(p)] for p in paths], rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_results(problem, jitted):
  emissions, mask, params = problem
  wider = np.concatenate([emissions, np.full((BATCH, 3, TAGS), 50.0, np.float32)], axis=1)  # Loud padding.
  wide_mask = np.asarray(crf.length_mask(LENGTHS, TIME + 3))
  # Padded steps are masked out: the same float32 operations on the real steps (measured equal on Zen 3).
  np.testing.assert_allclose(crf.log_partition(wider, wide_mask, *params), jitted["log_z"](emissions, mask, *params),
                             rtol=1e-6)
  np.testing.assert_array_equal(crf.viterbi(wider, wide_mask, *params)[0][:, :TIME],
                                jitted["viterbi"](emissions, mask, *params)[0])


@pytest.fixture(scope="module")
def bio_crf():
  vocab = tuple(tag_schemes.tag_vocab(["PER", "LOC"], "BIO"))
  model = crf.LinearChainCRF(tags=vocab, scheme="BIO")
  rng = np.random.default_rng(1)
  emissions = jnp.asarray(rng.normal(size=(6, 5, len(vocab))).astype(np.float32) * 3)
  emissions = emissions.at[:, :, 2].add(4.0)  # Favour I-PER everywhere, including where it is forbidden.
  mask = crf.length_mask(jnp.array([5, 5, 4, 3, 1, 2]), 5)
  variables = model.init(jax.random.key(0), emissions, mask)
  variables = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), jnp.float32), variables)
  return vocab, model, variables, emissions, mask


def test_constrained_viterbi_is_the_best_allowed_path_and_never_forbidden(bio_crf):
  vocab, model, variables, emissions, mask = bio_crf
  paths, best = jax.jit(model.apply)(variables, emissions, mask)
  allowed = tag_schemes.allowed_transitions(vocab, "BIO")
  params = [np.asarray(variables["params"][k]) for k in ("transitions", "start", "end")]
  lengths = np.asarray(mask.sum(axis=1))
  for b, length in enumerate(lengths):
    path = [int(t) for t in paths[b, :length]]
    tags = [vocab[t] for t in path]
    assert allowed[1][path[0]] and allowed[2][path[-1]]
    assert all(allowed[0][i, j] for i, j in itertools.pairwise(path)), tags
    assert tag_schemes.strict_spans(tags, "BIO") == tag_schemes.conlleval_spans(tags)  # Well formed.
    scores = brute_force(np.asarray(emissions[b]), length, *params, allowed=allowed)
    assert tuple(path) == max(scores, key=scores.get)
    np.testing.assert_allclose(best[b], max(scores.values()), rtol=1e-5)
  unconstrained = crf.viterbi(emissions, mask, *params)[0]
  assert (np.asarray(unconstrained) == 2).any() and not (np.asarray(paths[:, 0]) == 2).any()


def test_constrained_log_partition_sums_allowed_paths_only(bio_crf):
  vocab, model, variables, emissions, mask = bio_crf
  log_z = model.apply(variables, emissions, mask, method=model.log_partition)
  allowed = tag_schemes.allowed_transitions(vocab, "BIO")
  params = [np.asarray(variables["params"][k]) for k in ("transitions", "start", "end")]
  scores = brute_force(np.asarray(emissions[3]), 3, *params, allowed=allowed)
  np.testing.assert_allclose(log_z[3], logsumexp(scores.values()), rtol=1e-5)


def test_gradients_are_finite_and_skip_forbidden_transitions(bio_crf):
  vocab, model, variables, emissions, mask = bio_crf
  gold = jnp.asarray([[1, 2, 0, 3, 4]] * 6)  # B-PER I-PER O B-LOC I-LOC: well formed.

  def loss(variables, emissions):
    return model.apply(variables, emissions, gold, mask, method=model.nll).mean()

  value, (grad_vars, grad_emissions) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(variables, emissions)
  assert np.isfinite(value) and value > 0
  leaves = jax.tree.leaves(grad_vars) + [grad_emissions]
  assert all(np.isfinite(np.asarray(x)).all() for x in leaves)
  allowed = tag_schemes.allowed_transitions(vocab, "BIO")[0]
  grad_transitions = np.asarray(grad_vars["params"]["transitions"])
  assert not grad_transitions[~allowed].any() and grad_transitions[allowed].any()
