"""The one place that turns an `init` string into what a model starts from: its model config, tokenizer and
parameters. "hf:<name or directory>" is an imported HuggingFace BERT (a packaged name of encoder.pretrained or a
checkpoint directory); "run:<workdir>" is a training run of ours (its config.json and newest checkpoint), local or
gs://.

Configs read only the model config and tokenizer name (`model_fields`, no parameters); the engine, the demo, predict
and the embedder read parameters (`parameters`, `run_params`). Orbax is imported only to read a run's checkpoint, so
an `hf:` init never loads it.
"""

import dataclasses
import pathlib
from typing import Any

from encoder import files, hf, pretrained
from encoder.config import AUTO, PLATFORM_FIELDS, EncoderConfig, from_fields
from encoder.errors import ConfigError, UserError
from encoder.files import Path
from encoder.tokenizer import Tokenizer, load_tokenizer

KINDS = ("hf", "run")


def parse(init: str) -> tuple[str, str]:
  """'hf:all-MiniLM-L6-v2' -> ('hf', 'all-MiniLM-L6-v2'); any other prefix is a ConfigError."""
  kind, _, where = init.partition(":")
  if kind not in KINDS or not where:
    raise ConfigError(f"init={init!r} must be 'hf:<name or directory>', 'run:<workdir>' or '' (random init)")
  return kind, where


def _hf_directory(init: str, where: str) -> pathlib.Path:
  """The checkpoint directory of an `hf:` init (a ConfigError when it is neither a directory nor a known name)."""
  try:
    return pretrained.resolve_checkpoint(where)
  except (ValueError, FileNotFoundError) as err:
    raise ConfigError(f"init={init!r}: {err}") from None


def model_fields(init: str) -> tuple[dict[str, Any], str]:
  """(EncoderConfig fields with dtype names, as config.model holds them; the tokenizer's name or path) of the
  checkpoint named by `init`, read from its config only: a config file fails early, naming the file. The attention
  path is "auto" (the weights do not depend on it; the machine that uses them picks its own)."""
  kind, where = parse(init)
  if kind == "hf":
    directory = _hf_directory(init, where)
    cfg = hf.checked_config(directory)  # A CheckpointError naming the file, before any data is read.
    return dataclasses.asdict(cfg) | {"dtype": "float32", "param_dtype": "float32", "activation_dtype": "float32",
                                      **dict.fromkeys(PLATFORM_FIELDS, AUTO)}, str(directory)
  saved = files.reachable(where) / "config.json"
  if not saved.is_file():
    raise ConfigError(f"init={init!r}: {saved} does not exist; expected the workdir of a training run")
  try:
    run = files.read_json(saved)
    return dict(run["model"]) | dict.fromkeys(PLATFORM_FIELDS, AUTO), run["data"]["tokenizer"]
  except (ValueError, KeyError, TypeError) as err:
    raise ConfigError(f"init={init!r}: {saved} is not a run's config.json (expected JSON with model and "
                      f"data.tokenizer; {type(err).__name__}: {err})") from None


def parameters(init: str, heads: hf.HeadReader | None = None) -> dict[str, Any]:
  """{"encoder": tree, and the other top-level trees the checkpoint has}: an HF checkpoint's pretraining heads as
  `heads` reads them (objectives.hf_heads.read_heads; None: a checkpoint with heads is refused), or every head of a
  run's newest checkpoint (the caller picks the ones it wants)."""
  kind, where = parse(init)
  if kind == "hf":
    _, params, head_trees = hf.load_hf_checkpoint(_hf_directory(init, where), heads=heads)
    return {"encoder": params, **head_trees}
  step, params = run_params(where)
  if "encoder" not in params:
    raise ConfigError(f"init={init!r}: checkpoint {files.absolute(where) / 'checkpoints' / str(step)} has no "
                      f"encoder parameters (top-level keys {sorted(params)})")
  return params


def load(init: str, heads: hf.HeadReader | None = None) -> tuple[EncoderConfig, Tokenizer, dict[str, Any]]:
  """(EncoderConfig, tokenizer, `parameters`) of the checkpoint named by `init`: a model ready to apply."""
  fields, tokenizer_name = model_fields(init)
  tokenizer = load_tokenizer(tokenizer_name)
  return from_fields(fields, tokenizer.vocab_size), tokenizer, parameters(init, heads)


def run_params(workdir: str | Path, step: int | None = None, *, evaluation: bool = False) -> tuple[int, Any]:
  """(step, parameter tree on the default device) of a run's checkpoint `step` (None: the newest). evaluation: the
  parameters' moving average when the run kept one (launch.optimizer's EMA, as evaluation uses), else the trained
  parameters. Only those are read from disk (orbax partial restore), not the optimizer state."""
  # pylint: disable=import-outside-toplevel  (configs and hf: inits never load JAX's checkpointing)
  import jax
  import orbax.checkpoint as ocp
  directory = files.absolute(files.path(workdir) / "checkpoints")
  if not directory.is_dir() or not any(p.name.isdigit() for p in directory.iterdir()):
    raise UserError(f"{directory} holds no checkpoint: train the run first (python -m launch.main ... "
                    f"--workdir {workdir})")
  reader = ocp.CheckpointManager(directory, item_handlers=ocp.PyTreeCheckpointHandler())
  step = reader.latest_step() if step is None else step
  metadata = reader.item_metadata(step)
  opt_state = metadata["opt_state"] if evaluation else None
  ema = isinstance(opt_state, dict) and "ema" in opt_state  # launch.optimizer.EmaState, saved as a dict.
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        metadata["opt_state"]["ema"] if ema else metadata["params"])
  target = {"opt_state": {"ema": target}} if ema else {"params": target}
  restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device), target)
  restored = reader.restore(step, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args,
                                                              partial_restore=True))
  reader.close()
  return step, restored["opt_state"]["ema"] if ema else restored["params"]
