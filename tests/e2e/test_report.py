"""`sanctuary-local report`: pages from a run directory whose stage 2 is real (BM25 + MiniLM
over examples/store, the cpu profile's retrieval) and whose predictions are written by the
project's own writers; the LLM text is scripted (it only needs to cite "Evidence 1.1").
Rendered for real in headless Chromium when it is installed (`.ci/run` installs it)."""

from __future__ import annotations

import dataclasses
import html
import re
import shutil
import subprocess
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main as cli_main
from sanctuary_local.config.settings import load_config
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.io.predictions import write_predictions_json
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import EvidenceItem, HydeResult, Prediction, Query
from sanctuary_local.report.build import write_report
from sanctuary_local.claim_view import ReportSnippet, claim_snippets
from sanctuary_local.report.pages import render_claim
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import StageFile, check_state

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Claims 0-2 of examples/: 0 carries markup, 1 is ordinary, 2 failed in stage 3 (the
    pipeline's own fallback record for a model error)."""
    from sanctuary_local.run.fallbacks import verdict_fallback
    from sanctuary_local.stages.evidence import run_retrieval
    from sanctuary_local.stages.evidence_view import official_evidence

    out = tmp_path_factory.mktemp("run")
    claims = read_claims(EXAMPLES / "claims.json")[:3]
    check_state(out, {"config": "report-test", "store": str((EXAMPLES / "store").resolve())}, force=True)
    hyde = [HydeResult(c.index, "Refuted", (Query(c.index, 0, c.text, ()), Query(c.index, 1, f"Is it true? {c.text}", ())))
            for c in claims]
    evs = run_retrieval(EXAMPLES / "store", hyde, load_config("cpu").retrieval, workers=1)
    sf = StageFile(out / STAGE_FILES["retrieval"], lambda d: d)
    preds = []
    for c, h, ev in zip(claims, hyde, evs, strict=True):
        sf.append(c.index, ev, {"seconds": 0.0})
        if c.index == 2:
            preds.append(verdict_fallback(c, h, ev, RuntimeError(f"CUDA out of memory {EVIL}")))
            continue
        evidence, evidence_all, flags = official_evidence(c, ev)
        claim = c.text if c.index else f"{c.text} {EVIL}"  # claim 0 carries markup that must stay text
        preds.append(Prediction(claim_index=c.index, claim_id=c.claim_id, claim=claim, label="Refuted",
                                evidence=evidence, evidence_all=evidence_all, provisional_label="Refuted",
                                justification=f"1. Evidence 1.1 says otherwise; Evidence 9.9 does not exist. {EVIL}\n"
                                              "Label: Refuted",
                                flags=(*flags, "hyde_repaired", *(["store_problems:1"] if c.index == 1 else []))))
    write_predictions_json(preds, out / "predictions.json")
    return out


@pytest.fixture(scope="module")
def report(run_dir: Path) -> Path:
    return write_report(run_dir).index.parent


def _docs(index: int) -> dict[int, str]:
    return {d.position: d.text for d in KnowledgeStore(EXAMPLES / "store").load(index).documents}


def test_every_mark_is_the_exact_span_of_its_source_page(run_dir: Path, report: Path) -> None:
    stage2 = [orjson.loads(x) for x in (run_dir / "stage2_evidence.jsonl").read_bytes().splitlines()]
    for line in stage2:
        i = line["claim_index"]
        page = (report / f"claim_{i}.html").read_text("utf-8")
        sections = re.findall(r'<section class="evidence" id="(e-\d+-\d+)">(.*?)</section>', page, re.S)
        n_snippets = sum(len(q["snippets"]) for q in line["record"]["queries"])
        assert len(sections) == n_snippets > 0
        docs = _docs(i)
        for anchor, body in sections:
            pos, start, end = map(int, re.search(r"document (\d+), characters (\d+)–(\d+)", body).groups())
            marked = re.findall(r"<mark>(.*?)</mark>", body, re.S)
            assert len(marked) == 1 and html.unescape(marked[0]) == docs[pos][start:end]
            assert anchor.startswith("e-")


def test_justification_citations_link_to_existing_snippets(report: Path) -> None:
    page = (report / "claim_1.html").read_text("utf-8")
    assert '<a class="cite" href="#e-1-1">Evidence 1.1</a>' in page and 'id="e-1-1"' in page
    assert 'href="#e-9-9"' not in page  # no snippet 9.9: no link, marked as made up
    assert '<span class="cite-missing" title="the verdict prompt had no such snippet">Evidence 9.9</span>' in page
    for target in re.findall(r'href="#([^"]+)"', page):
        assert f'id="{target}"' in page


def test_the_label_not_enough_evidence_is_no_citation() -> None:
    """The trained verdict's justification lists each label with its probability: "Not
    Enough Evidence 0.16" is that label, not a citation of a snippet 0.16 the model made up."""
    from sanctuary_local.claim_view import linkify_citations

    text = "Refuted (label probabilities: Refuted 0.44, Not Enough Evidence 0.16). Evidence 1.1 says so; Evidence 0.16 too."
    out = linkify_citations(text, {"Evidence 1.1": "e-1-1"})
    assert "Not Enough Evidence 0.16)" in out and '<a class="cite" href="#e-1-1">Evidence 1.1</a>' in out
    assert out.count("cite-missing") == 1 and "too." in out


def test_untrusted_text_is_escaped(report: Path) -> None:
    page = (report / "claim_0.html").read_text("utf-8")
    assert "<script>" not in page and "<img" not in page
    assert html.escape(EVIL) in page  # shown as text, in the claim and in the justification
    index = (report / "index.html").read_text("utf-8")
    assert "<script>" not in index and 'href="claim_0.html"' in index and 'href="claim_1.html"' in index


def test_text_from_the_run_is_bidi_isolated(report: Path) -> None:
    """Claims, questions, justifications, page text and URLs come from the run: each sits in an
    element of its own direction (``dir="auto"``), so a right-to-left claim reads right to left
    and an unclosed RLO in it cannot reverse the text after it."""
    page = (report / "claim_1.html").read_text("utf-8")
    for element in ('<p class="claim" id="claim" dir="auto">', '<div class="justification" id="justification" dir="auto">',
                    '<span class="q" dir="auto">', '<div class="context" dir="auto">'):
        assert element in page, element
    assert re.search(r'<span class="url" dir="auto">|<a href="[^"]*" rel="noreferrer noopener" dir="auto">', page)
    index = (report / "index.html").read_text("utf-8")
    assert '<a href="claim_1.html" dir="auto">' in index


@pytest.mark.parametrize("url", ["javascript:alert(1)", " JavaScript:alert(1)", "java\tscript:alert(1)",
                                 "data:text/html,<script>alert(1)</script>", "https://ok.example/x y"])
def test_only_plain_http_source_urls_become_links(url: str) -> None:
    pred = Prediction(claim_index=0, claim_id="0", claim="c", label="Refuted")
    page = render_claim(pred, [ReportSnippet("E1", "e1", "q", url, 0, 0, 1, "x", 1.0)], {0: "x"})
    assert f'<span class="url" dir="auto">{html.escape(url)}</span>' in page and "<script>" not in page
    assert re.findall(r'href="([^"#][^"]*)"', page) == ["index.html"]  # no link but the way back
    ok = render_claim(pred, [ReportSnippet("E1", "e1", "q", "https://a.example/?b=1&c=<2>", 0, 0, 1, "x", 1.0)], {0: "x"})
    assert '<a href="https://a.example/?b=1&amp;c=&lt;2&gt;" rel="noreferrer noopener" dir="auto">' in ok


def test_flags_mark_degrading_ones(report: Path) -> None:
    page = (report / "claim_1.html").read_text("utf-8")
    assert '<li class="degrading">store_problems:1</li>' in page and '<li class="flag">hyde_repaired</li>' in page
    assert page.index('id="problems"') < page.index('<li class="degrading">store_problems:1</li>')


def test_a_failed_claim_shows_its_error(report: Path) -> None:
    page = (report / "claim_2.html").read_text("utf-8")
    box = re.search(r'<div class="problems" id="problems">(.*?)</div>', page, re.S).group(1)
    assert f'<li class="degrading">verdict_llm_error: RuntimeError: CUDA out of memory {html.escape(EVIL)}</li>' in box
    assert "<script>" not in page
    index = (report / "index.html").read_text("utf-8")
    row = re.search(r'<tr class="degraded"><td>2</td>.*?</tr>', index, re.S).group(0)
    assert 'href="claim_2.html"' in row and "degraded: verdict_label_fallback, verdict_llm_error" in row
    assert re.search(r"<tr><td>0</td>", index)  # claim 0: no degrading flag


def test_same_run_gives_byte_identical_pages(run_dir: Path, report: Path, tmp_path: Path) -> None:
    again = write_report(run_dir, tmp_path / "again").index.parent
    names = sorted(p.name for p in report.iterdir())
    assert names == sorted(p.name for p in again.iterdir()) == ["claim_0.html", "claim_1.html", "claim_2.html", "index.html"]
    assert all((report / n).read_bytes() == (again / n).read_bytes() for n in names)


def test_without_the_store_snippets_are_shown_alone_with_a_note(run_dir: Path, tmp_path: Path) -> None:
    summary = write_report(run_dir, tmp_path / "nostore", store=tmp_path / "gone")
    assert summary.store_problem.startswith(f"{tmp_path / 'gone'}: knowledge store not found")
    page = (summary.index.parent / "claim_1.html").read_text("utf-8")
    note = re.search(r'<p class="note" id="store-note">(.*?)</p>', page).group(1)
    assert html.escape(str(tmp_path / "gone")) in note and "each snippet is shown alone" in note
    sections = re.findall(r'<div class="context" dir="auto">(.*?)</div>', page, re.S)
    assert sections and all(re.fullmatch(r"<mark>[^<]*</mark>", body) for body in sections)


def test_a_run_without_recorded_store_says_so(run_dir: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run_dir / "predictions.json", bare)  # no run_state.json, no stage 2
    summary = write_report(bare)
    assert "run_state.json names no knowledge store and no --store was given" in summary.store_problem
    assert 'id="store-note"' in (bare / "report" / "claim_0.html").read_text("utf-8")


def test_a_claim_missing_from_the_store_or_a_changed_store_is_named(run_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(EXAMPLES / "store", store)
    (store / "0.json").unlink()
    shutil.copy(EXAMPLES / "store" / "0.json", store / "1.json")  # claim 1's pages are now claim 0's
    out = write_report(run_dir, tmp_path / "changed", store=store).index.parent
    page0 = (out / "claim_0.html").read_text("utf-8")
    assert f"{html.escape(str(store / '0.json'))}: not in the knowledge store" in page0
    page1 = (out / "claim_1.html").read_text("utf-8")
    assert 'id="store-note"' not in page1 and "does not hold the snippet" in page1
    for body in re.findall(r'<div class="context" dir="auto">(.*?)</div>', page1, re.S):
        if "span-note" in body:  # the note, then the snippet alone
            assert re.fullmatch(r'<span class="note span-note">[^<]*</span>\n<mark>[^<]*</mark>', body)


def test_a_damaged_store_archive_is_named_on_the_page(run_dir: Path, tmp_path: Path) -> None:
    archive = tmp_path / "store.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for f in sorted((EXAMPLES / "store").glob("*.json")):
            zf.write(f, f"store/{f.name}")
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("store/2.json")
    data = bytearray(archive.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2
    data[at] ^= 0xFF  # one byte of claim 2's file: its CRC no longer matches
    archive.write_bytes(bytes(data))
    out = write_report(run_dir, tmp_path / "damaged", store=archive).index.parent
    assert "Bad CRC-32" in (out / "claim_2.html").read_text("utf-8")
    assert 'id="store-note"' not in (out / "claim_1.html").read_text("utf-8")  # the other claims still have pages


def test_claims_range_and_run_info(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("report"))
    (run / "config.json").write_bytes(orjson.dumps(load_config("cpu-fast").to_dict()))
    (run / "timings.json").write_bytes(orjson.dumps({"complete": False, "n_selected": 4, "n_claims": 3}))
    assert cli_main(["report", str(run), "--out", str(tmp_path / "r"), "--claims-range", "1:2", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["claim_1.html", "index.html"]
    index = (tmp_path / "r" / "index.html").read_text("utf-8")
    info = re.search(r'<p class="meta" id="run-info">(.*?)</p>', index).group(1)
    model = load_config("cpu-fast").verdict.llm.model
    assert info == f"profile cpu-fast · stage 1 model {model} · stage 3 model {model} · unfinished run: 3 of 4 claims"
    assert f"report: {tmp_path / 'r' / 'index.html'} (claim pages: 1)" in capsys.readouterr().err
    assert cli_main(["report", str(run), "--claims-range", "7:9"]) == 2
    assert f"{run / 'predictions.json'}: --claims-range 7:9 selects none of its 3 claims" in capsys.readouterr().err


def test_numbering_follows_the_snippets_stage3_dropped(run_dir: Path) -> None:
    from sanctuary_local.records import ClaimEvidence
    from sanctuary_local.stages.evidence_view import drop_order as _drop_order

    rec = orjson.loads((run_dir / "stage2_evidence.jsonl").read_bytes().splitlines()[1])["record"]
    ev = ClaimEvidence.from_dict(rec)
    pred = Prediction(claim_index=1, claim_id="1", claim="c", label="Refuted")
    full = claim_snippets(pred, ev)
    note = {"trimmed": [f"dropped 2 of {len(full)} snippets (scores <= 0.5)"]}
    trimmed = claim_snippets(dataclasses.replace(pred, meta={**note, "dropped": [list(k) for k in _drop_order(ev)[:2]]}), ev)
    gone = {(ev.queries[qi].snippets[si].chunk.start, ev.queries[qi].snippets[si].chunk.url) for qi, si in _drop_order(ev)[:2]}
    assert len(trimmed) == len(full) - 2 and not {(s.start, s.url) for s in trimmed} & gone
    for q in {s.label.split(".")[0] for s in trimmed}:  # numbers within a question stay 1, 2, 3 …
        nums = [int(s.label.split(".")[1]) for s in trimmed if s.label.split(".")[0] == q]
        assert nums == list(range(1, len(nums) + 1))
    # trimmed, but made before meta.dropped: the prompt's numbers are unknown, so none are shown
    older = dataclasses.replace(pred, meta=note, evidence_all=(EvidenceItem("q", "a", "http://x", "t", 0, 0, 1),))
    assert [s.label for s in claim_snippets(older, ev)] == ["E1"]


def test_bad_run_directories_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="not a run directory"):
        write_report(tmp_path / "missing")
    with pytest.raises(UserError, match="predictions.json: not found"):
        write_report(tmp_path)
    (tmp_path / "predictions.json").write_text('[{"claim_id": 0, "claim": "x"', "utf-8")
    assert cli_main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'predictions.json'}:1:" in capsys.readouterr().err  # file:line:column
    (tmp_path / "predictions.json").write_text('[{"claim_id": 0, "claim": "x", "pred_label": "Maybe"}]', "utf-8")
    assert cli_main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'predictions.json'}: entry 0: unknown pred_label 'Maybe'" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path / "predictions.json")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()  # nothing written on bad input


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of ``<style>`` elements."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.css = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] == "style":
            self.css += data


def test_pages_load_nothing_and_every_link_resolves(report: Path) -> None:
    for page in sorted(report.glob("*.html")):
        parsed = _Tags(page.read_text("utf-8"))
        names = {tag for tag, _ in parsed.tags}
        assert names <= {"html", "head", "meta", "title", "style", "body", "nav", "a", "h1", "h2", "p", "span", "ul",
                         "li", "div", "section", "mark", "br", "table", "thead", "tbody", "tr", "th", "td", "strong"}
        assert "@import" not in parsed.css and "url(" not in parsed.css
        attrs = [(tag, a) for tag, at in parsed.tags for a in at]
        assert not [x for x in attrs if x[1] in ("src", "srcset", "style", "action") or x[1].startswith("on")]
        ids = {at["id"] for _, at in parsed.tags if "id" in at}
        for href in (at["href"] or "" for tag, at in parsed.tags if "href" in at):
            if href.startswith("#"):
                assert href[1:] in ids, (page.name, href)
            elif href.startswith("https://"):  # a source page: followed only when the reader clicks it
                assert ("a", {"href": href, "rel": "noreferrer noopener", "dir": "auto"}) in parsed.tags
            else:
                assert (report / href).is_file(), (page.name, href)


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'chromium-profile'}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=True)


def _highlighted_pixels(png: Path) -> int:
    """Pixels of the ``<mark>`` colour (#ffe28a) in a screenshot."""
    from matplotlib.image import imread

    rgb = (imread(png)[..., :3] * 255).round()
    return int((abs(rgb - (0xFF, 0xE2, 0x8A)).max(axis=-1) <= 2).sum())


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium; .ci/run does)")
def test_pages_render_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    page = report / "claim_0.html"
    dom = _chromium("--dump-dom", page.as_uri(), tmp=tmp_path).stdout
    assert "<title>Claim 0: Refuted</title>" in dom  # not "pwned": the claim's markup never ran
    assert '<span class="verdict v-Refuted" id="verdict">Refuted</span>' in dom and "<script" not in dom
    assert html.escape(EVIL, quote=False) in re.search(r'<p class="claim" id="claim" dir="auto">(.*?)</p>', dom, re.S).group(1)
    ids, targets = set(re.findall(r'\bid="([^"]+)"', dom)), re.findall(r'href="#([^"]+)"', dom)
    assert "e-1-1" in targets and set(targets) <= ids  # citation links land on rendered snippets
    docs = _docs(0)
    sections = re.findall(r'<section class="evidence" id="e-[\d-]+">(.*?)</section>', dom, re.S)
    assert sections
    for body in sections:  # as rendered: the highlighted text is the snippet's exact span
        pos, start, end = map(int, re.search(r"document (\d+), characters (\d+)–(\d+)", body).groups())
        assert [html.unescape(m) for m in re.findall(r"<mark>(.*?)</mark>", body, re.S)] == [docs[pos][start:end]]
    shot = tmp_path / "claim_0.png"
    _chromium("--window-size=1280,2000", f"--screenshot={shot}", page.as_uri(), tmp=tmp_path)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == 1280 and len(data) > 20_000
    assert _highlighted_pixels(shot) > 2_000  # the marked snippets are on screen, highlighted
    index_dom = _chromium("--dump-dom", (report / "index.html").as_uri(), tmp=tmp_path).stdout
    rows = re.findall(r'<tr(?: class="degraded")?><td>(\d+)</td><td><a href="(claim_\d+\.html)" dir="auto">', index_dom)
    assert rows == [("0", "claim_0.html"), ("1", "claim_1.html"), ("2", "claim_2.html")]


@pytest.mark.parametrize("recorded", ["index", "generation"])
def test_a_reindexed_corpus_keeps_each_snippet_in_its_own_file(tmp_path: Path, recorded: str) -> None:
    """A run over a corpus index, reported after the index was rebuilt with a file that sorts
    first: every unit number moved by one. The report looked each snippet's page up by its
    unit number in the live index, found another file's text there, and showed every snippet
    alone with "does not hold the snippet"; each is now found again in its own file (its URL)
    and span, as serve's check page does, and the pages are the same as before the re-index.
    ``generation``: the run names its generation folder, as `check` records it (``index.pinned``),
    which the re-index removes: the report reads the live index instead of stopping there."""
    from sanctuary_local.corpus.source import source_key
    from sanctuary_local.stages.evidence import run_retrieval
    from sanctuary_local.stages.evidence_view import official_evidence

    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLES / "corpus", corpus)
    index = tmp_path / "index"
    assert cli_main(["index", str(corpus), "--out", str(index), "--quiet"]) == 0
    run = tmp_path / "run"
    recorded_path = index / (index / "CURRENT").read_text().strip() if recorded == "generation" else index
    check_state(run, {"config": "report-test", "store": source_key(index)}, force=True, store_path=str(recorded_path))
    claim = read_claims(EXAMPLES / "claims.json")[0]
    hyde = [HydeResult(claim.index, "Refuted", (Query(claim.index, 0, claim.text, ()),))]
    cfg = load_config("cpu", {"retrieval": {"retriever": {"similarity_threshold": 0}}})
    ev = run_retrieval(index, hyde, cfg.retrieval, workers=1)[0]
    StageFile(run / STAGE_FILES["retrieval"], lambda d: d).append(claim.index, ev, {"seconds": 0.0})
    evidence, evidence_all, flags = official_evidence(claim, ev)
    write_predictions_json([Prediction(claim_index=claim.index, claim_id=claim.claim_id, claim=claim.text, label="Refuted",
                                       evidence=evidence, evidence_all=evidence_all, flags=flags,
                                       justification="Evidence 1.1 says so.")], run / "predictions.json")

    def page() -> str:
        return (write_report(run, tmp_path / "report").index.parent / f"claim_{claim.index}.html").read_text("utf-8")

    before = page()
    contexts = re.findall(r'<div class="context" dir="auto">(.*?)</div>', before, re.S)
    assert contexts and all("span-note" not in c and "<mark>" in c for c in contexts), before[-3000:]
    (corpus / "aaa-first.txt").write_text("Everest climbers say water boils at about 70 degrees Celsius there.\n")
    assert cli_main(["index", str(corpus), "--out", str(index), "--quiet"]) == 0
    after = page()
    assert "does not hold the snippet" not in after and after == before


def test_out_holding_the_users_own_pages_is_refused(run_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Audit finding: `report --out DIR` overwrote a user's index.html / claim_N.html without a word."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index.html").write_text("my own index", encoding="utf-8")
    assert cli_main(["report", str(run_dir), "--out", str(mine), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{mine}: holds index.html not written by `report`; refusing to overwrite" in err
    assert (mine / "index.html").read_text("utf-8") == "my own index"
    assert sorted(p.name for p in mine.iterdir()) == ["index.html"]
    ours = tmp_path / "ours"
    assert cli_main(["report", str(run_dir), "--out", str(ours), "--quiet"]) == 0
    assert cli_main(["report", str(run_dir), "--out", str(ours), "--quiet"]) == 0  # an earlier report is replaced


def test_out_holding_a_fifo_named_like_a_page_is_refused_without_blocking(run_dir: Path, tmp_path: Path) -> None:
    """The check for the user's own pages opened each name plainly: a FIFO named index.html
    blocked `report` for ever. It is refused at once now, and left as it was."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "index.html")
    proc = subprocess.run([sys.executable, "-m", "sanctuary_local.cli", "report", str(run_dir), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not written by `report`" in proc.stderr, proc.stderr
    assert (out / "index.html").is_fifo()
