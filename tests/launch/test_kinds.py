"""The kind of run is decided once (launch.workload.kind_of), and each kind's `resolve` makes its own start-up choices
concrete for config.json to record (issue 73): both the attention and dot paths, fine-tuning also the length buckets'
compile cost, which a pretraining config does not have."""

from configs import finetune, pretrain
from encoder.config import AUTO
from launch import workload
from tasks import batching


def test_each_kind_resolves_its_own_start_up_choices():
  tuning, pretraining = finetune.get_config("task=sst2,runlocal"), pretrain.get_config("runlocal")
  kinds = workload.kind_of(tuning), workload.kind_of(pretraining)
  assert [type(kind) for kind in kinds] == [workload.Finetuning, workload.Pretraining]
  assert tuning.data.compile_cost == -1.0 and "compile_cost" not in pretraining.data  # Auto, and none.
  for kind in kinds:
    kind.resolve(None)  # A new run.
    assert AUTO not in (kind.config.model.attention, kind.config.model.kernels, kind.config.model.bf16_dots)
  assert tuning.data.compile_cost == batching.COMPILE_COSTS["cpu"]  # This backend's (the tests run on CPUs).
  assert "compile_cost" not in pretraining.data
  resumed = finetune.get_config("task=sst2,runlocal")
  workload.kind_of(resumed).resolve({"model": {}, "data": {"compile_cost": 123.0}})
  assert resumed.data.compile_cost == 123.0  # As the resumed run recorded it.
