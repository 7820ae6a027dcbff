"""JAX's persistent compilation cache, on by default: a program compiled once on a machine is loaded, not compiled
again, by every later process there (seeds, sweep points, resumed runs, launch.predict).

Where (the first that is set wins):
  1. $ENCODERLAB_COMPILATION_CACHE: a directory, or '' / 'off' to disable the cache for this process;
  2. $JAX_COMPILATION_CACHE_DIR, JAX's own variable (the sweeps set it to ROOT/xla_cache);
  3. the config field `compilation_cache` (default ~/.cache/encoderlab/xla; '' disables).
Entries go to a subdirectory named after the host's CPU (model and instruction-set flags), so machines of different
kinds sharing a home directory never load each other's code. Every program is kept however fast it compiled and
however small it is (CPU programs often compile in well under JAX's default 1 s threshold), and a loaded program is the
same executable: results are the same bits (tests/launch/test_compilation_cache.py). Set up once per process, before
its first compilation (JAX opens the cache at the first compilation and keeps it).
"""

import hashlib
import os
import platform

import jax

from encoder.errors import ConfigError

ENV = "ENCODERLAB_COMPILATION_CACHE"
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"
DEFAULT = "~/.cache/encoderlab/xla"
OFF = ("", "off")


def host_kind() -> str:
  """'cpu-' and 12 hex digits of the CPU's architecture, model name and flags (/proc/cpuinfo on Linux)."""
  text = platform.machine() + platform.processor()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as info:
      text += "".join(sorted({line for line in info if line.startswith(("model name", "flags", "Features"))}))
  except OSError:
    pass
  return "cpu-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def directory(configured: str) -> str | None:
  """The cache directory this process uses (the precedence above), or None when disabled."""
  chosen = os.environ.get(ENV, os.environ.get(JAX_ENV, configured))
  if chosen.strip().lower() in OFF:
    return None
  base = chosen if "://" in chosen else os.path.expanduser(chosen)
  return f"{base.rstrip('/')}/{host_kind()}"


def source(configured: str) -> str:
  """Where the cache setting came from, for an error line: the variable or the config field that gave it."""
  for name in (ENV, JAX_ENV):
    if name in os.environ:
      return f"${name}={os.environ[name]}"
  return f"config.compilation_cache={configured}"


def enable(configured: str) -> str | None:
  """Points JAX's persistent cache at `directory(configured)` (or turns it off); returns the directory or None. A local
  path that is not a writable directory is a ConfigError naming the setting (JAX would warn and go on uncached)."""
  path = directory(configured)
  if path is not None and "://" not in path:
    try:
      os.makedirs(path, exist_ok=True)
      writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as err:
      raise ConfigError(f"{source(configured)}: the compilation cache must be a writable directory; {path}: "
                        f"{err.strerror} (give a directory, or 'off')") from None
    if not writable:
      raise ConfigError(f"{source(configured)}: the compilation cache must be a writable directory; {path} is not "
                        "writable (give a directory, or 'off')")
  jax.config.update("jax_enable_compilation_cache", path is not None)
  if path is not None:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # Keep every program (default: >= 1 s),
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # of any size.
  return path
