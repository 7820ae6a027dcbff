"""Sweep files (`get_sweep(arg) -> dict`, run by `python -m launch.sweep`; format in launch/sweep.py)."""
