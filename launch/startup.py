"""The start-up choices a run makes concrete once, for config.json to record: the attention path and the dot paths
(every run), and the length buckets' compile cost (fine-tuning). Each takes the workdir's config.json as
checkpointing.saved_config read it (`saved`; None for a new run), so a resumed run keeps what its checkpoints were
trained with; launch.workload's kinds call them from their `resolve`."""

import ml_collections

from encoder import errors
from encoder.config import AUTO, platform, resolve_attention, resolve_platform
from tasks import batching


def attention_path(config: ml_collections.ConfigDict, saved: dict | None) -> str:
  """config.model.attention made concrete once, at start-up, for config.json to record: "auto" resumes a run (`saved`:
  its config.json, checkpointing.saved_config; None for a new run) on the path its checkpoints were trained with (a
  run saved before the field existed: "matmul"), and otherwise is the platform's (encoder.config.resolve_attention).
  A path this platform cannot run is a ConfigError."""
  choice = config.model.get("attention", AUTO)
  resumed = saved if choice == AUTO else None  # An explicit choice is kept, resumed or not.
  if resumed is not None:
    choice = resumed["model"].get("attention", "matmul")
  where = platform()
  choice = resolve_attention(config.model.to_dict() | {"attention": choice}, where)
  if choice == "cudnn" and where != "cuda":
    raise errors.ConfigError(f"config.model.attention='cudnn'{' (the run resumed)' if resumed else ''} runs on NVIDIA "
                             f"GPUs only, and this process runs on {where}: set --config.model.attention=xla or "
                             "matmul (the same function)")
  return choice


def dot_paths(config: ml_collections.ConfigDict, saved: dict | None) -> dict[str, str]:
  """config.model.kernels and bf16_dots made concrete once, at start-up, for config.json to record: "auto" resumes a
  run (`saved`: its config.json) with the values its checkpoints were trained with (a run saved before the fields:
  this platform's), and otherwise is this platform's (encoder.config.resolve_platform: the device kind and
  /proc/cpuinfo)."""
  choices = {name: config.model.get(name, AUTO) for name in ("kernels", "bf16_dots")}
  if saved is not None:
    choices = {name: saved["model"].get(name, AUTO) if choice == AUTO else choice for name, choice in choices.items()}
  return resolve_platform(choices)


def resolve_model(config: ml_collections.ConfigDict, saved: dict | None) -> None:
  """Sets config.model's attention and dot paths to their concrete values (every run's start-up choices)."""
  config.model.attention = attention_path(config, saved)
  config.model.update(dot_paths(config, saved))


def compile_cost(config: ml_collections.ConfigDict, saved: dict | None) -> float:
  """config.data.compile_cost made concrete once, at start-up, for config.json to record and the loaders to use as
  given (bucket pruning must not change when a run resumes): -1 (auto) resumes with the saved run's figure (`saved`:
  its config.json), and otherwise is this backend's measured one (tasks.batching.compile_cost_on)."""
  chosen = config.data.compile_cost
  if chosen < 0 and saved is not None:
    chosen = saved["data"].get("compile_cost", batching.COMPILE_COSTS["cpu"])  # Saved before auto: the CPU's 500.
  return float(chosen) if chosen >= 0 else batching.compile_cost_on(platform())
