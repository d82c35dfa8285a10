# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NP ?= 4

.PHONY: demo test lint bench clean

$(BIN)/gridcomm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

demo: $(BIN)/gridcomm
	$(BIN)/gridcomm run --np $(NP) -- $(BIN)/gridcomm demo

test: $(BIN)/gridcomm
	$(BIN)/ruff check src tests
	$(BIN)/python -m pytest -q

bench: $(BIN)/gridcomm
	$(BIN)/gridcomm bench halo --np 2

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis
