# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NP ?= 4

.PHONY: demo test docs dist-check lint bench peers clean

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

# The benchmarks' optional peers (docs/benchmarks.md, Peers): GHEX built from its sdist against the MPI of this
# venv (5-8 minutes on 2 cores), and mpi4py-fft. Both need headers from the system (Debian:
# apt-get install libnuma-dev libfftw3-dev).
GHEX_CMAKE_ARGS = -DBoost_INCLUDE_DIR=$$($(BIN)/python -c 'import boost_headers; print(boost_headers.get_include())') \
	-DMPI_C_COMPILER=$(abspath $(BIN))/mpicc -DMPI_CXX_COMPILER=$(abspath $(BIN))/mpicxx
peers: $(BIN)/gridcomm
	@test -f /usr/include/numa.h || { echo "make peers: numa.h is missing (Debian: apt-get install libnuma-dev)"; exit 1; }
	@test -f /usr/include/fftw3.h || { echo "make peers: fftw3.h is missing (Debian: apt-get install libfftw3-dev)"; exit 1; }
	$(BIN)/python -m pip install --quiet -e '.[peers]' boost-headers scikit-build-core nanobind cmake ninja
	CMAKE_ARGS="$(GHEX_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 PATH="$(abspath $(BIN)):$$PATH" \
		$(BIN)/python -m pip install --quiet --no-build-isolation ghex==0.9.0

bench: $(BIN)/gridcomm
	$(BIN)/gridcomm bench halo --np 2 --out benchmarks/results

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis
