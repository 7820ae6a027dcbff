"""Experiment tools: sweeps, reports, local multi-process clusters and TPU-pod launches. Each starts `launch.main`
as subprocesses and never imports the engine."""
