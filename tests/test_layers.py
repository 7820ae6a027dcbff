"""The layering rules of DESIGN ("Contracts between parts"), checked on the source: nothing under encoder/,
objectives/, tasks/ or configs/ imports the engine (launch/), and outside a family's own module and the registry no
library module names a task family."""

import ast
from pathlib import Path

import pytest

from tasks import registry

REPO = Path(__file__).resolve().parents[1]
FAMILY_FILES = {"tasks/registry.py", "tasks/classification.py", "tasks/regression.py", "tasks/tagging.py",
                "tasks/span_ner.py", "tasks/question_answering.py"}


def _modules(*packages: str) -> list[Path]:
  return sorted(path for package in packages for path in (REPO / package).rglob("*.py"))


def _imports(tree: ast.AST) -> set[str]:
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names.add(node.module)
  return names


def _strings(tree: ast.AST) -> set[str]:
  """String constants, docstrings excluded."""
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
  return {node.value for node in ast.walk(tree)
          if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


@pytest.mark.parametrize("path", _modules("encoder", "objectives", "tasks", "configs"),
                         ids=lambda path: str(path.relative_to(REPO)))
def test_lower_layers_never_import_the_engine(path):
  imported = _imports(ast.parse(path.read_text(encoding="utf-8")))
  assert not {name for name in imported if name == "launch" or name.startswith("launch.")}


def test_no_library_module_outside_the_families_names_one():
  named = {}
  for path in _modules("encoder", "objectives", "tasks", "launch"):
    relative = str(path.relative_to(REPO))
    if relative not in FAMILY_FILES:
      found = _strings(ast.parse(path.read_text(encoding="utf-8"))) & set(registry.FAMILIES)
      if found:
        named[relative] = sorted(found)
  assert not named
