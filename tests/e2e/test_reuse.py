"""``run --reuse-from``: which stages of an earlier run a new run may copy (the chain of
config sections, claims file, store, budget, version, prompt hashes), how records are
copied claim by claim, and, end to end with the real 0.5B model, that a verdict-only
change recomputes stage 3 alone and a retrieval change recomputes stages 2 and 3."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import UserError
from sanctuary_local.records import HydeResult, Query
from sanctuary_local.run.reuse import CHAIN, reusable_stages, reuse_stages
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import StageFile
from tests.support.shared_runs import TINY_SECTIONS, TINY_VERDICT_PROMPT

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FP = {"config": "x", "claims_file": "c" * 64, "store": {"0": "s0", "1": "s1", "2": "s2", "3": "s3"}, "code": "git:abc",
      "libraries": "l1", "prompts": {"hyde": "h", "decompose": "d", "followup": "f", "verdict": "v"},
      "models": {"hyde_llm": "sha256:1", "verdict_llm": "sha256:1", "sts_embedder": "sha256:2", "retrieval_embedder": "sha256:2"},
      "trust_file": "", "budget_s": None}
ALL = [key for key, _ in CHAIN]


def _source(tmp_path: Path, overrides: dict | None = None, fingerprint: dict | None = None,
            manifest: dict | None = None) -> Path:
    """A source run directory whose fingerprint is ``FP`` with ``fingerprint``'s parts replaced."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "config.json").write_bytes(orjson.dumps(load_config("cpu-fast", overrides).to_dict()))
    (src / "run_state.json").write_bytes(orjson.dumps({"fingerprint": {**FP, **(fingerprint or {})}}))
    if manifest is not None:
        (src / "manifest.json").write_bytes(orjson.dumps(manifest))
    return src


def _stages(tmp_path: Path, new: dict | None = None, **source: dict) -> list[str]:
    return reusable_stages(_source(tmp_path, **source), tmp_path / "out", load_config("cpu-fast", new), FP)


def test_same_config_reuses_every_stage(tmp_path: Path) -> None:
    assert _stages(tmp_path) == ALL


@pytest.mark.parametrize(("new", "expected"), [
    ({"verdict": {"mode": "paper", "citations": True}}, ["hyde", "decompose", "retrieval", "followup_questions", "followup"]),
    ({"followup": {"enabled": True}}, ["hyde", "decompose", "retrieval"]),
    ({"retrieval": {"prefilter": 16}}, ["hyde", "decompose"]),
    ({"decompose": {"enabled": True}, "verdict": {"mode": "paper"}}, ["hyde"]),  # stage 1 does not read the decomposition
    ({"hyde": {"sampling": {"max_tokens": 100}}}, []),
    ({"seed": 1}, []),
    ({"retrieval": {"workers": 7}}, ALL),  # how many processes, not what they compute
    ({"hyde": {"llm": {"n_threads": 3}}, "models_dir": "elsewhere"}, ALL),  # execution settings
])
def test_the_first_changed_section_ends_the_chain(tmp_path: Path, new: dict, expected: list[str]) -> None:
    assert _stages(tmp_path, new) == expected


def test_an_older_config_without_newer_settings_counts_them_as_defaults(tmp_path: Path) -> None:
    src = _source(tmp_path)
    old = orjson.loads((src / "config.json").read_bytes())
    del old["followup"], old["verdict"]["citations"]  # settings a later version added
    (src / "config.json").write_bytes(orjson.dumps(old))
    assert reusable_stages(src, tmp_path / "out", load_config("cpu-fast"), FP) == ALL
    assert reusable_stages(src, tmp_path / "out", load_config("cpu-fast", {"followup": {"enabled": True}}), FP) == ALL[:3]
    old["hyde"]["retired_setting"] = 1
    (src / "config.json").write_bytes(orjson.dumps(old))
    with pytest.raises(UserError, match="unknown config key 'retired_setting'"):
        reusable_stages(src, tmp_path / "out", load_config("cpu-fast"), FP)


def test_a_trust_file_with_other_content_recomputes_retrieval_on(tmp_path: Path) -> None:
    assert _stages(tmp_path, fingerprint={"trust_file": "t" * 64}) == ["hyde", "decompose"]


@pytest.mark.parametrize(("part", "expected"), [
    ({"prompts": {**FP["prompts"], "hyde": "other"}}, []),
    ({"prompts": {**FP["prompts"], "decompose": "other"}}, ["hyde"]),
    ({"prompts": {**FP["prompts"], "followup": "other"}}, ["hyde", "decompose", "retrieval"]),
    ({"prompts": {**FP["prompts"], "verdict": "other"}}, ALL[:-1]),
    ({"models": {**FP["models"], "retrieval_embedder": "sha256:9"}}, ["hyde", "decompose"]),
    ({"models": {**FP["models"], "verdict_llm": "sha256:9"}}, ALL[:-1]),
])
def test_a_changed_prompt_or_model_ends_the_chain(tmp_path: Path, part: dict, expected: list[str]) -> None:
    assert _stages(tmp_path, fingerprint=part) == expected


@pytest.mark.parametrize(("source", "message"), [
    ({"fingerprint": {"claims_file": "d" * 64}}, "another claims file"),
    ({"fingerprint": {"budget_s": 30.0}}, "--budget-s 30.0"),
    ({"fingerprint": {"code": "git:other"}}, "other code (git:other"),
    ({"fingerprint": {"code": None}}, "not recorded (an older sanctuary_local)"),
    ({"fingerprint": {"libraries": "l2"}}, "other library versions"),
])
def test_refused_sources_say_why(tmp_path: Path, source: dict, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        _stages(tmp_path, **source)


def test_not_a_run_directory_or_out_itself(tmp_path: Path) -> None:
    cfg = load_config("cpu-fast")
    with pytest.raises(UserError, match="not a run directory"):
        reusable_stages(tmp_path / "nowhere", tmp_path / "out", cfg, FP)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="config.json is missing"):
        reusable_stages(tmp_path / "empty", tmp_path / "out", cfg, FP)
    src = _source(tmp_path)
    with pytest.raises(UserError, match="--out itself"):
        reusable_stages(src, src, cfg, FP)
    (src / "config.json").write_bytes(b"{broken")
    with pytest.raises(UserError, match="not valid JSON"):
        reusable_stages(src, tmp_path / "out", cfg, FP)


def _hyde(i: int, question: str) -> HydeResult:
    return HydeResult(claim_index=i, provisional_label="Refuted",
                      queries=(Query(claim_index=i, number=0, question=question, answers=("a",)),))


def test_records_are_copied_per_claim_only_on_top_of_the_same_source(tmp_path: Path) -> None:
    src = _source(tmp_path, overrides={"verdict": {"mode": "paper", "citations": True}})
    theirs = StageFile(src / STAGE_FILES["hyde"], HydeResult.from_dict)
    for i in (0, 1, 2):
        theirs.append(i, _hyde(i, f"theirs {i}?"), {"seconds": 4.0})
    out = tmp_path / "out"
    out.mkdir()
    mine = StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict)
    mine.append(1, _hyde(1, "mine 1?"), {"seconds": 9.0})  # computed by this run before (resumed)
    files = {key: StageFile(out / name, HydeResult.from_dict) for key, name in STAGE_FILES.items()}
    files["hyde"] = mine
    copied = reuse_stages(src, out, load_config("cpu-fast"), FP, files, [0, 1, 3])
    assert copied == {"hyde": 1}  # claim 0 only: 1 is this run's own, 3 is not in the source
    assert mine.records[0].queries[0].question == "theirs 0?"
    assert mine.extras[0] == {"seconds": 4.0, "reused_from": str(src.resolve())}
    assert mine.records[1].queries[0].question == "mine 1?"
    reread = StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict)  # persisted
    assert sorted(reread.records) == [0, 1]
    assert reuse_stages(src, out, load_config("cpu-fast"), FP, files, [0, 1, 3]) == {}  # idempotent


# ----------------------------------------------------------- end to end, real model
#: tests/data/tiny_cpu.toml's stage-1 settings (tiny_cpu_trained.toml's too), so the session's
#: reference run is the base.
OVERRIDES = {**TINY_SECTIONS, "verdict": {"prompt": TINY_VERDICT_PROMPT, "sampling": {"max_tokens": 160}}}


def _lines(path: Path) -> dict[int, dict]:
    return {o["claim_index"]: o for o in map(orjson.loads, path.read_bytes().splitlines())}


@pytest.mark.slow
def test_reuse_end_to_end_on_the_real_model(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The base is the session's reference run (conftest.py: tests/data/tiny_cpu_trained.toml on
    the 4 examples, made once and read by other modules too); the what-if runs take claim 1 alone."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install '.[cpu]')")
    from sanctuary_local.io.leaderboard import check_official_rows
    from sanctuary_local.io.predictions import MAX_EVIDENCE
    from sanctuary_local.pipeline import RunOptions, run_pipeline

    def run(out: Path, overrides: dict, reuse: Path | None = None):
        return run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                       profile="cpu-fast", workers=1, quiet=True, overrides=overrides,
                                       claims_range="1:2", reuse_from=reuse))

    base: Path = request.getfixturevalue("reference_run")
    what_if = tmp_path / "label_reask_off"
    summary = run(what_if, {**OVERRIDES, "verdict": {**OVERRIDES["verdict"], "label_reask": ""}}, reuse=base)
    tag = str(base.resolve())
    for name in (STAGE_FILES["hyde"], STAGE_FILES["retrieval"]):
        old, new = _lines(base / name), _lines(what_if / name)
        assert sorted(new) == [1] and sorted(old) == [0, 1, 2, 3]  # the what-if selected claim 1
        for i in new:
            assert new[i]["record"] == old[i]["record"] and new[i]["extra"]["reused_from"] == tag
    verdicts = _lines(what_if / STAGE_FILES["verdict"])
    assert sorted(verdicts) == [1] and not any("reused_from" in v["extra"] for v in verdicts.values())
    assert summary.n_claims == 1 and check_official_rows(what_if / "submission.csv", max_pairs=MAX_EVIDENCE) == []
    # a retrieval change: stage 1 is still the base's, stage 2 is computed anew
    other = tmp_path / "fewer_segments"
    run(other, {**OVERRIDES, "retrieval": {"top_k_segments": 20}}, reuse=base)
    assert all(o["extra"]["reused_from"] == tag for o in _lines(other / STAGE_FILES["hyde"]).values())
    assert not any("reused_from" in o["extra"] for o in _lines(other / STAGE_FILES["retrieval"]).values())
    assert sorted(_lines(other / STAGE_FILES["verdict"])) == [1]


def test_a_claim_whose_store_file_changed_gets_retrieval_anew(tmp_path: Path) -> None:
    from sanctuary_local.records import ClaimEvidence

    src = _source(tmp_path)
    for key, decode in (("hyde", HydeResult.from_dict), ("retrieval", ClaimEvidence.from_dict)):
        theirs = StageFile(src / STAGE_FILES[key], decode)
        for i in (0, 1):
            theirs.append(i, _hyde(i, "q?") if key == "hyde" else ClaimEvidence(i))
    out = tmp_path / "out"
    out.mkdir()
    files = {key: StageFile(out / name, ClaimEvidence.from_dict) for key, name in STAGE_FILES.items()}
    files["hyde"] = StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict)
    now = {**FP, "store": {**FP["store"], "1": "changed"}}
    copied = reuse_stages(src, out, load_config("cpu-fast"), now, files, [0, 1])
    assert copied == {"hyde": 2, "retrieval": 1}  # claim 1's pages changed: its stage 2 is computed anew
    assert sorted(files["retrieval"].records) == [0]


def test_a_torn_source_file_is_read_not_cut(tmp_path: Path) -> None:
    src = _source(tmp_path)
    theirs = StageFile(src / STAGE_FILES["hyde"], HydeResult.from_dict)
    theirs.append(0, _hyde(0, "theirs 0?"))
    with open(theirs.path, "ab") as f:
        f.write(b'{"claim_index": 1, "rec')  # a source run still writing its next line
    before = theirs.path.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    files = {key: StageFile(out / name, HydeResult.from_dict) for key, name in STAGE_FILES.items()}
    assert reuse_stages(src, out, load_config("cpu-fast"), FP, files, [0, 1]) == {"hyde": 1}
    assert theirs.path.read_bytes() == before
