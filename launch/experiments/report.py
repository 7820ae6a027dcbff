"""Reports of finished runs: a markdown table, paired-bootstrap p-values, loss and dev-metric curves, one HTML page.

  python -m launch.experiments.report runs/example [--baseline base] [--out runs/example/report]
  python -m launch.experiments.report runs/objectives --baseline objectives-mlm__task-sick \
      --baseline objectives-mlm__task-conll2003
  python -m launch.experiments.report runs/a runs/b runs/c --out reports/abc   # any workdirs

A path is a workdir (it holds config.json) or a directory of workdirs (a `launch.experiments.sweep` root). Runs are
grouped by their sweep group (the point name without its seed, from sweep_point.json; a plain workdir is its own
group) and one table is made per kind of run (pretraining, or a fine-tuning task on a dataset). A group's row gives
the mean ± the sample standard deviation (n - 1) over its runs of every dev and test score in results.json (`eval/...`
for pretraining), the steps, the sweep's wall time per run and the training tokens/s (the median over metrics.jsonl's
log lines after the first, which includes compilation). With --baseline (a group or run name; repeat it for tables
with different baselines), each other group of the baseline's table gets the `tasks.scoring.score bootstrap` p-value
that it beats the baseline on test (dev when there is no test split), run against run of the same seed, from the runs'
prediction files. Writes DIR/report.md, report.html (self-contained: the pictures inlined), report.json (every
number), <table>_curves.png (training loss and the dev metric over steps) and gold/ (the gold files the bootstrap
read, taken from the baseline's prediction files). A sweep root's points whose last attempt did not finish are listed
with their error (ROOT/sweep.jsonl)."""

import argparse
import base64
import contextlib
import html
import io
import json
import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from encoder import cli, errors, files
from launch.experiments.sweep import LOG_NAME, POINT_FILE
from tasks import registry
from tasks.scoring import kinds, score

DEFAULT_SAMPLES = 10_000


def find_workdirs(paths: Sequence[str | Path]) -> list[Path]:
  """The workdirs named by `paths`: each path itself if it holds config.json, else its subdirectories that do."""
  found = []
  remote = [str(p) for p in paths if files.is_remote(p)]
  if remote:  # Not through pathlib, which would make gs://b a local gs:/b.
    raise errors.UserError(f"{remote[0]}: reports read local workdirs; copy the runs down first, e.g. gcloud storage "
                           "cp -r")
  for path in map(Path, paths):
    if (path / "config.json").is_file():
      found.append(path)
    elif path.is_dir():
      found.extend(sorted(p for p in path.iterdir() if (p / "config.json").is_file()))
    else:
      raise errors.UserError(f"{path}: not a directory (expected a workdir or a sweep root)")
  if not found:
    raise errors.UserError(f"{', '.join(map(str, paths))}: no workdir (a directory with config.json) found")
  return found


def unfinished_points(paths: Sequence[str | Path]) -> dict[str, str]:
  """{point: its last sweep status and error} of the sweep roots' points whose last attempt did not finish (from
  ROOT/sweep.jsonl: failed, stopped, blocked; a point that failed before writing config.json is only there)."""
  last: dict[str, dict[str, Any]] = {}  # {point: its last sweep record}.
  for path in map(Path, paths):
    log = path / LOG_NAME
    if log.is_file():
      last |= {r["name"]: r for r in map(json.loads, log.read_text(encoding="utf-8").splitlines()) if r}
  return {name: f"{r['status']}: {r.get('error') or r.get('reason') or 'exit ' + str(r.get('returncode'))}"
          for name, r in last.items() if r["status"] not in ("finished", "skipped")}


def _read_json(path: Path) -> Any:
  return files.read_json(path) if path.is_file() else None


def load_run(workdir: Path) -> dict[str, Any]:
  """One workdir as {name, group, seed, kind, dev_metric, scores, steps, wall_s, tokens_per_second, curves, ...}."""
  config = _read_json(workdir / "config.json")
  results = _read_json(workdir / "results.json")
  point = _read_json(workdir / POINT_FILE) or {}
  records = files.read_json_lines(workdir / "metrics.jsonl") \
      if (workdir / "metrics.jsonl").is_file() else []
  # "" for pretraining; fields added since the run at their defaults.
  task = registry.complete_task(config["task"]) if isinstance(config.get("task"), dict) else None
  kind = f"{task['name']} on {task['dataset'] or 'files'}" if task else "pretraining"
  scores: dict[str, float] = {}
  if results:
    if "dev" in results or "test" in results:
      scores = {f"{split} {k}": v for split in ("dev", "test") for k, v in (results.get(split) or {}).items()}
    else:
      scores = dict(results.get("eval") or {})
  rates = [r["train/tokens_per_second"] for r in records if "train/tokens_per_second" in r]
  dev_metric = config.get("best_metric") or "eval/loss"
  return {"name": workdir.name, "workdir": str(workdir), "group": point.get("group", workdir.name),
          "parent": point.get("parent"),  # The pretraining point a sweep's fine-tuning run started from.
          "seed": config.get("seed", 0), "kind": kind, "task": task,
          "finished": bool(results) and not results.get("stopped_early", False), "scores": scores,
          "steps": results.get("step") if results else None, "wall_s": point.get("wall_s"),
          "tokens_per_second": statistics.median(rates[1:] or rates) if rates else None, "dev_metric": dev_metric,
          "loss_curve": [(r["step"], r["train/loss"]) for r in records if isinstance(r.get("train/loss"), float)],
          "dev_curve": [(r["step"], r[dev_metric]) for r in records if isinstance(r.get(dev_metric), float)]}


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
  """Mean and sample standard deviation (None for one value)."""
  return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def format_cell(values: Sequence[float]) -> str:
  """'mean ± std' (or the single value) as the tables print it: integers, and numbers whose mean or std is >= 1000,
  without decimals; >= 1 with 2; smaller ones with 4."""
  if not values or not all(math.isfinite(v) for v in values):
    return "–" if not values else "nan"
  mean, std = mean_std(values)
  size = max(abs(mean), std or 0.0)
  digits = 0 if all(isinstance(v, int) for v in values) or size >= 1000 else 2 if size >= 1 else 4
  return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


# Paired bootstrap (tasks.scoring.score bootstrap) on prediction files.

def prediction_files(run: dict[str, Any], split: str) -> tuple[str, Path, Path] | None:
  """(tasks.scoring.score bootstrap --task, prediction file, the split's gold source: the prediction file itself or
  the split's jsonl) of a run, or None without files or a kind its task can be bootstrapped with."""
  directory = Path(run["workdir"]) / "predictions"
  name = (run["task"] or {}).get("name")
  family = registry.FAMILIES.get(name) if name is not None else None
  kind = kinds.KINDS[family.scoring] if family is not None and family.scoring else None
  if kind is None or kind.bootstrap is None or not kind.tested(run["task"] or {}):
    return None
  pred = directory / f"{split}.{kind.suffix}"
  gold = pred if kind.gold_beside else directory / f"{split}.jsonl"
  return (kind.name, pred, gold) if pred.is_file() else None


def gold_text(task: str, source: Path) -> str:
  """The gold file of a split in tasks.scoring.score's format (for bootstrap --task `task`), from a run's prediction
  files."""
  make = kinds.KINDS[task].gold_text
  assert make is not None, f"scoring kind {task!r} bootstraps but has no gold_text"  # Every bootstrap kind has one.
  return make(source)


def bootstrap_p(task: str, gold: Path, pred_a: Path, pred_b: Path, samples: int) -> dict[str, Any]:
  """`python -m tasks.scoring.score bootstrap` on the files (its printed table discarded): that A beats B."""
  argv = ["bootstrap", "--gold", str(gold), "--pred-a", str(pred_a), "--pred-b", str(pred_b), "--task", task,
          "--samples", str(samples)]
  with contextlib.redirect_stdout(io.StringIO()):
    return score.bootstrap_command(score.parser().parse_args(argv))


def significance(runs: Sequence[dict[str, Any]], baseline: str, out: Path, slug: str,
                 samples: int) -> dict[str, list[dict[str, Any]]]:
  """{group: [bootstrap result per seed shared with the baseline]} for every other group of a table."""
  base_runs = {r["seed"]: r for r in runs if r["group"] == baseline and r["finished"]}
  tests: dict[str, list[dict[str, Any]]] = {}
  for group in dict.fromkeys(r["group"] for r in runs if r["group"] != baseline):
    for run in (r for r in runs if r["group"] == group and r["finished"] and r["seed"] in base_runs):
      base = base_runs[run["seed"]]
      split = "test" if prediction_files(base, "test") else "dev"
      files_a, files_b = prediction_files(run, split), prediction_files(base, split)
      if files_a is None or files_b is None:
        continue
      gold = out / "gold" / f"{slug}_{split}.{kinds.KINDS[files_b[0]].gold_suffix}"
      text = gold_text(files_b[0], files_b[2])
      if gold_text(files_a[0], files_a[2]) != text:
        raise errors.UserError(f"{files_a[2]}: its gold {split} examples differ from {files_b[2]}'s; a bootstrap "
                            "needs runs scored on the same examples")
      gold.parent.mkdir(parents=True, exist_ok=True)
      gold.write_text(text, encoding="utf-8")
      result = bootstrap_p(files_b[0], gold, files_a[1], files_b[1], samples)
      tests.setdefault(group, []).append(result | {"seed": run["seed"], "split": split, "gold": str(gold),
                                                   "pred_a": str(files_a[1]), "pred_b": str(files_b[1])})
  return tests


# Tables, curves and the page.

def slugify(text: str) -> str:
  """A file-name-safe form of a table title."""
  return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def build_table(runs: Sequence[dict[str, Any]], baseline: str | None, out: Path, samples: int) -> dict[str, Any]:
  """One table's numbers: per group the runs, every score's values, mean, std; p-values against the baseline."""
  slug = slugify(runs[0]["kind"])
  columns = list(dict.fromkeys(k for r in runs for k in r["scores"]))
  groups = {}
  order = sorted(dict.fromkeys(r["group"] for r in runs), key=lambda g: g != baseline)  # The baseline first.
  for group in order:
    members = [r for r in runs if r["group"] == group]
    done = [r for r in members if r["finished"]]
    cells = {}
    for key in columns + ["steps", "wall_s", "tokens_per_second"]:
      found = [r["scores"][key] if key in r["scores"] else r.get(key) for r in done]
      values = [v for v in found if isinstance(v, (int, float))]
      mean, std = mean_std(values) if values else (None, None)
      cells[key] = {"values": values, "mean": mean, "std": std, "text": format_cell(values)}
    groups[group] = {"runs": [r["name"] for r in members], "finished": len(done), "cells": cells}
  tests = significance(runs, baseline, out, slug, samples) if baseline else {}
  return {"title": runs[0]["kind"], "slug": slug, "columns": columns, "groups": groups, "baseline": baseline,
          "bootstrap": tests}


def table_rows(table: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
  """Header and rows of a table as text cells (shared by markdown and HTML)."""
  head = ["group", "runs"] + table["columns"] + ["steps", "wall s", "tokens/s"]
  if table["baseline"]:
    head.append(f"p vs {table['baseline']}")
  rows = []
  for group, info in table["groups"].items():
    cells = info["cells"]
    row = [group + (" (baseline)" if group == table["baseline"] else ""),
           f"{info['finished']}/{len(info['runs'])}"]
    row += [cells[k]["text"] for k in table["columns"]]
    row += [cells["steps"]["text"], cells["wall_s"]["text"], cells["tokens_per_second"]["text"]]
    if table["baseline"]:
      tests = table["bootstrap"].get(group, [])
      row.append(", ".join(f"{t['p_value']:.4f} (seed {t['seed']}, {t['split']} {t['metric']} {100 * t['delta']:+.2f})"
                           for t in tests) or "–")
    rows.append(row)
  return head, rows


def markdown(tables: Sequence[dict[str, Any]], images: dict[str, str], unfinished: dict[str, str]) -> str:
  """The report as markdown: one table (and its picture) per kind of run."""
  parts = ["# Report", "", "Mean ± sample standard deviation over the runs of each group (scores as in "
           "results.json: percent, MSE as is). p: paired bootstrap (`tasks.scoring.score bootstrap`) that the group "
           "beats the baseline, per seed, with the delta in points.", ""]
  for table in tables:
    head, rows = table_rows(table)
    parts += [f"## {table['title']}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    parts += ["| " + " | ".join(row) + " |" for row in rows]
    if table["slug"] in images:
      parts += ["", f"![{table['title']}]({images[table['slug']]})"]
    parts.append("")
  if unfinished:
    parts += ["## Not finished (sweep.jsonl)", ""] + [f"- {name}: {why}" for name, why in unfinished.items()] + [""]
  return "\n".join(parts)


def page(tables: Sequence[dict[str, Any]], out: Path, images: dict[str, str], unfinished: dict[str, str]) -> str:
  """The self-contained HTML page: the tables and the pictures as data URIs."""
  body = ["<h1>Report</h1>", "<p>Mean ± sample standard deviation over the runs of each group. p: paired bootstrap "
          "(<code>tasks.scoring.score bootstrap</code>) that the group beats the baseline, per seed.</p>"]
  for table in tables:
    head, rows = table_rows(table)
    body.append(f"<h2>{html.escape(table['title'])}</h2><table><tr>"
                + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
    body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows]
    body.append("</table>")
    if table["slug"] in images:
      data = base64.b64encode((out / images[table["slug"]]).read_bytes()).decode("ascii")
      body.append(f'<p><img alt="{html.escape(table["title"])}" src="data:image/png;base64,{data}"></p>')
  if unfinished:
    body.append("<h2>Not finished (sweep.jsonl)</h2><ul>" + "".join(
        f"<li>{html.escape(name)}: {html.escape(why)}</li>" for name, why in unfinished.items()) + "</ul>")
  style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
           "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}td:first-child{text-align:left}")
  return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Report</title><style>{style}</style></head>"
          f"<body>{''.join(body)}</body></html>\n")


def plot_curves(runs: Sequence[dict[str, Any]], path: Path) -> None:
  """Training loss and the dev metric over steps, one line per run."""
  import matplotlib as mpl  # pylint: disable=import-outside-toplevel  (only reports draw)
  mpl.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
  figure, (loss_axes, dev_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
  for run in runs:
    if run["loss_curve"]:
      loss_axes.plot(*zip(*run["loss_curve"]), label=run["name"])
    if run["dev_curve"]:
      dev_axes.plot(*zip(*run["dev_curve"]), marker="o", markersize=3, label=run["name"])
  loss_axes.set(title="training loss", xlabel="step", ylabel="train/loss")
  dev_axes.set(title=f"dev: {runs[0]['dev_metric']}", xlabel="step", ylabel=runs[0]["dev_metric"])
  for axes in (loss_axes, dev_axes):
    axes.grid(alpha=0.3)
  loss_axes.legend(fontsize=7)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def write_report(paths: Sequence[str | Path], out: str | Path, baselines: Sequence[str] = (),
                 samples: int = DEFAULT_SAMPLES) -> dict[str, Any]:
  """Reads the workdirs, writes report.md/.html/.json and the curves into `out`; returns report.json's content."""
  out = Path(out)
  runs = [load_run(w) for w in find_workdirs(paths) if w.resolve() != out.resolve()]
  names = {r["group"] for r in runs} | {r["name"] for r in runs}
  unknown = [b for b in baselines if b not in names]
  if unknown:
    raise errors.UserError(f"--baseline {', '.join(unknown)}: no such group or run; the groups are "
                        f"{', '.join(sorted({r['group'] for r in runs}))}")
  out.mkdir(parents=True, exist_ok=True)
  tables, images = [], {}
  for kind in dict.fromkeys(r["kind"] for r in runs):
    members = [r for r in runs if r["kind"] == kind]
    for run in members:  # A baseline given as a run name: that run is its own group.
      if run["name"] in baselines and run["group"] not in baselines:
        run["group"] = run["name"]
    baseline = next((b for b in baselines if any(r["group"] == b for r in members)), None)
    table = build_table(members, baseline, out, samples)
    if any(r["loss_curve"] or r["dev_curve"] for r in members):
      images[table["slug"]] = f"{table['slug']}_curves.png"
      plot_curves(members, out / images[table["slug"]])
    tables.append(table)
  unfinished = unfinished_points(paths)
  (out / "report.md").write_text(markdown(tables, images, unfinished), encoding="utf-8")
  (out / "report.html").write_text(page(tables, out, images, unfinished), encoding="utf-8")
  summary = {"runs": runs, "tables": tables, "unfinished": unfinished}
  (out / "report.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
  return summary


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = cli.ArgumentParser(prog="python -m launch.experiments.report", description=__doc__.split("\n")[0])
  root.add_argument("paths", nargs="+", help="workdirs and/or sweep roots")
  root.add_argument("--baseline", action="append", default=[], help="group or run the others are tested against")
  root.add_argument("--out", help="output directory (default: <path>/report for one path, else report)")
  root.add_argument("--samples", type=cli.integer(1), default=DEFAULT_SAMPLES, help="bootstrap samples")
  return root


def report_main(argv: Sequence[str] | None = None) -> None:
  """Parses the command line, writes the report, prints where."""
  args = parser().parse_args(argv)
  out = Path(args.out or (Path(args.paths[0]) / "report" if len(args.paths) == 1 else "report"))
  summary = write_report(args.paths, out, args.baseline, args.samples)
  print(f"{len(summary['runs'])} runs in {len(summary['tables'])} tables: {out / 'report.md'}, "
        f"{out / 'report.html'}")


def main(argv: Sequence[str] | None = None) -> None:
  """`report_main` with user errors as one line `error: ...`."""
  errors.run(report_main, argv)


if __name__ == "__main__":
  main()
