"""Which extractor reads a big saved web page? trafilatura against faster ones, timed and checked.

A flat 10 MB page took `index` 41.6 s and 739 MB in the hostile-folder audit: trafilatura
is quadratic on a container holding very many inline elements. Extractors, each given
the page as a string:

- ``trafilatura``  what ``corpus/extract.py`` runs (main content, favor_recall, tables kept)
- ``resiliparse``  Resiliparse 2.0 ``extract_plain_text(main_content=True)`` (C++, lexbor;
                   not a dependency: ``pip install resiliparse`` to measure it, else its
                   rows say the import failed)
- ``lxml_text``    lxml (huge_tree) with script, style, nav, header, footer, aside and form
                   dropped, then ``text_content()``: all the rest, no main-content choice
- ``strip_tags``   ``corpus/extract.py``'s regex tag stripper (no parse; all text)
- ``index``        what ``index`` runs now (``extract_html``): trafilatura, unless one
                   element has more than ``WIDE_CHILDREN`` children (then ``lxml_text``)

Pages: synthetic flat pages of N MB made of sentences in one of two layouts, ``span``
(one container of inline ``<span>``s: trafilatura's worst case) and ``p`` (paragraphs),
and two article pages for quality, the example ``eiffel-tower.html`` and a synthetic news
page with navigation, a sidebar, a comment block and a footer around a 12-paragraph
article. Per extractor and page, in a fresh process: seconds of the extraction call,
peak resident memory of the process (``ru_maxrss``, the interpreter and the page
included), recall (the share of the page's sentences, or the article's, found in the
output) and, for the article pages, leak (the share of boilerplate phrases that reach
the output). The machine load (``uptime``) is recorded before and after.

    python benchmarks/corpus/html_extractors.py --out benchmarks/results/corpus/html_extractors
    python benchmarks/corpus/html_extractors.py --extractors trafilatura lxml_text index \
        --pages blocks:10000 blocks:1000 blocks:100 span:10 news example --out benchmarks/results/corpus/html_extractors_wide
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRACTORS = ("trafilatura", "resiliparse", "lxml_text", "strip_tags", "index")
_WORDS = "the river bridge council vote mayor report water city budget school road hospital harbour".split()
_BOILER = [f"Related story number {i} about something else" for i in range(15)] + [
    "Subscribe to our newsletter", "All rights reserved", "Cookie settings", "Log in to comment",
    "Share on social media", "Most read this week"]


def _sentence(rng: random.Random, i: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(30)) + f" s{i}x."


def blocks_page(per: int, mb: float = 2.0) -> tuple[str, list[str]]:
    """``mb`` MB of ``<span>`` sentences in ``<div>``s of ``per`` spans each."""
    rng, blocks, size, i = random.Random(0), [], 0, 0
    while size < mb * 1e6:
        spans = "".join(f"<span>{_sentence(rng, i + j)}</span> " for j in range(per))
        blocks.append(f"<div>{spans}</div>")
        size, i = size + len(blocks[-1]), i + per
    return f"<html><head><title>Blocks</title></head><body>{''.join(blocks)}</body></html>", [f"s{j}x" for j in range(i)]


def flat_page(mb: float, layout: str) -> tuple[str, list[str]]:
    """A page of ``mb`` MB of sentences, and the sentence markers to find."""
    rng, parts, size, i = random.Random(0), [], 0, 0
    while size < mb * 1e6:
        s = _sentence(rng, i)
        part = f"<span>{s}</span> " if layout == "span" else f"<p>{s}</p>\n"
        parts.append(part)
        size, i = size + len(part), i + 1
    body = "<div>" + "".join(parts) + "</div>"
    return f"<html><head><title>Flat {layout}</title></head><body>{body}</body></html>", [f"s{j}x" for j in range(i)]


def news_page() -> tuple[str, list[str]]:
    rng = random.Random(1)
    article = [_sentence(rng, i) for i in range(12)]
    nav = "".join(f"<li><a href='/s{i}'>Section {i}</a></li>" for i in range(30))
    side = "".join(f"<li><a href='/r{i}'>{_BOILER[i]}</a></li>" for i in range(15))
    rest = "".join(f"<p>{b}</p>" for b in _BOILER[15:])
    html = (f"<html><head><title>News</title></head><body><header><ul>{nav}</ul></header>"
            f"<aside><h3>Related</h3><ul>{side}</ul></aside><main><article><h1>The council vote</h1>"
            + "".join(f"<p>{s}</p>" for s in article) + f"</article></main><div class='comments'>{rest}</div>"
            "<footer><p>All rights reserved</p></footer></body></html>")
    return html, [f"s{i}x" for i in range(12)]


def example_page() -> tuple[str, list[str]]:
    html = (ROOT / "examples" / "corpus" / "eiffel-tower.html").read_text(encoding="utf-8")
    return html, ["completed in March 1889", "Gustave Eiffel"]


def run_extractor(name: str, html: str) -> str:
    if name == "trafilatura":
        import trafilatura

        return trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=True,
                                   deduplicate=False) or ""
    if name == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        return extract_plain_text(HTMLTree.parse(html), main_content=True)
    if name == "lxml_text":
        import lxml.html

        tree = lxml.html.document_fromstring(html, parser=lxml.html.HTMLParser(huge_tree=True))
        for el in tree.xpath("//script|//style|//nav|//header|//footer|//aside|//form|//noscript"):
            el.drop_tree()
        return re.sub(r"\s*\n\s*", "\n", tree.text_content()).strip()
    if name in ("strip_tags", "index"):
        sys.path.insert(0, str(ROOT))
        from sanctuary_local.corpus.extract import extract_html, strip_tags

        return strip_tags(html) if name == "strip_tags" else extract_html("page.html", html.encode()).units[0].text
    raise SystemExit(f"unknown extractor {name!r}; known: {', '.join(EXTRACTORS)}")


def page(spec: str) -> tuple[str, list[str], list[str]]:
    """``span:10`` → (html, markers that must be found, boilerplate that must not)."""
    kind, _, mb = spec.partition(":")
    if kind == "blocks":
        html, markers = blocks_page(int(mb))
        return html, markers, []
    if kind in ("span", "p"):
        html, markers = flat_page(float(mb), kind)
        return html, markers, []
    if kind == "news":
        html, markers = news_page()
        return html, markers, _BOILER
    html, markers = example_page()
    return html, markers, ["Landmarks", "Public domain (CC0)"]


def one(name: str, spec: str) -> dict:
    """Measure one extractor on one page (in this process: run it as a fresh one)."""
    html, markers, boiler = page(spec)
    t0 = time.perf_counter()
    text = run_extractor(name, html)
    seconds = time.perf_counter() - t0
    found = sum(1 for m in markers if m in text)
    return {"extractor": name, "page": spec, "page_mb": round(len(html.encode()) / 1e6, 2), "tags": html.count("<"),
            "seconds": round(seconds, 3), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "recall": round(found / len(markers), 3),
            "leak": round(sum(1 for b in boiler if b in text) / len(boiler), 3) if boiler else None,
            "output_chars": len(text)}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def table(rows: list[dict]) -> str:
    lines = ["| page | MB | tags | extractor | seconds | peak RSS MB | recall | boilerplate leak |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['page']} | | | {r['extractor']} | {r['error']} | | | |")
            continue
        leak = "" if r["leak"] is None else f"{r['leak']:.2f}"
        lines.append(f"| {r['page']} | {r['page_mb']} | {r['tags']:,} | {r['extractor']} | {r['seconds']:.2f} | {r['peak_rss_mb']} | "
                     f"{r['recall']:.3f} | {leak} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 3, 10], help="flat page sizes, MB")
    ap.add_argument("--extractors", nargs="+", default=list(EXTRACTORS))
    ap.add_argument("--pages", nargs="+", help="page specs (default: example, news, span:N and p:N for --sizes); "
                                               "blocks:C is 2 MB of <div>s of C <span>s each")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per measurement")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    ap.add_argument("--one", nargs=2, metavar=("EXTRACTOR", "PAGE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    specs = args.pages or ["example", "news"] + [f"{layout}:{mb:g}" for layout in ("span", "p") for mb in args.sizes]
    before, rows = _uptime(), []
    for spec in specs:
        for name in args.extractors:
            cmd = [sys.executable, __file__, "--out", "-", "--one", name, spec]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                rows.append(json.loads(proc.stdout) if proc.returncode == 0 else
                            {"extractor": name, "page": spec, "error": proc.stderr.strip().splitlines()[-1][:120]})
            except subprocess.TimeoutExpired:
                rows.append({"extractor": name, "page": spec, "error": f"over {args.timeout:g} s"})
            print(json.dumps(rows[-1]), flush=True)
    after = _uptime()
    result = {"uptime_before": before, "uptime_after": after, "python": sys.version.split()[0], "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(
        f"# HTML extractors on big pages\n\nMade by `benchmarks/corpus/html_extractors.py`. Load before: `{before}`; "
        f"after: `{after}` (2 shared cores: read the seconds as upper bounds).\n\n{table(rows)}\n")


if __name__ == "__main__":
    main()
