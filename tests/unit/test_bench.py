"""bench: summary, markdown, chart and compare on timings of a real CPU run (committed result)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sanctuary_local.machine import bench
from sanctuary_local.cli import main
from sanctuary_local.errors import UserError

RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "speed" / "bench_cpu_examples_4claims.json"


@pytest.fixture(scope="module")
def timings() -> dict:
    """timings.json of a real `sanctuary-local run --profile cpu` (kept inside the committed result)."""
    if not RESULT.is_file():
        pytest.skip(f"{RESULT} absent")
    return json.loads(RESULT.read_text("utf-8"))["timings"]


def test_summary_is_consistent_with_timings(timings: dict) -> None:
    res = bench.summarize(timings, "cpu", "t")
    wall = timings["wall_s"] / timings["n_claims"]
    assert res["total"]["s_per_claim_wall"] == pytest.approx(wall, abs=1e-3)
    assert res["total"]["projected_1000_claims_s"] == pytest.approx(1000 * wall, abs=0.1)
    assert res["total"]["within_budget"] is (wall <= 60.0)
    for stage in bench.STAGES:
        st, raw = res["stages"][stage], timings["stages"][stage]
        assert st["s_per_claim"]["mean"] == raw["per_claim"]["mean"]
        assert st["s_per_claim"]["p50"] <= st["s_per_claim"]["p95"]
        assert st["claims_per_hour"] == pytest.approx(3600 / raw["per_claim"]["mean"], abs=0.05)
    stage_sum = sum(timings["stages"][s]["per_claim"]["mean"] for s in bench.STAGES)
    assert res["total"]["s_per_claim_stage_sum"] == pytest.approx(stage_sum, abs=1e-3)
    assert stage_sum <= timings["wall_s"] + 1e-6  # stages never take longer than the run


def test_markdown_json_and_png_are_written(timings: dict, tmp_path: Path) -> None:
    res = bench.summarize(timings, "cpu", "unit", "x/timings.json")
    paths = bench.write_result(res, tmp_path)
    assert [p.name for p in paths] == ["bench_unit.json", "bench_unit.md", "bench_unit.png"]
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths[1].read_text("utf-8")
    assert "| hyde |" in md and "projected for 1,000 claims" in md and "60 s/claim budget" in md
    assert bench.load_result(paths[0]) == json.loads(json.dumps(res))
    assert "questions per claim" not in md  # timings from before stage 1 counted its questions


def test_markdown_reports_stage1_questions(timings: dict) -> None:
    t = copy.deepcopy(timings)
    t["stages"]["hyde"]["questions"] = {"mean": 5.25, "p50": 5.0, "p95": 6.0, "min": 4}
    res = bench.summarize(t, "cpu", "q")
    assert res["stages"]["hyde"]["questions"]["min"] == 4
    assert "Stage 1 questions per claim: mean 5.25, fewest 4." in bench.to_markdown(res)


def test_compare_ratios(timings: dict) -> None:
    a = bench.summarize(timings, "cpu", "a")
    faster = copy.deepcopy(timings)
    faster["wall_s"] /= 4
    faster["wall_s_per_claim"] = faster["wall_s"] / faster["n_claims"]
    for st in faster["stages"].values():
        st["per_claim"] = {k: v / 2 for k, v in st["per_claim"].items()}
    b = bench.summarize(faster, "paper", "b")
    ratios = bench.compare(a, b)["ratio_b_over_a"]
    assert all(ratios[s] == pytest.approx(0.5, abs=1e-3) for s in bench.STAGES)
    assert ratios["total_wall"] == pytest.approx(0.25, abs=1e-3)
    assert "| verdict |" in bench.compare_markdown(bench.compare(a, b), a, b)


def test_bad_timings_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a run's timings.json"):
        bench.summarize({"n_claims": 0, "stages": {}}, "cpu", "x", "t.json")
    bad = tmp_path / "t.json"
    bad.write_text("{", "utf-8")
    with pytest.raises(UserError, match="cannot read"):
        bench.load_timings(bad)


def test_cli_from_timings_and_compare(timings: dict, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "timings.json").write_text(json.dumps(timings), "utf-8")
    args = ["bench", "--from-timings", str(run_dir), "--results-dir", str(tmp_path / "res"), "--label", "cli"]
    assert main(args) == 0
    out = tmp_path / "res" / "bench_cli.json"
    assert out.is_file() and (tmp_path / "res" / "bench_cli.png").is_file()
    assert main(["bench", "--compare", str(out), str(RESULT)]) == 0
    assert not list((tmp_path / "res").glob("bench_compare_*"))  # without --label: printed only
    assert main(["bench", "--compare", str(RESULT), str(out), "--results-dir", str(tmp_path / "res"), "--label", "ab"]) == 0
    chart = tmp_path / "res" / "bench_compare_ab.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "res" / "bench_compare_ab.md").read_text("utf-8")
    assert "| verdict |" in md and "A = `cpu_examples_4claims`" in md and "B = `cli`" in md
    assert "load average at the end not recorded" in md  # the committed result predates the field
    cmp = json.loads((tmp_path / "res" / "bench_compare_ab.json").read_text("utf-8"))
    assert [r["label"] for r in cmp["results"]] == ["cpu_examples_4claims", "cli"]
    assert len(json.loads(out.read_text("utf-8"))["host"]["loadavg"]) == 3
    assert main(["bench", "--claims", str(out)]) == 2  # needs --store or --synthetic


def test_synthetic_inputs_match_the_store(tmp_path: Path) -> None:
    from sanctuary_local.io.claims import read_claims

    claims_path, store = bench.synthetic_inputs(2, 0.002, tmp_path)
    claims = read_claims(claims_path)
    assert len(claims) == 2 and (store / "0.json").is_file() and (store / "1.json").is_file()
    first_doc_lines = " ".join(
        line for row in (store / "0.json").read_text("utf-8").splitlines() for line in json.loads(row)["url2text"]
    )
    assert claims[0].text[:100] in first_doc_lines  # the claim is a real line of its store
