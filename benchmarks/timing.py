"""Wall-clock timing shared by the speed benchmarks."""

import time
from collections.abc import Callable


def timed(fn: Callable[[], object], count: int) -> list[float]:
  """Seconds of each of `count` calls of fn (which must wait for its own result)."""
  times = []
  for _ in range(count):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times
