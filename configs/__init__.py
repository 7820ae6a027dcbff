"""Experiment configs (one `get_config(arg)` file per family) and shared defaults."""
