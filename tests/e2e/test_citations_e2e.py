"""verdict.citations end to end with the real model: the whole pipeline on examples/ with the
cpu-fast profile (Qwen2.5-Coder-0.5B-Instruct on llama.cpp, MiniLM retrieval) and the mode
on. Structure only, never quality (a 0.5B model cites badly): every claim gets a valid
label and a citation record, every valid citation's span reconstructs its quote from the
store's own document text, flags agree with the record, the rates are shares, and the
official outputs still pass the official format checks. The run starts from the session's
reference run (conftest.py, the same stages 1-2 settings) with ``--reuse-from``: only
stage 3, where the mode acts, runs here, on claim 0 (issue 29: every check is per claim
and per citation, and each further claim is another long stage-3 generation and re-ask)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sanctuary_local.io.leaderboard import check_official_rows
from sanctuary_local.io.predictions import MAX_EVIDENCE, read_predictions_json
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.records import LABELS
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.modes.citations import find_quote
from sanctuary_local.modes.citations import citation_rates
from tests.support.shared_runs import TINY_SECTIONS, reuse_extras

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: cpu-fast with the end-to-end tests' shorter stage-1 generations (tests/data/tiny_cpu.toml's,
#: so stages 1-2 are the reference run's); stage 3 gets room for a short reasoning, its
#: citations and the label.
OVERRIDES = {**TINY_SECTIONS, "verdict": {"mode": "paper", "citations": True, "sampling": {"max_tokens": 256}}}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cited_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    reference: Path = request.getfixturevalue("reference_run")
    out = tmp_path_factory.mktemp("cited")
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                      profile="cpu-fast", workers=1, quiet=True, overrides=OVERRIDES,
                                      reuse_from=reference, claims_range="0:1"))
    assert summary.n_claims == 1
    tag = str(reference.resolve())  # stages 1-2 copied, stage 3 computed with the mode on
    n = summary.n_claims
    assert reuse_extras(out, STAGE_FILES["hyde"]) == reuse_extras(out, STAGE_FILES["retrieval"]) == dict.fromkeys(range(n), tag)
    assert reuse_extras(out, STAGE_FILES["verdict"]) == dict.fromkeys(range(n))
    return out


def test_cited_run_on_the_real_model(cited_run: Path) -> None:
    preds = read_predictions_json(cited_run / "predictions.json")
    store = KnowledgeStore(EXAMPLES / "store")
    stage3 = [orjson.loads(line)["record"] for line in (cited_run / "stage3_predictions.jsonl").read_bytes().splitlines()]
    assert sorted(r["claim_index"] for r in stage3) == sorted(p.claim_index for p in preds)
    assert all("citations" in r["meta"] for r in stage3)  # the per-claim record is in the stage-3 file too
    n_items = 0
    for p in preds:
        assert p.label in LABELS
        cited = p.meta["citations"]
        assert {"before", "after", "reasked", "reask", "replaced", "items"} <= set(cited)
        assert cited["after"]["n"] == len(cited["items"]) and cited["after"]["valid"] == sum(i["ok"] for i in cited["items"])
        for key in ("before", "after"):
            assert cited[key]["validity"] is None or 0.0 <= cited[key]["validity"] <= 1.0
        docs = {d.position: d for d in store.iter_documents(p.claim_index)}
        for item in cited["items"]:
            assert item["ok"] == (item["ids_ok"] and item["quote_found"])
            if item["ok"]:
                doc = docs[item["doc_position"]]
                source = doc.text[item["start"]:item["end"]]
                assert doc.url == item["url"] and source and source == source.strip()
                assert find_quote(item["quote"], source) == (0, len(source))  # the span is the quote, exactly
                assert f"(source: {item['url']}, characters {item['start']}-{item['end']})" in p.justification
            else:
                assert item["problem"] and item["start"] == item["end"] == -1
            n_items += 1
        failing = len(cited["items"]) - cited["after"]["valid"]
        if not cited["items"]:
            assert "citations_missing" in p.flags
        elif failing:
            assert f"citation_violations:{failing}" in p.flags
        assert ("citations_reasked" in p.flags) == cited["reasked"]
    rates = citation_rates(preds)
    assert set(rates) == {"validity_before", "validity_after", "clean_before", "clean_after", "reasked",
                          "verdicts_with_valid_citation"}
    assert all(v is None or 0.0 <= v <= 1.0 for v in rates.values())
    assert check_official_rows(cited_run / "submission.csv", max_pairs=MAX_EVIDENCE) == []
    manifest = orjson.loads((cited_run / "manifest.json").read_bytes())
    assert manifest["prompts"]["verdict"] == preds[0].meta["verdict_prompt_hash"]
    print(f"citations on {len(preds)} claims, {n_items} citations kept: {rates}")
