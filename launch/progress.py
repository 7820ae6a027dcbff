"""Progress display: one rewritten line with ETA on a terminal, plain periodic lines otherwise (logs, CI)."""

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
  """update(step, {"loss": ...}) after each metrics fetch; ETA from the steps/s since this run started."""

  def __init__(self, start_step: int, total_steps: int, stream: TextIO = sys.stdout, enabled: bool = True):
    self.start_step, self.total_steps, self.stream, self.enabled = start_step, total_steps, stream, enabled
    self.tty = stream.isatty()
    self.started = time.perf_counter()

  def update(self, step: int, values: dict[str, float]) -> None:
    if not self.enabled:
      return
    elapsed = time.perf_counter() - self.started
    rate = (step - self.start_step) / elapsed if elapsed > 0 else 0.0
    eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
    shown = " ".join(f"{k}={v:.4g}" for k, v in values.items())
    line = (f"step {step}/{self.total_steps} ({100 * step / self.total_steps:.0f}%) {shown} "
            f"| {rate:.2f} steps/s, elapsed {_duration(elapsed)}, ETA {_duration(eta) if rate > 0 else '?'}")
    if self.tty:
      self.stream.write("\r\033[K" + line)
    else:
      self.stream.write(line + "\n")
    self.stream.flush()

  def message(self, text: str) -> None:
    """A line of its own (keeps the progress line intact on a terminal)."""
    if self.enabled:
      self.stream.write(("\n" if self.tty else "") + text + "\n")
      self.stream.flush()
