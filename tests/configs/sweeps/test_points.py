"""configs/sweeps/points.py: the lists of points sweep files build, importable without the engine."""

import subprocess
import sys
from pathlib import Path

from configs.sweeps import points

REPO = Path(__file__).resolve().parents[3]


def test_grid_product_and_seeds():
  assert points.grid(a=[1, 2], b=["x"]) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
  assert points.product([{"a": 1}], [{"b": 2}, {"a": 3}]) == [{"a": 1, "b": 2}, {"a": 3}]
  assert points.seeds([{"a": 1}, {"a": 2}], [0, 1]) == [{"a": 1, "seed": 0}, {"a": 1, "seed": 1},
                                                          {"a": 2, "seed": 0}, {"a": 2, "seed": 1}]


def test_sweep_files_do_not_import_the_engine():
  code = ("import sys, importlib; [importlib.import_module(f'configs.sweeps.{m}') for m in "
          "('example', 'objectives', 'sick_recipes', 'architecture', 'suite')]; "
          "print(sorted(m for m in sys.modules if m.split('.')[0] == 'launch'))")
  done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
  assert done.stdout.strip() == "[]"
