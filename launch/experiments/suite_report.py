"""The checkpoint suite's report (configs/sweeps/suite.py): per task the median over seeds of its metric, the suite
average, and with a second suite the two checkpoints compared task by task with paired-bootstrap p-values.

  python -m launch.experiments.suite_report runs/suite_minilm                       # one checkpoint
  python -m launch.experiments.suite_report runs/suite_minilm runs/suite_mini --out runs/suite_report   # A vs B
  python -m launch.experiments.suite_report runs/arch --by-point --baseline arch-bert   # an ablation's points

A path is a sweep root (or any directory of fine-tuning workdirs). Its finished runs are grouped by task: the preset
named in the point's config spec (`task=mrpc`, sweep_point.json), else the kind of run (family and dataset; such
runs are not matched to the suite's presets, so no "not run" list). A run's
score is results.json's value of its task's metric (config.task.metric, the one that picks the best checkpoint) on
test, or on dev where the preset has no test split (SST-2). The suite average is the mean over tasks of the medians
(of the tasks both checkpoints ran, when there are two). The p-value is `tasks.scoring.bootstrap.
median_over_seeds_bootstrap` on the runs' prediction files: every seed's predictions scored on the same resampled
test set, the median over seeds of each checkpoint compared, tested in the direction of the observed difference (that
the better one's lead is not chance). An ablation's root (configs/sweeps/objectives.py, architecture.py) holds the
fine-tuning runs of several pretraining points: `--by-point` reads each point's runs (sweep_point.json's parent) as
one suite and gives a table of points x tasks, each point compared with `--baseline` task by task. Writes
OUT/suite.md and OUT/suite.json (every number); OUT defaults to PATH/suite_report for one path, else suite_report.
"""

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from configs.sweeps import suite
from encoder import cli, errors, files
from launch.experiments import report
from launch.experiments.sweep import POINT_FILE
from tasks import registry
from tasks.scoring import bootstrap, kinds

DEFAULT_SAMPLES = 10_000


def task_key(run: dict[str, Any]) -> str:
  """The preset a run fine-tuned (`task=` of its sweep point's config spec), else its kind ('tagging on conll2003')."""
  point = Path(run["workdir"]) / POINT_FILE
  spec = files.read_json(point).get("config", "") if point.is_file() else ""
  arguments = dict(item.partition("=")[::2] for item in spec.partition(":")[2].split(",") if item)
  return arguments.get("task") or run["kind"]


def finished_runs(path: str | Path) -> list[dict[str, Any]]:
  """The finished fine-tuning runs of a directory (report.load_run's records)."""
  return [run for run in map(report.load_run, report.find_workdirs([path])) if run["task"] and run["finished"]]


def by_task(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
  """{task: its runs, by seed}."""
  tasks: dict[str, list[dict[str, Any]]] = {}
  for run in runs:
    tasks.setdefault(task_key(run), []).append(run)
  return {task: sorted(runs, key=lambda r: r["seed"]) for task, runs in tasks.items()}


def task_runs(path: str | Path) -> dict[str, list[dict[str, Any]]]:
  """{task: its finished fine-tuning runs, by seed} of a suite directory; an error where they started from several
  pretraining points (an ablation's root, which --by-point reads)."""
  runs = finished_runs(path)
  parents = sorted({str(run["parent"]) for run in runs})
  if len(parents) > 1:
    raise errors.UserError(f"{path}: fine-tuning runs from {len(parents)} pretraining points ({', '.join(parents)}); "
                           "expected one checkpoint's suite (compare an ablation's points with --by-point)")
  return by_task(runs)


def point_runs(path: str | Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
  """{pretraining point: {task: its finished fine-tuning runs, by seed}} of an ablation's sweep root."""
  points: dict[str, list[dict[str, Any]]] = {}
  for run in finished_runs(path):
    if run["parent"] is not None:
      points.setdefault(run["parent"], []).append(run)
  return {point: by_task(runs) for point, runs in points.items()}


def task_order(suites: Sequence[dict[str, Any]]) -> list[str]:
  """The tasks of the suites: the suite's order (configs/sweeps/suite.py), then any other task."""
  return list(dict.fromkeys([t for t in suite.TASKS if any(t in s for s in suites)] + [t for s in suites for t in s]))


def scored_split(run: dict[str, Any]) -> str:
  """'test' where the run has test scores, else 'dev'."""
  return "test" if any(key.startswith("test ") for key in run["scores"]) else "dev"


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One task's row: its metric, split, seeds, per-seed scores (percent, results.json) and their median."""
  metric, split = runs[0]["task"]["metric"], scored_split(runs[0])
  values = [run["scores"][f"{split} {metric}"] for run in runs]
  return {"metric": metric, "split": split, "seeds": [run["seed"] for run in runs], "values": values,
          "median": statistics.median(values)}


def suite_average(rows: dict[str, dict[str, Any]], tasks: Sequence[str]) -> float | None:
  """The mean over `tasks` of their medians (None without tasks)."""
  return statistics.fmean(rows[t]["median"] for t in tasks) if tasks else None


def run_statistics(run: dict[str, Any], split: str) -> tuple[Any, np.ndarray, bootstrap.Metric] | None:
  """(the split's gold, the run's per-example statistics, the metric of their sums) from its prediction files, for
  its task's metric; None where the family or metric has no additive statistics (its scoring kind's `statistics`,
  tasks.scoring.kinds)."""
  task = run["task"]
  family = registry.FAMILIES.get(task["name"])
  kind = kinds.KINDS[family.scoring] if family is not None and family.scoring else None
  columns = kind.run_columns(Path(run["workdir"]) / "predictions", split) if kind and kind.run_columns else None
  if kind is None or columns is None:
    return None
  gold, pred = columns
  found = kind.statistics(task["metric"], gold, pred, positive=task["positive_label"] or None,
                          mode=task["score_mode"], scheme=task["scheme"] or None, version2=bool(task["unanswerable"]))
  return None if found is None else (gold, *found)


def compare_task(runs_a: Sequence[dict[str, Any]], runs_b: Sequence[dict[str, Any]], samples: int,
                 seed: int = 0) -> dict[str, Any]:
  """A vs B on one task: medians, their difference (points) and the bootstrap p-value that the better one wins."""
  row_a, row_b = summarize(runs_a), summarize(runs_b)
  out = {"median_a": row_a["median"], "median_b": row_b["median"], "delta": row_a["median"] - row_b["median"],
         "p_value": None, "better": None, "note": ""}
  if (row_a["metric"], row_a["split"]) != (row_b["metric"], row_b["split"]):
    out["note"] = f"not comparable: {row_a['split']} {row_a['metric']} vs {row_b['split']} {row_b['metric']}"
    return out
  found = [[run_statistics(run, row_a["split"]) for run in runs] for runs in (runs_a, runs_b)]
  if any(f is None for side in found for f in side):
    out["note"] = f"no per-example statistics for {row_a['metric']} of this task: no p-value"
    return out
  complete = cast(list[list[tuple[Any, np.ndarray, bootstrap.Metric]]], found)  # No None left (checked above).
  gold = complete[0][0][0]
  if any(f[0] != gold for side in complete for f in side):
    raise errors.UserError(f"{runs_b[0]['workdir']}: its gold {row_a['split']} examples differ from "
                           f"{runs_a[0]['workdir']}'s; a bootstrap needs runs scored on the same examples")
  (stats_a, stats_b), metric = ([f[1] for f in side] for side in complete), complete[0][0][2]
  a_leads = out["delta"] >= 0
  result = bootstrap.median_over_seeds_bootstrap(*((stats_a, stats_b) if a_leads else (stats_b, stats_a)), metric,
                                                 samples=samples, seed=seed)
  out.update(p_value=result.p_value, better="A" if out["delta"] > 0 else "B" if out["delta"] < 0 else "tie",
             samples=samples)
  return out


def build(paths: Sequence[str | Path], samples: int = DEFAULT_SAMPLES) -> dict[str, Any]:
  """The report's numbers: per suite the task rows and the average; with two suites, the comparison."""
  suites = [task_runs(path) for path in paths]
  tasks = task_order(suites)
  rows = [{task: summarize(runs) for task, runs in s.items()} for s in suites]
  shared = [t for t in tasks if all(t in r for r in rows)]
  out = {"paths": [str(p) for p in paths], "tasks": tasks, "rows": rows, "shared": shared,
         "averages": [suite_average(r, shared) for r in rows],
         "not_run": [t for t in suite.TASKS if t not in tasks] if set(tasks) & set(suite.TASKS) else [],
         "unfinished": report.unfinished_points(paths)}
  if len(suites) == 2:
    out["comparison"] = {t: compare_task(suites[0][t], suites[1][t], samples) for t in shared}
  return out


def build_points(path: str | Path, baseline: str | None, samples: int = DEFAULT_SAMPLES) -> dict[str, Any]:
  """The by-point report's numbers: per pretraining point its task rows and suite average (over the tasks every point
  ran) and, with a baseline point, every other point compared with it task by task."""
  points = point_runs(path)
  if not points:
    raise errors.UserError(f"{path}: no finished fine-tuning run of a sweep's pretraining point (sweep_point.json "
                           "with a parent) found")
  if baseline is not None and baseline not in points:
    raise errors.UserError(f"--baseline {baseline}: no finished fine-tuning run from that point in {path}; "
                           f"expected one of {', '.join(points)}")
  tasks = task_order(list(points.values()))
  rows = {point: {task: summarize(runs) for task, runs in s.items()} for point, s in points.items()}
  shared = [t for t in tasks if all(t in r for r in rows.values())]
  out = {"path": str(path), "baseline": baseline, "points": list(points), "tasks": tasks, "rows": rows,
         "shared": shared, "averages": {point: suite_average(r, shared) for point, r in rows.items()},
         "unfinished": report.unfinished_points([path])}
  if baseline is not None:
    out["comparison"] = {point: {t: compare_task(s[t], points[baseline][t], samples) for t in tasks
                                 if t in s and t in points[baseline]}
                         for point, s in points.items() if point != baseline}
  return out


def _cell(row: dict[str, Any] | None) -> str:
  if row is None:
    return "–"
  return f"{row['median']:.2f} ({', '.join(f'{v:.2f}' for v in row['values'])})"


def p_text(compared: dict[str, Any]) -> str:
  """A comparison's p-value to 4 decimals; one no resample reversed as '< 1/samples'."""
  return f"< {1 / compared['samples']:g}" if compared["p_value"] == 0 else f"{compared['p_value']:.4f}"


def _winner(better: str) -> str:
  return "tie" if better == "tie" else f"{better} better"


def markdown(numbers: dict[str, Any]) -> str:
  """The report as markdown: one row per task, then the suite average."""
  rows, paths, two = numbers["rows"], numbers["paths"], "comparison" in numbers
  names = ["A", "B"][:len(paths)] if two else ["score"]
  parts = ["# Checkpoint suite", "", *(f"- {name}: `{path}`" for name, path in zip(names, paths)), "",
           "Per task: the median over seeds of its metric (percent, results.json; test, dev where the preset has "
           "none), the seeds' scores in brackets. Suite average: the mean of the task medians"
           + (" over the tasks both ran. p: paired bootstrap over the scored examples (median over seeds of each side "
              "scored on the same resamples) that the better checkpoint's lead is not chance." if two else ".")
           , ""]
  head = ["task", "metric", "seeds"] + [f"{n} median (seeds)" for n in names] + (["A − B", "p"] if two else [])
  parts += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for task in numbers["tasks"]:
    first = next(r[task] for r in rows if task in r)
    cells = [task, f"{first['split']} {first['metric']}", " / ".join(str(len(r[task]["seeds"])) if task in r else "0"
                                                                     for r in rows)]
    cells += [_cell(r.get(task)) for r in rows]
    if two:
      c = numbers["comparison"].get(task)
      cells += ["–", "–"] if c is None else [
          f"{c['delta']:+.2f}", c["note"] or f"{p_text(c)} ({_winner(c['better'])})"]
    parts.append("| " + " | ".join(cells) + " |")
  averages = [f"{a:.2f}" if a is not None else "–" for a in numbers["averages"]]
  delta = (f"{numbers['averages'][0] - numbers['averages'][1]:+.2f}" if two and None not in numbers["averages"]
           else "–")
  parts.append(f"| **suite average** ({len(numbers['shared'])} tasks) | | | " + " | ".join(averages)
               + (f" | {delta} | |" if two else " |"))
  if numbers["not_run"]:
    parts += ["", f"Not run: {', '.join(numbers['not_run'])} (no finished runs; a preset that does not exist yet is "
              "left out of the sweep)."]
  if numbers["unfinished"]:
    parts += ["", "Not finished (sweep.jsonl; not in the table):", ""]
    parts += [f"- {name}: {why}" for name, why in numbers["unfinished"].items()]
  return "\n".join(parts) + "\n"


def markdown_points(numbers: dict[str, Any]) -> str:
  """The by-point report as markdown: one row per pretraining point, one column per task, then the suite average."""
  rows, baseline, comparison = numbers["rows"], numbers["baseline"], numbers.get("comparison", {})
  points = ([baseline] if baseline else []) + [p for p in numbers["points"] if p != baseline]
  most = max(len(r["seeds"]) for row in rows.values() for r in row.values())
  parts = ["# Checkpoint suite per pretraining point", "", f"- root: `{numbers['path']}`",
           *([f"- baseline: `{baseline}`"] if baseline else []), "",
           "Per cell: the median over seeds of the task's metric (percent, results.json; test, dev where the preset "
           f"has none) over {most} seeds (fewer where a cell says so)"
           + (". Against the baseline: the difference of medians and the paired bootstrap's p (median over seeds of "
              "each side scored on the same resamples) that the better side's lead is not chance: a point ahead with "
              "p < 0.05 is better, one behind with p < 0.05 worse." if baseline else ".")
           + " Suite average: the mean of the task medians over the tasks every point ran.", ""]
  first = {t: next(r[t] for r in rows.values() if t in r) for t in numbers["tasks"]}
  head = ["point", *(f"{t} ({first[t]['split']} {first[t]['metric']})" for t in numbers["tasks"]),
          f"suite average ({len(numbers['shared'])} tasks)"]
  parts += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for point in points:
    cells = [f"{point} (baseline)" if point == baseline else point]
    for task in numbers["tasks"]:
      row, c = rows[point].get(task), comparison.get(point, {}).get(task)
      if row is None:
        cells.append("–")
        continue
      count = len(row["seeds"])
      text = f"{row['median']:.2f}" + (f" [{count} seed{'s' * (count > 1)}]" if count != most else "")
      if c is not None:
        text += f" ({c['delta']:+.2f}, {c['note'] or 'p ' + p_text(c)})"
      cells.append(text)
    average, base = numbers["averages"][point], numbers["averages"].get(baseline)
    cells.append("–" if average is None else f"**{average:.2f}**" + (
        f" ({average - base:+.2f})" if point != baseline and base is not None else ""))
    parts.append("| " + " | ".join(cells) + " |")
  if numbers["unfinished"]:
    parts += ["", "Not finished (sweep.jsonl; not in the table):", ""]
    parts += [f"- {name}: {why}" for name, why in numbers["unfinished"].items()]
  return "\n".join(parts) + "\n"


def write(paths: Sequence[str | Path], out: str | Path, samples: int = DEFAULT_SAMPLES, by_point: bool = False,
          baseline: str | None = None) -> dict[str, Any]:
  """Writes OUT/suite.md and OUT/suite.json; returns the numbers. by_point: one ablation root, a row per point."""
  if by_point and len(paths) != 1:
    raise errors.UserError(f"--by-point reads one ablation's sweep root, got {len(paths)} paths")
  if baseline is not None and not by_point:
    raise errors.UserError("--baseline names an ablation's point: it needs --by-point")
  if not 1 <= len(paths) <= 2:
    raise errors.UserError(f"expected one suite directory, or two to compare, got {len(paths)}")
  numbers = build_points(paths[0], baseline, samples) if by_point else build(paths, samples)
  if not numbers["tasks"]:
    raise errors.UserError(f"{', '.join(map(str, paths))}: no finished fine-tuning run found")
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "suite.md").write_text((markdown_points if by_point else markdown)(numbers), encoding="utf-8")
  (out / "suite.json").write_text(json.dumps(numbers, indent=1) + "\n", encoding="utf-8")
  return numbers


def suite_main(argv: Sequence[str] | None = None) -> None:
  """Parses the command line, writes the report, prints it."""
  parser = cli.ArgumentParser(prog="python -m launch.experiments.suite_report", description=__doc__.split("\n")[0])
  parser.add_argument("paths", nargs="+", help="a suite's sweep root, or two (A then B) to compare")
  parser.add_argument("--out", help="output directory (default: <path>/suite_report for one path, else suite_report)")
  parser.add_argument("--samples", type=cli.integer(1), default=DEFAULT_SAMPLES, help="bootstrap samples")
  parser.add_argument("--by-point", action="store_true",
                      help="an ablation's root: one row per pretraining point (sweep_point.json's parent)")
  parser.add_argument("--baseline", help="with --by-point: the point every other is compared with (p-values)")
  args = parser.parse_args(argv)
  out = Path(args.out or (Path(args.paths[0]) / "suite_report" if len(args.paths) == 1 else "suite_report"))
  write(args.paths, out, args.samples, args.by_point, args.baseline)
  print((out / "suite.md").read_text(encoding="utf-8"), end="")


def main(argv: Sequence[str] | None = None) -> None:
  """`suite_main` with user errors as one line `error: ...`."""
  errors.run(suite_main, argv)


if __name__ == "__main__":
  main()
