"""Contextual embeddings (spec, "Contextual Embeddings"): extraction of word and subword vectors from any layer mix
(`extract`, `layers`, `store`), anisotropy and standardization, word similarity in context (WiC), 1-NN word-sense
disambiguation and sense pictures. The encoder package never imports this one."""
