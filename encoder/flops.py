"""Training FLOPs of an encoder step, for MFU and equal-compute sweeps (DESIGN, "Performance notes": count first).

Forward + backward = 3x the forward's 2 FLOPs per multiply-add:
  6 * [layers * (4 H^2 + 2 H I)] * rows * length     the layers' matmuls (QKV, attention output, FFN) at every token
                                                       (3 H I for a gated FFN: GeGLU/SwiGLU's input, gate and output)
  + 12 * layers * H * length^2 * rows                  attention QK^T and AV (local layers too: the encoder computes
                                                       every score and masks those outside the window)
When the last block runs only at the rows the heads read (Encoder's last_positions), that block counts its keys and
values at every token and the rest of its work (queries, QK^T and AV, output, FFN) at those rows alone.
A head that runs encoders of its own over every token (ELECTRA's generator: an Objective's `encoders`) adds their
layers' FLOPs at every token (`step_flops`; the generator's last block, which runs at the masked rows alone, counted
at every token). Lookup tables cost no FLOPs; heads are left out (the engine's MFU is slightly conservative; the
throughput benchmark adds its heads' FLOPs on top). launch.flops measures the matmul ceiling MFU divides by.
"""

from collections.abc import Sequence

from encoder.config import EncoderConfig


def encoder_train_flops(cfg: EncoderConfig, rows: int, length: int, last_rows: float | None = None) -> float:
  """Forward + backward FLOPs of the encoder layers for `rows` sequences of `length` tokens, the last block at
  `last_rows` rows per sequence when given (module docstring)."""
  h = cfg.hidden_size
  feed_forward = (3 if cfg.gated_feed_forward else 2) * h * cfg.intermediate_size
  per_token = 4 * h * h + feed_forward + 2 * h * length  # Multiply-adds per token and layer.
  per_sequence: float = cfg.num_layers * per_token * length
  if last_rows is not None:  # Keys and values (2 H^2) stay at every token.
    per_sequence -= (per_token - 2 * h * h) * (length - last_rows)
  return 6.0 * per_sequence * rows


def step_flops(cfg: EncoderConfig, rows: int, length: int, last_rows: float | None = None,
               extra: Sequence[EncoderConfig] = ()) -> float:
  """Forward + backward FLOPs of one step's encoders: the model's (encoder_train_flops) and the `extra` encoders its
  heads run over every token (objectives.objective.extra_encoders; module docstring)."""
  return encoder_train_flops(cfg, rows, length, last_rows) + sum(encoder_train_flops(e, rows, length) for e in extra)
