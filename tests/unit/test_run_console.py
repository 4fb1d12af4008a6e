"""What ``run`` prints after the results table: verdicts, flags in words, next steps (issue 31),
and claim texts or URLs holding rich markup printed literally (issue 27, defect 5b)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from sanctuary_local.cli.run_cmd import print_verdicts
from sanctuary_local.flag_help import FLAG_TEXT, UNKNOWN_TEXT, explain, legend
from sanctuary_local.flag_help import DEGRADING
from sanctuary_local.records import EvidenceItem, Prediction
from sanctuary_local.run.options import RunSummary

REPO = Path(__file__).resolve().parents[2]

#: Flags the stages emit today (grep of sanctuary_local/), each must read as a sentence.
EMITTED = (
    "hyde_truncated", "hyde_repaired", "hyde_line_fallback", "hyde_claim_fallback", "hyde_no_label",
    "hyde_placeholders_dropped", "hyde_clamped", "hyde_few_questions", "hyde_llm_error: RuntimeError: x",
    "hyde_parse_error: x", "no_documents", "no_queries", "empty_documents:1", "no_hits:q1", "no_snippets:q2",
    "store_missing", "store_problems:3", "retrieval_error: OSError: x", "trust_dropped:2", "trust_reweighted:1",
    "evidence_placeholder:below_threshold", "evidence_placeholder:no_answer", "verdict_label_inferred",
    "verdict_label_fallback", "verdict_label_reasked", "verdict_llm_error: x", "verdict_truncated",
    "verdict_trimmed", "suspected_injection",
    "citations_reasked", "citation_violations:2", "citations_missing", "followup_questions:3", "followup_found:1",
    "followup_unusable", "followup_duplicates_dropped:1", "followup_llm_error: x", "followup_parse_error: x",
    "followup_retrieval_error: x", "decompose_fallback", "decompose_line_fallback", "decompose_clamped",
    "decompose_added:1", "decompose_not_exhaustive", "decompose_llm_error: x", "decompose_parse_error: x",
    "components:3", "components_reasked", "components_unparsed", "budget_level:2",
)


def _summary(out: Path, preds: list[Prediction]) -> RunSummary:
    return RunSummary(out_dir=out, n_claims=len(preds), n_degraded=0, degraded_reasons={}, label_counts={},
                      timings={}, predictions=preds)


def _print(summary: RunSummary, claims: Path) -> str:
    buf = io.StringIO()
    print_verdicts(summary, claims, Console(file=buf, width=120, color_system=None))
    return buf.getvalue()


def test_every_emitted_flag_has_a_sentence() -> None:
    unexplained = [f for f in EMITTED if explain(f) == UNKNOWN_TEXT]
    assert not unexplained, f"add them to FLAG_TEXT in sanctuary_local/flag_help.py: {unexplained}"
    assert all(kind in FLAG_TEXT for kind in DEGRADING)


def test_legend_once_per_kind_with_short_values() -> None:
    rows = legend(["no_snippets:q2", "hyde_truncated", "no_snippets:q3", "no_snippets:q2",
                   "hyde_llm_error: RuntimeError: a long message from the backend", "brand_new_flag:7"])
    assert [k for k, _, _ in rows] == ["no_snippets", "hyde_truncated", "hyde_llm_error", "brand_new_flag"]
    assert rows[0][1] == ["q2", "q3"] and rows[2][1] == []  # long error text is not repeated
    assert rows[3][2] == UNKNOWN_TEXT
    assert "fewer questions were asked" in rows[1][2]


def test_markup_in_claims_and_urls_is_printed_literally(tmp_path: Path) -> None:
    claim = "Minister said [/x] and [bold]not bold[/bold] [link=http://e.vil]x[/link]"
    url = "https://example.org/a[/]b?q=[red]"
    pred = Prediction(claim_index=0, claim_id="[/c]", claim=claim, label="Refuted",
                      evidence=(EvidenceItem(question="q", answer="a", url=url),),
                      flags=("no_snippets:q2", "store_missing", "[/f]:1"))
    text = _print(_summary(tmp_path / "run", [pred]), tmp_path / "missing-claims.json")
    assert claim in text and url in text and "[/c]" in text and "[/f]" in text


def test_flags_explained_and_next_steps(tmp_path: Path) -> None:
    preds = [
        Prediction(claim_index=1, claim_id="1", claim="A", label="Supported",
                   flags=("hyde_truncated", "empty_documents:1", "no_snippets:q2", "no_snippets:q3")),
        Prediction(claim_index=2, claim_id="2", claim="B", label="Refuted", flags=("no_snippets:q1", "suspected_injection")),
    ]
    out = tmp_path / "run dir"
    text = _print(_summary(out, preds), REPO / "examples" / "claims.json")
    assert text.count("no_snippets (q2, q3, q1): ") == 1
    assert "hyde_truncated: question generation hit its token limit; fewer questions were asked" in text
    assert "suspected_injection: evidence contains instruction-like text aimed at the model" in text
    assert f"sanctuary-local report '{out}'" in text
    assert str(out / "report" / "index.html") in text
    # examples/claims.json has gold labels: the eval command, for the claims this run had
    assert f"sanctuary-local eval --pred '{out}' --gold {REPO / 'examples' / 'claims.json'} --claims-range 1:3" in text


def test_no_eval_step_without_gold_labels(tmp_path: Path) -> None:
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps([{"claim": "A claim without a label."}]), "utf-8")
    pred = Prediction(claim_index=0, claim_id="0", claim="A", label="Refuted")
    text = _print(_summary(tmp_path, [pred]), claims)
    assert "sanctuary-local report" in text and "sanctuary-local eval" not in text
    assert "What the flags mean" not in text  # no flags, no legend


def test_trained_verdicts_show_their_label_probabilities_and_the_gold_count(tmp_path: Path) -> None:
    """A trained verdict prints its label probabilities, best first; with gold labels in the
    claims file each verdict says whether it matches, and a count closes the list."""
    scores = {"labels": ["Supported", "Refuted", "Not Enough Evidence", "Conflicting Evidence/Cherrypicking"],
              "probabilities": [0.1, 0.6, 0.2, 0.1], "calibrated": True}
    preds = [  # examples/claims.json: claim 0 is Supported, claim 1 Refuted
        Prediction(claim_index=0, claim_id="0", claim="A", label="Refuted", meta={"label_scores": scores}),
        Prediction(claim_index=1, claim_id="1", claim="B", label="Refuted"),
    ]
    text = _print(_summary(tmp_path, preds), REPO / "examples" / "claims.json")
    assert ("label probabilities (trained model, label by the fitted decision rule): Refuted 0.60, "
            "Not Enough Evidence 0.20, Supported 0.10") in text
    assert text.count("label probabilities") == 1  # a label read from text has none to show
    assert "(gold: Supported)" in text and "(gold: same)" in text
    assert "1 of 2 verdicts match the gold labels" in text


def test_an_uncertain_verdict_names_its_two_likeliest_labels_and_the_threshold(tmp_path: Path) -> None:
    """Under the model's confidence threshold a verdict is marked uncertain with its two likeliest
    labels; the threshold is printed to three places, so a probability just under it (0.4231 shown
    as 0.42) is not shown equal to it."""
    labels = ["Supported", "Refuted", "Not Enough Evidence", "Conflicting Evidence/Cherrypicking"]
    unsure = {"labels": labels, "probabilities": [0.26, 0.4231, 0.14, 0.1769], "confident": False,
              "confidence_threshold": 0.423471, "runner_up": "Supported"}
    sure = {**unsure, "probabilities": [0.14, 0.46, 0.18, 0.22], "confident": True, "runner_up": "Conflicting Evidence/Cherrypicking"}
    preds = [Prediction(claim_index=0, claim_id="0", claim="A", label="Refuted", meta={"label_scores": unsure}),
             Prediction(claim_index=1, claim_id="1", claim="B", label="Refuted", meta={"label_scores": sure})]
    text = " ".join(_print(_summary(tmp_path, preds), REPO / "examples" / "claims.json").split())
    assert "uncertain: Refuted 0.42 or Supported 0.26" in text
    assert "Not Enough Evidence 0.14; uncertain (threshold 0.423)" in text
    assert "Supported 0.14; confident (threshold 0.423)" in text
    assert text.count("uncertain:") == 1  # the confident verdict has no uncertain line
