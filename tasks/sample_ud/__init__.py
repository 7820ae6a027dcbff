"""The POS-tagging sample of `make demo` (data only: en_ewt-sample-{train,test}.conllu; see README.md, LICENSE.txt)."""
