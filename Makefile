# Two entry points (see README): `make run` and `make test`; `make test-fast` is the edit loop.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0

.PHONY: install run test test-fast clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(TORCH_CPU) || $(PIP) install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default data (simulated events).
run: install
	$(VENV)/bin/domainpar demo --out runs/demo

# The whole suite (what CI runs, .ci/run), with the 25 slowest tests listed at the end.
test: install
	$(PY) -m pytest -q --durations=25

# The edit loop, under 3 minutes on 2 cores: every test but those marked slow (pyproject.toml's markers).
test-fast: install
	$(PY) -m pytest -q -m "not slow" --durations=25

clean:
	rm -rf $(VENV) runs
