"""The run fingerprint (issue 29): what decides results changes it, execution settings do
not; a changed store page, prompt or code is refused on resume; ``--force`` keeps the
completed claims; a resumed run under ``--budget-s`` plans with the budget left to it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import fields, is_dataclass
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from sanctuary_local.config.settings import Config, load_config
from sanctuary_local.errors import UserError
from sanctuary_local.run.budget import BudgetPlanner, resume_planner
from sanctuary_local.run.fingerprint import (
    EXECUTION_SETTINGS, HashCache, code_identity, config_identity, is_execution_setting, prompt_identities,
    store_identity,
)
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import HydeResult, Prediction, Query
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import STATE_FILE, StageFile, check_state, run_identity

ROOT = Path(__file__).resolve().parents[2]


def _keys(obj: object, prefix: str = "") -> list[str]:
    """Every dotted config key of a dataclass tree."""
    out = []
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        out += _keys(value, f"{prefix}{f.name}.") if is_dataclass(value) else [f"{prefix}{f.name}"]
    return out


def _set(cfg: Config, dotted: str, value: object) -> None:
    *path, last = dotted.split(".")
    node = cfg
    for p in path:
        node = getattr(node, p)
    setattr(node, last, value)


def _changed_value(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 3
    return f"{value or ''}-changed"


# ----------------------------------------------------------- execution settings
def test_execution_settings_name_real_keys_and_only_they_keep_the_identity() -> None:
    keys = _keys(Config())
    listed = [k for k in keys if is_execution_setting(k)]
    for pattern in EXECUTION_SETTINGS:  # every entry names at least one existing key
        assert any(is_execution_setting(k) and all(p in ("*", q) for p, q in zip(pattern.split("."), k.split(".")))
                   for k in keys), pattern
    assert {"retrieval.workers", "hyde.llm.n_threads", "verdict.llm.n_threads", "models_dir"} <= set(listed)
    base = config_identity(load_config("cpu-fast"))
    for key in keys:
        cfg = load_config("cpu-fast")
        *path, last = key.split(".")
        node = cfg
        for p in path:
            node = getattr(node, p)
        _set(cfg, key, _changed_value(getattr(node, last)))
        assert (config_identity(cfg) == base) == (key in listed), key


def test_changed_worker_or_thread_count_resumes(tmp_path: Path) -> None:
    store = KnowledgeStore(ROOT / "examples" / "store")
    out = tmp_path / "run"

    def identity(workers: int, threads: int | None) -> dict:
        cfg = load_config("cpu-fast", {"retrieval": {"workers": workers}, "hyde": {"llm": {"n_threads": threads}}})
        return run_identity(out, cfg, "c" * 64, store, [0, 1], SimpleNamespace(budget_s=None, force=False, restart=False))

    first = identity(1, None)
    StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict).append(0, _hyde(0))
    second = identity(7, 2)  # no refusal, nothing discarded
    assert second["fingerprint"] == first["fingerprint"]
    assert list(StageFile(out / STAGE_FILES["hyde"], HydeResult.from_dict).records) == [0]
    with pytest.raises(UserError, match=r"changed: config\b"):
        run_identity(out, load_config("cpu-fast", {"retrieval": {"top_k_segments": 3}}), "c" * 64, store, [0, 1],
                     SimpleNamespace(budget_s=None, force=False, restart=False))


# ------------------------------------------------------------------ the store
def test_changed_store_content_under_the_same_path_is_refused(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    shutil.copytree(ROOT / "examples" / "store", store_dir)
    out = tmp_path / "run"
    cfg = load_config("cpu-fast")
    opts = SimpleNamespace(budget_s=None, force=False, restart=False)
    run_identity(out, cfg, "c" * 64, KnowledgeStore(store_dir), [0, 1], opts)
    run_identity(out, cfg, "c" * 64, KnowledgeStore(store_dir), [0, 1, 2, 3], opts)  # a larger range resumes
    page = store_dir / "2.json"
    data = page.read_bytes()
    page.write_bytes(data.replace(b"a", b"b", 1))  # same path, same size, other content
    assert len(page.read_bytes()) == len(data)
    with pytest.raises(UserError, match=r"changed: store \(claims 2\)"):
        run_identity(out, cfg, "c" * 64, KnowledgeStore(store_dir), [0, 1, 2], opts)
    # claims 0-1 alone did not change: resuming them is fine
    run_identity(out, cfg, "c" * 64, KnowledgeStore(store_dir), [0, 1], opts)


def test_store_hashes_are_cached_by_path_size_and_mtime(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    shutil.copytree(ROOT / "examples" / "store", store_dir)
    cache = HashCache(tmp_path / "hash_cache.json")
    first = store_identity(KnowledgeStore(store_dir), [0, 1, 9], cache)
    assert first["9"] == "missing" and first["0"] != first["1"]
    cache.save()
    again = HashCache(tmp_path / "hash_cache.json")
    assert len(orjson.loads((tmp_path / "hash_cache.json").read_bytes())) == 2
    assert store_identity(KnowledgeStore(store_dir), [0, 1, 9], again) == first
    assert not again._dirty  # answered from the cache: nothing hashed


def test_a_zip_store_is_identified_by_its_members(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "store.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.write(ROOT / "examples" / "store" / "0.json", "out/0.json")
        z.write(ROOT / "examples" / "store" / "1.json", "out/1.json")
    ident = store_identity(KnowledgeStore(path), [0, 1, 2], HashCache(None))
    assert ident["0"].startswith("crc32:") and ident["0"] != ident["1"] and ident["2"] == "missing"


# ----------------------------------------------------------------- the prompts
def test_changed_prompt_or_its_settings_changes_that_stage_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sanctuary_local import prompts

    cfg = load_config("cpu-fast")
    base = prompt_identities(cfg)
    assert set(base) == {"hyde", "decompose", "followup", "verdict"}
    other = prompt_identities(load_config("cpu-fast", {"hyde": {"min_questions": 2}}))
    assert other["hyde"] != base["hyde"] and other["verdict"] == base["verdict"]  # the HyDE settings count
    renamed = prompt_identities(load_config("cpu-fast", {"decompose": {"check_prompt": "decompose.txt"}}))
    assert renamed["decompose"] != base["decompose"] and renamed["hyde"] == base["hyde"]
    real = prompts.load_prompt

    def edited(name: str) -> str:
        return real(name) + ("\nOne more rule." if name == "followup.txt" else "")

    monkeypatch.setattr(prompts, "load_prompt", edited)
    changed = prompt_identities(cfg)
    assert changed["followup"] != base["followup"] and {k: v for k, v in changed.items() if k != "followup"} == {
        k: v for k, v in base.items() if k != "followup"}
    # a resume refuses it, naming the stage
    check_state(tmp_path, {"prompts": base}, force=False)
    with pytest.raises(UserError, match=r"changed: prompts\.followup"):
        check_state(tmp_path, {"prompts": changed}, force=False)


def test_a_setting_added_later_keeps_older_runs_identities_at_its_neutral_value() -> None:
    # repetition_penalty (issue 26) came after runs were made: at 1.0 every identity is that of
    # a config without the key (an older run's config.json), at any other value it differs.
    from sanctuary_local.run.fingerprint import result_settings

    cfg = load_config("cpu-fast", {"verdict": {"mode": "paper"}})
    older = cfg.to_dict()
    for section in ("hyde", "verdict", "decompose", "followup"):
        del older[section]["sampling"]["repetition_penalty"]
    assert result_settings(cfg.to_dict()) == result_settings(older)
    base, base_prompts = config_identity(cfg), prompt_identities(cfg)
    cfg.verdict.sampling.repetition_penalty = 1.1
    changed = prompt_identities(cfg)
    assert config_identity(cfg) != base and changed["verdict"] != base_prompts["verdict"] and changed["hyde"] == base_prompts["hyde"]


def test_vllm_enforce_eager_is_an_engine_argument_and_part_of_a_run_identity_only_when_on() -> None:
    # enforce_eager (2026-11-28, CI's vLLM test) came after runs were made: off, an older
    # run's config (without the key) has the same identity and vLLM gets no such argument;
    # on, vLLM runs without torch.compile (other numerics), so the identity changes.
    from pathlib import Path

    from sanctuary_local.llm.vllm_backend import engine_kwargs
    from sanctuary_local.run.fingerprint import result_settings

    cfg = load_config("paper")
    older = cfg.to_dict()
    for section in ("hyde", "verdict"):  # the sections with an llm of their own
        del older[section]["llm"]["enforce_eager"]
    assert result_settings(cfg.to_dict()) == result_settings(older)
    assert "enforce_eager" not in engine_kwargs(cfg.hyde.llm, Path("m"))
    base = config_identity(cfg)
    cfg = load_config("paper", {"hyde": {"llm": {"enforce_eager": True}}})
    assert engine_kwargs(cfg.hyde.llm, Path("m"))["enforce_eager"] is True
    assert "enforce_eager" not in engine_kwargs(cfg.verdict.llm, Path("m"))
    assert config_identity(cfg) != base


def test_the_retired_verdict_modes_settings_are_refused_but_older_runs_still_read() -> None:
    # "scored" and "stance" were retired with their settings: naming one in a profile or --set is
    # an error that says so; a run's config.json from before them reads without them.
    from sanctuary_local.config.settings import RETIRED_KEYS

    with pytest.raises(UserError, match=r"verdict\.calibration was removed.*'scored' verdict mode was retired"):
        load_config("paper", {"verdict": {"calibration": "cpu_scored.json"}})
    with pytest.raises(UserError, match=r"verdict\.mode = 'stance'.*retired.*cd0fd52"):
        load_config("paper", {"verdict": {"mode": "stance"}})
    cfg = load_config("paper")
    older = cfg.to_dict()
    older["verdict"].update({k.split(".")[1]: 0 for k in RETIRED_KEYS})
    again = Config.from_dict(older)
    assert again.to_dict() == cfg.to_dict() and config_identity(again) == config_identity(cfg)


# -------------------------------------------------------------------- the code
def _package(root: Path) -> Path:
    pkg = root / "pkg"
    (pkg / "prompts").mkdir(parents=True)
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "prompts" / "p.txt").write_text("Say hi.\n")
    return pkg


def test_code_hash_without_git_covers_the_python_files(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    first = code_identity(pkg)
    assert first["id"].startswith("files:")
    (pkg / "a.py").write_text("X = 2\n")
    second = code_identity(pkg)
    assert second["id"] != first["id"]
    (pkg / "prompts" / "p.txt").write_text("Say hello.\n")  # a prompt is fingerprinted per stage, not as code
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0")
    assert code_identity(pkg) == second


def test_code_hash_in_git_is_the_package_tree_plus_uncommitted_changes(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    pkg = _package(tmp_path)
    (tmp_path / "README.md").write_text("docs\n")

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    clean = code_identity(pkg)
    assert clean["id"].startswith("git:") and not clean["dirty"] and len(clean["git_commit"]) == 40
    (pkg / "a.py").write_text("X = 2\n")
    dirty = code_identity(pkg)
    assert dirty["dirty"] and dirty["id"].startswith(clean["id"] + "+dirty:")
    (pkg / "new.py").write_text("Y = 1\n")  # untracked files count too
    dirtier = code_identity(pkg)
    assert dirtier["id"] != dirty["id"]
    (pkg / "prompts" / "p.txt").write_text("Say hello.\n")  # prompts are not code (see prompt_identities)
    assert code_identity(pkg) == dirtier
    git("add", ".")
    git("commit", "-qm", "two")
    committed = code_identity(pkg)
    assert not committed["dirty"] and committed["id"] not in (clean["id"], dirty["id"])
    (tmp_path / "README.md").write_text("other docs\n")  # outside the package, or not Python: same code
    (pkg / "prompts" / "p.txt").write_text("Say hi again.\n")
    git("commit", "-qam", "docs")
    assert code_identity(pkg)["id"] == committed["id"]
    # a resume refuses other code
    out = tmp_path / "run"
    check_state(out, {"code": clean["id"]}, force=False)
    with pytest.raises(UserError, match=r"changed: code"):
        check_state(out, {"code": committed["id"]}, force=False)


# ------------------------------------------------------- --force and --restart
def _hyde(i: int) -> HydeResult:
    return HydeResult(claim_index=i, provisional_label="Refuted", queries=(Query(i, 0, f"q{i}?", ("a",)),))


def test_force_keeps_completed_claims_and_restart_discards_all(tmp_path: Path) -> None:
    check_state(tmp_path, {"config": "a"}, force=False)
    hyde = StageFile(tmp_path / STAGE_FILES["hyde"], HydeResult.from_dict)
    verdict = StageFile(tmp_path / STAGE_FILES["verdict"], Prediction.from_dict)
    for i in (0, 1, 2):
        hyde.append(i, _hyde(i))
    verdict.append(1, Prediction(claim_index=1, claim_id="1", claim="c", label="Refuted"))
    with pytest.raises(UserError, match="keep its 1 completed claims"):
        check_state(tmp_path, {"config": "b"}, force=False)
    assert sorted(StageFile(tmp_path / STAGE_FILES["hyde"], HydeResult.from_dict).records) == [0, 1, 2]
    check_state(tmp_path, {"config": "b"}, force=True)
    assert list(StageFile(tmp_path / STAGE_FILES["hyde"], HydeResult.from_dict).records) == [1]
    assert list(StageFile(tmp_path / STAGE_FILES["verdict"], Prediction.from_dict).records) == [1]
    state = orjson.loads((tmp_path / STATE_FILE).read_bytes())
    assert state["fingerprint"] == {"config": "b"}
    assert state["history"] == [{"fingerprint": {"config": "a"}, "changed": ["config"], "kept_claims": [1]}]
    check_state(tmp_path, {"config": "b"}, force=False)  # the new fingerprint resumes
    check_state(tmp_path, {"config": "b"}, force=False, restart=True)
    assert not any((tmp_path / name).exists() for name in STAGE_FILES.values())
    assert "history" not in orjson.loads((tmp_path / STATE_FILE).read_bytes())


# ------------------------------------------------------------ budget on resume
def test_a_resumed_run_plans_with_the_budget_left(tmp_path: Path) -> None:
    cfg = load_config("cpu-fast")
    n = 10
    files = {name: StageFile(tmp_path / f"{name}.jsonl", HydeResult.from_dict) for name in ("hyde", "retrieval", "verdict")}
    for i in range(5):  # the first attempt finished claims 0-4 at level 1, then was killed
        for sf in files.values():
            sf.append(i, _hyde(i), {"seconds": 1.0, "budget_level": 1})
    per_claim = {"hyde": 6.0, "retrieval": 2.0, "verdict": 10.0}
    earlier = {"wall_s": 90.0, "stages": {k: {"total_s": v * 5, "n": 5} for k, v in per_claim.items()}}

    naive = BudgetPlanner(cfg, 10.0, n)  # what a resumed run used to see: 0 s spent, nothing measured
    assert naive.choose(0.5, 0, {}, ("hyde", "retrieval", "verdict"), n - 2) == 0
    planner = BudgetPlanner(cfg, 10.0, n)
    resume_planner(planner, earlier, files, list(range(n)))
    assert planner.prior_s == 90.0 and planner.prior_per_claim == per_claim
    assert planner.pending == {"hyde": 5, "retrieval": 5, "verdict": 5} and planner.level == 1
    level = planner.choose(0.5, 0, {}, ("hyde", "retrieval", "verdict"), n - 2)
    assert level > 1  # 90 s of 100 spent, 5 claims of 18 s left: degrade
    assert planner.projected_s is not None and planner.projected_s > 9.0
    roomy = BudgetPlanner(cfg, 30.0, n)
    resume_planner(roomy, earlier, files, list(range(n)))
    assert roomy.choose(0.5, 0, {}, ("hyde", "retrieval", "verdict"), n - 2) == 1  # fits: stays where it was


def test_the_manifest_is_written_at_the_start_and_keeps_earlier_attempts(tmp_path: Path) -> None:
    from sanctuary_local.run.options import RunOptions
    from sanctuary_local.run.reporting import RunReporter

    out = tmp_path / "run"
    out.mkdir()
    earlier = {"attempts": [{"wall_s": 40.0, "status": "running", "stages": {"hyde": {"total_s": 30.0, "n": 3}}}]}
    (out / "manifest.json").write_bytes(orjson.dumps(earlier))
    opts = RunOptions(claims=ROOT / "examples" / "claims.json", store=ROOT / "examples" / "store", out=out, quiet=True)
    reporter = RunReporter(out, load_config("cpu-fast"), opts, quiet=True,
                           identity={"fingerprint": {"config": "x", "code": "git:1"}, "code": {"id": "git:1"}})
    try:
        manifest = orjson.loads((out / "manifest.json").read_bytes())
        assert manifest["status"] == "running" and manifest["code"] == {"id": "git:1"}
        assert manifest["fingerprint"]["config"] == "x" and len(manifest["attempts"]) == 2
        assert set(manifest["prompts"]) == {"hyde", "decompose", "followup", "verdict"}
        assert reporter.earlier_attempts() == {"wall_s": 40.0, "stages": {"hyde": {"total_s": 30.0, "n": 3}}}
        with reporter.stage("hyde", 1) as st:
            st.advance()
        after = orjson.loads((out / "manifest.json").read_bytes())
        assert after["attempts"][-1]["stages"]["hyde"]["n"] == 1  # updated as the stage finished
    finally:
        reporter.close_progress()


# ------------------------------------------------------------------ the models
def test_models_are_identified_by_content_not_by_path(tmp_path: Path) -> None:
    from sanctuary_local.run.fingerprint import model_identities

    a, b = tmp_path / "a.gguf", tmp_path / "moved" / "b.gguf"
    a.write_bytes(b"weights v1")
    b.parent.mkdir()
    b.write_bytes(b"weights v1")

    def cfg(path: Path) -> Config:
        return load_config("cpu-fast", {"verdict": {"llm": {"model": str(path)}}})

    cache = HashCache(None)
    assert model_identities(cfg(a), cache)["verdict_llm"] == model_identities(cfg(b), cache)["verdict_llm"]
    assert config_identity(cfg(a)) == config_identity(cfg(b))  # a moved model resumes
    b.write_bytes(b"weights v2, longer")
    assert model_identities(cfg(a), cache)["verdict_llm"] != model_identities(cfg(b), cache)["verdict_llm"]
    server = load_config("cpu-fast", {"verdict": {"llm": {"backend": "openai_http", "model": "qwen"}}})
    assert model_identities(server, cache)["verdict_llm"] == "server:qwen"


def test_every_switch_takes_true_or_false_only(tmp_path: Path) -> None:
    # --set parses values as TOML, so "yes" or "True" arrive as strings, which are truthy: every
    # bool setting refuses anything but true/false, naming the key and where it came from.
    for overrides, key in (({"hyde": {"llm": {"enforce_eager": "yes"}}}, "hyde.llm.enforce_eager"),
                           ({"verdict": {"llm": {"prefix_cache": 1}}}, "verdict.llm.prefix_cache"),
                           ({"retrieval": {"sts": {"trust_remote_code": "True"}}}, "retrieval.sts.trust_remote_code")):
        with pytest.raises(UserError, match=rf"^overrides\.[a-z.]+: {key} must be true or false, got "):
            load_config("cpu-fast", overrides)
    profile = tmp_path / "p.toml"
    profile.write_text('base = "cpu-fast"\n[hyde.llm]\nenable_prefix_caching = 1\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"p\.toml\.hyde\.llm: hyde\.llm\.enable_prefix_caching must be true or false, got 1"):
        load_config(str(profile))
    assert load_config("cpu-fast", {"hyde": {"llm": {"enforce_eager": True}}}).hyde.llm.enforce_eager is True


def test_a_trained_models_identity_covers_what_loading_reads_from_its_card(tmp_path: Path) -> None:
    """The card is outside the files' hash, and loading reads answer_words, answer_focus and
    the kind from it: an edited setting changed every prediction while a resumed run kept
    the claims it had labelled before (audit, 2026-11-29)."""
    import json

    from sanctuary_local.run.fingerprint import _trained_identity
    from sanctuary_local.verdict_model.store import CARD, resolve

    model = tmp_path / "model"
    shutil.copytree(resolve("packaged:verdict-tfidf"), model)
    before = _trained_identity(str(model))
    card = json.loads((model / CARD).read_text())
    card["wall_time_s"] = 1.0  # not read by loading: the same identity
    (model / CARD).write_text(json.dumps(card))
    assert _trained_identity(str(model)) == before
    card["settings"]["answer_words"] = 12
    (model / CARD).write_text(json.dumps(card))
    assert _trained_identity(str(model)) != before
