"""Named bounds for comparing floats in the tests, each with the reason it holds (docs/testing.md).

u is a format's unit roundoff, the largest relative error of one rounding: |fl(x) - x| <= u |x|.

- Sums and dot products. A sum of n terms rounded in any order errs by at most `gamma(n)` = n u / (1 - n u) times
  sum|terms| (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed. 2002, eq. 3.5): every rounding
  pushing the same way. Kernels' roundings behave as independent with mean zero, and then the error is below
  `sum_bound(n)` ~ LAMBDA sqrt(n) u times sum|terms|, except with probability at most 2n exp(-LAMBDA^2 / 2) (Higham
  and Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm. 3.1);
  blocked and pairwise kernels (BLAS, XLA's reductions) do better still. Another ISA changes the order of the sum,
  not the bound.
- The bound is relative to the terms' magnitudes, not to the result: a result near zero made of large terms
  (cancellation) can have any relative error. So compare relative to the terms' scale (`assert_within`), never per
  element with an rtol where results cross zero.
- Softmax. Logit errors of at most delta scale each probability by a factor within exp(+-2 delta); with its own
  rounding (the normalizing sum, an exp, a division) a probability errs by `softmax_bound(delta, n)` relative. So
  softmax(s) v errs by at most that plus the product's sum_bound(n), times sum_j p_j |v_j| <= max|v|.
- LayerNorm. An error of at most delta on its input moves x - mean by at most 2 delta and the standard deviation by
  at most delta, so y = (x - mean) / sigma moves by at most (2 + |y|) delta / sigma: errors come out relative to the
  input's spread.
- Two float32 computations differ by at most the sum of their bounds; against float64 only ours counts. Where
  exactness is the point the reference is float64: numpy, or HF's model in double precision.
- A whole network's outputs or a training step's gradients chain too many of these for a useful closed form. There
  the reference is HF's model in float64, and our float32 error may be at most AS_ACCURATE times HF's own float32
  error on the same inputs (`assert_as_accurate`): the rounding noise of the same formulas, cancellation included,
  measured in the same run on the same CPU.
"""

import math

import numpy as np

U32 = 2.0**-24  # float32: 24 significand bits.
U_BF16 = 2.0**-8  # bfloat16: 8 significand bits.
U64 = 2.0**-53  # float64: 53 significand bits.
LAMBDA = 6.0  # A sum exceeds sum_bound with probability below 2 exp(-18) = 3e-8 per term.

# Measured, not derived: over the 258 gradient tensors and 6 losses of tests/launch/test_hf_gradient_parity.py,
# (max|ours - float64| - the sum_bound term) / max|HF float32 - float64| was at most 2.5 on an AMD EPYC Zen 3 (AVX2),
# 3.0 on a Zen 4 (AVX-512) and 11.0 on that Zen 4 under the numerics lane's AVX2 cap: layer 1's query bias and weight
# of the QA step, where HF's float32 happened to be 6x more accurate than on the same CPU uncapped (2.5e-11 against
# 1.6e-10) while ours stayed at 2.8e-10 either way. 32 leaves 3x over that; a wrong gradient (a missing factor, a
# wrong mask) is off by the gradient's own size, 1e4-1e5 times that noise.
AS_ACCURATE = 32.0


def gamma(n: int, u: float = U32) -> float:
  """The worst-case relative bound of a sum or dot product of n terms (relative to the sum of their magnitudes)."""
  assert n * u < 1, n
  return n * u / (1 - n * u)


def sum_bound(n: int, u: float = U32) -> float:
  """The probabilistic bound of a sum or dot product of n terms relative to the sum of their magnitudes:
  exp(LAMBDA sqrt(n) u + n u^2 / (1 - u)) - 1 ~ LAMBDA sqrt(n) u (Higham and Mary 2019)."""
  return math.expm1(LAMBDA * math.sqrt(n) * u + n * u * u / (1 - u))


def softmax_bound(logit_error: float, n: int, u: float = U32) -> float:
  """The relative error of each probability of a softmax over n logits, each off by at most `logit_error` (absolute,
  their own rounding included): exp(2 delta) - 1 from the logits, sum_bound(n) from the normalizing sum, 3u from the
  shift, the exp and the division."""
  return math.expm1(2 * logit_error) + sum_bound(n, u) + 3 * u


def assert_within(got, want, bound: float, scale, what: str = "") -> None:
  """|got - want| <= bound * scale elementwise; `scale` broadcasts against them (a number, or per element the sum of
  the magnitudes that element was summed from)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  error = np.abs(got - want)
  limit = bound * np.broadcast_to(np.asarray(scale, np.float64), error.shape)
  if not (error <= limit).all():
    worst = np.unravel_index(np.argmax(np.where(np.isnan(error), np.inf, error - limit)), error.shape)
    raise AssertionError(f"{what}: |got - want| = {error[worst]:.3g} at {worst} > {bound:.3g} x scale "
                         f"{limit[worst] / bound:.3g} (got {got[worst]!r}, want {want[worst]!r})")


def assert_as_accurate(ours, theirs, exact, n: int, what: str = "") -> None:
  """Our float32 result is as accurate as theirs (HF's float32 model on the same inputs) against the float64 result
  `exact`: max|ours - exact| <= AS_ACCURATE max|theirs - exact| + sum_bound(n) max|exact|. The second term is the
  float32 rounding of the last reduction alone (n terms: the tokens a weight's gradient sums over, say), which any
  float32 result carries even where theirs happens to be exact."""
  ours, theirs, exact = (np.asarray(x, np.float64) for x in (ours, theirs, exact))
  error, noise = float(np.abs(ours - exact).max()), float(np.abs(theirs - exact).max())
  limit = AS_ACCURATE * noise + sum_bound(n) * float(np.abs(exact).max())
  assert error <= limit, (f"{what}: max|ours - float64| = {error:.3g} > {limit:.3g} ({AS_ACCURATE:g} x HF float32's "
                          f"{noise:.3g} + sum_bound({n}) x max|float64| {float(np.abs(exact).max()):.3g})")
