"""The LLM sections of the config tree (``settings.py`` holds the rest and the loading):
``SamplingConfig`` (what a request sends) and ``LLMConfig`` (which backend runs a stage, and
how). Every stage section that talks to a model has one of each."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingConfig:
    """Sampling parameters; every field is always sent explicitly to the backend."""

    temperature: float = 0.0
    """Softmax temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = -1
    """Keep the k most likely tokens (-1: off; 1: greedy)."""
    min_p: float = 0.0
    """Drop tokens below min_p × the top token's probability."""
    max_tokens: int = 2048
    """Generation cap (vLLM's default of 16 is never relied on)."""
    seed: int = 0
    """Sampling seed (reruns are identical)."""
    repetition_penalty: float = 1.0
    """Divides the logits of tokens already in the prompt or the text (llama.cpp's
    ``repeat_penalty``, vLLM's ``repetition_penalty``; CTRL, Keskar et al. 2019); 1.0: off.
    Issue 26's row against the 1.5B's greedy repetition loops in stage 3. At 1.0 it is left
    out of every fingerprint and prompt hash, so runs made before it existed still match."""
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation ends where one appears, and it is not part of the text
    (besides the chat template's end-of-turn markers, which always stop). Issue 26's
    "stop string after the label line" row sets the verdict's to the starts of anything
    that is not the model's own answer (an echoed example)."""


@dataclass
class LLMConfig:
    """Which LLM backend runs a stage, and how."""

    backend: str = "llama_cpp"
    """One of: vllm, llama_cpp, openai_http."""
    model: str = "packaged:qwen2.5-coder-1.5b-instruct-q4-k-m-gguf"
    """A model name from models/manifest.toml, 'packaged:NAME', or a local path."""
    chat_template: str | None = None
    """A template file name in sanctuary_local/prompts (for models that ship none, e.g.
    'gemma_chat.jinja'); None or "" uses the model's own (GGUF metadata / tokenizer)."""
    dtype: str = "auto"
    """vLLM dtype: bfloat16 for Qwen2.5-7B, float16 for the GPTQ Phi-4."""
    quantization: str | None = None
    """vLLM quantization (e.g. gptq_marlin); None lets vLLM detect it."""
    max_model_len: int = 8192
    """Context length; prompts are trimmed to fit it."""
    gpu_memory_utilization: float = 0.88
    """vLLM's share of GPU memory."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of the shared few-shot prefix (vLLM)."""
    enforce_eager: bool = False
    """vLLM: run the model eagerly, without torch.compile (and, on a GPU, CUDA graphs): an
    engine that starts in seconds instead of minutes on a CPU. It generated as fast as the
    compiled engine at CI's test size on 2 cores; large batches and GPUs were not measured
    (docs/gpu.md). CI's vLLM test sets it; the profiles leave it off."""
    n_threads: int | None = None
    """llama.cpp CPU threads (None: every core this process may run on)."""
    n_batch: int = 512
    """llama.cpp prompt-processing batch."""
    parallel: int = 1
    """llama.cpp: requests decoded together in one batch (continuous batching; each decode
    step reads the weights once for all of them; ``llm/llama_cpp_batch.py``). 1: one at a
    time. A wave of a stage then holds 2 × parallel claims unless ``batch_size`` says
    otherwise. Measured by ``benchmarks/speed/throughput.py`` (issue 69)."""
    prefix_cache: bool = True
    """llama.cpp: keep the KV cache of a stage prompt's fixed head (instructions, example)
    on disk in $SANCTUARY_CACHE/prefix_kv, so a new process skips evaluating it (~10 s of
    stage 1's first claim on 2 cores, 9-13 s of a paper-mode verdict's on the 0.5B;
    llm/prefix_cache.py). Same results either way."""
    base_url: str | None = None
    """openai_http: server base URL, e.g. http://127.0.0.1:8000/v1."""
    api_key: str | None = None
    """openai_http: bearer token (most local servers ignore it)."""
    served_model: str | None = None
    """openai_http: model name the server expects (default: the model field)."""
    concurrency: int = 8
    """openai_http: requests in flight at once."""
    timeout_s: float = 300.0
    """openai_http: per-request timeout."""
    retries: int = 3
    """openai_http: retries with exponential backoff."""
    structured_output: bool = False
    """Constrain output to the stage's JSON schema (costs speed on llama.cpp)."""
    batch_size: int | None = None
    """Prompts per backend call (None: all at once)."""
