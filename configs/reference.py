"""The config reference page, docs/config.md, generated from the config files' own comments.

  python -m configs.reference > docs/config.md

Each experiment's default config is built (configs/pretrain.py; configs/finetune.py with its default task and init,
which reads only the checkpoint's config.json; configs/demo.py's two runs) and every field is listed with its default
and the comment of the line that assigns it: a trailing `# ...`, else the comment lines just above. A field is looked
up in the experiment's file first, then configs/common.py, then EncoderConfig in encoder/config.py (the `model.*`
fields); fine-tuning's `task.*` fields in their declarations by the task families first (`tasks.registry.
field_comments`: tasks/task_fields.py's COMMON and each family's `config_fields`) and an objective's own block
(`electra.*`) in its module's `CONFIG_FIELDS`, so the page cannot drift from the code; tests/configs/test_reference.py
fails when docs/config.md is out of date or a field has no comment.
"""

import ast
import io
import json
import re
import sys
import textwrap
import tokenize
from collections.abc import Mapping
from pathlib import Path

import ml_collections

from configs import demo, finetune, pretrain, rules
from encoder.fields import Rule
from objectives import registry as objective_registry
from tasks import regimes, registry

REPO = Path(__file__).resolve().parents[1]
# The local names that hold a config block in the config files, and the block's dotted prefix.
BLOCK_NAMES = {"config": "", "opt": "optimizer.", "task": "task."}
CLASS_BLOCKS = {"EncoderConfig": "model."}  # Dataclasses whose annotated fields are a config block.
COMMON, MODEL = "configs/common.py", "encoder/config.py"
TASK_FIELDS = "the task families' fields (tasks/task_fields.py)"  # A source that is the registry, not one file.
# A source that is the objectives' registry: config.electra's fields as objectives/electra.py declares them.
OBJECTIVE_FIELDS = "the objectives' fields (CONFIG_FIELDS in objectives/electra.py)"
MODULES = {"configs/pretrain.py": pretrain, "configs/finetune.py": finetune, "configs/demo.py": demo}
SITE_PACKAGES = re.compile(r"[^\s\"']*/(?:site|dist)-packages/")


def _comments(source: str) -> dict[int, tuple[str, bool]]:
  """Line number -> (comment text without '#', whether it stands alone on its line)."""
  lines, found = source.splitlines(), {}
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      row, col = token.start
      found[row] = (token.string.lstrip("#").strip(), not lines[row - 1][:col].strip())
  return found


def _dotted(target: ast.expr) -> str | None:
  """`config.data.max_length` -> "data.max_length", `opt.name` -> "optimizer.name"; None for other targets."""
  parts = []
  while isinstance(target, ast.Attribute):
    parts.append(target.attr)
    target = target.value
  if not parts or not isinstance(target, ast.Name) or target.id not in BLOCK_NAMES:
    return None
  return BLOCK_NAMES[target.id] + ".".join(reversed(parts))


def _assigned_fields(tree: ast.Module) -> list[tuple[str, ast.stmt]]:
  """(dotted field, statement) for every config-block assignment and config dataclass field, in source order."""
  fields: list[tuple[str, ast.stmt]] = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and (name := _dotted(node.targets[0])):
      fields.append((name, node))
    elif isinstance(node, ast.ClassDef) and node.name in CLASS_BLOCKS:
      fields += [(CLASS_BLOCKS[node.name] + item.target.id, item) for item in node.body
                 if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
  return sorted(fields, key=lambda field: field[1].lineno)


def _comment_of(statement: ast.stmt, comments: dict[int, tuple[str, bool]]) -> str:
  """The statement's trailing comment, else the comment lines directly above it, else ""."""
  for row in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1):  # Parsed: end_lineno is set.
    if row in comments and not comments[row][1]:
      return comments[row][0]
  above: list[str] = []
  row = statement.lineno - 1
  while row in comments and comments[row][1]:
    above.insert(0, comments[row][0])
    row -= 1
  return " ".join(above)


def comments_in(source: str) -> dict[str, str]:
  """Dotted field -> comment in one config file's source; the first commented assignment of a field wins (later ones
  are usually runlocal's overrides), and a field assigned only without one maps to ""."""
  comments = _comments(source)
  found: dict[str, str] = {}
  for name, statement in _assigned_fields(ast.parse(source)):
    if not found.get(name):
      found[name] = _comment_of(statement, comments)
  return found


def field_comments(path: str) -> dict[str, str]:
  """`comments_in` of a config file, by its path relative to the repository; for TASK_FIELDS, the comments the task
  families declare with their `task.*` fields."""
  if path == TASK_FIELDS:  # With the regimes' blocks (config.lora, config.adapters: tasks/regimes.py declares them).
    return {f"task.{name}": text for name, text in registry.field_comments().items()} | {
        f"{block}.{field.name}": field.comment for block, declared in regimes.BLOCKS.items() for field in declared}
  if path == OBJECTIVE_FIELDS:
    return {f"{name}.{field.name}": field.comment for name, declared in objective_registry.config_fields().items()
            for field in declared}
  return comments_in((REPO / path).read_text(encoding="utf-8"))


def _lookup(sources: list[str]) -> dict[str, str]:
  """Field -> comment over several files, the first file with a comment for a field winning."""
  merged: dict[str, str] = {}
  for path in reversed(sources):
    merged.update({name: text for name, text in field_comments(path).items() if text or name not in merged})
  return merged


def _leaves(config: ml_collections.ConfigDict, comments: dict[str, str], prefix: str = "") -> dict[str, object]:
  """Dotted field -> value. A block is expanded when the sources document its fields (model, data, ...), else it is
  one field (objective_weights, a dict keyed by objective)."""
  leaves = {}
  for key, value in config.items():
    name = prefix + key
    if isinstance(value, ml_collections.ConfigDict) and any(c.startswith(name + ".") for c in comments):
      leaves.update(_leaves(value, comments, name + "."))
    else:
      leaves[name] = value.to_dict() if isinstance(value, ml_collections.ConfigDict) else value
  return leaves


def _cell(text: str) -> str:
  """Text safe inside a Markdown table cell."""
  return text.replace("|", "\\|")


def _show(value: object) -> str:
  """A value as Python would write it, with machine-specific path prefixes removed, in backticks."""
  text = json.dumps(value) if isinstance(value, str) else repr(value)
  text = SITE_PACKAGES.sub("<site-packages>/", text.replace(str(REPO) + "/", ""))
  return f"`{_cell(text)}`"


EXPERIMENTS = {  # Name -> (config file, its default config, the files its comments come from).
    "pretrain": ("configs/pretrain.py", pretrain.get_config,
                 [OBJECTIVE_FIELDS, "configs/pretrain.py", COMMON, MODEL]),
    "finetune": ("configs/finetune.py", finetune.get_config, [TASK_FIELDS, "configs/finetune.py", COMMON, MODEL]),
}


def documented_fields(name: str) -> dict[str, tuple[object, str]]:
  """Experiment `name`'s fields as docs/config.md lists them: dotted field -> (default, comment)."""
  _, build, sources = EXPERIMENTS[name]
  comments = _lookup(sources)
  return {field: (value, comments.get(field, "")) for field, value in _leaves(build(), comments).items()}


def missing_comments() -> list[str]:
  """Every field of every default config that no source line comments, as "experiment: field"."""
  missing = []
  for name, (_, build, sources) in EXPERIMENTS.items():
    comments = _lookup(sources)
    missing += [f"{name}: {field}" for field in _leaves(build(), comments) if not comments.get(field)]
  return missing


def _field_table(leaves: dict[str, object], comments: dict[str, str], accepts: Mapping[str, Rule]
                 ) -> list[str]:
  rows = ["| field | default | accepts | meaning |", "|---|---|---|---|"]
  return rows + [f"| `{name}` | {_show(value)} | {_cell(accepts[name].describe())} | {_cell(comments[name])} |"
                 for name, value in leaves.items()]


def _diff_table(leaves: dict[str, object], base: dict[str, object], comments: dict[str, str], base_name: str
                ) -> list[str]:
  rows = [f"| field | value | {base_name} | note |", "|---|---|---|---|"]
  return rows + [f"| `{name}` | {_show(value)} | {_show(base.get(name))} | {_cell(comments.get(name, ''))} |"
                 for name, value in leaves.items() if base.get(name) != value]


def _constant(node: ast.expr, module_globals: dict[str, object]) -> object:
  """A literal, or a module-level constant's value (`steps=DEMO_STEPS`)."""
  return module_globals[node.id] if isinstance(node, ast.Name) else ast.literal_eval(node)


def argument_defaults(path: str) -> dict[str, object]:
  """The string arguments of a config file's get_config and their defaults (its `common.parse_arg` call)."""
  module_globals = vars(MODULES[path])
  for node in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8"))):
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parse_arg":
      return {keyword.arg: _constant(keyword.value, module_globals) for keyword in node.keywords
              if keyword.arg is not None}  # None: a **mapping, whose names the source does not spell.
  raise ValueError(f"{path} has no common.parse_arg call")


def _string_arguments(path: str) -> str:
  return ", ".join(f"`{name}={value!r}`" for name, value in argument_defaults(path).items())


def _experiment_section(name: str) -> list[str]:
  path, build, sources = EXPERIMENTS[name]
  comments = _lookup(sources)
  leaves = _leaves(build(), comments)
  accepts = rules.rules(finetuning=name == "finetune")
  return [f"## {path}", "", f"`--config {path}` with no string argument; its string arguments and their defaults: "
          f"{_string_arguments(path)}. Comments from {', '.join(sources)}; what each field accepts from "
          "configs/rules.py (checked before a run reads or writes anything).", "",
          *_field_table(leaves, comments, accepts), ""]


def _preset_section() -> list[str]:
  """Each fine-tuning task preset against the default one."""
  comments = _lookup(EXPERIMENTS["finetune"][2])
  default_task = str(argument_defaults("configs/finetune.py")["task"])
  base = _leaves(finetune.get_config(), comments)
  lines = ["## Fine-tuning task presets", "",
           f"`configs/finetune.py:task=NAME` (TASK_PRESETS): the fields each preset sets differently from the default "
           f"task, {default_task}.", ""]
  for task in finetune.TASK_PRESETS:
    if task != default_task:
      lines += [f"### task={task}", "",
                *_diff_table(_leaves(finetune.get_config(f"task={task}"), comments), base, comments, default_task), ""]
  return lines


def _demo_section() -> list[str]:
  """The two demo runs against the configs they start from."""
  runs = (("", "the MLM run", "pretrain", pretrain.get_config(), "configs/pretrain.py"),
          ("pos", "the POS run", "finetune", finetune.get_config("task=ud_pos"), "configs/finetune.py:task=ud_pos"))
  lines = ["## configs/demo.py", "", "`make demo`'s two runs add no field; they change these (the note is demo.py's "
           f"own comment where it has one, else the field's meaning). String arguments: "
           f"{_string_arguments('configs/demo.py')}.", ""]
  for arg, title, experiment, base, base_name in runs:
    comments = _lookup(["configs/demo.py", *EXPERIMENTS[experiment][2]])
    lines += [f"### `configs/demo.py{':' + arg if arg else ''}`: {title}", "",
              *_diff_table(_leaves(demo.get_config(arg or None), comments), _leaves(base, comments), comments,
                           f"`{base_name}`"), ""]
  return lines


def page() -> str:
  """docs/config.md's text."""
  if missing := missing_comments():
    raise ValueError(f"fields without a comment (add a one-line `# ...` after the assignment): {missing}")
  intro = ("Generated by `python -m configs.reference > docs/config.md` from the comments in the config files; "
           "tests/configs/test_reference.py fails when this page is out of date or a field has no comment. Every "
           "field can be overridden on the command line (`--config.optimizer.name=lamb --config.batch_size=64`); "
           "string arguments go after the file name (`--config configs/pretrain.py:size=mini,objectives=mlm+nsp`). "
           "The `model.*` fields are EncoderConfig's (encoder/config.py): a size preset's, or with `init` the "
           "checkpoint's own (fine-tuning's default, all-MiniLM-L6-v2). Paths inside the repository are shown "
           "relative to it; relative data paths are read under the data directory ([data.md](data.md)). A field "
           "set explicitly (an override, or a string argument: `init=`, and `size=` and `arch=`, which ask for "
           "model fields) that the run does not read is refused in one line naming it and why (configs/given.py): a "
           "field of another task family, `task.format`, `files` or `columns` beside a packaged `task.dataset`, an "
           "objective's or regime's field when it is not in use (`electra.*`, `top_k`, `layer_decay` when frozen), "
           "a field another one overrides (`optimizer.warmup_steps` under `warmup_fraction`, `data.train_files` "
           "under `data.prepared`), an architecture field the architecture has no use for (RoPE's thetas with "
           "absolute positions), and with `init` every `model.*` field but those an init "
           "takes (dropout, `initializer_range`, the dtypes, `remat`, `attention`, `kernels`, `bf16_dots`), and "
           "another `data.tokenizer`: a run from an init has its checkpoint's architecture and vocabulary. A config "
           "file's own values (a task preset's) are never refused.")
  lines = ["# Config reference", "", textwrap.fill(intro, 118, break_on_hyphens=False, break_long_words=False), ""]
  for name in EXPERIMENTS:
    lines += _experiment_section(name)
  lines += _preset_section() + _demo_section()
  return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
  sys.stdout.write(page())


if __name__ == "__main__":
  main()
