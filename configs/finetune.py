"""Fine-tuning a pretrained encoder on a task (classification, pair classification, tagging, span NER, extractive QA).

  python -m launch.main --config configs/finetune.py:task=conll2003 --workdir runs/conll
  python -m launch.main --config configs/finetune.py:task=sick,init=run:runs/mini --workdir runs/sick_mini
  python -m launch.main --config configs/finetune.py:task=sst2,runlocal --workdir /tmp/smoke   # seconds

String arguments: task (a name of TASK_PRESETS), init ("hf:<name or directory>" for an imported HuggingFace BERT,
"run:<workdir>" for the encoder of our own pretraining run's latest checkpoint, "" for random init), runlocal (a tiny
random-init model on a slice of each split, a few steps: a smoke test; with an explicit init=, that checkpoint's model
on the same slices). Other datasets (e.g. paraphrase or RTE TSVs) need only config: --config.task.dataset=
--config.task.format=tsv --config.task.files=train:a.tsv,validation:b.tsv,test:c.tsv
--config.task.columns=text_a:sentence1,text_b:sentence2,label:label --config.task.labels=... (see `task_block`).
"""

import difflib

import ml_collections

from configs import common
from encoder.errors import ConfigError
from tasks import regimes, registry

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT", "SCONJ",
        "SYM", "VERB", "X")  # The 17 Universal POS tags.
# Per-task recipes (chosen on dev; the README's fine-tuning section has the runs compared). Keys are task_block's.
# The uncased MiniLM loses casing, so the NER/POS presets give the head word shapes back (task.case_features); UPOS
# also reads word endings (task.last_subword).
TASK_PRESETS: dict[str, dict] = {
    "sst2": dict(name="classification", dataset="sst2", test_split="", metric="accuracy", max_length=64,
                 epochs=3, learning_rate=1e-4, layer_decay=0.8),
    # MRPC: the GLUE pair, accuracy and the paraphrase class's F1; the best checkpoint by dev F1.
    "mrpc": dict(name="classification", dataset="mrpc", metric="f1", positive_label="1", max_length=128, epochs=3,
                 learning_rate=1e-4),
    "sick": dict(name="classification", dataset="sick", metric="accuracy", max_length=128, epochs=4,
                 learning_rate=1e-4, regime="top_k", top_k=6),  # Every MiniLM layer trains; the embeddings stay.
    "sick_relatedness": dict(name="regression", dataset="sick", metric="pearson", max_length=128, epochs=4,
                             learning_rate=1e-4),
    "conll2003": dict(name="tagging", dataset="conll2003", scheme="IOB2", source_scheme="IOB2", metric="f1",
                      epochs=5, learning_rate=1e-4),  # Plain BIO tagging: the baseline of the NER variants.
    "conll2003_crf": dict(name="tagging", dataset="conll2003", scheme="IOB2", source_scheme="IOB2", crf=True,
                          case_features=16, metric="f1", epochs=8, learning_rate=1e-4),
    "conll2003_spans": dict(name="span_ner", dataset="conll2003", scheme="IOB2", source_scheme="IOB2",
                            case_features=16, metric="f1", epochs=8, learning_rate=1e-4,
                            prior_bias=False),  # Its measured recipe (docs/results.md) predates task.prior_bias.
    # Nested NER on a GENIA sample (docs/results.md, "Nested NER on GENIA"); spans up to 10 words hold every dev
    # entity and all but 9 of the 4,156 training ones. genia_flat: BIO tagging of the outermost entities, its baseline.
    "genia_nested": dict(name="span_ner", dataset="genia_nested", test_split="", nested=True, max_span_width=10,
                         case_features=16, metric="f1", epochs=10, learning_rate=1e-4),
    "genia_flat": dict(name="tagging", dataset="genia_outer", test_split="", scheme="IOB2", case_features=16,
                       metric="f1", epochs=10, learning_rate=1e-4),
    # Extractive QA; the HF reference's recipe with its epochs chosen on the held-out articles (1 or 2: 2;
    # docs/question_answering.md, "The preset"). Windows of 384 subwords, 128 apart: most contexts fit one. Buckets
    # every 32 subwords, those not worth their compilation pruned (ten kept for two epochs, nine for one).
    "squad": dict(name="question_answering", dataset="squad", metric="f1", max_length=384, epochs=2,
                  learning_rate=1e-4, buckets=tuple(range(64, 385, 32))),
    "ud_pos": dict(name="tagging", dataset="ud_ewt_upos", scheme="", metric="accuracy", epochs=5,
                   learning_rate=1e-4, labels=UPOS, case_features=16, last_subword=True),
}
# Preset keys that set training fields, not task fields.
RECIPE_KEYS = ("epochs", "learning_rate", "layer_decay", "regime", "top_k", "buckets", "pack")


def task_block(name: str, **preset) -> ml_collections.ConfigDict:
  """The config.task block: what data, which head, how labels are encoded and scored. Its fields, defaults and comments
  are declared by the task families (tasks/task_fields.py's COMMON, each family's `config_fields`), every registered
  family's in the block whatever the chosen one (docs/design.md, "Config fields"): family `name`'s, with `preset`'s
  values."""
  values = registry.task_defaults(name) | preset
  return ml_collections.ConfigDict({key: tuple(value) if isinstance(value, list) else value
                                    for key, value in values.items()})


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The fine-tuning config for `arg` ('task=conll2003,init=hf:all-MiniLM-L6-v2,runlocal')."""
  explicit_init = any(key == "init" for key, _, _ in common.arg_items(arg))
  args = common.parse_arg(arg, task="sick", init="hf:all-MiniLM-L6-v2", runlocal=False)
  if args.task not in TASK_PRESETS:
    close = difflib.get_close_matches(args.task, TASK_PRESETS, n=1)
    raise ConfigError(f"task={args.task!r} is not a task{f'; did you mean {close[0]!r}?' if close else ''} (known: "
                      f"{', '.join(sorted(TASK_PRESETS))}; configs/finetune.py TASK_PRESETS)")
  preset = TASK_PRESETS[args.task]
  config = ml_collections.ConfigDict()  # Locked before it is returned.
  config.objectives = ""  # Unused by fine-tuning (the task is the only objective).
  config.objective_weights = ml_collections.ConfigDict()  # Unused by fine-tuning.
  config.task = task_block(**{k: v for k, v in preset.items() if k not in RECIPE_KEYS})  # The task (above).
  # "hf:<name|dir>", "run:<workdir>" or "" (random init); runlocal starts from random init unless init= is given.
  config.init = "" if args.runlocal and not explicit_init else args.init
  if config.init:
    config.model, tokenizer = common.model_from_init(config.init)  # EncoderConfig fields of the checkpoint.
  else:
    config.model, tokenizer = common.model_config("tiny"), "all-MiniLM-L6-v2"
  config.model.hidden_dropout = 0.1  # Encoder dropout while fine-tuning.
  config.model.attention_dropout = 0.1  # Attention-probability dropout while fine-tuning.

  config.data = ml_collections.ConfigDict()  # Tokenizer and batching.
  config.data.tokenizer = tokenizer  # Tokenizer path or packaged name (the init checkpoint's: vocabularies match).
  # Padded batch lengths (jit shapes), <= max_length.
  config.data.buckets = preset.get("buckets", (8, 12, 16, 24, 32, 40, 48, 64, 96, 128))
  # Buckets whose compilation costs more than the padding they save are dropped (tasks.batching.prune_buckets): the
  # cost of one compilation in padded token columns of a step; -1 = this backend's measured figure
  # (tasks.batching.COMPILE_COSTS: 500 on a CPU, 50,000 on a GPU), chosen at start-up and recorded; 0 keeps all.
  config.data.compile_cost = -1.0
  # Training batches packed into rows of task.max_length as attention segments (one jit shape, little padding;
  # tasks.batching.pack) instead of padded to buckets; evaluation stays bucketed. One device, no R-Drop or grad_accum.
  config.data.pack = preset.get("pack", False)
  config.data.cache_dir = ""  # tfds array_record cache ("" = ~/.cache/encoderlab/tfds).
  config.data.prefetch = 2  # Batches prepared ahead on background threads.

  config.epochs = preset["epochs"]  # Passes over the training split (num_train_steps = epochs * batches/epoch).
  # What trains, beside the head (docs/regimes.md): "full" everything, "frozen" nothing else, "top_k" the top `top_k`
  # layers, "lora" config.lora's low-rank branches, "bitfit" the encoder's biases, "adapters" config.adapters'.
  config.regime = preset.get("regime", "full")
  config.top_k = preset.get("top_k", 0)  # Layers trained by regime "top_k" (read by that regime only).
  # Regime "lora": rank (1 to hidden_size), alpha (updates scaled by alpha / rank), dropout (on LoRA's input), targets
  # (comma-separated among query, key, value, attention_output, intermediate, output), layers ('all', 'top:<k>' or
  # '0,1,5'); tasks.regimes.LORA_FIELDS.
  config.lora = regimes.config_blocks()["lora"]
  # Regime "adapters": size (the bottleneck, >= 1), placement ('attention', 'feed_forward' or 'both': Houlsby's two
  # per block), layers (as lora's); tasks.regimes.ADAPTER_FIELDS.
  config.adapters = regimes.config_blocks()["adapters"]
  # Layer-wise LR decay: layer l's LR is lr * layer_decay^(num_layers + 1 - depth) (1.0: none).
  config.layer_decay = preset.get("layer_decay", 1.0)
  config.optimizer = common.optimizer_config(learning_rate=preset["learning_rate"], eps=1e-8)  # AdamW.
  config.optimizer.warmup_fraction = 0.1  # Warmup over this fraction of the steps (overrides warmup_steps if > 0).
  common.engine_config(config, steps=0)  # num_train_steps 0 = epochs * steps per epoch.
  config.batch_size = 32  # Examples per optimizer step (the last batch of an epoch is padded, masked out).
  config.log_every_steps = 50
  config.eval_every_steps = -1  # -1: evaluate on the whole dev split after every epoch.
  config.eval_steps = -1  # Always the whole dev split.
  config.checkpoint_every_steps = -1  # -1: with every evaluation (the best one is kept for the test score).
  config.keep_checkpoints = 1  # The latest checkpoint (plus the best one by best_metric).
  # Dev metric for the best checkpoint: follows task.metric unless set itself.
  config.best_metric = ml_collections.FieldReference("eval/") + config.task.get_ref("metric")
  config.best_mode = "max"
  config.measure_mfu = False

  if args.runlocal:  # A tiny model (random init, or init='s own) on slices of the splits: a smoke test in seconds.
    if not config.init:
      config.model = common.model_config("tiny", num_layers=2, hidden_size=64, num_heads=4, intermediate_size=128,
                                         max_positions=64)
    config.task.train_split = "train[:64]"
    config.task.eval_split = "validation[:32]"
    config.task.test_split = "test[:32]" if config.task.test_split else ""
    config.task.max_length = 32
    config.task.span_hidden = 32
    config.task.max_question_length = 12  # QA: windows of 32 hold 17 context subwords, 8 apart.
    config.task.doc_stride = 8
    config.data.buckets = (16, 32)
    config.epochs = 2
    config.batch_size = 16
    config.optimizer.learning_rate = 1e-3
    config.log_every_steps = 2
  # A preset's top_k counts MiniLM's 6 layers: a shallower model (runlocal's, or another init) trains all of its own.
  config.top_k = min(config.top_k, config.model.num_layers)
  return config.lock()
