# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NP ?= 4

.PHONY: demo test docs dist-check lint bench clean

$(BIN)/gridcomm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

# torch and JAX for the examples' tests: large downloads, so only `make test` asks for them, not `make demo`.
$(VENV)/.examples: $(BIN)/gridcomm
	$(BIN)/python -m pip install --quiet -e '.[test,examples]'
	@touch $@

$(VENV)/.docs: $(BIN)/gridcomm
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	@touch $@

demo: $(BIN)/gridcomm
	$(BIN)/gridcomm run --np $(NP) -- $(BIN)/gridcomm demo

test: $(VENV)/.examples
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/python -m pytest -q

# The user guide (docs/, mkdocs.yml) with every warning an error.
docs: $(VENV)/.docs
	$(BIN)/mkdocs build --strict --site-dir build/site

# A wheel and an sdist built from this tree, each installed into a fresh venv and run there.
dist-check: $(BIN)/gridcomm
	bash .ci/dist-check $(PYTHON)

bench: $(BIN)/gridcomm
	$(BIN)/gridcomm bench halo --np 2 --out benchmarks/results

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis
