"""launch.experiments.pod_plan: on a tiny config for a v4-8 (4 devices of this CPU) the figures are consistent with
an independent count (rows per device, the state of parameters + two Adam moments + gradients, the FSDP state a
quarter of it, the step time from the FLOPs and the input a host needs from it); the verdict lines say what to
change (the smallest grad_accum_steps whose low estimate fits, the workers a host needs); and the method itself,
XLA's buffer assignment of the compiled step, is checked against a CPU run's measured peak memory at a small size."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from configs import pretrain, samples
from encoder import flops
from launch.experiments import pod_plan, tpu_types
from launch.model import EncoderWithHeads, encoder_config, last_positions

REPO = Path(__file__).resolve().parents[3]
# The plan checks the config as launch.main does, the corpus files included: the packaged sample, so no data is needed.
CORPUS = [f"--config.data.train_files={samples.sample_file('train')}",
          f"--config.data.eval_files={samples.sample_file('heldout')}"]
TINY = ["--config", "configs/pretrain.py:size=tiny,objectives=mlm+nsp", "--config.batch_size=32",
        "--config.data.max_length=64", *CORPUS, "--workdir", "/tmp/unused"]
MFU = 1e-4  # A tiny encoder at 50% MFU would need more input than any host masks.


def _plan(*extra: str) -> dict:
  result = subprocess.run([sys.executable, "-m", "launch.experiments.pod_plan", "--type", "v4-8", "--mfu", str(MFU),
                           "--", *TINY, *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-2] == "verdict: fits and can be fed"
  return json.loads(lines[-1])


@pytest.mark.slow
def test_figures_match_an_independent_count():
  plain, fsdp = _plan(), _plan("--config.fsdp=true")
  config = pretrain.get_config("size=tiny,objectives=mlm+nsp")
  config.batch_size, config.data.max_length = 32, 64
  work = pod_plan.sample_workload(config)
  cfg = encoder_config(config.model, work.vocab_size)
  model = EncoderWithHeads(cfg, work.objectives)
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), work.example, train=False))["params"]
  parameters = sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))
  # float32 parameters, Adam's two moments and the gradients, 4 bytes each (+ a step, a key and Adam's count).
  assert 16 * parameters <= plain["state_bytes"] <= 16 * parameters + 64
  assert fsdp["state_bytes"] < 0.35 * plain["state_bytes"]  # The large leaves split over the 4 devices.
  assert plain["rows_per_device"] == 8 and plain["accum"] == 1 and plain["fits_accum"] == 1
  assert plain["state_bytes"] < plain["low_bytes"] < plain["high_bytes"]
  assert plain["low_bytes"] == int(plain["state_bytes"] + pod_plan.ACCELERATOR_RATIO
                                   * (plain["high_bytes"] - plain["state_bytes"]))
  slice_ = tpu_types.slice_type("v4-8")
  last = last_positions(work.objectives, work.example).shape[1]  # [CLS] and the masked positions.
  step = flops.step_flops(cfg, 32, 64, last) / (MFU * slice_.devices * slice_.device_peak_flops)
  np.testing.assert_allclose(plain["step_seconds"], step, rtol=1e-9)
  np.testing.assert_allclose(plain["host_tokens_per_s"], 32 * 64 / step, rtol=1e-9)  # One host.
  assert plain["workers"] == 30 and plain["process_tokens_per_s"] > 0  # A v4 host: 240 cores / 8.
  np.testing.assert_allclose(plain["supply_tokens_per_s"], 30 * plain["process_tokens_per_s"], rtol=1e-12)


def _plan_of(**fields) -> pod_plan.Plan:
  defaults = dict(slice=tpu_types.slice_type("v5e-16"), rows_per_device=512, accum=1, state_bytes=2 * 2**30,
                  high_bytes=70 * 2**30, low_bytes=43 * 2**30, device_bytes=15 * 2**30, fits_accum=4,
                  step_seconds=0.3, host_tokens_per_s=800_000.0, workers=14, process_tokens_per_s=120_000.0,
                  supply_tokens_per_s=1_680_000.0, mfu=0.5)
  return pod_plan.Plan(**defaults | fields)


def test_verdicts_say_what_to_change():
  refused = _plan_of()
  assert refused.problems() == [
      "memory: 43.0-70.0 GiB per device, over the 15.0 GiB of a v5litepod device; use --config.grad_accum_steps=4 "
      "(low estimate fits), --config.model.remat=full, or a smaller config.batch_size"]
  assert refused.report().splitlines()[-1] == f"verdict: refused: {refused.problems()[0]}"
  starved = _plan_of(high_bytes=10 * 2**30, low_bytes=7 * 2**30, workers=2, supply_tokens_per_s=240_000.0)
  assert starved.problems() == ["input: a host needs 800,000 tokens/s at MFU 0.5, its 2 input worker(s) supply "
                                "~240,000; set --config.data.workers=7 (of the host's 112 cores)"]
  maybe = _plan_of(high_bytes=20 * 2**30, low_bytes=13 * 2**30)
  assert maybe.problems() == [] and maybe.report().endswith("verdict: may not fit (only the accelerator estimate "
                                                            "fits); the 200-step smoke test on the slice settles it")
  assert _plan_of(high_bytes=10 * 2**30, low_bytes=7 * 2**30).report().endswith("verdict: fits and can be fed")


MEASURE = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from launch.experiments import pod_plan
    config = pod_plan.parse_main_args(sys.argv[1:])
    work = pod_plan.sample_workload(config)
    programs = pod_plan.step_programs(config, work, 1)
    stats = programs.grad_step.memory_analysis()
    state = jax.device_put(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), programs.state))
    batch = jax.device_put({k: np.resize(np.asarray(v), (config.batch_size,) + v.shape[1:])
                            for k, v in work.example.items()})
    status = lambda field: next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field))
    jax.block_until_ready((state, batch))
    before = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # Resets the peak (VmHWM) to the current resident size.
    jax.block_until_ready(programs.grad_step(state, batch))
    print(json.dumps({"measured": status("VmHWM:") - before,
                      "predicted": stats.temp_size_in_bytes + stats.output_size_in_bytes}))
""")


@pytest.mark.slow
def test_compiled_memory_against_a_cpu_runs_measured_peak():
  """The plan's figure is XLA's buffer assignment of the compiled step. Run here (one CPU device, a mini encoder,
  32 rows of 128 tokens, MLM + NSP), the step's peak resident memory grows by its temporaries and outputs plus the
  scratch XLA:CPU's runtime allocates outside that assignment: measured 1.13x at 32 and 64 rows (mini) and 1.25x
  (tiny) on this machine. The bound 1.0-1.35 fails a method that missed the activations or double-counted them."""
  result = subprocess.run(
      [sys.executable, "-c", MEASURE, "--config", "configs/pretrain.py:size=mini,objectives=mlm+nsp",
       "--config.batch_size=32", *CORPUS, "--workdir", "/tmp/unused"], cwd=REPO, capture_output=True, text=True,
      timeout=900, check=False, env=dict(os.environ, ENCODERLAB_MALLOC="default", JAX_PLATFORMS="cpu"))
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(result.stdout.splitlines()[-1])
  assert figures["predicted"] > 300 * 2**20  # Large enough that the process's own noise does not matter.
  assert 1.0 <= figures["measured"] / figures["predicted"] <= 1.35, figures
