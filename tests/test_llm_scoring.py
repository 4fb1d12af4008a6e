"""``LlamaCppBackend.score`` with the real packaged Qwen2.5-Coder-0.5B-Instruct GGUF (the
cpu-fast profile's LLM, as in test_llm_e2e.py): log P(label | prompt) of the four labels,
its determinism, its consistency with greedy generation, and that the KV cache it
shares with ``generate`` is left in a state where the next generation is unchanged.
Prompts and token caps are small, and llama.cpp runs on one thread (two threads stall
each other when the cores are shared), so the file takes seconds; answer quality is never
asserted."""

from __future__ import annotations

import math

import pytest

from sanctuary_local.config import LLMConfig, SamplingConfig, VerdictConfig
from sanctuary_local.llm import make_backend
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ScoreRequest
from sanctuary_local.records import LABELS
from test_llm_e2e import QWEN, _model_path

ASK = ("Claim: The moon is made of cheese.\nEvidence: NASA says the moon is made of rock.\n"
       "Which label fits the claim? Answer with the label only: Supported, Refuted, Not Enough Evidence "
       "or Conflicting Evidence/Cherrypicking.")
MSGS = (ChatMessage("user", ASK),)
OTHER = (ChatMessage("user", "Name one planet of the solar system."),)
GREEDY = SamplingConfig(temperature=0.0, max_tokens=4)


@pytest.fixture(scope="module")
def llama():
    _model_path()
    backend = make_backend(LLMConfig(backend="llama_cpp", model=QWEN, max_model_len=2048, n_threads=1))
    yield backend
    backend.close()


def first_token_text(llama, text: str) -> str:
    """The text of ``text``'s first token (in the model's own tokenizer)."""
    llm = llama._llm
    return llm.detokenize(llm.tokenize(text.encode(), add_bos=False)[:1]).decode()


def test_score_gives_a_log_probability_per_label(llama):
    (res,) = llama.score([ScoreRequest(MSGS, LABELS, tag="t")])
    assert res.ok and res.exact and len(res.logprobs) == 4 and res.seconds > 0
    assert all(math.isfinite(x) and x <= 0.0 for x in res.logprobs), res.logprobs
    assert res.prompt_tokens == llama.count_tokens(MSGS)
    # the four labels start with four different tokens: disjoint answers, their mass is at most 1
    assert len({first_token_text(llama, c) for c in LABELS}) == 4
    assert sum(math.exp(x) for x in res.logprobs) <= 1.0 + 1e-6
    assert len(set(res.logprobs)) == 4  # the prompt matters: no constant or copied scores


def test_scores_are_deterministic_and_independent_of_the_cache(llama):
    req = ScoreRequest(MSGS, LABELS)
    (a,) = llama.score([req])
    (b,) = llama.score([req])  # the prompt is cached now
    llama.generate([ChatRequest(OTHER, SamplingConfig(temperature=0.0, max_tokens=2))])  # another prompt in the cache
    c, d = llama.score([ScoreRequest(OTHER, LABELS[:2]), req])  # a batch, in order
    assert a.logprobs == b.logprobs == d.logprobs
    assert c.ok and len(c.logprobs) == 2 and c.logprobs != a.logprobs[:2]


def test_a_longer_answer_is_no_likelier_than_its_first_token(llama):
    label = "Not Enough Evidence"
    head = first_token_text(llama, label)
    assert head != label  # a multi-token label: the later tokens are scored too
    (res,) = llama.score([ScoreRequest(MSGS, (label, head))])
    assert res.logprobs[0] < res.logprobs[1] <= 0.0


def test_scoring_between_generations_leaves_generation_unchanged(llama):
    req = ChatRequest(MSGS, GREEDY)
    (alone,) = llama.generate([req])
    (again,) = llama.generate([req])
    assert alone.ok and alone.text.strip() and again.text == alone.text  # greedy, with the prompt cached: the same
    (scored,) = llama.score([ScoreRequest(MSGS, LABELS)])
    (after,) = llama.generate([req])
    assert scored.ok and after.text == alone.text, (alone.text, after.text)
    llama.generate([ChatRequest(OTHER, SamplingConfig(temperature=0.0, max_tokens=1))])
    llama.score([ScoreRequest(MSGS, LABELS)])  # scoring a prompt the cache does not hold, then generating it
    (later,) = llama.generate([req])
    assert later.text == alone.text


def test_the_greedy_first_token_has_the_best_first_token_score(llama):
    (one,) = llama.generate([ChatRequest(MSGS, SamplingConfig(temperature=0.0, max_tokens=1))])
    greedy = one.text
    assert one.ok and one.completion_tokens == 1 and greedy
    heads = [first_token_text(llama, c) for c in LABELS]
    cands = tuple(dict.fromkeys([greedy, *heads]))
    (res,) = llama.score([ScoreRequest(MSGS, cands)])
    scores = dict(zip(cands, res.logprobs))
    # the greedy token is the argmax over the whole vocabulary, so over these candidates too
    assert scores[greedy] >= max(scores.values()) - 1e-6, scores
    assert max(scores.values()) > max(min(scores.values()), -50) + 0.5  # the candidates are told apart
    if greedy in heads:  # the model answers with a label: that label has the best first-token score
        assert max(heads, key=scores.__getitem__) == greedy


def test_the_scored_verdict_end_to_end(llama):
    from sanctuary_local.records import Claim, ClaimEvidence, HydeResult
    from sanctuary_local.stages.verdict import run_verdict

    claim = Claim(index=0, text="The moon is made of cheese.", date="01-04-2020")
    cfg = VerdictConfig(mode="scored")
    cfg.llm.max_model_len = 2048
    (p,) = run_verdict([claim], [HydeResult(0, "Refuted", ())], [ClaimEvidence(0)], llama, cfg)
    assert p.label in LABELS and "verdict_scored" in p.flags and "verdict_text_parsed" not in p.flags
    ls = p.meta["label_scores"]
    assert ls["exact"] is True and all(math.isfinite(x) and x <= 0 for x in ls["logprobs"])
    assert LABELS[max(range(4), key=lambda i: ls["logprobs"][i])] == p.label  # raw argmax without a calibration
