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

from encoder import damaged_checkpoint, files, hf, peft_format, pretrained, runs
from encoder.config import AUTO, PLATFORM_FIELDS, REGIME_FIELDS, EncoderConfig, from_fields
from encoder.errors import ConfigError, UserError
from encoder.files import Path
from encoder.hf.files import read_config
from encoder.tokenizer import Tokenizer, load_tokenizer

KINDS = ("hf", "run", "peft")
# The config.model fields a run from an init may set: its dropout, the initializer of new heads and how it computes
# (dtypes, remat, attention path), none of which changes what the checkpoint's parameters mean. Every other field is
# the checkpoint's architecture (configs.checks.check_init refuses another value).
TAKES = ("hidden_dropout", "attention_dropout", "initializer_range", "dtype", "param_dtype", "activation_dtype",
         "remat", *PLATFORM_FIELDS)
# config.json's name of an EncoderConfig field where it is not the field's own: BERT's and ELECTRA's, then ModernBERT's.
_HF_KEYS = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
            "max_positions": "max_position_embeddings", "hidden_dropout": "hidden_dropout_prob",
            "attention_dropout": "attention_probs_dropout_prob", "position_embedding": "position_embedding_type"}
_MODERNBERT_KEYS = _HF_KEYS | {
    "hidden_act": "hidden_activation", "layer_norm_eps": "norm_eps", "hidden_dropout": "embedding_dropout",
    "attention_dropout": "attention_dropout", "use_bias": "attention_bias", "local_attention_window": "local_attention",
    "global_attention_every": "global_attn_every_n_layers", "rope_theta": "rope_parameters",
    "rope_local_theta": "rope_parameters"}


def parse(init: str) -> tuple[str, str]:
  """'hf:all-MiniLM-L6-v2' -> ('hf', 'all-MiniLM-L6-v2'); any other prefix is a ConfigError."""
  kind, _, where = init.partition(":")
  if kind not in KINDS or not where:
    raise ConfigError(f"init={init!r} must be 'hf:<name or directory>', 'run:<workdir>' or '' (random init), or "
                      "'peft:<directory>' (a PEFT LoRA adapter on its base)")
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
  if kind == "peft":
    return model_fields(f"hf:{_peft_base(init, where)}")
  if kind == "hf":
    directory = _hf_directory(init, where)
    cfg = hf.checked_config(directory)  # A CheckpointError naming the file, before any data is read.
    plain = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in REGIME_FIELDS}  # The run's regime sets those.
    return plain | {"dtype": "float32", "param_dtype": "float32", "activation_dtype": "float32",
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


def field_source(init: str, field: str) -> str:
  """Where the checkpoint named by `init` sets config.model.<field>, for a message about a value the user never set:
  "DIR/config.json's max_position_embeddings", or "W/config.json's model.max_positions" for a run."""
  kind, where = parse(init)
  if kind == "peft":
    return field_source(f"hf:{_peft_base(init, where)}", field)
  if kind == "run":
    return f"{files.reachable(where) / 'config.json'}'s model.{field}"
  hf_config, path = read_config(_hf_directory(init, where))
  model_type = hf_config.get("model_type")
  model_type = hf.REMOTE_MODEL_TYPES.get(model_type, model_type) if isinstance(model_type, str) else model_type
  key = (_MODERNBERT_KEYS if model_type == "modernbert" else _HF_KEYS).get(field, field)
  return f"{path}'s {key}" if key in hf_config else f"{path}, model_type {model_type!r} (no {key}: the layout's)"


def parameters(init: str, heads: hf.HeadReader | None = None) -> dict[str, Any]:
  """{"encoder": tree, and the other top-level trees the checkpoint has}: an HF checkpoint's pretraining heads as
  `heads` reads them (objectives.hf_heads.read_heads; None: a checkpoint with heads is refused), or every head of a
  run's newest checkpoint (the caller picks the ones it wants)."""
  kind, where = parse(init)
  if kind == "peft":  # The base's, with the adapter's LoRA branches in the encoder tree.
    base = _peft_base(init, where)
    _, branches = peft_format.read_adapter(where, hf.checked_config(_hf_directory(init, base)))
    params = parameters(f"hf:{base}", heads)
    return params | {"encoder": _with(params["encoder"], branches)}
  if kind == "hf":
    _, params, head_trees = hf.load_hf_checkpoint(_hf_directory(init, where), heads=heads)
    return {"encoder": params, **head_trees}
  step, params = run_params(where)
  if "encoder" not in params:
    raise ConfigError(f"init={init!r}: checkpoint {files.absolute(where) / 'checkpoints' / str(step)} has no "
                      f"encoder parameters (top-level keys {sorted(params)})")
  config = files.read_json(files.reachable(where) / "config.json")
  if config.get("regime") == "lora":  # Its branches folded into the dense kernels: a plain encoder to start from.
    cfg = runs.encoder_config(config, load_tokenizer(config["data"]["tokenizer"]).vocab_size)
    params = params | {"encoder": peft_format.merge_lora(cfg, params["encoder"])}
  return params


def load(init: str, heads: hf.HeadReader | None = None) -> tuple[EncoderConfig, Tokenizer, dict[str, Any]]:
  """(EncoderConfig, tokenizer, `parameters`) of the checkpoint named by `init`: a model ready to apply."""
  fields, tokenizer_name = model_fields(init)
  tokenizer = load_tokenizer(tokenizer_name)
  cfg = from_fields(fields, tokenizer.vocab_size)
  kind, where = parse(init)
  if kind == "peft":
    cfg = cfg.replace(**peft_format.read_adapter(where, cfg)[0])
  if kind == "run":  # An adapters run's encoder holds its adapters (a LoRA run's branches are merged: `parameters`).
    config = files.read_json(files.reachable(where) / "config.json")
    if config.get("regime") == "adapters":
      cfg = cfg.replace(**runs.regime_fields(config, cfg.num_layers))
  return cfg, tokenizer, parameters(init, heads)


def _peft_base(init: str, where: str) -> str:
  """A PEFT adapter's base, as an `hf:` init names it (adapter_config.json's base_model_name_or_path: a packaged name
  or a checkpoint directory)."""
  base = peft_format.read_config(where).get("base_model_name_or_path")
  if not isinstance(base, str) or not base:
    raise ConfigError(f"init={init!r}: {pathlib.Path(where) / peft_format.CONFIG} has no base_model_name_or_path; "
                      "expected the base checkpoint's packaged name or directory")
  return base


def _with(tree: dict[str, Any], branches: dict[str, Any]) -> dict[str, Any]:
  """Encoder tree `tree` with the subtrees of `branches` added (LoRA's lora_<target> beside their dense layers)."""
  return tree | {k: _with(tree.get(k, {}), v) if isinstance(v, dict) else v for k, v in branches.items()}


def run_params(workdir: str | Path, step: int | None = None, *, evaluation: bool = False) -> tuple[int, Any]:
  """(step, parameter tree on the default device) of a run's checkpoint `step` (None: the newest). evaluation: the
  parameters' moving average when the run kept one (launch.optimizer's EMA, as evaluation uses), else the trained
  parameters. Only those are read from disk (orbax partial restore), not the optimizer state."""
  # pylint: disable=import-outside-toplevel  (configs and hf: inits never load JAX's checkpointing)
  import orbax.checkpoint as ocp
  directory = files.absolute(files.path(workdir) / "checkpoints")
  if not directory.is_dir() or not any(p.name.isdigit() for p in directory.iterdir()):
    raise UserError(f"{directory} holds no checkpoint: train the run first (python -m launch.main ... "
                    f"--workdir {workdir})")
  reader = ocp.CheckpointManager(directory, item_handlers=ocp.PyTreeCheckpointHandler())
  step = reader.latest_step() if step is None else step
  try:
    with damaged_checkpoint.quiet_reads():
      params = _restore_params(reader, step, evaluation)
  except Exception as err:  # noqa: BLE001  (orbax and TensorStore raise many types for a damaged file: one line)
    raise damaged_checkpoint.error(directory / str(step), step, err) from None
  finally:
    reader.close()
  run = files.path(workdir)
  return step, _on_base(run, params) if runs.is_partial(run) else params


def _on_base(workdir: Path, params: dict[str, Any]) -> dict[str, Any]:
  """The trainable part `params` of a partial run's checkpoint (encoder.runs) put on the run's frozen base."""
  import flax.traverse_util  # pylint: disable=import-outside-toplevel  (as in run_params)
  config = files.read_json(workdir / "config.json")
  init = config.get("init", "")
  base = runs.base_params(workdir, parameters(init)["encoder"] if init else None,
                          load_tokenizer(config["data"]["tokenizer"]).vocab_size)
  flat = flax.traverse_util.flatten_dict(base)
  flat.update(flax.traverse_util.flatten_dict(params))
  return flax.traverse_util.unflatten_dict(flat)


def _restore_params(reader: Any, step: int, evaluation: bool) -> Any:
  """`run_params`' read of checkpoint `step` by the orbax CheckpointManager `reader`: its params, with the moving
  average in place of the leaves it covers when `evaluation` and the run kept one (launch.optimizer's EMA covers the
  trainable part alone when a regime freezes some, as launch.optimizer.evaluation_params puts it on the rest)."""
  import flax.traverse_util  # pylint: disable=import-outside-toplevel  (as in run_params)
  import jax  # pylint: disable=import-outside-toplevel
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  metadata = reader.item_metadata(step)
  opt_state = metadata["opt_state"] if evaluation else None
  ema = opt_state["ema"] if isinstance(opt_state, dict) and "ema" in opt_state else None  # EmaState, as a dict.
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  abstract = lambda tree: jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
  target = {"params": abstract(metadata["params"])}
  if ema is not None:
    target["opt_state"] = {"ema": abstract(ema)}
  restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device), target)
  restored = reader.restore(step, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args,
                                                              partial_restore=True))
  if ema is None:
    return restored["params"]
  flat = flax.traverse_util.flatten_dict(restored["params"])
  flat.update(flax.traverse_util.flatten_dict(restored["opt_state"]["ema"]))
  return flax.traverse_util.unflatten_dict(flat)
