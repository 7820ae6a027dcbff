"""Imported by Python's `site` at start-up in a process whose PYTHONPATH holds this folder (tests.faults.environment
puts it there): arms the fault the environment names (tests/faults.py). Not a package: this folder is on the path of
fault-injected test runs only."""

import json
import os

if os.environ.get("ENCODERLAB_TEST_FAULTS"):
  from tests import faults  # The repository root follows this folder on PYTHONPATH.
  faults.install(json.loads(os.environ[faults.ENV]))
