"""ELECTRA's replaced-token detection (Clark et al., 2020; the spec's footnote on ELECTRA).

A small generator (an MLM encoder, by default 1/4 of the discriminator's hidden size, heads and feed-forward width,
the same depth) shares the discriminator's token, position and segment embeddings. It predicts the masked tokens;
a sample from its distribution (not its argmax, no gradient through the sampling) replaces each masked token, and
the discriminator (the run's encoder) labels every non-padding token as original or replaced; a sampled token equal
to the original counts as original. Loss = generator MLM + rtd_weight * RTD (binary cross-entropy), each term the
mean over its own tokens. Fine-tuning starts from the discriminator (params/encoder).

Parameter names follow HF's ElectraForMaskedLM / ElectraForPreTraining: generator/encoder (the generator's encoder
without embeddings), generator/head (an MLM head as objectives/mlm.py's: ElectraGeneratorPredictions and the tied
decoder's bias), discriminator/{dense, dense_prediction} (ElectraDiscriminatorPredictions).
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder import fields
from encoder.config import EncoderConfig
from encoder.fields import Field
from encoder.hf import checkpoint, electra as hf_electra
from encoder.hf.files import MissingTensorError
from encoder.hf.tensors import Found, Tensor, dense, state
from encoder.model import Encoder, hash_uniform, per_token
from objectives import layers, mlm
from objectives.objective import HfHead, Objective, Requirement

GENERATOR_LOGITS = "electra_generator_logits"  # Batch key replace_inputs adds: generator logits [batch, P, vocab].
# ELECTRA's masking (its code's defaults): 85% of the selected tokens become [MASK], the rest stay (no random tokens).
MASK_DEFAULTS = {"mask_prob": 0.85, "random_prob": 0.0}


# config.electra's fields: their defaults (configs/pretrain.py's block), rules (configs/rules.py, checked before a
# run starts) and comments (docs/config.md), declared here once (objectives.registry.config_fields).
CONFIG_FIELDS: tuple[Field, ...] = (
    Field("generator_size", 0.25, fields.Number(0.0, 1.0, low_open=True),  # Paper: 1/4 - 1/2.
          "Generator hidden size, heads and feed-forward width / the discriminator's."),
    Field("generator_layers", 0, fields.NON_NEGATIVE_INT,
          "Generator depth (0 = the discriminator's, as in the paper)."),
    Field("rtd_weight", 50.0, fields.NON_NEGATIVE, "lambda: loss = generator MLM + lambda * replaced-token detection."),
)


def generator_config(discriminator: EncoderConfig, size: float, num_layers: int = 0) -> EncoderConfig:
  """The generator's shape: `size` x the discriminator's hidden size, heads and feed-forward width (ELECTRA's
  "generator size"), its depth (num_layers 0: the discriminator's), its embeddings the discriminator's."""
  heads = max(1, round(discriminator.num_heads * size))
  hidden = heads * max(1, round(discriminator.hidden_size * size / heads))
  return discriminator.replace(hidden_size=hidden, num_heads=heads,
                               intermediate_size=max(1, round(discriminator.intermediate_size * size)),
                               num_layers=num_layers or discriminator.num_layers,
                               embedding_size=discriminator.embedding_width)


def original_ids(batch: dict[str, jax.Array]) -> jax.Array:
  """The uncorrupted input_ids [batch, length]: the masked positions hold their original tokens again."""
  return scatter(batch["input_ids"], batch["masked_positions"], batch["masked_ids"], batch["masked_weights"])


def scatter(ids: jax.Array, positions: jax.Array, values: jax.Array, weights: jax.Array) -> jax.Array:
  """ids [batch, length] with values [batch, P] written at positions [batch, P] where weights > 0 (padding entries
  of the fixed-width masked_* arrays write nothing)."""
  positions = positions.astype(jnp.int32)
  values = jnp.where(weights > 0, values.astype(ids.dtype), layers.gather(ids[..., None], positions)[..., 0])
  return jnp.asarray(ids).at[jnp.arange(ids.shape[0])[:, None], positions].set(values)


def sample(key: jax.Array, logits: jax.Array) -> jax.Array:
  """One token id per row of logits [..., V], drawn from softmax(logits) by the Gumbel-max trick (the argmax of
  logits + Gumbel noise), the noise from encoder.model.hash_uniform (cheaper than jax.random.categorical's)."""
  noisy = logits - jnp.log(-jnp.log(hash_uniform(key, logits.shape)))
  vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  first_max = jnp.where(noisy >= noisy.max(axis=-1, keepdims=True), vocab, logits.shape[-1]).min(axis=-1)
  return jnp.minimum(first_max, logits.shape[-1] - 1)  # A max over the vocabulary, not a slow variadic argmax.


class Generator(nn.Module):
  """The generator encoder on the masked input (sharing `discriminator`'s embeddings) and its MLM head."""
  size: float = 0.25
  num_layers: int = 0
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12

  @nn.compact
  def __call__(self, batch: dict[str, jax.Array], discriminator: Encoder, train: bool) -> jax.Array:
    """-> logits [batch, P, vocab] at batch["masked_positions"]."""
    cfg = generator_config(discriminator.cfg, self.size, self.num_layers)
    encoder = Encoder(cfg, shared_embeddings=discriminator.embeddings, name="encoder")
    positions = batch["masked_positions"].astype(jnp.int32)
    last = jnp.concatenate([jnp.zeros((positions.shape[0], 1), jnp.int32), positions], axis=1)
    outputs = encoder(batch["input_ids"], batch.get("type_ids"), batch.get("positions"),
                      batch.get("attention_segments"), train=train,
                      last_positions=last if last.shape[1] < batch["input_ids"].shape[1] else None)
    # HF's ElectraGeneratorPredictions: dense to the embedding width, exact GELU, LayerNorm; the tied decoder.
    head = mlm.MaskedLMHead(self.initializer_range, self.layer_norm_eps, features=cfg.embedding_width, name="head")
    return head(outputs, batch, encoder.attend)


class DiscriminatorHead(nn.Module):
  """HF's ElectraDiscriminatorPredictions: dense -> activation -> dense to one logit per token."""
  initializer_range: float = 0.02
  approximate_gelu: bool = False

  @nn.compact
  def __call__(self, hidden: jax.Array) -> jax.Array:
    """hidden [batch, length, H] -> float32 logits [batch, length] (> 0: replaced)."""
    def predict(h):
      dense = lambda n, name: nn.Dense(n, kernel_init=nn.initializers.normal(self.initializer_range), name=name)
      return dense(1, "dense_prediction")(nn.gelu(dense(h.shape[-1], "dense")(h), approximate=self.approximate_gelu))
    return per_token(predict, hidden.astype(jnp.float32))[..., 0]


class ElectraHead(nn.Module):
  """replace_inputs: the generator's samples in the masked positions; __call__: the discriminator's logits."""
  generator_size: float = 0.25
  generator_layers: int = 0
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  approximate_gelu: bool = False

  def setup(self):
    self.generator = Generator(self.generator_size, self.generator_layers, self.initializer_range,
                               self.layer_norm_eps, name="generator")
    self.discriminator = DiscriminatorHead(self.initializer_range, self.approximate_gelu, name="discriminator")

  def replace_inputs(self, batch: dict[str, jax.Array], encoder: Encoder, train: bool) -> dict[str, jax.Array]:
    """The batch with each masked token replaced by a sample of the generator (training: a key of the step's
    dropout stream; evaluation: a fixed key, so evaluation is deterministic) and the generator's logits added."""
    logits = self.generator(batch, encoder, train)
    key = self.make_rng("dropout") if train else jax.random.PRNGKey(0)
    sampled = sample(key, jax.lax.stop_gradient(logits))  # [batch, P]: no gradient reaches the generator through it.
    ids = scatter(batch["input_ids"], batch["masked_positions"], sampled, batch["masked_weights"])
    return batch | {"input_ids": ids, GENERATOR_LOGITS: logits}

  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable[[jax.Array], jax.Array],
               train: bool = False) -> dict[str, jax.Array]:
    """-> {"generator": logits [batch, P, vocab], "discriminator": logits [batch, length], "input_ids": the
    discriminator's input [batch, length]}."""
    return {"generator": batch[GENERATOR_LOGITS], "discriminator": self.discriminator(outputs.last),
            "input_ids": batch["input_ids"]}


def rtd_loss(logits: jax.Array, replaced: jax.Array, tokens: jax.Array):
  """Mean binary cross-entropy of logits [batch, length] against replaced (bool) over `tokens` (bool), with
  (sum, count) metrics rtd_loss and rtd_accuracy."""
  labels, weights = replaced.astype(jnp.float32), tokens.astype(jnp.float32)
  nll = jnp.maximum(logits, 0.0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))  # -log sigmoid(+-logit)
  count = weights.sum()
  total = (nll * weights).sum()
  correct = (((logits > 0) == replaced) * weights).sum()
  return total / jnp.maximum(count, 1.0), {"rtd_loss": (total, count), "rtd_accuracy": (correct, count)}


def electra_loss(rtd_weight: float):
  """loss(predictions, batch) -> (generator MLM + rtd_weight * RTD, metrics generator_mlm_* and rtd_*)."""
  def loss(predictions: dict[str, jax.Array], batch: dict[str, jax.Array]):
    mlm, mlm_metrics = layers.cross_entropy(predictions["generator"], batch["masked_ids"], batch["masked_weights"],
                                            "generator_mlm")
    replaced = predictions["input_ids"] != original_ids(batch)
    rtd, rtd_metrics = rtd_loss(predictions["discriminator"], replaced, batch["attention_segments"] > 0)
    return mlm + rtd_weight * rtd, mlm_metrics | rtd_metrics
  return loss


def build(config: Mapping[str, Any] | None = None) -> Objective:
  """Objective "electra" (optional keys: generator_size, generator_layers, rtd_weight, initializer_range,
  layer_norm_eps, hidden_act)."""
  own = {field.name: layers.option(config, field.name, field.default) for field in CONFIG_FIELDS}
  rtd_weight, size, depth = float(own["rtd_weight"]), float(own["generator_size"]), int(own["generator_layers"])
  head = ElectraHead(generator_size=size, generator_layers=depth,
                     initializer_range=layers.model_option(config, "initializer_range"),
                     layer_norm_eps=layers.model_option(config, "layer_norm_eps"),
                     approximate_gelu=layers.model_option(config, "hidden_act") == "gelu_tanh")
  return Objective(name="electra", head=head, loss=electra_loss(rtd_weight),
                   terms={"generator_mlm": 1.0, "rtd": rtd_weight}, replaces_inputs=True,
                   encoders=lambda cfg: (generator_config(cfg, size, depth),), hf=HF,
                   # Its generator already predicts the masked tokens and its samples replace them in the encoder's
                   # input, so MLM/SBO heads on the discriminator would predict from the samples.
                   excludes=Requirement(("mlm", "sbo"), "its generator predicts the masked tokens and its samples "
                                        "replace them in the encoder's input"),
                   mask_defaults=MASK_DEFAULTS, check=lambda cfg: _check_generator(cfg, size, depth))


def _check_generator(discriminator: EncoderConfig, size: float, num_layers: int) -> None:
  """A ConfigError naming the field when the generator of this shape is not a valid encoder (its config's rules)."""
  generator_config(discriminator, size, num_layers)


def hf_tensors(cfg: EncoderConfig) -> list[Tensor]:
  """The discriminator's head as ElectraForPreTraining's discriminator_predictions (dense, dense_prediction)."""
  H = cfg.hidden_size
  return (dense(("electra", "discriminator", "dense"), "discriminator_predictions.dense", H, H)
          + dense(("electra", "discriminator", "dense_prediction"), "discriminator_predictions.dense_prediction", H, 1))


def read_hf(found: Found, directory: Path, params: dict) -> dict | None:
  """The head's tree from an ElectraForPreTraining's tensors (None without one), with the generator of its
  `generator/` subdirectory (an ElectraForMaskedLM sharing the discriminator's embeddings) when there is one."""
  if found.layout != "electra" or not found.holds(tensors := hf_tensors(found.cfg)):
    return None
  tree = found.take(tensors)["electra"]
  where = Path(directory) / hf_electra.GENERATOR_DIRECTORY
  if where.is_dir():
    read_mlm = lambda f, d, p: {"mlm": head} if (head := mlm.read_hf(f, d, p)) is not None else {}
    _, generator, heads = checkpoint.load_hf_checkpoint(where, heads=read_mlm)
    if "mlm" not in heads:
      raise MissingTensorError(f"{where}: the ELECTRA generator has no generator_predictions / generator_lm_head "
                               "(expected an ElectraForMaskedLM checkpoint)")
    hf_electra.check_shared_embeddings(where, params["embeddings"], generator["embeddings"])
    tree["generator"] = {"encoder": {k: v for k, v in generator.items() if k != "embeddings"}, "head": heads["mlm"]}
  return tree


def write_hf(cfg: EncoderConfig, layout: str, heads: Mapping, remote: bool = False):
  """(HF tensors, no config.json fields) of the discriminator's head; None outside ELECTRA's layout."""
  return (state(hf_tensors(cfg), heads, "heads"), {}) if layout == "electra" else None


def write_generator(directory: Path, cfg: EncoderConfig, params: Mapping, tree: Mapping, tokenizer_files) -> None:
  """The head's generator (if any) as an ElectraForMaskedLM in directory/generator, its embeddings the
  discriminator's (`params`)."""
  if tree.get("generator") is None:
    return
  generator = tree["generator"]
  generator_cfg = hf_electra.generator_config(cfg, generator["encoder"])
  tensors, fields_ = mlm.write_hf(generator_cfg, "electra", {"mlm": generator["head"]})
  heads = checkpoint.Heads(mlm.HF.classes[("electra", ("mlm",))], tensors, fields_, pooler=False)
  checkpoint.save_hf_checkpoint(Path(directory) / hf_electra.GENERATOR_DIRECTORY, generator_cfg,
                                {"embeddings": params["embeddings"], **generator["encoder"]}, heads, tokenizer_files)


HF = HfHead(read_hf, write_hf, {("electra", ("electra",)): "ElectraForPreTraining"}, layout="electra",
            beside=write_generator)
