"""benchmarks.finetune flags a --reference run whose machine changed speed between the two sides, and refuses a
--reference it cannot mirror."""

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import finetune


@pytest.mark.parametrize("ceilings", [[940.0, 940.0, 940.0], [940.0, 830.0, 950.0], [500.0, 575.0]])
def test_no_warning_within_fifteen_percent(ceilings):
  assert finetune.drift_warning(ceilings) is None


@pytest.mark.parametrize("ceilings, listed", [([940.0, 520.0, 930.0], "940, 520, 930"), ([400.0, 461.0], "400, 461")])
def test_warning_names_the_ceilings(ceilings, listed):
  warning = finetune.drift_warning(ceilings)
  assert warning.startswith("warning: the matmul ceiling moved") and f"({listed} GFLOP/s" in warning
  assert "\n" not in warning


def test_reference_refuses_nested_span_ner():
  """HF's side of --reference is a tagger of the same entities: nested ones it cannot hold, so it is refused before
  anything trains."""
  result = subprocess.run([sys.executable, "-m", "benchmarks.finetune", "--task", "genia_nested", "--reference"],
                          capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=300)
  assert result.returncode == 2 and "cannot hold nested ones (task.nested)" in result.stderr
