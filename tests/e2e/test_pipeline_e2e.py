"""End to end: `sanctuary-local run` on examples/ with the real CPU models.

The cpu-fast profile with short generations (tests/data/tiny_cpu_trained.toml):
Qwen2.5-Coder-0.5B-Instruct (llama.cpp) for stage 1, all-MiniLM-L6-v2 for retrieval, real
BM25 and FAISS, and cpu-fast's own stage 3, the packaged trained verdict. Asserts
structure, provenance, resume and failure isolation — never answer quality. The LLM verdict
(the paper's path) has its own real-model tests: test_llm_e2e, test_citations_e2e,
test_decompose_e2e, test_openai_fleet. The uninterrupted run the tests compare with is ``reference_run`` (conftest.py:
one per session, every non-loopback socket blocked; other modules reuse its stages)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from sanctuary_local.io.leaderboard import HEADER, check_official_rows, read_leaderboard_csv
from sanctuary_local.io.predictions import MAX_EVIDENCE, NO_ANSWER, read_predictions_json
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.records import LABELS
from sanctuary_local.io.run_files import STAGE_FILES
from tests.support.shared_runs import EXAMPLES, N_EXAMPLES, TINY_TRAINED, reuse_extras

pytestmark = pytest.mark.slow


def _comparable(out: Path) -> list[dict]:
    """Predictions without the fields that legitimately differ between runs: wall-clock seconds,
    and the prompt tokens a process found cached (the head of stage 1's prompt may already be
    on disk from an earlier run, or not; the text is the same either way, test_llm_e2e.py)."""
    def strip(obj: object) -> object:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in ("seconds", "timings", "cached_tokens")}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    return strip(orjson.loads((out / "predictions.json").read_bytes()))  # type: ignore[return-value]


def test_outputs_exist_and_validate(reference_run: Path) -> None:
    for name in ("predictions.json", "submission.csv", "stage1_hyde.jsonl", "stage2_evidence.jsonl",
                 "stage3_predictions.jsonl", "timings.json", "manifest.json", "config.json", "run.log"):
        assert (reference_run / name).is_file(), name
    preds = orjson.loads((reference_run / "predictions.json").read_bytes())
    assert [p["claim_id"] for p in preds] == list(range(N_EXAMPLES))  # integers, as in the official files
    for p in preds:
        assert p["pred_label"] in LABELS
        assert isinstance(p["claim"], str) and p["claim"]
        for e in p["evidence"]:
            assert set(e) >= {"question", "answer", "url", "scraped_text"}
    rows = read_leaderboard_csv(reference_run / "submission.csv")
    assert [r.id for r in rows] == [str(p["claim_index"]) for p in preds]
    assert all(r.split == "pred" and r.label in LABELS for r in rows)
    assert (reference_run / "submission.csv").read_bytes().startswith(",".join(HEADER).encode() + b"\r\n")
    timings = orjson.loads((reference_run / "timings.json").read_bytes())
    assert set(timings["stages"]) == {"hyde", "retrieval", "verdict"}
    assert timings["stages"]["hyde"]["tokens_out"] > 0 and timings["peak_rss_mb"] > 0
    counts = [len(orjson.loads(x)["record"]["queries"]) for x in (reference_run / "stage1_hyde.jsonl").read_bytes().splitlines()]
    assert timings["stages"]["hyde"]["questions"]["min"] == min(counts)  # what stage 1 wrote, per claim
    assert timings["stages"]["hyde"]["questions"]["mean"] == pytest.approx(sum(counts) / len(counts), abs=1e-4)
    # llama.cpp reuses the shared instructions + few-shot prefix: every claim after the first
    hyde = [orjson.loads(x)["record"]["generation"] for x in (reference_run / "stage1_hyde.jsonl").read_bytes().splitlines()]
    assert all(0 <= g["cached_tokens"] < g["prompt_tokens"] for g in hyde)
    assert sum(g["cached_tokens"] > 0.3 * g["prompt_tokens"] for g in hyde) >= len(hyde) - 1
    manifest = orjson.loads((reference_run / "manifest.json").read_bytes())
    assert manifest["models"]["hyde_llm"]["files"] and set(manifest["prompts"]) == {"hyde", "decompose", "followup", "verdict"}


def test_every_evidence_snippet_reconstructs_from_its_document(reference_run: Path) -> None:
    store = KnowledgeStore(EXAMPLES / "store")
    preds = orjson.loads((reference_run / "predictions.json").read_bytes())
    n = 0
    for p in preds:
        docs = {d.position: d for d in store.load(int(p["claim_id"])).documents}
        for e in p["evidence"]:
            doc = docs[e["doc_position"]]
            assert doc.url == e["url"]
            assert doc.text[e["start"] : e["end"]] == e["scraped_text"]  # verbatim
            assert e["answer"] == " ".join(e["scraped_text"].split())  # what the scorers read
            n += 1
    assert n > 0, "no evidence at all on the examples"


def test_official_outputs_are_always_valid(reference_run: Path) -> None:
    """Every submission row parses under the official scorer's rules; ≤ 10 pairs per
    claim, the full ranking kept in evidence_all; no tab or newline in emitted text."""
    assert check_official_rows(reference_run / "submission.csv", max_pairs=MAX_EVIDENCE) == []
    for p in read_predictions_json(reference_run / "predictions.json"):
        assert 1 <= len(p.evidence) <= MAX_EVIDENCE
        if p.evidence_all:
            assert p.evidence == p.evidence_all[:MAX_EVIDENCE]
        else:
            assert any(f.startswith("evidence_placeholder") for f in p.flags)
        for e in (*p.evidence, *p.evidence_all):
            assert e.question == " ".join(e.question.split()) and e.answer == " ".join(e.answer.split())


#: Claims 0-1 of the examples for the kill-and-resume run (issue 29): a kill still lands in
#: each stage with a claim of that stage left to do, and every further claim would only
#: repeat the same model work.
KILLED = 2


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "sanctuary_local.cli", "run", "--claims", str(EXAMPLES / "claims.json"),
            "--store", str(EXAMPLES / "store"), "--out", str(out), "--profile", TINY_TRAINED, "--workers", "1", "--quiet",
            "--claims-range", f"0:{KILLED}"]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.soak
def test_kill_and_resume_matches_uninterrupted_run(reference_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # SIGKILL the run once inside each stage, resuming each time, then finish.
    for stage_file in ("stage1_hyde.jsonl", "stage2_evidence.jsonl", "stage3_predictions.jsonl"):
        proc = subprocess.Popen(_cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = _lines(out / stage_file) + 1
        deadline = time.time() + 600
        while proc.poll() is None and _lines(out / stage_file) < target and time.time() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    final = subprocess.run(_cmd(out), env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode in (0, 3), final.stderr[-2000:]
    for name in ("stage1_hyde.jsonl", "stage2_evidence.jsonl", "stage3_predictions.jsonl"):
        idx = [orjson.loads(line)["claim_index"] for line in (out / name).read_bytes().splitlines()]
        assert sorted(idx) == list(range(KILLED)), (name, idx)  # exactly once
    # Every stage is identical to an uninterrupted run's: stages 1 and 2 record for record (less
    # seconds and the prompt tokens found cached, as the KV prefix is empty after a resume), and
    # the predictions whole, as stage 3 is the trained verdict, a function of its inputs.
    for name in ("stage1_hyde.jsonl", "stage2_evidence.jsonl"):
        def records(d: Path) -> dict:
            return {orjson.loads(x)["claim_index"]: orjson.loads(x)["record"] for x in (d / name).read_bytes().splitlines()}
        mine, ref = records(out), {i: r for i, r in records(reference_run).items() if i < KILLED}
        for rec in (*mine.values(), *ref.values()):
            rec.pop("timings", None)
            rec.get("generation", {}).pop("seconds", None)
            rec.get("generation", {}).pop("cached_tokens", None)  # the KV prefix is empty after a resume
        assert mine == ref, name
    assert _comparable(out) == _comparable(reference_run)[:KILLED]


def test_overlapped_retrieval_gives_identical_results(reference_run: Path, tmp_path: Path) -> None:
    """Stage 2 in a 2-process pool fed wave by wave during stage 1 (forced on; auto only
    turns it on for GPU/server backends) gives exactly the stage-major results. Claims 0-1
    (issue 29: two waves of one claim on llama.cpp already overlap, claim 0's retrieval
    with claim 1's generation; each claim more is a full stage 1 and stage 3 on the model)
    against the reference run's first two, which ran in the same order."""
    out = tmp_path / "overlap"
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                      profile=TINY_TRAINED, workers=2, quiet=True, overlap=True, claims_range="0:2"))
    assert summary.n_claims == 2
    assert "stages 1+2 overlapped" in (out / "run.log").read_text()
    assert _comparable(out) == _comparable(reference_run)[:2]


def test_corrupted_and_missing_store_files_are_isolated(reference_run: Path, tmp_path: Path) -> None:
    """Started from the reference run's finished stages (``--reuse-from``; stage 1 never
    reads the store): the claims whose store file changed, 1 (missing) and 2 (corrupted),
    get retrieval and verdict anew, and the others keep the reference run's records."""
    store = tmp_path / "store"
    shutil.copytree(EXAMPLES / "store", store)
    (store / "1.json").unlink()  # missing
    data = (store / "2.json").read_bytes().splitlines(keepends=True)
    data.insert(1, b'{"url": "https://broken.example", "url2text": ["unterminated\n')
    data.insert(3, b"\xff\xfe not utf-8 \xc3\x28\n")
    (store / "2.json").write_bytes(b"".join(data))
    out = tmp_path / "out"
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=store, out=out, profile=TINY_TRAINED,
                                      workers=1, quiet=True, reuse_from=reference_run))
    assert summary.n_claims == N_EXAMPLES and summary.exit_code == 3
    tag = str(reference_run.resolve())
    assert reuse_extras(out, STAGE_FILES["hyde"]) == dict.fromkeys(range(N_EXAMPLES), tag)
    for stage in ("retrieval", "verdict"):  # computed here for the changed store files only
        assert reuse_extras(out, STAGE_FILES[stage]) == {0: tag, 1: None, 2: None, 3: tag}, stage
    by_id = {p.claim_id: p for p in summary.predictions}
    assert any(f.startswith("store_missing") for f in by_id["1"].flags)
    assert by_id["1"].label in LABELS and by_id["1"].evidence_all == ()
    (placeholder,) = by_id["1"].evidence  # never an empty evi cell: the scorer would crash on it
    assert placeholder.answer == NO_ANSWER and "evidence_placeholder:no_answer" in by_id["1"].flags
    assert any(f.startswith("store_problems") for f in by_id["2"].flags)
    assert summary.degraded_reasons.get("store_missing") == 1 and "evidence_placeholder" not in summary.degraded_reasons
    assert check_official_rows(out / "submission.csv", max_pairs=MAX_EVIDENCE) == []


@pytest.mark.soak
def test_tiny_budget_degrades_later_claims_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "budget"
    summary = run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                      profile=TINY_TRAINED, workers=1, quiet=True, budget_s=0.01))
    levels = [max(p.meta["budget"]["levels"].values()) for p in summary.predictions]
    assert levels[:2] == [0, 0]  # the pilot runs at full settings
    assert all(lv > 0 for lv in levels[2:]) and len(levels) == N_EXAMPLES
    for p, lv in zip(summary.predictions[2:], levels[2:]):
        assert f"budget_level:{lv}" in p.flags
        assert p.meta["budget"]["knobs"]["hyde.max_questions"] <= 5
    b = orjson.loads((out / "timings.json").read_bytes())["budget"]
    assert b["budget_s_per_claim"] == 0.01 and b["decisions"] and b["achieved_s_per_claim"] > 0
