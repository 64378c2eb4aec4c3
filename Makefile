# Two entry points (see README): `make run` and `make test`; `make test-fast` is the edit loop.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
# Bytecode is compiled once, at install, on every core (pip compiles one file after another: ~70 s of one core
# here). Without it, where PYTHONDONTWRITEBYTECODE is set every process compiles torch's sources again (the suite
# ran ~2x slower), and writing it lazily at first import lets a process under a file-size limit or on a full disk
# leave a truncated .pyc behind for every later one ("marshal data too short": seen in the machine-fault tests).
# Files that do not compile are skipped, as pip skips them.
INSTALL := $(PY) -m pip install -q --no-compile
COMPILE := $(PY) -c "import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()['purelib'], quiet=2, workers=0)"
# torch first, and the build asked for: a version pin alone does not choose one (on PyPI, Linux wheels carry
# CUDA, several GB). The local version names the build exactly: 2.13.0+cpu (default) or, for a GPU node,
# `make TORCH_BUILD=cu128` (any build the PyTorch index serves: cu126, cu128, ...).
TORCH_VERSION ?= 2.13.0
TORCH_BUILD   ?= cpu
TORCH_INDEX   ?= https://download.pytorch.org/whl/$(TORCH_BUILD)
TORCH         := torch==$(TORCH_VERSION)+$(TORCH_BUILD)

.PHONY: install run test test-fast clean

# A wheel this site already keeps (pip's find-links) is installed without the network, its dependencies from
# the configured index; otherwise the PyTorch index of that build serves torch (PyPI the rest).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	if $(INSTALL) --no-index --no-deps '$(TORCH)' 2>/dev/null; then $(INSTALL) '$(TORCH)'; \
	else $(INSTALL) '$(TORCH)' --extra-index-url $(TORCH_INDEX); fi
	$(INSTALL) -e '.[test]'
	$(COMPILE)
	touch $@

install: $(VENV)/.installed

# The main job on the embedded default data (simulated events).
run: install
	$(VENV)/bin/domainpar demo --out runs/demo

# Two pytest-xdist workers (TEST_WORKERS=0: all in this process): a test file stays in one worker, so its module
# fixtures are made once (tests/conftest.py's scheduler groups the files).
TEST_WORKERS ?= 2
PYTEST        = $(PY) -m pytest -q -n $(TEST_WORKERS) --no-loadscope-reorder

# The whole suite (what CI runs, .ci/run), with the 25 slowest tests listed at the end.
test: install
	$(PYTEST) --durations=25

# The edit loop, under 3 minutes on 2 cores: every test but those marked slow (pyproject.toml's markers).
test-fast: install
	$(PYTEST) -m "not slow" --durations=25

clean:
	rm -rf $(VENV) runs
