# The two commands of the README: `make demo` and `make test`. Both create or
# reuse .venv and install what is missing; nothing else is needed on the machine.
# `demo` installs sidequest alone; `test` adds the test extra (pytest, the integrations'
# libraries, Playwright: a few hundred MB), each with a stamp of its own. `dist` builds the wheel and
# the sdist into dist/; `dist-check` is what .ci/run checks of them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint dist dist-check bench bench-quick bench-failover clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sidequest demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4 $(PYTEST_ARGS)  # 4 workers: most tests wait on processes and Redis, not the CPU

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

$(VENV)/.bench-installed: $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[bench]'
	touch $(VENV)/.bench-installed

bench: $(VENV)/.bench-installed  # every peer, 3 interleaved rounds (30-40 min on 2 cores); never part of `make test`
	$(BIN)/python bench/run.py $(BENCH_ARGS)

bench-quick: $(VENV)/.bench-installed  # sidequest vs Ruby Sidekiq, one short round (about a minute)
	$(BIN)/python bench/run.py --quick $(BENCH_ARGS)

bench-failover: $(STAMP)  # a Sentinel and a Redis Cluster failover under load, with and without wait_replicas (about 2 minutes; BENCH_ARGS='--topology cluster' for one)
	$(BIN)/python bench/failover.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist src/*.egg-info  # .sidequest holds the embedded Redis data: kept
