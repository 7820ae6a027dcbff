"""How soon a run trains: `python -m launch.main` from process start to its "starting" line and its first steps,
with a fresh persistent compilation cache (cold) and again with the cache that run filled (warm).

  python -m benchmarks.startup [--config configs/finetune.py:task=sick] [--steps 3] [--rounds 2] [--repo DIR ...]

Each round runs every --repo (checkouts of this repository; default this one) cold then warm, alternating, so a
before/after comparison shares the machine's state; a run is killed once it has logged --steps steps
(`--config.log_every_steps=1`). Prints a table and one JSON line; the CPU is named, as every speed figure is.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.encoder_speed import cpu_name
from encoder import cli, errors

REPO = Path(__file__).resolve().parents[1]


def timed_start(repo: Path, config: str, cache: Path, steps: int) -> dict[str, float]:
  """Seconds from process start to the "starting" line, to step 1 and to step `steps` of one run in `repo`."""
  marks, start = {}, time.perf_counter()
  output: list[str] = []  # The run's last lines: a refused run's own `error:` line is passed on.
  with tempfile.TemporaryDirectory(prefix="startup-run-") as workdir:
    command = [sys.executable, "-m", "launch.main", f"--config={config}", f"--workdir={workdir}",
               "--config.log_every_steps=1"]
    env = {**os.environ, "ENCODERLAB_COMPILATION_CACHE": str(cache), "PYTHONPATH": str(repo)}
    with subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as run:
      assert run.stdout is not None  # stdout=PIPE
      for line in run.stdout:
        now = time.perf_counter() - start
        output = [*output[-20:], line]
        if line.startswith("starting"):
          marks["starting"] = now
        elif line.startswith("step 1/"):
          marks["first_step"] = now
        elif line.startswith(f"step {steps}/"):
          marks[f"step_{steps}"] = now
          run.kill()
          break
      run.wait()
    if f"step_{steps}" not in marks:
      child = cli.child_error(output) or f"its last line: {output[-1].strip() if output else '(none)'}"
      raise errors.UserError(f"{repo}: launch.main exited with {run.returncode} before step {steps}: {child}")
  return marks


def main(argv: list[str] | None = None) -> dict:
  parser = cli.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n\n", maxsplit=1)[0])
  parser.add_argument("--config", default="configs/finetune.py:task=sick")
  parser.add_argument("--steps", type=cli.integer(1), default=3, help="steps logged before a run is stopped")
  parser.add_argument("--rounds", type=cli.integer(1), default=2)
  parser.add_argument("--repo", action="append", type=Path, help="a checkout to run (repeat to compare)")
  args = parser.parse_args(argv)
  repos = [repo.resolve() for repo in args.repo or [REPO]]
  for repo in repos:
    if not (repo / "launch" / "main.py").is_file():
      raise errors.UserError(f"--repo {repo}: not a checkout of this repository (no launch/main.py)")
  times: dict[str, dict[str, list[dict[str, float]]]] = {str(repo): {"cold": [], "warm": []} for repo in repos}
  for round_ in range(args.rounds):
    for repo in repos:
      with tempfile.TemporaryDirectory(prefix="startup-cache-") as cache:
        for kind in ("cold", "warm"):
          marks = timed_start(repo, args.config, Path(cache), args.steps)
          times[str(repo)][kind].append(marks)
          print(f"round {round_ + 1} {repo.name} {kind}: " + ", ".join(f"{k} {v:.1f} s" for k, v in marks.items()),
                flush=True)
  summary = {repo: {kind: {mark: statistics.median(m[mark] for m in runs) for mark in runs[0]}
                    for kind, runs in kinds.items()} for repo, kinds in times.items()}
  print(f"\nmedians over {args.rounds} rounds, {args.config}, CPU {cpu_name()}:")
  for repo, kinds in summary.items():
    for kind, marks in kinds.items():
      print(f"  {Path(repo).name:20s} {kind}: " + ", ".join(f"{k} {v:.1f} s" for k, v in marks.items()))
  result = {"cpu": cpu_name(), "config": args.config, "steps": args.steps, "rounds": args.rounds, "medians": summary,
            "runs": times}
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  errors.run(main)
