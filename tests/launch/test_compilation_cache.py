"""launch.compilation_cache: where the cache goes (environment over config), a tiny SICK fine-tuning run through
`python -m launch.main` giving the same bits with a cold cache and a warm one (the warm run compiling nothing new, and
`launch.predict` on its dev split finding every program the run compiled ahead), and a disabled cache writing
nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch import compilation_cache
from tests.conftest import require_data

REPO = Path(__file__).resolve().parents[2]
TIMINGS = ("per_second",)  # Fields that measure the machine, not the run.


@pytest.mark.parametrize("env, configured, expected", [
    ({}, "/c", "/c"), ({}, "", None), ({compilation_cache.JAX_ENV: "/j"}, "/c", "/j"),
    ({compilation_cache.ENV: "/e", compilation_cache.JAX_ENV: "/j"}, "/c", "/e"),
    ({compilation_cache.ENV: "off", compilation_cache.JAX_ENV: "/j"}, "/c", None),
    ({compilation_cache.ENV: " OFF "}, "/c", None), ({compilation_cache.ENV: ""}, "/c", None),
    ({}, "gs://bucket/xla/", "gs://bucket/xla")])
def test_the_environment_moves_or_disables_the_configured_cache(monkeypatch, env, configured, expected):
  for name in (compilation_cache.ENV, compilation_cache.JAX_ENV):
    monkeypatch.delenv(name, raising=False)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  kind = compilation_cache.host_kind()
  assert kind.startswith("cpu-") and len(kind) == 16
  assert compilation_cache.directory(configured) == (None if expected is None else f"{expected}/{kind}")


def test_the_default_is_under_the_home_directory(monkeypatch):
  for name in (compilation_cache.ENV, compilation_cache.JAX_ENV):
    monkeypatch.delenv(name, raising=False)
  assert compilation_cache.directory(compilation_cache.DEFAULT).startswith(os.path.expanduser("~/.cache/encoderlab/"))


def _run(workdir: Path, env: dict[str, str]) -> dict:
  """A runlocal SICK fine-tuning run (8 steps, dev and test evaluated) in a process of its own; its results, metrics
  and prediction files without the timings."""
  env = {k: v for k, v in os.environ.items() if k not in (compilation_cache.ENV, compilation_cache.JAX_ENV)} | env
  subprocess.run([sys.executable, "-m", "launch.main", "--config=configs/finetune.py:task=sick,runlocal",
                  f"--workdir={workdir}"], cwd=REPO, env=env | {"JAX_PLATFORMS": "cpu"}, check=True, timeout=600,
                 capture_output=True)
  untimed = lambda tree: {k: untimed(v) if isinstance(v, dict) else v for k, v in tree.items()
                          if not any(t in k for t in TIMINGS)}
  return {"results": untimed(json.loads((workdir / "results.json").read_text())),
          "metrics": [untimed(json.loads(line)) for line in (workdir / "metrics.jsonl").read_text().splitlines()],
          **{p.name: p.read_bytes() for p in sorted((workdir / "predictions").iterdir())}}


def _entries(root: Path) -> set[str]:
  return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


@pytest.mark.slow
def test_a_warm_cache_gives_the_cold_runs_bits_and_compiles_nothing_new(tmp_path):
  """The cold run compiles (as a run without a cache does) and writes; the warm one loads every program."""
  require_data("sick/SICK_train.txt")
  cache = tmp_path / "cache"
  cold = _run(tmp_path / "cold", {compilation_cache.ENV: str(cache)})
  written = _entries(cache)
  assert written and all(name.startswith(compilation_cache.host_kind() + "/") for name in written)
  warm = _run(tmp_path / "warm", {compilation_cache.ENV: str(cache)})
  assert _entries(cache) == written, "the warm run compiled a program the cold one had cached"
  assert len(cold) > 2 and cold["results"]["test"] and warm == cold
  # launch.predict on the dev pairs runs the evaluation's program the run compiled ahead: loaded, nothing compiled,
  # and the run's own dev predictions come back.
  dev = [json.loads(line) for line in (tmp_path / "cold" / "predictions" / "dev.jsonl").read_text().splitlines()]
  inputs = tmp_path / "dev_pairs.jsonl"
  inputs.write_text("".join(json.dumps({"text_a": r["text_a"], "text_b": r["text_b"]}) + "\n" for r in dev))
  env = {k: v for k, v in os.environ.items() if k not in (compilation_cache.ENV, compilation_cache.JAX_ENV)} | {
      compilation_cache.ENV: str(cache), "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-m", "launch.predict", f"--workdir={tmp_path / 'cold'}", f"--input={inputs}",
                        "--format=jsonl"], cwd=REPO, env=env, check=True, timeout=300, capture_output=True,
                       text=True).stdout
  assert [json.loads(line)["label"] for line in out.splitlines()] == [r["prediction"] for r in dev]
  assert _entries(cache) == written, "launch.predict compiled a program the run had cached"


@pytest.mark.parametrize("setting", ["off", "", "cache"])
def test_disabled_writes_nothing_and_enabled_keeps_even_tiny_programs(tmp_path, setting):
  """A 2-element addition (compiled in milliseconds) lands in the cache, unless $ENCODERLAB_COMPILATION_CACHE
  disables it, which also overrides JAX's own variable."""
  configured, jax_dir = tmp_path / "configured", tmp_path / "jax"
  chosen = str(tmp_path / setting) if setting == "cache" else setting
  env = {k: v for k, v in os.environ.items() if k != compilation_cache.ENV} | {
      compilation_cache.ENV: chosen, compilation_cache.JAX_ENV: str(jax_dir), "JAX_PLATFORMS": "cpu"}
  code = ("import jax, jax.numpy as jnp, sys; from launch import compilation_cache\n"
          "print(compilation_cache.enable(sys.argv[1])); jax.jit(lambda x: x + 1)(jnp.ones(2)).block_until_ready()")
  out = subprocess.run([sys.executable, "-c", code, str(configured)], cwd=REPO, env=env, check=True, timeout=120,
                       capture_output=True, text=True).stdout
  assert _entries(configured) == _entries(jax_dir) == set()
  if setting == "cache":
    assert out.strip() == f"{tmp_path / 'cache'}/{compilation_cache.host_kind()}" and _entries(tmp_path / "cache")
  else:
    assert out.strip() == "None"
