"""Layer specs and the layer mix against numpy indexing by hand."""

import jax.numpy as jnp
import numpy as np
import pytest

from tasks.embeddings.layers import parse_layers, select_from_states, select_layers

# hidden [sentences=2, positions=3, layers=5 (embeddings + 4 blocks), H=4]
HIDDEN = np.random.default_rng(0).normal(size=(2, 3, 5, 4)).astype(np.float32)

CASES = {  # spec -> the expected result from HIDDEN, written out by hand.
    "last": HIDDEN[:, :, 4],
    "0": HIDDEN[:, :, 0],
    "-1": HIDDEN[:, :, 4],
    "-5": HIDDEN[:, :, 0],
    "2": HIDDEN[:, :, 2],
    "3,1,4": np.stack([HIDDEN[:, :, 3], HIDDEN[:, :, 1], HIDDEN[:, :, 4]], axis=2),
    "all": HIDDEN,
    "last4_mean": (HIDDEN[:, :, 1] + HIDDEN[:, :, 2] + HIDDEN[:, :, 3] + HIDDEN[:, :, 4]) / 4,
    "last4_sum": HIDDEN[:, :, 1] + HIDDEN[:, :, 2] + HIDDEN[:, :, 3] + HIDDEN[:, :, 4],
    "last2_mean": (HIDDEN[:, :, 3] + HIDDEN[:, :, 4]) / 2,
    "mean:0,2": (HIDDEN[:, :, 0] + HIDDEN[:, :, 2]) / 2,
    "sum:1,-1": HIDDEN[:, :, 1] + HIDDEN[:, :, 4],
}


@pytest.mark.parametrize("spec", sorted(CASES))
def test_select_layers_equals_the_hand_indexed_reference(spec):
  # float32 sums and means of at most 4 layers: measured equal on Zen 3; another order would differ by a few roundings
  # of u |h| ~ 1e-7 (|h| < 4.1); a wrong or missing layer is off by O(1).
  np.testing.assert_allclose(select_layers(HIDDEN, spec), CASES[spec], rtol=1e-6, atol=1e-6)
  states = tuple(jnp.asarray(HIDDEN[:, :, i]) for i in range(5))  # The encoder's tuple, as inside the jit.
  np.testing.assert_allclose(np.asarray(select_from_states(states, spec)), CASES[spec], rtol=1e-6, atol=1e-6)


def test_widths_say_which_layers_stay_separate():
  assert parse_layers("last").width(4) is None and parse_layers("last4_mean").width(4) is None
  assert parse_layers("3,4").width(4) == 2 and parse_layers("all").width(4) == 5
  assert parse_layers("last4_mean").indices(6) == (3, 4, 5, 6)


@pytest.mark.parametrize("spec", ["", "top", "last4", "last0_mean", "lastx_sum", "1,,2", "max:1,2", "mean:", "2,2",
                                  "1.5"])
def test_a_bad_spec_names_itself_and_the_accepted_forms(spec):
  with pytest.raises(ValueError, match="accepted forms"):
    parse_layers(spec)


@pytest.mark.parametrize("spec", ["5", "-6", "last6_mean", "mean:0,9"])
def test_a_layer_the_model_lacks_is_refused(spec):
  with pytest.raises(ValueError, match="does not exist in an encoder of 4 layers"):
    select_layers(HIDDEN, spec)
