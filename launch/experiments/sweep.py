"""Sweeps: many `launch.main` runs from one small Python file, run one after another or printed for a scheduler.

  python -m launch.experiments.sweep --sweep configs/sweeps/example.py --root runs/example   # run every point
  python -m launch.experiments.sweep --sweep configs/sweeps/objectives.py:budget=small --root runs/obj --print
  python -m launch.experiments.sweep --sweep configs/sweeps/example.py --root runs/example --only 'seed-1*'

A sweep file defines `get_sweep(arg: str | None) -> dict` (arg: the text after the file's ':'):

  {"config": "configs/finetune.py:task=sick",           # the base config spec, as launch.main's --config
   "common": {"epochs": 2},                              # optional: overrides of every point (not in the names)
   "points": [{"seed": 0}, {":task": "conll2003", "optimizer.learning_rate": 2e-4}, ...],
   "then": {"config": "configs/finetune.py", "points": [...]}}   # optional: a chain (see below)

A point is a dict of overrides: a key starting with ':' is a string argument of the config file (`:task` ->
`configs/finetune.py:task=...`), any other key a config field (`optimizer.learning_rate` ->
`--config.optimizer.learning_rate=2e-4`); a point's own overrides win over "common". `grid`, `product` and `seeds`
(configs/sweeps/points.py) build lists of points. With "then", every point of the chain's stage runs after each point
of this stage, with `:init=run:<that point's workdir>` (a pretraining point then its fine-tunings). Every point runs
in ROOT/NAME, NAME made of its overrides (`task-sick_seed-1`; a chained point: `<parent>__<its own>`). A point whose
results.json says it finished is skipped; any other resumes (the engine restores its workdir's newest checkpoint).
Each point runs as its own `python -m launch.main` process, so a crash stays in its point: it is recorded in
ROOT/sweep.jsonl and the sweep goes on (its chained points are skipped). ROOT/NAME/sweep_point.json holds the point's
overrides, group (its name without the seed, for `launch.experiments.report`), command and wall time. SIGTERM (a
preemption, `timeout`) stops the sweep after the running point, which gets the signal too, checkpoints and is
recorded as stopped; the same command later resumes it. The points share JAX's persistent compilation cache in
ROOT/xla_cache (JAX_COMPILATION_CACHE_DIR, unless the environment sets it): a program that another point already
compiled (the same model, recipe and batch shape: a group's other seeds) is loaded, not compiled again.
"""

import argparse
import collections
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from configs import checks
from configs.sweeps.points import SEED_KEY
from encoder import cli, errors, files

ARG_PREFIX = ":"  # Point keys starting with it are the config file's string arguments.
CHAIN_SEPARATOR = "__"  # Between a chained point's parent name and its own.
MAX_NAME = 120  # Longer names are cut (point_name).
LOG_NAME = "sweep.jsonl"
POINT_FILE = "sweep_point.json"
CACHE_ENV, CACHE_DIR = "JAX_COMPILATION_CACHE_DIR", "xla_cache"  # The points' shared compilation cache.
SWEEP_KEYS = ("config", "common", "points", "then")


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of a sweep."""
  name: str  # The workdir's name under the sweep root (filesystem- and config-argument-safe).
  group: str  # The name without the seed override: the runs `launch.experiments.report` averages.
  config: str  # The --config spec, with the point's string arguments merged in.
  overrides: dict[str, Any]  # Config fields -> --config.KEY=VALUE.
  parent: str | None  # The name of the point this one starts from (a chain), or None.


def _value_text(value: Any) -> str:
  """A value as config_flags parses it from the command line."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, (list, tuple)):
    return repr(tuple(value))
  return str(value)


def _name_part(key: str, value: Any) -> str:
  text = f"{key.removeprefix(ARG_PREFIX)}-{_value_text(value)}"
  return re.sub(r"[^A-Za-z0-9._+-]", "-", text)


def point_name(overrides: dict[str, Any]) -> str:
  """The workdir name of a point: its `key-value` pairs joined by '_', unsafe characters as '-' ('base' if none). A
  longer name than MAX_NAME is cut and ends with a hash of the name without its seed, then the seed, so that
  `--only '*seed-1'` and the eye still find a run's seed."""
  name = "_".join(_name_part(k, v) for k, v in overrides.items()) or "base"
  if len(name) > MAX_NAME:
    seed = f"_{_name_part(SEED_KEY, overrides[SEED_KEY])}" if SEED_KEY in overrides else ""
    rest = "_".join(_name_part(k, v) for k, v in overrides.items() if k != SEED_KEY)
    name = f"{rest[:MAX_NAME - 9 - len(seed)]}-{hashlib.sha1(rest.encode()).hexdigest()[:8]}{seed}"
  return name


def merge_spec(spec: str, args: dict[str, Any]) -> str:
  """'configs/f.py:task=sick,runlocal' + {'task': 'sst2'} -> 'configs/f.py:task=sst2,runlocal' (True: a bare word)."""
  path, _, arg = spec.partition(":")
  items: dict[str, str | None] = {}
  for item in filter(None, arg.split(",")):
    key, has_value, value = item.partition("=")
    items[key] = value if has_value else None
  for key, value in args.items():
    items[key] = None if value is True else _value_text(value)
  arg = ",".join(k if v is None else f"{k}={v}" for k, v in items.items())
  return f"{path}:{arg}" if arg else path


def _check_stage(stage: Any, where: str) -> None:
  if not isinstance(stage, dict) or not isinstance(stage.get("config"), str) or not stage["config"]:
    raise errors.UserError(f"{where}: expected a dict with 'config' (a config spec such as 'configs/finetune.py:task="
                        f"sick') and 'points' (a list of dicts), got {stage!r:.200}")
  unknown = sorted(set(stage) - set(SWEEP_KEYS))
  if unknown:
    raise errors.UserError(f"{where}: unknown key(s) {unknown}; expected {', '.join(SWEEP_KEYS)}")
  points = stage.get("points")
  if not isinstance(points, list) or not points or not all(isinstance(p, dict) for p in points):
    raise errors.UserError(f"{where}: 'points' must be a non-empty list of override dicts, got {points!r:.200}")
  if not isinstance(stage.get("common", {}), dict):
    raise errors.UserError(f"{where}: 'common' must be a dict of overrides, got {stage['common']!r:.200}")
  for i, point in enumerate([stage.get("common", {})] + points):
    for key, value in point.items():
      if not isinstance(key, str) or not key.strip(ARG_PREFIX) or value is None:
        raise errors.UserError(f"{where}: {f'point {i - 1}' if i else 'common'} {point!r:.200}: expected "
                            "'field': value or ':argument': value")
  if "then" in stage:
    _check_stage(stage["then"], f"{where} then")


def expand(sweep: dict[str, Any], root: str | Path, where: str = "sweep") -> list[Point]:
  """The sweep's points in running order (each chained point right after its parent's stage point)."""
  _check_stage(sweep, where)
  root = Path(root)

  def stage_points(stage: dict[str, Any], parent: Point | None) -> list[Point]:
    out = []
    for overrides in stage["points"]:
      merged = stage.get("common", {}) | overrides
      args = {k[len(ARG_PREFIX):]: v for k, v in merged.items() if k.startswith(ARG_PREFIX)}
      if parent is not None:
        args["init"] = f"run:{root / parent.name}"
      fields = {k: v for k, v in merged.items() if not k.startswith(ARG_PREFIX)}
      own = point_name(overrides)
      group = point_name({k: v for k, v in overrides.items() if k != SEED_KEY})
      prefix = "" if parent is None else parent.name + CHAIN_SEPARATOR
      point = Point(name=prefix + own, group=prefix + group, config=merge_spec(stage["config"], args),
                    overrides=fields, parent=None if parent is None else parent.name)
      out.append(point)
      if "then" in stage:
        out.extend(stage_points(stage["then"], point))
    return out

  points = stage_points(sweep, None)
  seen: dict[str, Point] = {}
  for point in points:
    if point.name in seen:
      raise errors.UserError(f"{where}: two points are both named {point.name!r} ({seen[point.name].config} and "
                          f"{point.config}); give them different overrides")
    seen[point.name] = point
  return points


def load_sweep(spec: str) -> dict[str, Any]:
  """Calls get_sweep(arg) of 'path/to/sweep.py[:arg]'."""
  path, _, arg = spec.partition(":")
  if not Path(path).is_file():
    raise errors.UserError(f"--sweep {spec}: {path} is not a file (expected a sweep file such as "
                        "configs/sweeps/example.py)")
  module = checks.load_python_file(path, f"sweep_{Path(path).stem}")
  if not callable(getattr(module, "get_sweep", None)):
    raise errors.UserError(f"{path}: expected a function get_sweep(arg) returning the sweep dict, found none")
  return module.get_sweep(arg or None)


def command(point: Point, root: str | Path, python: str = "python") -> list[str]:
  """The `launch.main` command line of a point."""
  return [python, "-m", "launch.main", f"--config={point.config}", f"--workdir={Path(root) / point.name}",
          *(f"--config.{k}={_value_text(v)}" for k, v in point.overrides.items())]


def is_finished(workdir: Path) -> bool:
  """Whether the workdir holds the results of a run that trained to the end (not stopped by SIGTERM)."""
  try:
    return not files.read_json(workdir / "results.json").get("stopped_early", False)
  except (OSError, ValueError):
    return False


def _last_error(lines: list[str]) -> str:
  errors = [line for line in lines if line.startswith("error:") or "Error" in line.split(":")[0]]
  return (errors or lines or ["(no output)"])[-1].strip()


def run_point(point: Point, root: Path, stop: list[bool]) -> dict[str, Any]:
  """Runs one point as a subprocess (its output streamed and kept in ROOT/NAME/sweep.log); returns its record. A
  SIGTERM meanwhile is passed on to the point (which saves a checkpoint and exits) and sets stop[0]."""
  workdir = root / point.name
  workdir.mkdir(parents=True, exist_ok=True)
  argv = command(point, root, python=sys.executable)
  info_path = workdir / POINT_FILE
  info = files.read_json(info_path) if info_path.is_file() else {"wall_s": 0.0, "attempts": 0}
  info |= {"name": point.name, "group": point.group, "config": point.config, "overrides": point.overrides,
           "parent": point.parent, "command": shlex.join(command(point, root))}
  start = time.time()
  with open(workdir / "sweep.log", "a", encoding="utf-8") as log:
    env = {CACHE_ENV: str((root / CACHE_DIR).absolute())} | os.environ
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               env=env)
    def terminate(*_):
      stop[0] = True
      process.send_signal(signal.SIGTERM)
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
      tail = list(collections.deque(_stream(process, log), maxlen=20))
    finally:
      signal.signal(signal.SIGTERM, previous)
    returncode = process.wait()
  wall = time.time() - start
  info["wall_s"] += wall
  info["attempts"] += 1
  info_path.write_text(json.dumps(info, indent=2) + "\n")
  status = "finished" if returncode == 0 and is_finished(workdir) else ("stopped" if returncode == 0 else "failed")
  record = {"name": point.name, "status": status, "returncode": returncode, "wall_s": round(wall, 3)}
  if status == "failed":
    record["error"] = _last_error(tail)
  return record


def _stream(process: subprocess.Popen, log) -> Iterator[str]:
  """The point's output lines, each copied to stdout and its log as it comes."""
  assert process.stdout is not None  # run_point opens the point with stdout=PIPE.
  for line in process.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    log.write(line)
    yield line


def run_sweep(points: Sequence[Point], root: str | Path) -> list[dict[str, Any]]:
  """Runs the unfinished points one after another; each outcome is appended to ROOT/sweep.jsonl."""
  root = Path(root)
  root.mkdir(parents=True, exist_ok=True)
  records, stop = [], [False]
  done: dict[str, bool] = {}  # {point name: whether it finished (or was skipped as finished)} of this run.
  with open(root / LOG_NAME, "a", encoding="utf-8") as log:
    for point in points:
      if stop[0]:  # SIGTERM during an earlier point: the rest are left for the next run.
        break
      if is_finished(root / point.name):
        record = {"name": point.name, "status": "skipped", "reason": "finished before (results.json)"}
      elif point.parent is not None and not done.get(point.parent, is_finished(root / point.parent)):
        record = {"name": point.name, "status": "blocked", "reason": f"{point.parent} did not finish"}
      else:
        print(f"=== sweep point {point.name}", flush=True)
        record = run_point(point, root, stop)
      done[point.name] = record["status"] in ("finished", "skipped")
      record["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
      log.write(json.dumps(record) + "\n")
      log.flush()
      records.append(record)
  return records


def select(points: Sequence[Point], patterns: Sequence[str]) -> list[Point]:
  """The points whose name matches one of the glob patterns (all points when there are none)."""
  chosen = [p for p in points if not patterns or any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)]
  if not chosen:
    raise errors.UserError(f"--only {' '.join(patterns)}: no point matches; the points are "
                        f"{', '.join(p.name for p in points)}")
  return chosen


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = cli.ArgumentParser(prog="python -m launch.experiments.sweep", description=__doc__.split("\n")[0])
  root.add_argument("--sweep", required=True, help="sweep file, optionally with its argument: path.py[:arg]")
  root.add_argument("--root", help="directory of the points' workdirs (default runs/<sweep file name>)")
  root.add_argument("--print", action="store_true", help="print one launch.main command per point, run nothing")
  root.add_argument("--only", action="append", default=[], help="run only points whose name matches this glob")
  return root


def sweep_main(argv: Sequence[str] | None = None) -> None:
  """Parses the command line, then prints or runs the points; exits 1 naming the failed points."""
  args = parser().parse_args(argv)
  if args.root and files.is_remote(args.root):  # Not through pathlib, which would make gs://b a local gs:/b.
    raise errors.UserError(f"--root {args.root}: a sweep root is a local directory (the sweep appends to its logs "
                           "there); copy finished runs to a bucket afterwards, e.g. gcloud storage cp -r")
  root = Path(args.root or Path("runs") / Path(args.sweep.partition(":")[0]).stem)
  points = select(expand(load_sweep(args.sweep), root, where=args.sweep), args.only)
  if args.print:
    for point in points:
      print(shlex.join(command(point, root)))
    return
  records = run_sweep(points, root)
  counts = {s: sum(r["status"] == s for r in records) for s in ("finished", "skipped", "stopped", "failed", "blocked")}
  print(f"sweep {root}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" (log: {root / LOG_NAME})")
  failed = [r["name"] for r in records if r["status"] in ("failed", "stopped", "blocked")]
  if failed:
    raise errors.UserError(f"{len(failed)} of {len(records)} points did not finish: {', '.join(failed)} (reasons in "
                        f"{root / LOG_NAME}; run the same command again to retry them)")


def main(argv: Sequence[str] | None = None) -> None:
  """`sweep_main` with user errors as one line `error: ...`."""
  errors.run(sweep_main, argv)


if __name__ == "__main__":
  main()
