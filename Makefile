# Two commands matter (README): `make demo` and `make test`. Both install first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# llama-cpp-python builds from source; a native build segfaults on some CPUs.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF
STAMP := $(VENV)/.installed-cpu

.PHONY: install demo test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e ".[cpu,dev]"
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/sanctuary-local inspect --claims examples/claims.json --store examples/store

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
