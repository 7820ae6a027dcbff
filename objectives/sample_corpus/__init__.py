"""The sample corpus of `make demo` (data only: wiki.train.txt, wiki.heldout.txt; see README.md and LICENSE)."""
