# Two entry points (see README): `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0

.PHONY: install run test clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(TORCH_CPU) || $(PIP) install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default data (simulated events).
run: install
	$(VENV)/bin/domainpar demo --out runs/demo

test: install
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs
