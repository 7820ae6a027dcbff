"""configs/finetune.py string arguments: runlocal keeps an explicit init= (a smoke test of that checkpoint), and
starts from random init only when init is left at its default."""

from configs import finetune


def test_runlocal_alone_is_a_tiny_random_init_model():
  config = finetune.get_config("task=sick,runlocal")
  assert config.init == "" and (config.model.num_layers, config.model.hidden_size) == (2, 64)


def test_runlocal_honours_an_explicit_init():
  config = finetune.get_config("task=sick,runlocal,init=hf:all-MiniLM-L6-v2")
  assert config.init == "hf:all-MiniLM-L6-v2"
  assert (config.model.num_layers, config.model.hidden_size) == (6, 384)  # The checkpoint's own model.
  assert config.task.train_split == "train[:64]" and config.epochs == 2  # Still runlocal's slices and steps.
  assert config.data.tokenizer.endswith("model")  # The checkpoint's tokenizer (its directory).


def test_an_explicit_empty_init_with_runlocal_is_random_init():
  assert finetune.get_config("task=sick,runlocal,init=").init == ""
