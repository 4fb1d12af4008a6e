"""followup end to end with the real model: the whole pipeline on examples/ with the cpu-fast
profile (Qwen2.5-Coder-0.5B-Instruct on llama.cpp, MiniLM retrieval) and the follow-up
round on. The similarity threshold is raised to 0.68 so that some stage-1 questions find nothing
(the gaps the round is for; the examples' best snippets score 0.62-0.89 with MiniLM). Structure only, never quality: the claims with gaps, and only
they, asked the model; the first round's evidence is kept as it was; new questions are
numbered after the old ones and every new snippet reconstructs exactly from its page;
the verdict prompt saw the merged evidence; a rerun recomputes nothing; the official
outputs still pass the official format checks. The run starts from the session's reference
run (conftest.py, the same stage-1 settings) with ``--reuse-from``: stage 1 is copied, and
retrieval (another threshold), the round and the verdict run here."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sanctuary_local.io.leaderboard import check_official_rows
from sanctuary_local.io.predictions import MAX_EVIDENCE, read_predictions_json
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.records import LABELS, ClaimEvidence, HydeResult
from sanctuary_local.io.run_files import STAGE_FILES
from tests.support.shared_runs import TINY_SECTIONS, TINY_VERDICT_PROMPT, reuse_extras

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OVERRIDES = {**TINY_SECTIONS,
             "retrieval": {**TINY_SECTIONS["retrieval"], "retriever": {"similarity_threshold": 0.68},
                           "sts": {"similarity_threshold": 0.68}},
             "followup": {"enabled": True, "max_questions": 2, "sampling": {"max_tokens": 160}},
             "verdict": {"prompt": TINY_VERDICT_PROMPT, "sampling": {"max_tokens": 192}}}

pytestmark = pytest.mark.slow


def records(out: Path, stage: str, cls) -> dict[int, object]:
    return {(o := orjson.loads(line))["claim_index"]: cls.from_dict(o["record"])
            for line in (out / STAGE_FILES[stage]).read_bytes().splitlines()}


def opts(out: Path, reference: Path) -> RunOptions:
    return RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                      profile="cpu-fast", workers=1, quiet=True, overrides=OVERRIDES, reuse_from=reference)


@pytest.fixture(scope="module")
def followup_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    reference: Path = request.getfixturevalue("reference_run")
    out = tmp_path_factory.mktemp("followup")
    summary = run_pipeline(opts(out, reference))
    assert summary.n_claims == len(orjson.loads((EXAMPLES / "claims.json").read_bytes()))
    n, tag = summary.n_claims, str(reference.resolve())  # stage 1 copied; retrieval and after computed
    assert reuse_extras(out, STAGE_FILES["hyde"]) == dict.fromkeys(range(n), tag)
    for stage in ("retrieval", "followup_questions", "followup", "verdict"):
        assert reuse_extras(out, STAGE_FILES[stage]) == dict.fromkeys(range(n)), stage
    return out


def test_followup_round_on_the_real_model(followup_run: Path) -> None:
    out = followup_run
    first = records(out, "retrieval", ClaimEvidence)
    asked = records(out, "followup_questions", HydeResult)
    merged = records(out, "followup", ClaimEvidence)
    preds = {p.claim_index: p for p in read_predictions_json(out / "predictions.json")}
    assert set(first) == set(asked) == set(merged) == set(preds)
    gaps = {i for i, ev in first.items() if any(not qe.snippets for qe in ev.queries)}
    assert gaps, "the raised threshold should leave some question without a snippet"
    store = KnowledgeStore(EXAMPLES / "store")
    n_new = 0
    for i, ev in first.items():
        q, m, p = asked[i], merged[i], preds[i]
        assert p.label in LABELS
        if i not in gaps:  # no gap: no model call, the evidence unchanged
            assert q.queries == () and q.generation.prompt_tokens == 0 and m.queries == ev.queries
            continue
        assert q.generation.prompt_tokens > 0  # the model was asked
        assert q.queries or "followup_unusable" in q.flags
        assert m.queries[: len(ev.queries)] == ev.queries  # the first round is kept as it was
        new = m.queries[len(ev.queries):]
        assert [qe.query for qe in new] == list(q.queries)
        assert [qe.query.number for qe in m.queries] == list(range(len(m.queries)))
        old = {qe.query.question.lower() for qe in ev.queries}
        assert not any(qe.query.question.lower() in old for qe in new)
        docs = {d.position: d for d in store.iter_documents(i)}
        for qe in new:
            for sn in qe.snippets:
                assert docs[sn.chunk.doc_position].text[sn.chunk.start:sn.chunk.end] == sn.chunk.text
        n_new += len(new)
        assert p.meta["followup"]["questions"] == [x.question for x in q.queries]
        assert p.meta["followup"]["found"] == sum(bool(qe.snippets) for qe in new)
        assert f"followup_questions:{len(q.queries)}" in p.flags or not q.queries
        # the verdict saw the merged evidence: every new snippet is among the prediction's evidence
        spans = {(e.doc_position, e.start, e.end) for e in p.evidence_all}
        assert all((sn.chunk.doc_position, sn.chunk.start, sn.chunk.end) in spans for qe in new for sn in qe.snippets)
    assert n_new > 0, "the model wrote no usable follow-up question for any claim with gaps"
    print(f"follow-up: {len(gaps)} of {len(first)} claims had gaps, {n_new} new questions")
    timings = orjson.loads((out / "timings.json").read_bytes())
    assert timings["stages"]["followup"]["claims_this_run"] == len(preds)
    assert timings["stages"]["followup"]["tokens_out"] > 0
    assert check_official_rows(out / "submission.csv", max_pairs=MAX_EVIDENCE) == []


def test_rerun_recomputes_nothing(followup_run: Path, reference_run: Path) -> None:
    files = [n for n in STAGE_FILES.values() if (followup_run / n).exists()]
    assert "stage2c_followup_evidence.jsonl" in files and "stage0_decompose.jsonl" not in files
    before = {n: (followup_run / n).read_bytes() for n in files}
    run_pipeline(opts(followup_run, reference_run))
    assert {n: (followup_run / n).read_bytes() for n in files} == before
