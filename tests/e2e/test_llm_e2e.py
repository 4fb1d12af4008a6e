"""Real models, no mocks: the llama.cpp backend with the packaged Qwen2.5-Coder-0.5B-Instruct
GGUF (the cpu-fast profile's LLM, with the chat template embedded in the GGUF), stages 1
and 3 end to end on ``examples/``, prompt-prefix KV reuse, and the openai_http backend
against a real llama.cpp server started on 127.0.0.1 by the test. Structure and flags are
asserted, never answer quality. Token caps are tiny so the file stays around two minutes
on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.config.settings import HydeConfig, LLMConfig, SamplingConfig, VerdictConfig
from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.llm import BACKENDS, local_server, make_backend
from sanctuary_local.llm.base import ChatMessage, ChatRequest, LLMBackend
from sanctuary_local.llm.llama_cpp_backend import reused_prefix
from sanctuary_local.models.resolve import resolve_model
from sanctuary_local.prompts import load_schema
from sanctuary_local.records import LABELS, Chunk, ClaimEvidence, EvidenceSnippet, QueryEvidence
from sanctuary_local.stages.hyde import build_hyde_request, run_hyde
from sanctuary_local.stages.verdict.line import run_verdict
from sanctuary_local.stages.verdict.paper import LABEL_REASK_TOKENS
from sanctuary_local.stages.verdict.prompt import build_verdict_request

REPO = Path(__file__).resolve().parents[2]
QWEN = "packaged:qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"
KNOWN_HYDE_FLAGS = ("hyde_repaired", "hyde_truncated", "hyde_line_fallback", "hyde_claim_fallback",
                    "hyde_no_label", "hyde_few_questions", "hyde_clamped")


def _model_path() -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    try:
        return resolve_model(QWEN)
    except MissingModel as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> LLMBackend:
    _model_path()
    backend = make_backend(LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=4096, n_threads=2))
    backend._prefixes.root = tmp_path_factory.mktemp("prefix_kv")  # not the user's cache
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def claims():
    return read_claims(REPO / "examples" / "claims.json")[:2]


def test_registry():
    assert set(BACKENDS) == {"vllm", "llama_cpp", "openai_http"}
    with pytest.raises(UserError, match="valid: llama_cpp, openai_http, vllm"):
        make_backend(LLMConfig(backend="tgi"))
    with pytest.raises(UserError, match="base_url"):
        make_backend(LLMConfig(backend="openai_http"))


def test_llama_generate_counts_and_grammar(llama):
    msgs = (ChatMessage("user", "Name one planet."),)
    plain = ChatRequest(msgs, SamplingConfig(temperature=0.0, max_tokens=8))
    schema = {"type": "object", "properties": {"label": {"type": "string", "enum": ["Supported", "Refuted"]}},
              "required": ["label"], "additionalProperties": False}
    constrained = ChatRequest(msgs, SamplingConfig(temperature=0.0, max_tokens=24), json_schema=schema)
    r1, r2 = llama.generate([plain, constrained])
    assert r1.ok and r1.prompt_tokens == llama.count_tokens(msgs) and 0 < r1.completion_tokens <= 8
    assert r1.finish_reason in ("stop", "length") and r1.seconds > 0
    assert r2.ok and r2.extra["grammar"] and r2.text.lstrip().startswith("{")
    if r2.finish_reason == "stop":  # a finished constrained output is valid JSON of the schema
        assert json.loads(r2.text)["label"] in ("Supported", "Refuted")


def test_llama_stop_strings_end_generation(llama):
    # sampling.stop (issue 26's stop-string row): generation ends at the string, which is
    # not part of the text; without it the same request runs past it.
    msgs = (ChatMessage("user", "Write the numbers from 1 to 6, one per line, digits only."),)
    free, stopped = llama.generate([ChatRequest(msgs, SamplingConfig(temperature=0.0, max_tokens=24)),
                                    ChatRequest(msgs, SamplingConfig(temperature=0.0, max_tokens=24, stop=["4"]))])
    assert "4" in free.text and "5" in free.text, free.text
    assert stopped.ok and stopped.finish_reason == "stop" and "3" in stopped.text and "4" not in stopped.text
    assert stopped.completion_tokens < free.completion_tokens


REPEAT = (ChatMessage("user", "Write the word apple twenty times, separated by spaces."),)


def test_llama_repetition_penalty_reaches_the_sampler(llama):
    # sampling.repetition_penalty (issue 26's row against greedy loops): the same greedy
    # request repeats itself without it and writes something else with it.
    free, penalised = llama.generate([ChatRequest(REPEAT, SamplingConfig(temperature=0.0, top_k=1, max_tokens=16)),
                                      ChatRequest(REPEAT, SamplingConfig(temperature=0.0, top_k=1, max_tokens=16,
                                                                         repetition_penalty=1.5))])
    assert free.ok and penalised.ok and free.text.lower().count("apple") >= 5, free.text
    assert penalised.text != free.text and penalised.text.lower().count("apple") < free.text.lower().count("apple")


def test_llama_uses_the_gguf_chat_template(llama):
    # No chat_template configured: the GGUF's own (Qwen2.5 ChatML) is rendered, and
    # generation stops at its end-of-turn marker.
    assert "<|im_start|>" in llama._template and llama._stop == ["<|im_end|>"]
    msgs = (ChatMessage("user", "Name one planet."),)
    assert llama.count_tokens(msgs) == len(llama._llm.tokenize(
        b"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        b"<|im_start|>user\nName one planet.<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True))


def test_reused_prefix_rule():
    assert reused_prefix([], [1, 2, 3]) == 0
    assert reused_prefix([1, 2, 3, 9, 9], [1, 2, 3, 4]) == 3  # previous prompt + completion vs new prompt
    assert reused_prefix([1, 2, 3, 4, 5], [1, 2, 3]) == 2  # whole prompt cached: last token re-evaluated
    assert reused_prefix([7, 2], [1, 2]) == 0


def _evaluated(backend, reqs):
    """Each request's result and the prompt tokens llama.cpp evaluated for it (its own counter)."""
    import llama_cpp

    backend.generate([ChatRequest((ChatMessage("user", "warm-up"),), SamplingConfig(max_tokens=1))])  # counters start at 1
    out = []
    for req in reqs:
        before = llama_cpp.llama_perf_context(backend._llm.ctx).n_p_eval
        (res,) = backend.generate([req])
        out.append((res, llama_cpp.llama_perf_context(backend._llm.ctx).n_p_eval - before))
    return out


def test_llama_reuses_the_shared_prompt_prefix(claims, tmp_path):
    # Stage-1 prompts share their instructions and worked example (the template before its
    # first placeholder, ChatRequest.cache_prefix). The first request evaluates that head
    # and saves its KV state; the next request keeps it in memory and evaluates only its
    # claim; a new process reads it from disk. llama.cpp's own counters confirm what
    # ChatResult.cached_tokens reports, and the text is the same whichever way the head came.
    _model_path()
    cfg = HydeConfig(sampling=SamplingConfig(temperature=0.5, top_p=0.8, min_p=0.1, max_tokens=12))
    first_req, second_req = [build_hyde_request(c, cfg) for c in claims]
    llm_cfg = LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=4096, n_threads=2)
    runs = []
    for _ in range(2):  # two processes' worth: the second finds the head on disk
        backend = make_backend(llm_cfg)
        backend._prefixes.root = tmp_path
        runs.append(_evaluated(backend, [first_req, second_req, first_req]))
        backend.close()
    (cold, n_cold), (second, n_second), (again, n_again) = runs[0]
    head = second.cached_tokens
    assert cold.ok and second.ok and again.ok and cold.cached_tokens == 0 and n_cold == cold.prompt_tokens
    assert 0.8 * second.prompt_tokens < head < second.prompt_tokens and n_second == second.prompt_tokens - head
    assert again.cached_tokens == head and n_again == again.prompt_tokens - head  # the other claim's tokens are dropped
    assert again.text == cold.text  # computed the same way whatever came before
    assert len(list(tmp_path.glob("*.kv"))) == 1
    (disk, n_disk), (second2, _), _ = runs[1]
    assert disk.cached_tokens == head and n_disk == disk.prompt_tokens - head
    assert disk.text == cold.text and second2.text == second.text


def test_llama_prefix_cache_refuses_a_damaged_file(claims, tmp_path):
    # A truncated or tampered state file never reaches llama.cpp: the head is evaluated
    # again, the text is the same, and the file is rewritten sound.
    _model_path()
    req = build_hyde_request(claims[0], HydeConfig(sampling=SamplingConfig(temperature=0.0, max_tokens=6)))
    llm_cfg = LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=4096, n_threads=2)
    texts = []
    for damage in (None, lambda b: b[: len(b) // 2], lambda b: b[:-1] + bytes([b[-1] ^ 1]), lambda b: b"not a state"):
        if damage is not None:
            (kv,) = tmp_path.glob("*.kv")
            kv.write_bytes(damage(kv.read_bytes()))
        backend = make_backend(llm_cfg)
        backend._prefixes.root = tmp_path
        ((res, n),) = _evaluated(backend, [req])
        backend.close()
        assert res.ok and res.cached_tokens == 0 and n == res.prompt_tokens  # evaluated, not read
        texts.append(res.text)
    assert len(set(texts)) == 1
    backend = make_backend(llm_cfg)  # and the rewritten file is read
    backend._prefixes.root = tmp_path
    ((res, n),) = _evaluated(backend, [req])
    backend.close()
    assert res.cached_tokens > 0 and res.text == texts[0]


def test_llama_prefix_cache_off_writes_nothing(claims, tmp_path, monkeypatch):
    _model_path()
    import sanctuary_local.llm.prefix_cache as prefix_cache

    monkeypatch.setattr(prefix_cache, "prefix_dir", lambda: tmp_path / "prefix_kv")
    req = build_hyde_request(claims[0], HydeConfig(sampling=SamplingConfig(temperature=0.0, max_tokens=4)))
    backend = make_backend(LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=4096, n_threads=2,
                                     prefix_cache=False))
    (res,) = backend.generate([req])
    backend.close()
    assert res.ok and backend._prefixes is None and not (tmp_path / "prefix_kv").exists()


def test_llama_prompt_too_long_is_an_error_result(llama):
    huge = ChatRequest((ChatMessage("user", "word " * 5000),), SamplingConfig(max_tokens=4))
    (r,) = llama.generate([huge])
    assert not r.ok and "max_model_len" in r.error and r.text == ""


def test_stage1_and_stage3_end_to_end(llama, claims):
    hcfg = HydeConfig(sampling=SamplingConfig(temperature=0.5, top_p=0.8, min_p=0.1, max_tokens=24))
    hyde = run_hyde(claims, llama, hcfg)
    assert [h.claim_index for h in hyde] == [c.index for c in claims]
    for h in hyde:
        assert 1 <= len(h.queries) <= hcfg.max_questions
        assert [q.number for q in h.queries] == list(range(len(h.queries)))
        assert set(h.flags) <= set(KNOWN_HYDE_FLAGS), h.flags
        assert h.provisional_label in (None, "Supported", "Refuted", "Conflicting Evidence/Cherrypicking")
        assert h.generation.prompt_tokens > 100 and 0 < h.generation.completion_tokens <= 24

    store = KnowledgeStore(REPO / "examples" / "store")
    evidence = []
    for c, h in zip(claims, hyde):
        docs = list(store.iter_documents(c.index))[:2]
        snippets = tuple(
            EvidenceSnippet(Chunk(c.index, d.position, d.url, 0, len(d.lines[0]), d.lines[0]), 0.9 - 0.1 * i)
            for i, d in enumerate(docs)
        )
        evidence.append(ClaimEvidence(c.index, tuple(QueryEvidence(q, snippets) for q in h.queries[:3])))
    vcfg = VerdictConfig(sampling=SamplingConfig(temperature=0.9, top_p=0.7, top_k=1, max_tokens=16))
    vcfg.llm.max_model_len = 4096
    preds = run_verdict(claims, hyde, evidence, llama, vcfg)
    assert [p.claim_index for p in preds] == [c.index for c in claims]
    for p, h, ev in zip(preds, hyde, evidence):
        assert p.label in LABELS and p.justification
        reask = LABEL_REASK_TOKENS if "verdict_label_reasked" in p.flags else 0  # a cut reasoning is asked for its label
        assert p.meta["prompt_tokens"] > 1000 and 0 < p.meta["completion_tokens"] <= 16 + reask
        assert set(h.flags) <= set(p.flags) and p.provisional_label == h.provisional_label
        assert len(p.evidence_all) == sum(len(q.snippets) for q in ev.queries) and p.evidence == p.evidence_all[:10]
        doc_text = {d.position: d.text for d in store.iter_documents(p.claim_index)}
        assert all(doc_text[e.doc_position][e.start : e.end] == e.scraped_text for e in p.evidence)


def test_verdict_prompt_fits_real_tokenizer(llama, claims):
    c = claims[0]
    from sanctuary_local.records import HydeResult, Query

    q = Query(c.index, 0, "Does the tower grow in summer?")
    # varied sentences: one sentence repeated would be flooding, redacted from the prompt
    text = " ".join(f"In {1900 + k} the tower grew {k} millimetres taller on day {3 * k}." for k in range(20))
    snippets = tuple(EvidenceSnippet(Chunk(c.index, 0, f"https://e.org/{i}", 0, len(text), text), 1 - i / 10) for i in range(6))
    ev = ClaimEvidence(c.index, (QueryEvidence(q, snippets),))
    cfg = VerdictConfig()
    full = llama.count_tokens(build_verdict_request(c, HydeResult(c.index, None, (q,)), ev, cfg, llama)[0].messages)
    cfg.sampling.max_tokens = 64
    cfg.llm.max_model_len = full + 64 - 300  # about two snippets too many
    req, notes = build_verdict_request(c, HydeResult(c.index, None, (q,)), ev, cfg, llama)
    assert llama.count_tokens(req.messages) <= cfg.llm.max_model_len - 64
    assert notes and notes[0].startswith("dropped ") and "https://e.org/0" in req.messages[0].content
    assert "https://e.org/5" not in req.messages[0].content  # lowest score went first


# ------------------------------------------------------------- real HTTP server


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    path = _model_path()
    pytest.importorskip("uvicorn", reason="llama-cpp-python server deps missing (pip install '.[dev]')")
    pytest.importorskip("fastapi", reason="llama-cpp-python server deps missing (pip install '.[dev]')")
    port = local_server.free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    proc, url = local_server.start(local_server.llama_cpp_cmd(path, port, n_ctx=2048), port, log)
    try:
        local_server.wait_up(proc, url, log)
        yield url
    finally:
        local_server.stop(proc)


def test_openai_http_against_real_server(server_url):
    cfg = LLMConfig(backend="openai_http", base_url=server_url, served_model="qwen", concurrency=2, timeout_s=120, retries=1)
    backend = make_backend(cfg)
    msgs = (ChatMessage("user", "Name one planet."),)
    reqs = [
        ChatRequest(msgs, SamplingConfig(temperature=0.0, max_tokens=8), tag="a"),
        ChatRequest((ChatMessage("user", "Is the sky green?"),), SamplingConfig(temperature=0.5, min_p=0.1, top_k=1, max_tokens=8), tag="b"),
        ChatRequest(msgs, SamplingConfig(max_tokens=16), json_schema=load_schema("hyde_schema.json"), tag="c"),
        ChatRequest((ChatMessage("user", "Write the numbers from 1 to 6, one per line, digits only."),),
                    SamplingConfig(temperature=0.0, max_tokens=16, stop=["4"]), tag="d"),
        ChatRequest(REPEAT, SamplingConfig(temperature=0.0, top_k=1, max_tokens=16), tag="e"),
        ChatRequest(REPEAT, SamplingConfig(temperature=0.0, top_k=1, max_tokens=16, repetition_penalty=1.5), tag="f"),
    ]
    results = backend.generate(reqs)
    assert len(results) == 6 and all(r.ok for r in results), [r.error for r in results]
    assert "3" in results[3].text and "4" not in results[3].text, results[3].text  # the server got "stop"
    assert results[4].text != results[5].text, results[4].text  # and the repetition penalty
    for r in results:
        assert r.prompt_tokens > 0 and 0 < r.completion_tokens <= 16 and r.finish_reason in ("stop", "length")
    # llama-cpp-python's server only speaks {"type": "json_object", "schema": ...}: the backend adapts.
    assert results[2].extra["schema_dialect"] == "json_object" and results[2].text.lstrip().startswith("{")
    n = backend.count_tokens(msgs)
    # That route counts the message text + 8 per turn. Qwen's template also adds a default
    # system turn (21 tokens) when there is none, which the server cannot tell us about:
    # the estimate is that much low here (it was within 12 for Gemma, which has no such turn).
    assert backend._count_route == "llama_cpp_python" and abs(n - results[0].prompt_tokens) <= 12 + 21


def test_openai_http_unreachable_server_gives_error_results():
    port = local_server.free_port()  # nothing listens there
    backend = make_backend(LLMConfig(backend="openai_http", base_url=f"http://127.0.0.1:{port}/v1", retries=1, timeout_s=2))
    results = backend.generate([ChatRequest((ChatMessage("user", "hi"),), SamplingConfig(max_tokens=4))] * 2)
    assert [r.ok for r in results] == [False, False] and all("Connection" in r.error or "refused" in r.error for r in results)
