"""The engine's steps lower for the card's targets without them: the pretraining step (MLM + NSP) and a fine-tuning
step (sequence classification) of a tiny config, exported by `jax.export` for the TPU and CUDA platforms on this CPU,
in the accelerators' precision (bf16 operands and activations), on the attention paths "auto" picks there: "matmul"
with attention dropout on (the pretraining and fine-tuning configs' default) and "xla" without (TPUs; GPUs in
float32). A change that cannot run on a TPU or a GPU fails here: jax.export refuses a custom call (LAPACK, a CPU
kernel) not guaranteed on the platforms, and the program holds none.

The "cudnn" path cannot be traced without cuDNN (jax.nn.dot_product_attention asks cuDNN for its version while
tracing: "cuDNN is not detected"), so it is proven on a GPU (benchmarks.attention_check, the accelerator benchmark's
attention_check part). Lowering only (no compilation), both platforms in one export per step.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from configs import common
from encoder.config import preset, resolve_platform
from launch import optimizer, steps
from launch.model import EncoderWithHeads
from objectives import registry
from tasks import registry as tasks_registry

PLATFORMS = ("tpu", "cuda")
ROWS, LENGTH, MASKED, VOCAB = 4, 16, 3, 100


def _batch(finetuning: bool) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  batch = dict(input_ids=rng.integers(5, VOCAB, (ROWS, LENGTH)).astype(np.int32),
               type_ids=np.zeros((ROWS, LENGTH), np.int32),
               positions=np.broadcast_to(np.arange(LENGTH, dtype=np.int32), (ROWS, LENGTH)).copy(),
               attention_segments=np.ones((ROWS, LENGTH), np.int32))
  if finetuning:
    return batch | dict(label=rng.integers(0, 3, ROWS).astype(np.int32), example_mask=np.ones(ROWS, np.float32))
  return batch | dict(masked_positions=rng.integers(1, LENGTH, (ROWS, MASKED)).astype(np.int32),
                      masked_ids=rng.integers(5, VOCAB, (ROWS, MASKED)).astype(np.int32),
                      masked_weights=np.ones((ROWS, MASKED), np.float32),
                      nsp_label=rng.integers(0, 2, ROWS).astype(np.int32))


def _objectives(finetuning: bool) -> list:
  if finetuning:
    return [tasks_registry.family({"name": "classification", "labels": ["a", "b", "c"]}).objective()]
  return [registry.build("mlm"), registry.build("nsp")]


@pytest.mark.parametrize("step, attention", [("pretraining", "matmul"), ("pretraining", "xla"),
                                             ("finetuning", "matmul")])
def test_train_step_lowers_for_tpu_and_cuda(step, attention):
  finetuning = step == "finetuning"
  cfg = preset("tiny", vocab_size=VOCAB, max_positions=32, dtype=jnp.bfloat16, activation_dtype=jnp.bfloat16,
               attention=attention, attention_dropout=0.1 if attention == "matmul" else 0.0,
               **resolve_platform({}, "tpu"))  # The accelerators' kernels and bf16 dots, not this CPU's.
  assert (cfg.kernels, cfg.bf16_dots) == ("accelerator", "native")
  objectives = _objectives(finetuning)
  fns = steps.StepFns(model=EncoderWithHeads(cfg, objectives), objectives=objectives,
                      weights={o.name: 1.0 for o in objectives},
                      tx=optimizer.make_optimizer(common.optimizer_config(warmup_steps=1), 10))
  batch = _batch(finetuning)
  state = jax.eval_shape(functools.partial(steps.init_state, fns, seed=0), batch)
  train_step = functools.partial(steps.train_step, fns, accum=1)
  acc = steps.zero_metrics(train_step, state, batch)
  exported = export.export(jax.jit(train_step), platforms=PLATFORMS)(state, batch, acc)
  assert exported.platforms == PLATFORMS
  text = exported.mlir_module()
  assert "stablehlo.dot_general" in text and "stablehlo.custom_call" not in text
