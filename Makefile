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
	bash scripts/install_nltk_data.sh $(BIN)/python || echo "warning: WordNet 3.0 not installed: only \`sanctuary-local eval\` (METEOR) needs it, see docs/evaluation.md" >&2
	touch $@

install: $(STAMP)

# The main job on the embedded CPU defaults. Exit code 3 = finished with some claims
# flagged as degraded (common with the tiny 270M model), which is still a result.
demo: install
	$(BIN)/sanctuary-local run --claims examples/claims.json --store examples/store --out runs/demo --profile cpu --force || [ $$? -eq 3 ]

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
