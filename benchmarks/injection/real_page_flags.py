"""False flags on real web pages: how often does the injection detector fire on text that
is only a page, and how much would redaction cut from what stage 3 reads?

``benchmarks/injection/injection.py`` measures the detector on the surrogate store, whose pages are
built from the annotators' answers, not crawled. Real crawled page text is in the FEVER-8
baseline's dev submission (``../shared/data/fever8_baseline/submission_part_a.csv``): for
each of AVeriTeC dev claims 0-249, up to 10 question-answer pairs whose answers are
passages its retriever cut from the real AVeriTeC knowledge store (crawled web pages,
fact-check articles among them). None of them is an attack, so every flag is a false one.

For every answer passage: ``evidence_view.why_flagged`` (the names of the patterns it
matches) and, for a flagged one, what ``evidence_view.redact`` (``verdict.flagged =
"redact"``, the default) would leave of it. Reported: flagged passages and claims with at
least one, per pattern, and the characters redaction removes, then every flagged passage
in full, to be read by a person. The passages are shorter than this pipeline's chunks (a
few sentences), so the rate per 1,000 words is given too. No model, seconds to run.

    python benchmarks/injection/real_page_flags.py --label fever8_baseline_dev0-249

Writes ``benchmarks/results/injection/real_page_flags_<label>.{json,md}``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sanctuary_local.io.leaderboard import CSV_FIELD_LIMIT, parse_evi  # noqa: E402
from sanctuary_local.stages.evidence_view import PATTERN_NAMES, redact, why_flagged  # noqa: E402

DEFAULT_CSV = ROOT.parent / "shared" / "data" / "fever8_baseline" / "submission_part_a.csv"


def passages(path: Path, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """``(claim id, pair number, answer passage)`` of the claims ``lo <= id < hi``."""
    csv.field_size_limit(CSV_FIELD_LIMIT)
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if lo <= int(r["id"]) < hi]
    return [(int(r["id"]), n, a) for r in rows for n, (_q, a) in enumerate(parse_evi(r["evi"]), 1) if a.strip()]


def measure(items: list[tuple[int, int, str]]) -> dict:
    flagged = []
    for cid, n, text in items:
        names = why_flagged(text)
        if names:
            kept = redact(text)
            flagged.append({"claim": cid, "pair": n, "patterns": names, "chars": len(text),
                            "redacted_chars": len(text) - len(kept), "text": text, "redacted": kept})
    words = sum(len(t.split()) for _c, _n, t in items)
    claims = {c for c, _n, _t in items}
    return {
        "passages": len(items), "claims": len(claims), "words": words,
        "chars": sum(len(t) for _c, _n, t in items),
        "flagged_passages": len(flagged), "flagged_claims": len({f["claim"] for f in flagged}),
        "per_pattern": dict(Counter(p for f in flagged for p in f["patterns"])),
        "redacted_chars": sum(f["redacted_chars"] for f in flagged),
        "flagged": flagged,
    }


def to_markdown(label: str, src: Path, lo: int, hi: int, m: dict) -> str:
    pct = lambda a, b: f"{100 * a / b:.2f} %" if b else "-"  # noqa: E731
    per_kw = 1000 * m["flagged_passages"] / m["words"] if m["words"] else 0.0
    lines = [
        f"# Injection detector on real page text: {label}",
        "",
        f"Answer passages of the FEVER-8 baseline's dev submission (`{src.name}`), AVeriTeC dev claims "
        f"{lo}-{hi - 1}: text its retriever cut from the real AVeriTeC knowledge store (crawled pages). "
        "None is an attack: every flag is a false flag. Command: "
        f"`python benchmarks/injection/real_page_flags.py --csv {os.path.relpath(src, ROOT)} --indices {lo}:{hi} --label {label}`.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| claims / passages / words | {m['claims']} / {m['passages']} / {m['words']:,} |",
        f"| passages flagged | {m['flagged_passages']} ({pct(m['flagged_passages'], m['passages'])}) |",
        f"| claims with a flagged passage | {m['flagged_claims']} ({pct(m['flagged_claims'], m['claims'])}) |",
        f"| flagged passages per 1,000 words | {per_kw:.3f} |",
        f"| characters redaction removes (of all) | {m['redacted_chars']:,} ({pct(m['redacted_chars'], m['chars'])}) |",
        "",
        "| pattern | passages |",
        "|---|---|",
        *(f"| {name} | {m['per_pattern'].get(name, 0)} |" for name in (*PATTERN_NAMES, "flooding")),
        "",
        "## Every flagged passage",
        "",
    ]
    if not m["flagged"]:
        lines.append("None.")
    for f in m["flagged"]:
        lines += [f"- claim {f['claim']}, pair {f['pair']}: {', '.join(f['patterns'])}; redaction removes "
                  f"{f['redacted_chars']} of {f['chars']} characters",
                  f"  - page: {json.dumps(f['text'], ensure_ascii=False)}",
                  f"  - model sees: {json.dumps(f['redacted'], ensure_ascii=False)}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="a FEVER-8 submission CSV with real evidence (default: %(default)s)")
    ap.add_argument("--indices", default="0:250", help="claim ids lo:hi (default %(default)s)")
    ap.add_argument("--label", required=True)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results" / "injection")
    args = ap.parse_args(argv)
    if not args.csv.is_file():
        print(f"error: {args.csv}: no such file (the FEVER-8 baseline's submission, in ../shared)", file=sys.stderr)
        return 2
    lo, hi = (int(x) for x in args.indices.split(":"))
    try:
        m = measure(passages(args.csv, lo, hi))
    except (KeyError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        print(f"error: {args.csv}: not a FEVER-8 submission CSV (id,claim,evi,label,split): {exc!r}"[:300], file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"real_page_flags_{args.label}"
    stem.with_suffix(".json").write_bytes(json.dumps(m, indent=1, ensure_ascii=False).encode() + b"\n")
    stem.with_suffix(".md").write_text(to_markdown(args.label, args.csv, lo, hi, m), encoding="utf-8")
    print(f"{m['flagged_passages']} of {m['passages']} passages flagged ({m['flagged_claims']} of {m['claims']} claims); "
          f"wrote {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
