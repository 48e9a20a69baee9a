# The two commands of the README: `make demo` and `make test`. Both create or
# reuse .venv and install what is missing; nothing else is needed on the machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sidequest demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4 $(PYTEST_ARGS)  # 4 workers: most tests wait on processes and Redis, not the CPU

lint: $(STAMP)  # what .ci/run checks before the suites
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy --strict src

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build src/*.egg-info  # .sidequest holds the embedded Redis data: kept
