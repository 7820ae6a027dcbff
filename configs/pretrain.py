"""Pretraining (MLM, NSP, SpanBERT's SBO, ELECTRA) on raw text.

  python -m launch.main --config configs/pretrain.py:size=mini,objectives=mlm+nsp --workdir runs/mini
  python -m launch.main --config configs/pretrain.py:size=mini,arch=modernbert --workdir runs/mini_modern
  python -m launch.main --config configs/pretrain.py:runlocal --workdir /tmp/smoke   # tiny model, a few seconds
  python -m launch.main --config configs/pretrain.py:size=electra-small,objectives=electra --workdir runs/electra
  python -m launch.main --config configs/pretrain.py:init=hf:all-MiniLM-L6-v2,steps=500 \
      --config.data.train_files=my_domain.txt --workdir runs/adapted   # continued (domain-adaptive) pretraining

String arguments: size (a name from encoder.config.PRESETS), arch (architecture switches set on the size: a name
from encoder.config.ARCHITECTURES, e.g. rope, geglu, modernbert; default bert, none), objectives ("+"-joined names from
objectives.registry.OBJECTIVES), steps, runlocal (tiny model, 20 steps, on the WikiText-2 articles that ship with the
package, so no data directory is needed), init (continue
from a checkpoint: "hf:<name or directory>" or "run:<workdir>"; its model config and tokenizer replace size's, and
its encoder and whichever of the objectives' heads it has are loaded; "" = random init).
"""

import ml_collections

from configs import common, samples
from encoder import fields
from objectives import data as objective_data, registry as objective_registry


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The pretraining config for `arg` ('size=base,objectives=mlm+sbo,steps=100000,runlocal')."""
  args = common.parse_arg(arg, size="base", arch="bert", objectives="mlm", steps=100_000, runlocal=False, init="")
  names = args.objectives.split("+")
  # What the objectives set of the data (Objective.packing, .masking: NSP pairs, SBO's spans; .mask_defaults:
  # ELECTRA's), else the defaults below; an unknown name is left to config.objectives' rule.
  needed = objective_data.defaults(names).get
  config = ml_collections.ConfigDict()  # Locked before it is returned.
  config.objectives = args.objectives  # "+"-joined objective names (objectives.registry.OBJECTIVES).
  config.objective_weights = ml_collections.ConfigDict(dict.fromkeys(names, 1.0))  # Total loss = sum of w * loss.
  config.task = ""  # Fine-tuning task name (tasks registry); "" for pretraining.
  config.init = args.init  # "hf:<name|dir>" or "run:<workdir>": continue pretraining from it ("" = random init).
  config.model = common.model_config(args.size, arch=args.arch)  # EncoderConfig fields (PRESETS[size] + switches).

  config.data = ml_collections.ConfigDict()  # Corpus files, tokenizer and row layout.
  config.data.train_files = "wikitext-2/raw/wiki.train.raw"  # Comma-separated; relative to the data dir or absolute.
  config.data.eval_files = "wikitext-2/raw/wiki.valid.raw"  # Comma-separated evaluation files ("" = no eval).
  config.data.prepared = ""  # A directory of objectives.prepare: train rows read from its shards (not train_files).
  config.data.tokenizer = "all-MiniLM-L6-v2"  # A tokenizer path or a packaged checkpoint name (encoder.pretrained).
  config.data.max_length = 128  # Tokens per example row.
  # Row layout (objectives.pipeline.PACKINGS): "full_sentences" (RoBERTa), "nsp_pairs" (BERT, for NSP), "segments".
  config.data.packing = needed("data.packing", "full_sentences")
  config.data.cache_dir = ""  # Tokenized-corpus cache ("" = workdir/cache).
  config.data.prefetch = 2  # Batches prepared ahead on a background thread.
  # Processes that mask and batch (0: threads; -1: chosen for the host: 1 per 8 cores, at most 32, on a TPU host,
  # else 0; a GPU needs several: docs/gpu.md).
  config.data.workers = -1

  config.masking = ml_collections.ConfigDict()  # MLM corruption (objectives.masking.mask_example).
  config.masking.rate = 0.15  # Fraction of tokens selected for prediction (spec, "Masking Words").
  config.masking.max_predictions = 20  # Fixed width P of masked_positions per row.
  config.masking.mode = needed("masking.mode", "token")  # "token", "whole_word" or "span" (SpanBERT).
  config.masking.replacement = "unigram"  # Random replacements from the corpus unigram law or "uniform".
  config.masking.mask_prob = needed("masking.mask_prob", 0.8)  # Of the selected tokens: [MASK] (ELECTRA: 85%).
  # Of the selected tokens: replaced by a random token (the rest are kept; ELECTRA's code: none).
  config.masking.random_prob = needed("masking.random_prob", 0.1)

  # An objective's own block (ELECTRA's generator and loss weight: config.electra), from the fields its module
  # declares (objectives/electra.py CONFIG_FIELDS: defaults, rules and comments in one place).
  for name, declared in objective_registry.config_fields().items():
    config[name] = ml_collections.ConfigDict(fields.defaults(declared))

  config.optimizer = common.optimizer_config()  # AdamW/LAMB, warmup + linear decay (configs/common.py).
  common.engine_config(config, steps=args.steps)
  # The held-out metric the objectives keep the best checkpoint by (Objective.best: MLM's accuracy), else the loss.
  config.best_metric, config.best_mode = objective_registry.best_checkpoint(names)

  if args.runlocal:  # A tiny run on the packaged sample corpus (configs/samples.py): a smoke test in seconds.
    config.model = common.model_config("tiny", arch=args.arch, num_layers=2, hidden_size=64, num_heads=4,
                                       intermediate_size=256, max_positions=64)
    config.data.train_files = str(samples.sample_file("train"))
    config.data.eval_files = str(samples.sample_file("heldout"))
    config.data.max_length = 32
    config.masking.max_predictions = 4
    config.batch_size = 8
    config.num_train_steps = 20 if args.steps == 100_000 else args.steps
    config.optimizer.warmup_steps = 4
    config.optimizer.learning_rate = 1e-3
    config.log_every_steps = 5
    config.eval_every_steps = 10
    config.eval_steps = 2
    config.checkpoint_every_steps = 10
  if args.init:  # The checkpoint's architecture and vocabulary (after runlocal: a tiny run can continue a real one).
    config.model, config.data.tokenizer = common.model_from_init(args.init)
  return config.lock()
