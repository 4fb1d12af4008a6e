"""decompose end to end with the real model: the whole pipeline on examples/ with the cpu-fast
profile (Qwen2.5-Coder-0.5B-Instruct on llama.cpp, MiniLM retrieval), the decomposition on
and a user trust file that zeroes one domain of the example store and halves another.
A fifth claim, compound, is added on claim 0's pages so that at least one claim splits; the
run takes claims 2-4 (``--claims-range 2:5``): the claim whose pages hold the zeroed domain,
the one whose pages hold the halved domain, and the compound one that must split (issue 29:
the pages of claims 0 and 1 hold neither domain, and each claim costs the decomposition and
stages 1-3 on the model).
Structure only, never quality: every claim has recorded parts; the parts of a claim split
in several were stage-2 queries after its stage-1 questions; stage 3 labelled the parts and
the claim's label is their AND whenever every part got a label; no snippet of the zeroed
domain survives anywhere; a rerun recomputes nothing; the official outputs pass the
official format checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from sanctuary_local.io.leaderboard import check_official_rows
from sanctuary_local.io.predictions import MAX_EVIDENCE, read_predictions_json
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.records import LABELS, ClaimEvidence, Decomposition, HydeResult
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.stages.verdict.parts import and_label

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ZEROED, HALVED = "socialpost-archive.example", "energyexplained.example"  # in store/2.json, store/3.json
SELECTED = "2:5"
COMPOUND = ("The Eiffel Tower grows by up to 15 centimetres in summer, and it was built for the 1889 World's Fair "
            "by Gustave Eiffel's company.")

pytestmark = pytest.mark.slow


def records(out: Path, stage: str, cls) -> dict[int, object]:
    return {(o := orjson.loads(line))["claim_index"]: cls.from_dict(o["record"])
            for line in (out / STAGE_FILES[stage]).read_bytes().splitlines()}


@pytest.fixture(scope="module")
def run_opts(tmp_path_factory: pytest.TempPathFactory) -> RunOptions:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    tmp = tmp_path_factory.mktemp("decompose")
    # the 4 examples plus a compound claim (two assertions) on claim 0's pages, as claim 4
    claims = orjson.loads((EXAMPLES / "claims.json").read_bytes())
    claims.append({**claims[0], "claim": COMPOUND})
    (tmp / "claims.json").write_bytes(orjson.dumps(claims))
    shutil.copytree(EXAMPLES / "store", tmp / "store")
    shutil.copy(EXAMPLES / "store" / "0.json", tmp / "store" / "4.json")
    trust = tmp / "trust.toml"
    trust.write_text(f'"{ZEROED}" = 0\n"{HALVED}" = 0.5\n', encoding="utf-8")
    overrides = {"hyde": {"max_questions": 5, "sampling": {"max_tokens": 160}},
                 "retrieval": {"trust_file": str(trust)},
                 "decompose": {"enabled": True, "max_components": 3},
                 "verdict": {"mode": "paper", "sampling": {"max_tokens": 256}}}
    opts = RunOptions(claims=tmp / "claims.json", store=tmp / "store", out=tmp / "run", claims_range=SELECTED,
                      profile="cpu-fast", workers=1, quiet=True, overrides=overrides)
    summary = run_pipeline(opts)
    assert sorted(p.claim_index for p in summary.predictions) == [2, 3, 4]
    return opts


def test_decomposed_run_on_the_real_model(run_opts: RunOptions) -> None:
    out = Path(run_opts.out)
    decs = records(out, "decompose", Decomposition)
    hyde = records(out, "hyde", HydeResult)
    evidence = records(out, "retrieval", ClaimEvidence)
    preds = {p.claim_index: p for p in read_predictions_json(out / "predictions.json")}
    assert set(decs) == set(hyde) == set(evidence) == set(preds)
    split = 0
    for i, d in decs.items():
        p = preds[i]
        assert p.label in LABELS and d.components and all(c.strip() for c in d.components)
        assert len(d.components) <= 3 and f"components:{len(d.components)}" in p.flags
        assert p.meta["decomposition"]["components"] == list(d.components)
        assert d.generation.prompt_tokens > 0  # the model was asked
        queries = [qe.query for qe in evidence[i].queries]
        assert queries[: len(hyde[i].queries)] == list(hyde[i].queries)
        if len(d.components) < 2:
            assert "components" not in p.meta
            continue
        split += 1
        asked = {q.question.lower() for q in hyde[i].queries}
        extra = [q.question for q in queries[len(hyde[i].queries):]]
        assert extra == [c for c in d.components if c.lower() not in asked]
        comp = p.meta["components"]
        assert [x["text"] for x in comp["parts"]] == list(d.components)
        labels = [x["label"] for x in comp["parts"]]
        if all(lbl is not None for lbl in labels):
            assert p.label == comp["and_label"] == and_label(labels)
        else:
            assert "components_unparsed" in p.flags and p.label == comp["model_label"]
    print(f"decomposition: {split} of {len(decs)} claims split into parts")
    assert split >= 1, "not even the compound claim was split: the AND path did not run"
    for i, ev in evidence.items():  # the trust file: nothing from the zeroed domain anywhere
        urls = [sn.chunk.url for qe in ev.queries for sn in qe.snippets]
        assert not any(ZEROED in u for u in urls)
        assert not any(ZEROED in e.url for e in preds[i].evidence_all)
    assert any(f.startswith(("trust_dropped:", "trust_reweighted:")) for p in preds.values() for f in p.flags)
    assert check_official_rows(out / "submission.csv", max_pairs=MAX_EVIDENCE) == []
    timings = orjson.loads((out / "timings.json").read_bytes())
    assert timings["stages"]["decompose"]["claims_this_run"] == len(preds)


def test_rerun_recomputes_nothing(run_opts: RunOptions) -> None:
    out = Path(run_opts.out)
    before = {n: (out / n).read_bytes() for n in STAGE_FILES.values() if (out / n).exists()}
    run_pipeline(run_opts)
    assert {n: (out / n).read_bytes() for n in STAGE_FILES.values() if (out / n).exists()} == before
