"""`sanctuary-local index` (issue 28): extraction, bad files, incremental and atomic
rebuilds, BM25 against the per-claim engine, and the stage-2 seam (no models needed)."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.corpus.build import CURRENT, REPORT_NAME, build_index
from sanctuary_local.corpus.extract import UNDECODABLE
from sanctuary_local.corpus.index import CorpusIndex
from sanctuary_local.corpus.source import CorpusSource, open_source
from sanctuary_local.errors import UserError
from sanctuary_local.io.store import KnowledgeStore
from sanctuary_local.records import Document, Query
from sanctuary_local.retrieval.bm25 import SparseBM25
from sanctuary_local.retrieval.segment import build_corpus

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "corpus"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    dst = tmp_path / "docs"
    shutil.copytree(EXAMPLES, dst)
    return dst


def _units(index: CorpusIndex) -> dict[tuple[str, int], dict]:
    return {(m["path"], m["page"] or m["line"]): {**m, "text": index.unit_text(u)}
            for u in range(index.n_units) for m in [index.unit_meta(u)]}


def test_examples_extracted(tmp_path: Path) -> None:
    rep = build_index(EXAMPLES, tmp_path / "ix")
    assert (rep.indexed, rep.skipped, rep.failed, rep.flagged) == (4, [], [], [])
    units = _units(CorpusIndex(tmp_path / "ix"))
    html = units[("eiffel-tower.html", 0)]
    assert html["url"] == "https://example.org/landmarks/eiffel-tower"  # canonical wins over og:url
    assert html["title"] == "The Eiffel Tower: facts and figures"
    assert "completed in March 1889" in html["text"] and "Landmarks" not in html["text"]  # nav is boilerplate
    assert "Mount Everest" in units[("boiling-point.pdf", 1)]["text"]
    assert "pressure cooker" in units[("boiling-point.pdf", 2)]["text"]  # pages kept apart, numbered from 1
    md = units[("great-wall-from-space.md", 0)]
    assert md["text"] == (EXAMPLES / "great-wall-from-space.md").read_text(encoding="utf-8")  # verbatim
    assert md["title"] == "Can you see the Great Wall of China from space?"
    assert units[("notes/honey.txt", 0)]["text"] == (EXAMPLES / "notes" / "honey.txt").read_text(encoding="utf-8")


def _encrypted_pdf() -> bytes:
    from pypdf import PdfWriter

    w = PdfWriter()
    w.add_blank_page(200, 200)
    w.encrypt(user_password="secret", owner_password="owner")
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def test_bad_files_are_reported_not_fatal(folder: Path, tmp_path: Path) -> None:
    bad = folder / "bad"
    bad.mkdir()
    (bad / "locked.pdf").write_bytes(_encrypted_pdf())
    pdf = (EXAMPLES / "boiling-point.pdf").read_bytes()
    (bad / "truncated.pdf").write_bytes(pdf[: len(pdf) // 3])
    (bad / "image.html").write_bytes(bytes(range(256)) * 40)  # binary renamed .html
    (bad / "empty.txt").write_bytes(b"")
    (bad / "nothing.zip").write_bytes(b"")
    (bad / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me, a note in Latin-1.".encode("latin-1"))
    (bad / "tool.exe").write_bytes(b"MZ\x90\x00")
    with zipfile.ZipFile(bad / "docs.zip", "w") as zf:
        zf.writestr("inner/readme.md", "# Inside a zip\nThe Eiffel Tower is in Paris.\n")
        zf.writestr("inner/nested.zip", b"PK")
    assert main(["index", str(folder), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    rep = orjson.loads((tmp_path / "ix" / REPORT_NAME).read_bytes())
    reasons = {d["path"]: d["reason"] for d in rep["skipped"] + rep["failed"]}
    assert "encrypted" in reasons["bad/locked.pdf"] and {"path": "bad/locked.pdf", "reason": reasons["bad/locked.pdf"]} in rep["failed"]
    assert "broken PDF" in reasons["bad/truncated.pdf"] or "empty" in reasons["bad/truncated.pdf"]
    assert reasons["bad/image.html"].startswith("binary")
    assert reasons["bad/empty.txt"].startswith("empty")
    assert reasons["bad/nothing.zip"].startswith("empty")
    assert reasons["bad/tool.exe"].startswith("unsupported file type")
    assert reasons["bad/docs.zip!/inner/nested.zip"].startswith("nested archive")
    assert rep["flagged"] == [{"path": "bad/latin1.txt", "flags": [UNDECODABLE]}]
    units = _units(CorpusIndex(tmp_path / "ix"))
    assert units[("bad/latin1.txt", 0)]["text"] == "Caf\ufffd cr\ufffdme, a note in Latin-1."  # replaced, kept
    assert "The Eiffel Tower is in Paris." in units[("bad/docs.zip!/inner/readme.md", 0)]["text"]
    assert rep["indexed"] == 6  # the 4 examples, the Latin-1 note, the zip member


def test_docx_and_store_files(tmp_path: Path) -> None:
    import docx

    src = tmp_path / "src"
    src.mkdir()
    d = docx.Document()
    d.add_paragraph("Minutes of the meeting.")
    d.add_paragraph("The bridge reopened on 3 May 2021.")
    d.save(src / "minutes.docx")
    (src / "broken.docx").write_bytes(b"PK\x03\x04 not really a docx")
    lines = [{"url": "https://a.example/1", "url2text": ["First page.", "Its second sentence."]},
             {"url": "https://a.example/2", "url2text": []}, "not an object"]
    (src / "17.json").write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n{broken\n")
    rep = build_index(src, tmp_path / "ix")
    units = _units(CorpusIndex(tmp_path / "ix"))
    assert units[("minutes.docx", 0)]["text"] == "Minutes of the meeting.\nThe bridge reopened on 3 May 2021."
    store = units[("17.json", 1)]
    assert (store["text"], store["url"]) == ("First page.\nIts second sentence.", "https://a.example/1")
    assert [f for f in rep.flagged if f["path"] == "17.json"] == [{"path": "17.json", "flags": ["store_lines_skipped:2"]}]
    assert [f["path"] for f in rep.failed] == ["broken.docx"]


def test_incremental_reuses_unchanged_and_drops_deleted(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "ix"
    first = build_index(folder, out)
    again = build_index(folder, out)
    assert (again.indexed, again.reused, again.removed) == (0, 4, 0)
    assert again.generation != first.generation and len(list(out.glob("gen-*"))) == 1
    (folder / "notes" / "honey.txt").write_text("Honey keeps for years when sealed.\n", encoding="utf-8")
    (folder / "great-wall-from-space.md").unlink()
    third = build_index(folder, out)
    assert (third.indexed, third.reused, third.removed) == (1, 2, 1)
    index = CorpusIndex(out)
    paths = {index.unit_meta(u)["path"] for u in range(index.n_units)}
    assert "great-wall-from-space.md" not in paths
    assert index.unit_text(index.search("honey sealed years", 1)[0][0]) == "Honey keeps for years when sealed.\n"
    assert len(index.search("Great Wall astronaut Yang Liwei", 5)[0]) == 0  # its postings are gone too


def test_interrupted_index_never_leaves_a_loadable_half(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "ix"

    def boom(done: int, total: int, path: str) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(folder, out, progress=boom)
    assert not (out / CURRENT).exists()
    with pytest.raises(UserError, match="not a corpus index"):
        CorpusIndex(out)
    good = build_index(folder, out)
    (folder / "extra.md").write_text("A new note about volcanoes.\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        build_index(folder, out, progress=boom)
    index = CorpusIndex(out)  # the previous generation is still the live one
    assert index.generation == good.generation and index.n_units == good.units
    index.close()  # an open index keeps its generation from removal (corpus/lease.py)
    final = build_index(folder, out)
    assert final.units == good.units + 1 and sorted(p.name for p in out.glob("gen-*")) == [final.generation]


def test_scores_match_the_per_claim_engine(tmp_path: Path) -> None:
    """Same segments, same terms, same Okapi/ATIRE weights as ``SparseBM25`` on one claim."""
    texts = [(EXAMPLES / "great-wall-from-space.md").read_text(encoding="utf-8"),
             (EXAMPLES / "notes" / "honey.txt").read_text(encoding="utf-8"),
             " ".join(f"word{i % 97} filler{i % 13}" for i in range(1400))]
    src = tmp_path / "src"
    src.mkdir()
    for i, t in enumerate(texts):
        (src / f"{i}.txt").write_text(t, encoding="utf-8")
    build_index(src, tmp_path / "ix", segment_tokens=50)
    index = CorpusIndex(tmp_path / "ix")
    corpus = build_corpus([Document(0, i, str(i), (t,)) for i, t in enumerate(texts)], 50)
    assert [(s.doc_position, s.start, s.end, s.n_tokens) for s in corpus.segments] == \
           [index.segment(i) for i in range(index.n_segments)]
    engine = SparseBM25()
    engine.index(corpus)
    for q in ("Great Wall visible from the Moon", "honey water spoil ferment", "word5 filler3 word5", "zzz unknown"):
        np.testing.assert_allclose(index.scores(q), engine.scores(corpus.query_ids(q)), rtol=1e-5, atol=1e-6)


def _mapped_rss_kb(path: Path) -> int | None:
    """Resident kB of this process's mappings of ``path`` (``/proc/self/smaps``); None: not mapped."""
    total, inside = None, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = len(head) >= 6 and head[5] == str(path)
            total = (total or 0) if inside else total
        elif inside and line.startswith("Rss:"):
            total = (total or 0) + int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_a_query_leaves_no_postings_resident(tmp_path: Path) -> None:
    """The postings' pages leave the resident set after each query (memory stays bounded at
    a million segments) and the scores are unchanged, before and after a release."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"{i}.txt").write_text(" ".join(f"word{(j * (i + 3)) % 997} filler{j % 13}" for j in range(60_000)))
    build_index(src, tmp_path / "ix", segment_tokens=50)
    index = CorpusIndex(tmp_path / "ix", release_pages=False)
    post_w = index.dir / "post_w.npy"
    assert index.arrays["post_w"].nbytes > 1 << 20
    query = " ".join(f"word{j}" for j in range(0, 997, 3))
    kept = index.scores(query)
    assert _mapped_rss_kb(post_w) > 256  # the pages the query read stay mapped
    index.release()
    assert _mapped_rss_kb(post_w) == 0
    index.release_pages = True
    np.testing.assert_array_equal(index.scores(query), kept)  # read again through the same maps
    assert _mapped_rss_kb(post_w) == 0


def test_source_gives_stage2_its_documents_and_hits(tmp_path: Path) -> None:
    build_index(EXAMPLES, tmp_path / "ix")
    source = open_source(tmp_path / "ix")
    assert isinstance(source, CorpusSource) and isinstance(open_source(ROOT / "examples" / "store"), KnowledgeStore)
    queries = [Query(7, 0, "At what temperature does water boil on Everest?"), Query(7, 1, "xyzzy")]
    docs, hits = source.claim_inputs(7, queries, 3)
    assert hits[1] == [] and hits[0]
    by_pos = {d.position: d for d in docs}
    for s in hits[0]:
        assert s.claim_index == 7 and by_pos[s.doc_position].text[s.start:s.end]
        assert by_pos[s.doc_position].text == source.index.unit_text(s.doc_position)
    top = by_pos[hits[0][0].doc_position]
    assert top.url == "boiling-point.pdf#page=1"
    prov = source.index.provenance(top.position, 10, 40)
    assert (prov.path, prov.page, prov.text) == ("boiling-point.pdf", 1, top.text[10:40])


def test_run_needs_exactly_one_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = ROOT / "examples" / "claims.json"
    assert main(["run", "--claims", str(claims), "--out", str(tmp_path / "o")]) == 2
    assert "exactly one of --store" in capsys.readouterr().err
    assert main(["run", "--claims", str(claims), "--corpus", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not a corpus index" in capsys.readouterr().err
    assert main(["check", "a claim", "--corpus", str(tmp_path)]) == 2
    assert main(["index", str(tmp_path / "missing"), "--out", str(tmp_path / "ix")]) == 2


def test_corpus_claim_through_the_real_semantic_stage(tmp_path: Path) -> None:
    """``CorpusSource.retrieve`` (what a retrieval worker runs for a corpus) with the cpu
    profile's real embedders: snippets come from the corpus's units, with exact spans."""
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.stages.evidence import EvidenceRetriever

    build_index(EXAMPLES, tmp_path / "ix")
    source = CorpusSource(tmp_path / "ix")
    cfg = load_config("cpu").retrieval
    cfg.index_cache = ""
    retriever = EvidenceRetriever(cfg)
    queries = (Query(3, 0, "When was the Eiffel Tower completed?", ("It was completed in March 1889.",)),
               Query(3, 1, "zzzz qqqq"))
    ev = source.retrieve(retriever, 3, queries)
    assert ev.claim_index == 3 and "no_hits:q1" in ev.flags and "bm25" in ev.timings
    snippets = ev.queries[0].snippets
    assert snippets and ev.queries[1].snippets == ()
    for s in snippets:
        c = s.chunk
        assert source.index.unit_text(c.doc_position)[c.start:c.end] == c.text
        assert c.url == source.index.unit_url(c.doc_position)
    assert snippets[0].chunk.url == "https://example.org/landmarks/eiffel-tower"


def test_spill_holds_one_record_per_term_and_segment(tmp_path: Path) -> None:
    """A word repeated 5,000 times in 100 segments is spilled as 100 records with their
    counts, not 5,000 pairs (a frequent term's bucket stays small at a million segments)."""
    from sanctuary_local.corpus.postings import _PAIR, PostingsWriter

    w = PostingsWriter(tmp_path, 50, 1.5, 0.75)
    assert w.add(0, " ".join(["zebra"] * 4999 + ["okapi"])) == 100
    w._flush()
    rec = np.concatenate([np.fromfile(f, dtype=_PAIR) for f in sorted(w.spill.iterdir())])
    assert len(rec) == 101
    assert sorted(rec["tf"].tolist()) == [1, 49] + [50] * 99
    assert int(rec["tf"].sum()) == 5000
    counts = w.finish()
    assert (counts["segments"], counts["terms"], counts["postings"]) == (100, 2, 101)


def test_a_documents_folder_given_as_corpus_gets_the_commands_to_index_it_elsewhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run and check name the folder's own index command with another --out (they suggested
    `index DIR --out <the documents folder>`, writing the index into the user's folder)."""
    docs = tmp_path / "my docs"
    docs.mkdir()
    (docs / "note.txt").write_text("A note.\n")
    claims = ROOT / "examples" / "claims.json"
    assert main(["run", "--claims", str(claims), "--corpus", str(docs), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"`sanctuary-local index '{docs}' --out my-index`" in err and "`sanctuary-local run --claims FILE --out DIR --corpus my-index`" in err
    assert f"--out {docs}" not in err
    assert main(["check", "a claim", "--corpus", str(tmp_path / "missing")]) == 2
    assert "the folder does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in docs.iterdir()) == ["note.txt"]
