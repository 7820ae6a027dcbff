"""A stand-in for `launch.main` under launch.experiments.pod_worker in tests: what it does on worker w in attempt a
is $STANDIN_SCRIPT's entry "w/a" (JSON; default "done"):
  "done"         worker 0 writes <workdir>/results.json {"stopped_early": false} (as process 0 does); exits 0
  "fail:<line>"  prints <line> last and exits 1 (launch.main's one-line error)
  "hang"         runs until SIGTERM, then (as launch.train) worker 0 writes results.json {"stopped_early": true};
                 exits 0
  "stuck"        ignores SIGTERM (a process whose peer died, waiting in a collective): only SIGKILL ends it
It prints its arguments first. It learns w and a from the variables pod_worker sets (ENCODERLAB_POD_WORKER,
ENCODERLAB_POD_ATTEMPT)."""

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
  stopped = []
  signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))  # First: a SIGTERM during the imports below counts.
  from encoder import files  # pylint: disable=import-outside-toplevel
  worker, attempt = os.environ["ENCODERLAB_POD_WORKER"], os.environ["ENCODERLAB_POD_ATTEMPT"]
  action = json.loads(Path(os.environ["STANDIN_SCRIPT"]).read_text()).get(f"{worker}/{attempt}", "done")
  args = sys.argv[1:]
  workdir = files.path(args[args.index("--workdir") + 1])  # Local or gs://, as launch.main's.
  print(f"standin worker {worker} attempt {attempt}: {' '.join(args)}", flush=True)

  def results(stopped_early: bool) -> None:
    if worker == "0":
      (workdir / "results.json").write_text(json.dumps({"stopped_early": stopped_early}))

  if action == "done":
    results(False)
    return
  if action.startswith("fail:"):
    print("Traceback (most recent call last): ...", flush=True)
    print(action.removeprefix("fail:"), flush=True)
    sys.exit(1)
  if action == "stuck":
    signal.signal(signal.SIGTERM, lambda *_: None)
    stopped.clear()
  while not stopped:
    time.sleep(0.05)
  print("SIGTERM: saved", flush=True)
  results(True)


if __name__ == "__main__":
  main()
