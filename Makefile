# The two commands of the README: `make demo` and `make test`. Both create or
# reuse .venv and install what is missing; nothing else is needed on the machine.
# Both install the versions the suite was last proven with: locks/demo.txt (sidequest's own
# dependencies) and locks/test.txt (with the test extra: pytest, the integrations' libraries,
# Playwright: a few hundred MB), every package pinned with its hashes; each install has a stamp that
# depends on its lock. `make lock` writes both locks again with uv, for every Python from 3.11 to
# 3.13 (`--universal`: markers where versions differ). `test-latest` runs the suite with every
# runtime dependency and integration at its newest release, `test-floor` with each at its declared
# lower bound (on Python 3.11), the test tools locked in both (.ci/deps.py). `dist` builds the wheel
# and the sdist into dist/; `dist-check` is what .ci/run checks of them. `docs` builds the docs site
# (mkdocs.yml) into site/ in strict mode, with the tools of locks/docs.txt (the `docs` extra, at the
# suite's versions wherever the two locks share a package, so it can go into the same .venv).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
LOCK      := locks/test.txt
DEMO_LOCK := locks/demo.txt
DOCS_LOCK := locks/docs.txt
DOCS_STAMP := $(VENV)/.installed-docs
PYTEST    := -m pytest -q -n 4  # 4 workers: most tests wait on processes and Redis, not the CPU
FLOOR_PYTHON ?= python3.11
# the locker: Astral's uv, for its universal resolution (one lock, each Python's versions by marker)
UV := uv==0.13.9

.PHONY: demo test test-model test-latest test-floor lock lint docs dist dist-check bench bench-quick bench-failover bench-weights chaos clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The lock first, hashes required; then sidequest itself, editable, taking nothing more.
$(DEMO_STAMP): pyproject.toml $(DEMO_LOCK) | $(BIN)/python
	$(BIN)/python -m pip install -q --require-hashes -r $(DEMO_LOCK)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/python -m pip install -q --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

$(DOCS_STAMP): $(DOCS_LOCK) | $(BIN)/python  # the site's tools only: MkDocs reads src/, it imports nothing
	$(BIN)/python -m pip install -q --require-hashes -r $(DOCS_LOCK)
	touch $(DOCS_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sidequest demo

test: $(STAMP)
	$(BIN)/python $(PYTEST) $(PYTEST_ARGS)

docs: $(DOCS_STAMP)  # site/index.html; strict: a broken link, anchor or reference fails the build
	$(BIN)/mkdocs build --strict --clean --site-dir site

lock: | $(BIN)/python  # after a change to pyproject.toml's dependencies or extras; commit locks/ with it
	$(BIN)/python -m pip install -q '$(UV)'
	$(BIN)/uv pip compile -q pyproject.toml --extra test --universal --python-version 3.11 --generate-hashes \
	  --no-header --output-file $(LOCK)
	$(BIN)/uv pip compile -q pyproject.toml --universal --python-version 3.11 --generate-hashes \
	  --no-header --constraints $(LOCK) --output-file $(DEMO_LOCK)  # the same versions as the suite's
	$(BIN)/uv pip compile -q pyproject.toml --extra docs --universal --python-version 3.11 --generate-hashes \
	  --no-header --constraints $(LOCK) --output-file $(DOCS_LOCK)  # the same again, for the site's tools

# A venv of its own each, remade from nothing every run: what the index serves changes by the day.
# $(1): latest or floor (.ci/deps.py's kinds), $(2): the Python to make the venv with.
define fresh_suite
	rm -rf .venv-$(1)
	$(2) -m venv .venv-$(1)
	.venv-$(1)/bin/python -m pip install -q --upgrade pip
	$(PYTHON) .ci/deps.py $(1) > .venv-$(1)/requirements.txt
	.venv-$(1)/bin/python -m pip install -q -r .venv-$(1)/requirements.txt
	.venv-$(1)/bin/python -m pip install -q --no-deps -e .
	.venv-$(1)/bin/python -m pip list --format=freeze > .venv-$(1)/versions.txt
	.venv-$(1)/bin/python $(PYTEST) $(PYTEST_ARGS)
endef

# The model-based tests (tests/scenarios/test_model.py, and test_model_steps.py for durable steps),
# each with fresh seeds for SIDEQUEST_MODEL_MINUTES (30 by default); `make test` runs them from fixed
# seeds, a bounded number of examples. --timeout=0 lifts pytest-timeout's hang guard for them
# (unloading the plugin with -p no:timeout made pytest warn about the `timeout` ini option).
test-model: $(STAMP)
	SIDEQUEST_MODEL_MINUTES=$${SIDEQUEST_MODEL_MINUTES:-30} $(BIN)/python -m pytest -q -n 0 -s --timeout=0 \
	  tests/scenarios/test_model.py tests/scenarios/test_model_steps.py $(PYTEST_ARGS)

test-latest:
	$(call fresh_suite,latest,$(PYTHON))

test-floor:
	$(call fresh_suite,floor,$(FLOOR_PYTHON))

lint: $(STAMP)  # what .ci/run checks before the suites
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy --strict src

$(VENV)/.dist-installed: | $(BIN)/python  # the packaging tools alone: not the test extra
	$(BIN)/python -m pip install -q 'build>=1.4' 'twine>=6.1'  # build 1.4: --quiet; twine 6.1: metadata 2.4 (License-Expression)
	touch $(VENV)/.dist-installed

dist: $(VENV)/.dist-installed  # dist/sidequest-<version>.tar.gz, then the wheel built from that sdist
	rm -rf dist build src/*.egg-info  # stale state ships: build/lib keeps files deleted from src, the egg-info's SOURCES.txt files MANIFEST.in dropped
	$(BIN)/python -m build --quiet --outdir dist .

dist-check: dist  # twine check, the files in each, the wheel alone in a fresh virtualenv (about a minute)
	$(BIN)/python .ci/wheel_check.py dist

$(VENV)/.bench-installed: $(STAMP) pyproject.toml  # the bench's own tools, not in the lock
	$(BIN)/python -m pip install -q -e '.[bench]'
	touch $(VENV)/.bench-installed

bench: $(VENV)/.bench-installed  # every peer, 3 interleaved rounds (30-40 min on 2 cores); never part of `make test`
	$(BIN)/python bench/run.py $(BENCH_ARGS)

bench-quick: $(VENV)/.bench-installed  # sidequest vs Ruby Sidekiq, one short round (about a minute)
	$(BIN)/python bench/run.py --quick $(BENCH_ARGS)

bench-failover: $(STAMP)  # a Sentinel and a Redis Cluster failover under load, with and without wait_replicas (about 2 minutes; BENCH_ARGS='--topology cluster' for one)
	$(BIN)/python bench/failover.py $(BENCH_ARGS)

bench-weights: $(STAMP)  # 3 groups of weights 1, 2, 4 on 2 worker processes for 60 s, then a weight changed at run time (about 2 minutes)
	$(BIN)/python bench/weights.py $(BENCH_ARGS)

chaos: $(STAMP)  # 200 checkouts with durable steps on 2 worker processes, 50 kill -9, about 7 min (CHAOS_ARGS='--runner asyncio' or '--cluster'); never part of `make test`
	$(BIN)/python bench/chaos_checkout.py $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .venv-latest .venv-floor build dist site src/*.egg-info  # .sidequest holds the embedded Redis data: kept
