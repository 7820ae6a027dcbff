"""Configurations of encoderlab exports that need remote code: HF's BertConfig / ModernBertConfig (the encoder, read
unchanged) plus `encoderlab_head`, what the head computes (written by encoderlab's `python -m launch.export`).

Their own model_type makes `AutoModel*.from_pretrained(dir)` without `trust_remote_code=True` fail loudly instead of
loading HF's class with an untrained head.
"""

from transformers import BertConfig, ModernBertConfig


class EncoderlabBertConfig(BertConfig):
  """BertConfig of an encoderlab run whose head HF has no class for."""
  model_type = "encoderlab-bert"
  encoderlab_head: dict | None = None  # What the head reads and computes (modeling_encoderlab's classes read it).


class EncoderlabModernBertConfig(ModernBertConfig):
  """ModernBertConfig of an encoderlab run of the ModernBERT switches whose heads HF's ModernBERT classes lack."""
  model_type = "encoderlab-modernbert"
  encoderlab_head: dict | None = None  # What the head reads and computes (modeling_encoderlab's classes read it).
