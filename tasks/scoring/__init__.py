"""Scoring: metrics (accuracy, F1, entity-level P/R/F1, correlations), tag schemes, the paired bootstrap, and the
`python -m tasks.scoring.score` command that re-scores prediction files."""
