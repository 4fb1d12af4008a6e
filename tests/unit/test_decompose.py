"""decompose (issue 15, mode 3) and the trust weights: parsing of whatever the model writes
(scripted outputs: parsing only), the exhaustiveness loop, the parts as queries, the AND
aggregation and its use in stage 3, and the user's trust file. The real-model run is
tests/e2e/test_decompose_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctuary_local.config.settings import DecomposeConfig, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.prompts import fixed_head, load_prompt
from sanctuary_local.llm.base import ChatRequest, ChatResult
from sanctuary_local.records import (
    CONFLICTING, NEE, REFUTED, SUPPORTED, Chunk, Claim, ClaimEvidence, Decomposition, EvidenceSnippet, HydeResult, Query,
    QueryEvidence,
)
from sanctuary_local.modes.decompose import parse_check, parse_components, run_decompose, with_component_queries
from sanctuary_local.modes.trust import apply_trust, domain_of, load_trust
from sanctuary_local.stages.verdict.draft import Parts
from sanctuary_local.stages.verdict.parts import and_label, parse_component_labels
from sanctuary_local.modes import verdict_steps
from sanctuary_local.stages.verdict import line


def run_verdict(claims, hyde, evidence, backend, cfg, parts=None):
    """Stage 3 with the steps of the modes its config and parts turn on, as a run has it."""
    decomposed = parts is not None and any(p is not None for p in parts)
    return line.run_verdict(claims, hyde, evidence, backend, cfg, parts, modes=verdict_steps(cfg, decomposed))


CLAIM = Claim(index=3, text="Musician Lil Nas X partnered with Nike to create 'Satan shoes' that contain real human blood.")
CFG = DecomposeConfig(max_components=3, check_rounds=2)


class Scripted:
    """A backend that answers from a list, recording the requests (parsing tests only)."""

    name, model_id = "scripted", "scripted"

    def __init__(self, *answers: str) -> None:
        self.answers, self.requests = list(answers), []

    def generate(self, reqs: list[ChatRequest]) -> list[ChatResult]:
        self.requests.append(reqs)
        return [ChatResult(self.answers.pop(0), prompt_tokens=100, completion_tokens=20, seconds=0.5) for _ in reqs]

    def count_tokens(self, messages) -> int:
        return sum(len(m.content) for m in messages) // 4

    def close(self) -> None:
        pass


def test_parse_components_json_lines_and_garbage() -> None:
    out = ('```json\n{"parts": ["Lil Nas X released shoes called Satan shoes.", "Nike partnered with Lil Nas X on them.", '
           '"<part 3>", "lil nas x released shoes called satan shoes", "The Satan shoes contain real human blood.", '
           '"A fourth part that is one too many."]}\n```')
    parts, flags = parse_components(out, CLAIM, CFG)
    assert parts == ("Lil Nas X released shoes called Satan shoes.", "Nike partnered with Lil Nas X on them.",
                     "The Satan shoes contain real human blood.")
    assert "decompose_clamped" in flags
    parts, flags = parse_components("Parts:\n1. Lil Nas X released Satan shoes.\n2) Nike made them with him.", CLAIM, CFG)
    assert parts == ("Lil Nas X released Satan shoes.", "Nike made them with him.") and "decompose_line_fallback" in flags
    for garbage in ("", "no idea", '{"parts": []}', '{"parts": "x"}', "\x00\xff" * 20):
        parts, flags = parse_components(garbage, CLAIM, CFG)
        assert parts == (CLAIM.text,) and "decompose_fallback" in flags


def test_metadata_lines_and_restated_parts_are_dropped() -> None:
    # what Qwen2.5-Coder-0.5B wrote on two example claims
    out = ('{"parts": ["A town council in north Wales voted in 2021 to ban all petrol-powered lawnmowers from next summer.", '
           '"The town council voted in 2021 to ban all petrol-powered lawnmowers from next summer.", '
           '"Location ISO Code: GB", "Claim Date: 12-05-2023", "The ban starts next summer in Conwy county."]}')
    parts, _ = parse_components(out, CLAIM, CFG)
    assert parts == ("A town council in north Wales voted in 2021 to ban all petrol-powered lawnmowers from next summer.",
                     "The ban starts next summer in Conwy county.")


def test_parse_check() -> None:
    assert parse_check('{"is_exhaustive": true, "missing": []}') == (True, ())
    assert parse_check('{"is_exhaustive": "false", "missing": ["The shoes contain human blood.", "x"]}') == (
        False, ("The shoes contain human blood.",))
    assert parse_check("is_exhaustive: true") == (True, ())
    assert parse_check("I think so.") == (None, ())


def test_run_decompose_adds_what_the_check_finds_missing() -> None:
    backend = Scripted('{"parts": ["Lil Nas X released Satan shoes.", "Nike partnered with Lil Nas X."]}',
                       '{"is_exhaustive": false, "missing": ["The Satan shoes contain real human blood."]}',
                       '{"is_exhaustive": true, "missing": []}')
    [d] = run_decompose([CLAIM], backend, CFG)
    assert d.components == ("Lil Nas X released Satan shoes.", "Nike partnered with Lil Nas X.",
                            "The Satan shoes contain real human blood.")
    assert d.added == ("The Satan shoes contain real human blood.",) and d.exhaustive is True
    assert {"decompose_added:1", "components:3"} <= set(d.flags)
    assert d.generation.prompt_tokens == 300 and len(backend.requests) == 3  # split + 2 checks
    assert "Part 3: The Satan shoes contain real human blood." in backend.requests[2][0].messages[0].content
    split = backend.requests[0][0]  # its prompt's head is kept evaluated by llama.cpp (cache_prefix)
    assert split.cache_prefix == fixed_head(load_prompt(CFG.prompt)) and len(split.cache_prefix) > 500
    assert split.messages[0].content.startswith(split.cache_prefix)
    assert Decomposition.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    # a claim that falls back is never checked
    backend = Scripted("nothing useful")
    [d] = run_decompose([CLAIM], backend, CFG)
    assert d.components == (CLAIM.text,) and "decompose_fallback" in d.flags and len(backend.requests) == 1


def test_parts_become_queries_after_the_questions() -> None:
    h = HydeResult(3, SUPPORTED, (Query(3, 0, "Did Nike partner with Lil Nas X."), Query(3, 1, "What is in Satan shoes?")))
    d = Decomposition(3, ("Nike partnered with Lil Nas X", "The shoes contain blood."))
    out = with_component_queries(h, d)
    assert [(q.number, q.question) for q in out.queries] == [
        (0, "Did Nike partner with Lil Nas X."), (1, "What is in Satan shoes?"), (2, "Nike partnered with Lil Nas X"),
        (3, "The shoes contain blood.")]
    assert with_component_queries(h, Decomposition(3, ("one part only",))) == h
    assert with_component_queries(h, None) == h


@pytest.mark.parametrize(("labels", "expected"), [
    ([SUPPORTED, SUPPORTED], SUPPORTED), ([SUPPORTED, REFUTED, CONFLICTING], REFUTED), ([SUPPORTED, NEE], NEE),
    ([CONFLICTING, NEE, SUPPORTED], CONFLICTING), ([NEE], NEE), ([REFUTED], REFUTED)])
def test_and_label(labels: list[str], expected: str) -> None:
    assert and_label(labels) == expected


def test_part_labels_are_read_from_the_parts_block() -> None:
    text = ("Reasoning:\n1. Part 1: Lil Nas X released shoes - supported by the evidence? Part 2: Nike...\n"
            "Parts:\n**Part 1:** Supported\nPart 2: refuted\nPart 3 - NEE\nPart 9: Supported\nLabel: Supported")
    assert parse_component_labels(text, 3) == [SUPPORTED, REFUTED, NEE]
    assert parse_component_labels("Label: Supported", 2) == [None, None]


def test_stage3_uses_the_parts_prompt_and_the_and_of_the_parts() -> None:
    cfg = load_config("cpu", {"decompose": {"enabled": True}, "verdict": {"mode": "paper"}}).verdict
    ev = ClaimEvidence(3, (QueryEvidence(Query(3, 0, "q?")),))
    h = HydeResult(3, SUPPORTED, (Query(3, 0, "q?"),))
    parts = Parts(("Lil Nas X released Satan shoes.", "The shoes contain human blood."))
    backend = Scripted("Reasoning:\n1. ...\nParts:\nPart 1: Supported\nPart 2: Refuted\nLabel: Supported",
                       "Reasoning: both hold.\nLabel: Supported")
    p, whole = run_verdict([CLAIM, CLAIM], [h, h], [ev, ev], backend, cfg, [parts, None])
    prompt = backend.requests[0][0].messages[0].content
    assert "Part 2: The shoes contain human blood." in prompt and "Parts:" in prompt
    assert "Part 1:" not in backend.requests[0][1].messages[0].content  # the whole claim: the usual prompt
    # each request names its own template's head, which llama.cpp keeps evaluated (cache_prefix);
    # the parts prompt shares verdict.txt's instructions and examples, so the two heads are one
    assert [r.cache_prefix for r in backend.requests[0]] == [fixed_head(load_prompt(t)) for t in (parts.prompt, cfg.prompt)]
    assert backend.requests[0][0].cache_prefix.endswith("Claim: ")
    assert p.label == REFUTED and "components_and_overrode" in p.flags
    assert p.meta["components"] == {"parts": [{"text": parts.components[0], "label": SUPPORTED},
                                              {"text": parts.components[1], "label": REFUTED}],
                                    "model_label": SUPPORTED, "and_label": REFUTED}
    assert whole.label == SUPPORTED and "components" not in whole.meta
    # no Parts block: asked once for the parts' labels only, in the same conversation
    backend = Scripted("Reasoning: fine.\nLabel: Not Enough Evidence", "Part 1: Supported\nPart 2: Supported")
    [p] = run_verdict([CLAIM], [h], [ev], backend, cfg, [parts])
    reask = backend.requests[1][0]
    assert [m.role for m in reask.messages] == ["user", "assistant", "user"]
    assert "Part 2: <label of: The shoes contain human blood.>" in reask.messages[2].content
    assert p.label == SUPPORTED and {"components_reasked", "components_and_overrode"} <= set(p.flags)
    # the re-ask labels only part 2 (the first answer had part 1): together they decide
    backend = Scripted("Parts:\nPart 1: Refuted\nLabel: Refuted", "Part 2: Supported")
    [p] = run_verdict([CLAIM], [h], [ev], backend, cfg, [parts])
    assert p.label == REFUTED and p.meta["components"]["and_label"] == REFUTED
    # a useless re-ask: the model's own label stands
    backend = Scripted("Reasoning: fine.\nLabel: Not Enough Evidence", "I am not sure.")
    [p] = run_verdict([CLAIM], [h], [ev], backend, cfg, [parts])
    assert p.label == NEE and "components_unparsed" in p.flags and p.meta["components"]["and_label"] is None


def test_config_switch() -> None:
    assert load_config("cpu").decompose.enabled is False
    with pytest.raises(UserError, match="cannot be combined"):
        load_config("cpu", {"decompose": {"enabled": True}, "verdict": {"citations": True}})
    with pytest.raises(UserError, match="decompose.max_components"):
        load_config("cpu", {"decompose": {"max_components": 0}})


def snip(url: str, score: float, start: int = 0) -> EvidenceSnippet:
    return EvidenceSnippet(Chunk(3, 0, url, start, start + 5, "hello"), score)


def test_trust_weights(tmp_path: Path) -> None:
    f = tmp_path / "trust.toml"
    f.write_text('"who.int" = 1.0\n"tabloid.example" = 0.5\n"fake.example" = 0\n"news.tabloid.example" = 0.9\n')
    trust = load_trust(str(f), default=0.8)
    assert trust.weight("https://www.who.int/x") == 1.0 and trust.weight("https://apps.WHO.int:443/") == 1.0
    assert trust.weight("https://tabloid.example/a") == 0.5 and trust.weight("http://news.tabloid.example/") == 0.9
    assert trust.weight("https://other.org/") == 0.8 and trust.weight("not a url") == 0.8
    assert domain_of("https://User@Sub.Example.COM:8080/p") == "sub.example.com"
    ev = ClaimEvidence(3, (QueryEvidence(Query(3, 0, "q?"), (snip("https://tabloid.example/1", 0.9),
                                                             snip("https://fake.example/2", 0.8),
                                                             snip("https://www.who.int/3", 0.6, 10))),))
    out = apply_trust(ev, trust)
    assert [(s.chunk.url, round(s.score, 3)) for s in out.queries[0].snippets] == [
        ("https://www.who.int/3", 0.6), ("https://tabloid.example/1", 0.45)]
    assert "trust_dropped:1" in out.flags and "trust_reweighted:1" in out.flags
    assert apply_trust(ev, None) is ev and load_trust("") is None
    j = tmp_path / "t.json"
    j.write_text(json.dumps({"who.int": 0.7}))
    assert load_trust(str(j)).weight("https://who.int") == 0.7


@pytest.mark.parametrize(("content", "match"), [
    ('"who.int" = 2\n', "must be a number in \\[0, 1\\]"), ('"who.int" = "high"\n', "must be a number"),
    ("not toml = = \n", "cannot parse the trust file"), (b"\xff\xfe", "cannot parse")])
def test_bad_trust_files_name_the_file_and_entry(tmp_path: Path, content, match: str) -> None:
    f = tmp_path / f"bad{abs(hash(str(content)))}.toml"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UserError, match=match) as exc:
        load_trust(str(f))
    assert str(f) in str(exc.value)
    with pytest.raises(UserError, match="cannot read the trust file"):
        load_trust(str(tmp_path / "missing.toml"))


def test_report_shows_the_parts_and_their_labels_escaped() -> None:
    from sanctuary_local.records import Prediction
    from sanctuary_local.report.pages import render_claim

    meta = {"components": {"parts": [{"text": "Nike made <b>shoes</b>.", "label": SUPPORTED},
                                     {"text": "They contain blood.", "label": None}],
                           "model_label": NEE, "and_label": None}}
    page = render_claim(Prediction(3, "c3", CLAIM.text, NEE, meta=meta), [], None)
    assert "<li><bdi>Nike made &lt;b&gt;shoes&lt;/b&gt;.</bdi> <span class=\"verdict v-Supported\">Supported</span></li>" in page
    assert "<li><bdi>They contain blood.</bdi> <span class=\"meta\">no label</span></li>" in page
    assert "the model&#x27;s own label stands" in page
    whole = render_claim(Prediction(3, "c3", CLAIM.text, NEE), [], None)
    assert 'class="parts"' not in whole


def test_a_bad_trust_file_stops_the_run_before_force_clears_anything(tmp_path: Path) -> None:
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    out.mkdir()
    (out / "stage1_hyde.jsonl").write_text('{"claim_index": 0, "record": {}}\n')
    bad = tmp_path / "trust.toml"
    bad.write_text('"who.int" = 7\n')
    opts = RunOptions(claims=root / "examples" / "claims.json", store=root / "examples" / "store", out=out,
                      profile="cpu-fast", quiet=True, force=True, overrides={"retrieval": {"trust_file": str(bad)}})
    with pytest.raises(UserError, match="trust.toml: the weight of 'who.int'"):
        run_pipeline(opts)
    assert (out / "stage1_hyde.jsonl").read_text() == '{"claim_index": 0, "record": {}}\n'
