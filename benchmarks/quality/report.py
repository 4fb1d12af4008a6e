"""The quality harness's results written out (``quality/e2e.py``): the markdown tables, the
per-result and comparison charts, and ``quality_e2e_<label>.{json,md,png}``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from benchmarks.quality.stats import RATE_FLAGS

# ---------------------------------------------------------------------------- report
ROW_TITLES = {"system": "system (stages 1-3)", "majority_baseline": "majority class (Refuted, no evidence)",
              "system_on_oracle_claims": "system, on the oracle row's claims only",
              "retrieval_only": "retrieval only (stage-1 label, stage 1+2 evidence)",
              "oracle_evidence": "oracle evidence (stage 3 on gold QA)"}


def _f(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def source_text(res: dict[str, Any]) -> str:
    """Where the evidence came from, in words (results made before it was recorded: the store)."""
    src = res.get("evidence_source") or {"kind": "surrogate store"}
    if src["kind"] != "corpus index":
        return "surrogate knowledge store"
    return (f"corpus index `{src['path']}` ({src['generation']}: {src['documents']:,} documents, "
            f"{src['segments']:,} segments, {src['text_mb']} MB), searched for every claim")


def to_markdown(res: dict[str, Any]) -> str:
    lines = [f"# Quality, end to end: {res['label']}", "",
             f"Profile `{res['profile']}`{' with ' + ', '.join(res['overrides']) if res['overrides'] else ''}, "
             f"AVeriTeC dev claims {res['indices']} ({res['n_claims']} claims), {source_text(res)}. "
             f"Models: {', '.join(f'{k}={v}' for k, v in res['models'].items() if v)}. "
             f"{res['machine']['cpus']} CPUs, load average at the end {res['machine']['loadavg_at_end']}; {res['date']}.", "",
             "| row | accuracy | macro-F1 | Q-only METEOR | Q+A METEOR | AVeriTeC @0.25 |", "|---|---|---|---|---|---|"]
    for key, row in res["rows"].items():
        title = ROW_TITLES.get(key, key) + (f" ({row['n']} claims)" if row["n"] != res["n_claims"] else "")
        lines.append(f"| {title} | {_f(row['accuracy'])} | {_f(row['macro_f1'])} | {_f(row['q_only'])} | "
                     f"{_f(row['qa'])} | {_f(row['averitec_0.25'])} |")
    sysrow = res["rows"]["system"]
    if res.get("budget_levels"):
        how = f"`--budget-s {res['budget_s']:g}`" if res.get("budget_s") else "a latency budget (`run --budget-s`)"
        lines += ["", f"Run with {how}: claims per degradation level (`budget.py`; the highest level of a "
                  f"claim's stages): {res['budget_levels']}."]
    lines += ["", "The oracle row's evidence is the gold QA itself, so its METEOR is not shown and its AVeriTeC score "
              "equals its accuracy.", "",
              "## System: per class", "", "| class | precision | recall | F1 | gold support |", "|---|---|---|---|---|"]
    for cls, s in sysrow["per_class"].items():
        lines.append(f"| {cls} | {s['precision']:.3f} | {s['recall']:.3f} | {s['f1']:.3f} | {s['support']} |")
    labels = list(sysrow["per_class"])
    short = [lbl.split("/")[0].replace("Not Enough Evidence", "NEE") for lbl in labels]
    lines += ["", "Confusion (rows gold, columns predicted):", "", "| gold \\ pred | " + " | ".join(short) + " |",
              "|---" * (len(labels) + 1) + "|"]
    lines += [f"| {s} | " + " | ".join(str(x) for x in row) + " |" for s, row in zip(short, sysrow["confusion"])]
    lines += ["", f"Predicted labels: {sysrow['pred_label_counts']}", "", "## Seconds per claim per stage", "",
              "| stage 1 (HyDE) | stage 2 (retrieval) | stage 3 (verdict) | oracle stage 3 |", "|---|---|---|---|",
              f"| {_f(res['stage_s_per_claim'].get('hyde'))} | {_f(res['stage_s_per_claim'].get('retrieval'))} | "
              f"{_f(res['stage_s_per_claim'].get('verdict'))} | {_f(res['rows'].get('oracle_evidence', {}).get('verdict_s_per_claim'))} |",
              *(["", f"Follow-up round (questions + retrieval): {_f(res['stage_s_per_claim'].get('followup'))} s/claim."]
                if res['stage_s_per_claim'].get('followup') is not None else []),
              *(["", f"Decomposition (split + checks): {_f(res['stage_s_per_claim'].get('decompose'))} s/claim."]
                if res['stage_s_per_claim'].get('decompose') is not None else []),
              "", *usage_markdown([res]), *citations_markdown(res), *modes_markdown(res),
              "", "## Flag rates (share of claims)", "", "| flag | system | oracle |", "|---|---|---|"]
    orates = res["rows"].get("oracle_evidence", {}).get("flag_rates", {})
    lines += [f"| {f} | {r:.3f} | {_f(orates.get(f))} |" for f, r in res["flag_rates"].items()]
    lines += ["", "Command: `python benchmarks/quality/e2e.py " + " ".join(res.get("argv", [])) + "`", ""]
    return "\n".join(lines)


def write_png(results: list[dict[str, Any]], path: Path) -> Path:
    """Bars of accuracy / macro-F1 / AVeriTeC@0.25 per row (and per result when comparing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = ("accuracy", "macro_f1", "averitec_0.25")
    bars = [(f"{r['label']}: {k}" if len(results) > 1 else ROW_TITLES.get(k, k), row)
            for r in results for k, row in r["rows"].items()]
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.55 * len(bars)), dpi=100)
    y = np.arange(len(bars))
    for j, m in enumerate(metrics):
        ax.barh(y + (j - 1) * 0.26, [row[m] for _, row in bars], height=0.26, label=m)
    ax.set_yticks(y, [name for name, _ in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("quality, end to end: " + ", ".join(f"{r['label']} (claims {r['indices']})" for r in results), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_confusion_png(res: dict[str, Any], path: Path) -> Path | None:
    """Per-label confusion matrices (rows gold, columns predicted) of the system row and,
    when it ran, the oracle-evidence row; None when the result holds no confusion."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from sanctuary_local.records import LABELS

    rows = [(k, r) for k, r in res["rows"].items() if k in ("system", "oracle") and r.get("confusion")]
    if not rows:
        return None
    short = ["Supported", "Refuted", "NEE", "Conflicting/\nCherrypicking"]
    fig, axes = plt.subplots(1, len(rows), figsize=(5.2 * len(rows), 4.6), dpi=100, squeeze=False)
    for ax, (key, r) in zip(axes[0], rows):
        m = np.array(r["confusion"])
        ax.imshow(m, cmap="Blues")
        for i in range(len(LABELS)):
            for j in range(len(LABELS)):
                ax.text(j, i, str(m[i, j]), ha="center", va="center", color="white" if m[i, j] > m.max() / 2 else "black")
        ax.set_xticks(range(len(LABELS)), short, fontsize=8)
        ax.set_yticks(range(len(LABELS)), short, fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
        ax.set_title(f"{ROW_TITLES.get(key, key)}\nacc {r['accuracy']:.3f}, macro-F1 {r['macro_f1']:.3f}", fontsize=9)
    fig.suptitle(f"{res['label']}: claims {res['indices']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


#: The optional modes' stats tables: result key, title, (column title, stat key) pairs.
MODE_TABLES = (
    ("followup", "Follow-up round (followup.enabled)",
     (("claims", "claims"), ("share asked", "claims_asked"), ("questions per asked claim", "questions_per_asked_claim"),
      ("share of questions that found a snippet", "questions_found"),
      ("completion tokens per asked claim", "completion_tokens_per_asked_claim"))),
    ("decomposition", "Decomposition (decompose.enabled)",
     (("claims", "claims"), ("share split in parts", "split"), ("parts per split claim", "parts_per_split_claim"),
      ("share where the AND decided", "and_decided"), ("share where it changed the model's label", "and_overrode"))),
)


def modes_markdown(res: dict[str, Any]) -> list[str]:
    """One small table per optional mode that ran (results without it: nothing)."""
    lines: list[str] = []
    for key, title, cols in MODE_TABLES:
        stats = res.get(key)
        if stats:
            lines += ["", f"## {title}", "", "| " + " | ".join(c for c, _ in cols) + " |", "|---" * len(cols) + "|",
                      "| " + " | ".join(_f(stats[k]) for _, k in cols) + " |"]
    return lines


def citations_markdown(res: dict[str, Any]) -> list[str]:
    c = res.get("citations") or {}
    if c.get("validity_before") is None:
        return []
    return ["", "## Citations (verdict.citations)", "", "| valid citations before the re-ask | after | clean verdicts "
            "before | after | verdicts re-asked | verdicts with a valid citation |", "|---|---|---|---|---|---|",
            f"| {_f(c['validity_before'])} | {_f(c['validity_after'])} | {_f(c.get('clean_before'))} | "
            f"{_f(c.get('clean_after'))} | {_f(c['reasked'])} | {_f(c['verdicts_with_valid_citation'])} |"]


def usage_markdown(results: list[dict[str, Any]]) -> list[str]:
    """The LLM stages' token accounting (results made before it existed have none: skipped)."""
    rows = [(r["label"], st, u) for r in results for st, u in (r.get("llm_usage") or {}).items() if u]
    if not rows:
        return []
    lines = ["## LLM tokens per claim and throughput", "",
             "Prefill saved = prompt tokens whose KV cache was reused from the previous request "
             "(the shared instructions and few-shot prefix); tokens/s over the generation seconds.", "",
             "| result | stage | prompt tokens | prefill saved | completion tokens | tokens/s in | tokens/s out |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {lbl} | {st} | {u['prompt_tokens_per_claim']} | {u['prefill_saved_per_claim']} | "
              f"{u['completion_tokens_per_claim']} | {u['tokens_per_s_in']} | {u['tokens_per_s_out']} |" for lbl, st, u in rows]
    return lines


def compare_markdown(results: list[dict[str, Any]], title: str) -> str:
    lines = [f"# Quality comparison: {title}", "",
             "| result | profile | claims | row | accuracy | macro-F1 | Q+A METEOR | AVeriTeC @0.25 | s/claim (1 / 2 / 3) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        st = r["stage_s_per_claim"]
        secs = f"{_f(st.get('hyde'))} / {_f(st.get('retrieval'))} / {_f(st.get('verdict'))}"
        if st.get("followup") is not None:
            secs += f" (+ {_f(st['followup'])} follow-up)"
        if st.get("decompose") is not None:
            secs += f" (+ {_f(st['decompose'])} decomposition)"
        for key, row in r["rows"].items():
            lines.append(f"| {r['label']} | {r['profile']} | {r['indices']} | {ROW_TITLES.get(key, key)} | {_f(row['accuracy'])} | "
                         f"{_f(row['macro_f1'])} | {_f(row['qa'])} | {_f(row['averitec_0.25'])} | {secs if key == 'system' else ''} |")
    lines += ["", "| result | " + " | ".join(RATE_FLAGS) + " |", "|---" * (len(RATE_FLAGS) + 1) + "|"]
    lines += [f"| {r['label']} | " + " | ".join(f"{r['flag_rates'].get(f, 0):.3f}" for f in RATE_FLAGS) + " |" for r in results]
    lines += ["", *usage_markdown(results)]
    lines += ["", "| result | models | CPUs | load average at the end | date |", "|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {', '.join(sorted(set(v for v in r['models'].values() if v)))} | {r['machine']['cpus']} | "
              f"{r['machine']['loadavg_at_end']} | {r['date']} |" for r in results]
    lines += ["", "| result | evidence |", "|---|---|"]
    lines += [f"| {r['label']} | {source_text(r)} |" for r in results]
    lines += [f"\nNote on {r['label']}: {r['note']}" for r in results if r.get("note")]
    return "\n".join(lines) + "\n"


def write(res_or_list: Any, label: str, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"quality_e2e_{label}"
    if isinstance(res_or_list, list):
        md = compare_markdown(res_or_list, label)
        data = {"label": label, "compare": [r["label"] for r in res_or_list], "results": res_or_list}
        results = res_or_list
    else:
        md, data, results = to_markdown(res_or_list), res_or_list, [res_or_list]
    paths = [Path(f"{stem}.json"), Path(f"{stem}.md"), Path(f"{stem}.png")]
    paths[0].write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    paths[1].write_text(md, "utf-8")
    write_png(results, paths[2])
    if not isinstance(res_or_list, list) and write_confusion_png(res_or_list, Path(f"{stem}_confusion.png")):
        paths.append(Path(f"{stem}_confusion.png"))
    return paths
