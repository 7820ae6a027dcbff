"""The layering rules of DESIGN ("Contracts between parts"), checked on the source: no package imports one above it
(encoder/, objectives/, tasks/, configs/, launch/, benchmarks/ from the ground up), no modules import each other in a
circle, and outside a family's own module and the registry no library module names a task family. Imports inside
functions count."""

import ast
from pathlib import Path

import pytest

from tasks import registry

REPO = Path(__file__).resolve().parents[1]
FLOORS = ("encoder", "objectives", "tasks", "configs", "launch", "benchmarks")  # Each imports only those before it.
FAMILY_FILES = {"tasks/registry.py", "tasks/classification.py", "tasks/regression.py", "tasks/tagging.py",
                "tasks/span_ner.py", "tasks/question_answering.py", "tasks/multiple_choice.py"}


def _modules(*packages: str) -> list[Path]:
  return sorted(path for package in packages for path in (REPO / package).rglob("*.py"))


def _name(path: Path) -> str:
  return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _file(module: str) -> Path | None:
  base = REPO / module.replace(".", "/")
  return next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.is_file()), None)


def _module_imports(path: Path) -> set[str]:
  """The modules of this repository that `path` imports anywhere in it, by dotted name: `from a import b` names a.b
  when b is a module, else a (a package that hands on names is its __init__.py); relative imports resolved."""
  package = _name(path).split(".")[:None if path.name == "__init__.py" else -1]
  names = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      base = ".".join((package[:len(package) - node.level + 1] if node.level else [])
                      + ([node.module] if node.module else []))
      names |= {f"{base}.{alias.name}" if _file(f"{base}.{alias.name}") else base for alias in node.names}
  return {name for name in names if _file(name)}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The sets of modules that import each other in a loop (strongly connected components of more than one)."""
  reach = {node: set() for node in graph}
  for node in graph:
    todo = list(graph[node])
    while todo:
      other = todo.pop()
      if other in graph and other not in reach[node]:
        reach[node].add(other)
        todo.extend(graph[other])
  circles = {tuple(sorted(other for other in reach[node] if node in reach[other]))
             for node in graph if node in reach[node]}
  return sorted(list(circle) for circle in circles)


def _strings(tree: ast.AST) -> set[str]:
  """String constants, docstrings excluded."""
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
  return {node.value for node in ast.walk(tree)
          if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


@pytest.mark.parametrize("path", _modules(*FLOORS), ids=lambda path: str(path.relative_to(REPO)))
def test_no_module_imports_a_floor_above_its_own(path):
  """encoder/, objectives/ and tasks/ never import configs/ (the data paths are encoder.paths), and nothing below
  launch/ imports the engine."""
  above = FLOORS[FLOORS.index(_name(path).split(".")[0]) + 1:]
  assert not sorted(name for name in _module_imports(path) if name.split(".")[0] in above)


def test_no_modules_import_each_other_in_a_circle():
  """A circle of imports (one inside a function included) makes a module part of what it depends on: its files have
  no order (issue 73: tasks/task_fields.py imported tasks/registry back inside a function)."""
  graph = {_name(path): _module_imports(path) - {_name(path)} for path in _modules(*FLOORS)}
  assert not _circles(graph)


def test_imports_inside_functions_and_circles_are_seen():
  assert "tasks.readers" in _module_imports(REPO / "tasks" / "task_fields.py")  # Imported in `_formats`' body.
  assert "launch.hf_modeling.configuration_encoderlab" in _module_imports(
      REPO / "launch" / "hf_modeling" / "modeling_encoderlab.py")  # A relative import.
  assert _circles({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"a"}}) == [["a", "b", "c"]]


def test_no_library_module_outside_the_families_names_one():
  named = {}
  for path in _modules("encoder", "objectives", "tasks", "launch"):
    relative = str(path.relative_to(REPO))
    if relative not in FAMILY_FILES:
      found = _strings(ast.parse(path.read_text(encoding="utf-8"))) & set(registry.FAMILIES)
      if found:
        named[relative] = sorted(found)
  assert not named


def test_the_encoder_packages_lazy_names_are_its_all_and_each_loads():
  """encoder/__init__.py imports its names on first use: its table and __all__ agree, and each name resolves."""
  import encoder
  assert sorted(encoder._HOMES) == sorted(encoder.__all__)
  assert all(getattr(encoder, name) is not None for name in encoder.__all__)
