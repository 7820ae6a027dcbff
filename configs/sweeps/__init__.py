"""Sweep files (`get_sweep(arg) -> dict`, run by `python -m launch.experiments.sweep`; format in
launch/experiments/sweep.py; points.py builds lists of points)."""
