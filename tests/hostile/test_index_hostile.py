"""`sanctuary-local index` on a folder someone else wrote (mail attachments, a leaked
archive, a scrape): it never loses the user's files, never corrupts the index, never
drops text silently. Every input here is a real file made by the test (real zips, PDFs,
.docx, symbolic links, FIFOs); the concurrency test runs two real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.corpus.build import CURRENT, REPORT_NAME, build_index
from sanctuary_local.corpus.index import CorpusIndex
from sanctuary_local.corpus.outdir import MARKER

from tests.support.pdf_support import pdf_bytes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "corpus"


@pytest.fixture()
def docs(tmp_path: Path) -> Path:
    dst = tmp_path / "docs"
    shutil.copytree(EXAMPLES, dst)
    return dst


def _report(out: Path) -> dict:
    return orjson.loads((out / REPORT_NAME).read_bytes())


def _reasons(out: Path) -> dict[str, str]:
    rep = _report(out)
    return {d["path"]: d["reason"] for d in rep["skipped"] + rep["failed"]}


def _paths(out: Path) -> set[str]:
    index = CorpusIndex(out)
    return {index.unit_meta(u)["path"] for u in range(index.n_units)}


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` with its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


# ---------------------------------------------------------------- --out is never the user's folder
def test_out_holding_user_files_is_refused_untouched(docs: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    u = tmp_path / "u"
    (u / "gen-photos").mkdir(parents=True)
    (u / "gen-photos" / "a").write_text("x")
    (u / "CURRENT").write_text("mine")
    (u / REPORT_NAME).write_text("my own notes")
    before = _tree(u)
    assert main(["index", str(docs), "--out", str(u), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not an index made by" in err and len(err.strip().splitlines()) == 1
    assert _tree(u) == before  # nothing deleted, nothing overwritten, no marker added

    (docs / "gen-notes").mkdir()
    (docs / "gen-notes" / "n.txt").write_text("A note about the Eiffel Tower.\n")
    before = _tree(docs)
    assert main(["index", str(docs), "--out", str(docs), "--quiet"]) == 2
    assert "the folder being indexed" in capsys.readouterr().err
    assert _tree(docs) == before


def test_out_absent_empty_or_ours_is_accepted(docs: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    build_index(docs, empty)
    assert (empty / MARKER).is_file() and (empty / CURRENT).is_file()
    # a user's folder put into an index folder is not ours: a rebuild leaves it alone
    (empty / "gen-photos").mkdir()
    (empty / "gen-photos" / "a.jpg").write_bytes(b"\xff\xd8 my photo")
    (empty / "gen-000099").symlink_to(empty / "gen-photos", target_is_directory=True)
    rep = build_index(docs, empty)
    assert (empty / "gen-photos" / "a.jpg").read_bytes() == b"\xff\xd8 my photo"
    assert (empty / "gen-000099").is_symlink() and rep.reused == 4
    inside = docs / "index"  # --out inside the folder: not walked into
    build_index(docs, inside)
    assert not any(p.startswith("index/") for p in _paths(inside))


def test_index_made_before_the_marker_is_accepted_and_other_formats_refused(docs: Path, tmp_path: Path) -> None:
    out = tmp_path / "ix"
    build_index(docs, out)
    (out / MARKER).unlink()  # as an earlier version left it
    assert build_index(docs, out).reused == 4 and (out / MARKER).is_file()
    (out / MARKER).write_text('{"made_by": "sanctuary-local index", "format": "sanctuary-corpus-v9"}')
    with pytest.raises(Exception, match="format 'sanctuary-corpus-v9'"):
        build_index(docs, out)
    (out / MARKER).write_text("not json")
    with pytest.raises(Exception, match="was not written by"):
        build_index(docs, out)


# ---------------------------------------------------------------- one run at a time
def _index_proc(folder: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "sanctuary_local.cli", "index", str(folder), "--out", str(out),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def _many_notes(folder: Path, n: int = 150) -> Path:
    folder.mkdir()
    for i in range(n):
        (folder / f"n{i:03d}.txt").write_text(" ".join(f"word{(i * 7 + j) % 501} topic{i % 11}" for j in range(400)))
    return folder


def test_a_second_run_refuses_while_the_first_holds_the_index(docs: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ix"
    build_index(docs, out)
    holder = subprocess.Popen(  # another process holding the index's lock, as a running `index` does
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, b'%d' % os.getpid()); "
         "print('locked', flush=True); "
         "sys.stdin.read()", str(out / "index.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        live = (out / CURRENT).read_text()
        assert main(["index", str(docs), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"(pid {holder.pid}) is writing this index" in err
        assert (out / CURRENT).read_text() == live  # the refused run changed nothing
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
    assert main(["index", str(docs), "--out", str(out), "--quiet"]) == 0  # the lock died with its holder


def test_a_marker_renamed_in_between_the_checks_is_not_taken_for_foreign_files(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The race `test_two_concurrent_runs_leave_a_sound_index` once hit: run B reads no marker,
    run A (holding the lock) renames its marker in, then B lists the folder and sees it. B must
    take the folder for an index (and then meet A's lock), not refuse it as the user's files."""
    from sanctuary_local.corpus import outdir

    out = tmp_path / "ix"
    out.mkdir()
    outdir.write_marker(out)
    real, calls = outdir._marker_format, []

    def late(path: Path) -> str | None:  # the first read happens before A's rename
        calls.append(path)
        return None if len(calls) == 1 else real(path)

    monkeypatch.setattr(outdir, "_marker_format", late)
    (tmp_path / "docs").mkdir()
    assert outdir.check_out(out, tmp_path / "docs") is True
    assert len(calls) == 2


def test_two_concurrent_runs_leave_a_sound_index(tmp_path: Path) -> None:
    folder = _many_notes(tmp_path / "notes")
    ref = build_index(folder, tmp_path / "ref")
    reference = CorpusIndex(tmp_path / "ref")
    for attempt in range(3):
        out = tmp_path / f"ix{attempt}"
        procs = [_index_proc(folder, out) for _ in range(2)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        codes = sorted(r[0] for r in results)
        assert codes in ([0, 0], [0, 2]), results
        for rc, _, err in results:
            assert "Traceback" not in err
            if rc == 2:
                assert len(err.strip().splitlines()) == 1 and "is writing this index" in err
        index = CorpusIndex(out)
        assert (index.n_units, index.n_segments) == (ref.units, ref.segments)
        assert index.manifest["postings"] == reference.manifest["postings"]  # not doubled
        assert index.search("word17 topic3", 5)[0].tolist() == reference.search("word17 topic3", 5)[0].tolist()
        assert [p.name for p in out.glob("gen-*")] == [index.generation]


# ---------------------------------------------------------------- names that are not UTF-8
def test_undecodable_file_names_are_indexed_and_reported(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / os.fsdecode(b"d\xfe")).mkdir(parents=True)
    (src / os.fsdecode(b"\xff.txt")).write_text("A note named in Latin-1 about the Eiffel Tower.\n")
    (src / os.fsdecode(b"d\xfe") / os.fsdecode(b"caf\xe9.md")).write_text("# Caf\u00e9\nCoffee notes.\n")
    (src / os.fsdecode(b"\xff.xyz")).write_text("an unsupported type with an odd name")
    (src / "\\xff.txt").write_text("A file literally named backslash-x-f-f.\n")  # spelled like the escape
    out = tmp_path / "ix"
    for _ in range(2):  # the second run reads the first one's index back
        assert main(["index", str(src), "--out", str(out), "--quiet"]) == 0
        rep = _report(out)  # valid JSON
        assert {"path": "\\xff.xyz", "reason": "unsupported file type (.xyz)"} in rep["skipped"]
        assert {"path": "\\xff.txt", "reason": "duplicate name (another file has the same name; indexed once)"} \
            in rep["skipped"]
        assert _paths(out) == {"\\xff.txt", "d\\xfe/caf\\xe9.md"}
    assert rep["reused"] == 2


# ---------------------------------------------------------------- symbolic links
def test_links_out_of_the_folder_are_listed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("The outside secret: a password.\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "more.txt").write_text("More outside text.\n")
    src = tmp_path / "src"
    (src / "in").mkdir(parents=True)
    (src / "in" / "note.txt").write_text("A note inside the folder about bridges.\n")
    (src / "p.txt").symlink_to(outside / "secret.txt")
    (src / "inside-link.txt").symlink_to(src / "in" / "note.txt")
    (src / "relative-link.txt").symlink_to(Path("in") / "note.txt")
    (src / "linked-folder").symlink_to(outside / "sub", target_is_directory=True)
    (src / "dangling.txt").symlink_to(tmp_path / "nowhere.txt")
    (src / "loop.txt").symlink_to(src / "loop.txt")
    out = tmp_path / "ix"
    assert main(["index", str(src), "--out", str(out), "--quiet"]) == 0
    assert _paths(out) == {"in/note.txt", "inside-link.txt", "relative-link.txt"}
    reasons = _reasons(out)
    assert reasons["p.txt"].startswith("symbolic link to a file outside the folder")
    assert reasons["linked-folder"] == "symbolic link to a folder (not followed)"
    assert reasons["dangling.txt"].startswith("broken symbolic link") and reasons["loop.txt"].startswith("broken")
    assert main(["index", str(src), "--out", str(out), "--quiet", "--follow-links"]) == 0
    assert _paths(out) == {"in/note.txt", "inside-link.txt", "relative-link.txt", "p.txt"}
    assert "linked-folder" in _reasons(out)  # folders stay unfollowed


def test_a_file_swapped_for_a_link_during_the_run_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("The outside secret.\n")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.txt", "b.txt"):
        (src / name).write_text(f"Note {name} about rivers.\n")

    def swap(done: int, total: int, path: str) -> None:
        if done == 1:  # a.txt is read; b.txt, listed as a plain file, becomes a link
            (src / "b.txt").unlink()
            (src / "b.txt").symlink_to(tmp_path / "secret.txt")

    build_index(src, tmp_path / "ix", progress=swap)
    assert _paths(tmp_path / "ix") == {"a.txt"}
    assert "symbolic link" in _reasons(tmp_path / "ix")["b.txt"]


# ---------------------------------------------------------------- deep folders
def test_a_folder_nested_1100_deep_is_walked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "top.txt").write_text("A note at the top about lighthouses.\n")
    deep = src
    for _ in range(1100):
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.txt").write_text("A note at the bottom about submarines.\n")
    out = tmp_path / "ix"
    try:
        assert main(["index", str(src), "--out", str(out), "--quiet"]) == 0
        assert _paths(out) == {"top.txt", "d/" * 1100 + "bottom.txt"}
    finally:  # bottom up: shutil.rmtree (pytest's clean-up of old tmp folders) recurses
        (deep / "bottom.txt").unlink()
        while deep != src:
            deep.rmdir()
            deep = deep.parent


# ---------------------------------------------------------------- deep HTML
def _nested_page(depth: int) -> str:
    return ("<html><head><title>Deep page</title><link rel='canonical' href='https://deep.example/p'></head><body>"
            "<p>Before the deep part.</p>" + "<div>" * depth + "<p>At the bottom of the nest.</p>" + "</div>" * depth
            + "<p>After the deep part: the harbour reopened in &amp; after May.</p><script>var hidden = 1;</script>"
            + "</body></html>")


def test_deeply_nested_html_keeps_its_text(tmp_path: Path) -> None:
    from sanctuary_local.corpus.extract import HTML_TOO_DEEP

    src = tmp_path / "src"
    src.mkdir()
    (src / "deep300.html").write_text(_nested_page(300))  # past libxml2's default 256 levels
    (src / "deep3000.html").write_text(_nested_page(3000))  # past its 2,048 levels with huge_tree
    out = tmp_path / "ix"
    rep = build_index(src, out)
    index = CorpusIndex(out)
    units = {index.unit_meta(u)["path"]: (index.unit_meta(u), index.unit_text(u)) for u in range(index.n_units)}
    for name in ("deep300.html", "deep3000.html"):
        meta, text = units[name]
        assert "At the bottom of the nest." in text and "the harbour reopened in & after May." in text, name
        assert "hidden" not in text and (meta["title"], meta["url"]) == ("Deep page", "https://deep.example/p")
    assert rep.flagged == [{"path": "deep3000.html", "flags": [HTML_TOO_DEEP]}]


# ---------------------------------------------------------------- zip archives
def test_a_zip_member_listed_many_times_is_indexed_once(tmp_path: Path) -> None:
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    with zipfile.ZipFile(src / "dup.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with warnings.catch_warnings():  # zipfile warns "Duplicate name", and writes every entry
            warnings.simplefilter("ignore")
            for _ in range(10):
                zf.writestr("big.txt", "the same words again " * 5000)
        zf.writestr("other.txt", "Another member about canals.\n")
    out = tmp_path / "ix"
    rep = build_index(src, out)
    assert sorted(_paths(out)) == ["dup.zip!/big.txt", "dup.zip!/other.txt"]
    assert {"path": "dup.zip!/big.txt", "flags": ["zip_duplicate_entries:9"]} in rep.flagged
    index = CorpusIndex(out)
    assert index.n_units == 2 and sorted(f["units"][1] - f["units"][0] for f in index.manifest["files"].values()) == [1, 1]
    assert rep.text_bytes == len("the same words again " * 5000) + len("Another member about canals.\n")
    assert build_index(src, out).reused == 2  # and no orphan units on a rerun


def test_an_archive_is_read_up_to_its_expanded_total(tmp_path: Path) -> None:
    import zipfile

    from sanctuary_local.corpus.limits import Limits

    src = tmp_path / "src"
    src.mkdir()
    with zipfile.ZipFile(src / "bomb.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(6):  # 6 x 300 kB of one letter: each member small, the total not
            zf.writestr(f"m{i}.txt", f"word{i} " + "a" * 300_000)
    out = tmp_path / "ix"
    build_index(src, out, limits=Limits(max_file_bytes=400_000, max_archive_bytes=1_000_000))
    assert sorted(_paths(out)) == ["bomb.zip!/m0.txt", "bomb.zip!/m1.txt", "bomb.zip!/m2.txt"]
    reasons = _reasons(out)
    assert sorted(reasons) == ["bomb.zip!/m3.txt", "bomb.zip!/m4.txt", "bomb.zip!/m5.txt"]
    assert all(r.startswith("over the archive's cap") for r in reasons.values())


# ---------------------------------------------------------------- .docx XML
def _docx_with_body(path: Path, paragraphs: int) -> None:
    """A real .docx (python-docx) whose document.xml is replaced by ``paragraphs`` paragraphs."""
    import zipfile

    import docx

    plain = path.with_suffix(".plain.docx")
    docx.Document().save(plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "word/document.xml":
                head, _, rest = data.decode().partition("<w:body>")
                body = "<w:p><w:r><w:t>The dam was finished in 1936.</w:t></w:r></w:p>" * paragraphs
                data = f"{head}<w:body>{body}</w:body>{rest.partition('</w:body>')[2]}".encode()
            dst.writestr(info, data)
    plain.unlink()


def test_a_docx_whose_xml_expands_past_the_cap_is_skipped(tmp_path: Path) -> None:
    from sanctuary_local.corpus.limits import Limits

    src = tmp_path / "src"
    src.mkdir()
    _docx_with_body(src / "small.docx", 3)
    _docx_with_body(src / "bomb.docx", 40_000)  # ~2.6 MB of XML in a file of a few kB
    assert (src / "bomb.docx").stat().st_size < 60_000
    out = tmp_path / "ix"
    build_index(src, out, limits=Limits(max_docx_xml_bytes=1_000_000))
    assert _paths(out) == {"small.docx"}
    assert _reasons(out)["bomb.docx"].startswith("over the .docx XML cap")


# ---------------------------------------------------------------- PDF page trees
def _content(text: str) -> bytes:
    stream = b"BT /F1 12 Tf 72 700 Td (%s) Tj ET" % text.encode()
    return b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)


_FONT = b"/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >>"


def _repeated_page_pdf() -> bytes:
    """One page listed 10,000 times: four levels of /Pages, each listing the next ten times (walked
    once each: 4 x 9 repeated references skipped)."""
    kids = lambda n: b"[" + b" ".join(b"%d 0 R" % n for _ in range(10)) + b"]"  # noqa: E731
    return pdf_bytes([b"<< /Type /Catalog /Pages 2 0 R >>",
                 b"<< /Type /Pages /Kids %s /Count 10000 %s /MediaBox [0 0 612 792] >>" % (kids(3), _FONT),
                 b"<< /Type /Pages /Kids %s /Count 1000 >>" % kids(4),
                 b"<< /Type /Pages /Kids %s /Count 100 >>" % kids(5),
                 b"<< /Type /Pages /Kids %s /Count 10 >>" % kids(6),
                 b"<< /Type /Page /Contents 7 0 R >>",  # its font and media box are inherited
                 _content("The only page, about glaciers.")])


def _many_pages_pdf(n: int) -> bytes:
    pages = [b"<< /Type /Page /Parent 2 0 R /Contents %d 0 R >>" % (3 + n + i) for i in range(n)]
    contents = [_content(f"Page number {i + 1} about tides.") for i in range(n)]
    kids = b"[" + b" ".join(b"%d 0 R" % (3 + i) for i in range(n)) + b"]"
    return pdf_bytes([b"<< /Type /Catalog /Pages 2 0 R >>",
                 b"<< /Type /Pages /Kids %s /Count %d %s /MediaBox [0 0 612 792] >>" % (kids, n, _FONT),
                 *pages, *contents])


def test_a_pdf_page_listed_many_times_is_one_document_and_pages_are_capped(tmp_path: Path) -> None:
    from sanctuary_local.corpus.limits import Limits

    src = tmp_path / "src"
    src.mkdir()
    (src / "repeat.pdf").write_bytes(_repeated_page_pdf())
    assert (src / "repeat.pdf").stat().st_size < 2000
    (src / "long.pdf").write_bytes(_many_pages_pdf(30))
    out = tmp_path / "ix"
    rep = build_index(src, out, limits=Limits(max_pdf_pages=12))
    index = CorpusIndex(out)
    units = [(index.unit_meta(u)["path"], index.unit_meta(u)["page"], index.unit_text(u)) for u in range(index.n_units)]
    assert [u for u in units if u[0] == "repeat.pdf"] == [("repeat.pdf", 1, "The only page, about glaciers.")]
    long = [u for u in units if u[0] == "long.pdf"]
    assert [p for _, p, _ in long] == list(range(1, 13)) and long[11][2] == "Page number 12 about tides."
    flags = {f["path"]: f["flags"] for f in rep.flagged}
    assert flags == {"repeat.pdf": ["pdf_page_tree_repeats_skipped:36"], "long.pdf": ["pdf_pages_capped:12"]}


# ---------------------------------------------------------------- a file that changes type
def test_a_file_that_becomes_a_fifo_during_the_run_is_skipped(tmp_path: Path) -> None:
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.txt", "b.txt", "d.txt"):
        (src / name).write_text(f"Note {name} about lighthouses.\n")
    with zipfile.ZipFile(src / "c.zip", "w") as zf:
        zf.writestr("inner.txt", "Inside the archive.\n")
    os.mkfifo(src / "fifo.txt")  # a FIFO from the start: listed and skipped

    def change(done: int, total: int, path: str) -> None:
        if done == 1:  # a.txt is read; b.txt and c.zip, listed as files, become FIFOs
            for name in ("b.txt", "c.zip"):
                (src / name).unlink()
                os.mkfifo(src / name)

    out = tmp_path / "ix"
    build_index(src, out, progress=change)  # never blocks on a FIFO, never stops
    assert _paths(out) == {"a.txt", "d.txt"}
    reasons = _reasons(out)
    assert reasons["b.txt"] == reasons["c.zip"] == "not a regular file: it is now a FIFO (named pipe) (changed during the run)"
    assert reasons["fifo.txt"] == "not a regular file"


# ---------------------------------------------------------------- what reaches the terminal
def test_names_reach_the_terminal_escaped_and_long_lists_summarised(tmp_path: Path) -> None:
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    (src / "\x1b[31mred.xyz").write_text("x")
    (src / "a\nforged: line.xyz").write_text("x")
    (src / "\u202egnp.exe.xyz").write_text("x")  # a right-to-left override
    (src / "note.txt").write_text("A real note about ferries.\n")
    with zipfile.ZipFile(src / "many.zip", "w") as zf:
        for i in range(300):
            zf.writestr(f"m{i:03d}.xyz", "x")
    out = tmp_path / "ix"
    proc = subprocess.run([sys.executable, "-m", "sanctuary_local.cli", "index", str(src), "--out", str(out)],
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "\x1b" not in err and "\u202e" not in err
    assert "\\x1b[31mred.xyz" in err and "a\\nforged: line.xyz" in err  # the first ten are printed
    assert not any(line.startswith("forged") for line in err.splitlines())
    assert len(err.splitlines()) < 30 and "303 unsupported file type" in err
    skipped = {d["path"] for d in _report(out)["skipped"]}  # the report keeps every name, as it is
    assert len(skipped) == 303 and "\x1b[31mred.xyz" in skipped and "a\nforged: line.xyz" in skipped


# ---------------------------------------------------------------- archives are streamed
def _open_files() -> list[str]:
    """What this process's descriptors point at (Linux ``/proc``; [] elsewhere)."""
    targets = []
    for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    return targets


def test_zip_archives_are_streamed_not_held(tmp_path: Path) -> None:
    import gc
    import tracemalloc
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):  # 4 archives of 3 MB each (stored, incompressible)
        with zipfile.ZipFile(src / f"a{i}.zip", "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("noise.bin.txt", os.urandom(3_000_000))
            zf.writestr("note.txt", f"Archive {i} holds a note about bridges.\n")
    (src / "z-last.txt").write_text("The last file, read after every archive.\n")
    seen: dict[str, object] = {}

    def check(done: int, total: int, path: str) -> None:
        if path == "z-last.txt":  # every archive is done with: none may be alive or open
            gc.collect()
            # only this test's archives: other tests of the session may hold zips of their own
            seen["zipfiles"] = [o for o in gc.get_objects() if isinstance(o, zipfile.ZipFile) and o.fp is not None
                                and str(src) in str(getattr(o, "filename", "") or "")]
            seen["open"] = [t for t in _open_files() if t.endswith(".zip") and t.startswith(str(src))]

    warm = tmp_path / "warm"  # the first build imports modules: not what is measured
    warm.mkdir()
    (warm / "a.txt").write_text("warm up")
    with zipfile.ZipFile(warm / "b.zip", "w") as zf:
        zf.writestr("b.txt", "warm up")
    build_index(warm, tmp_path / "warm-ix")
    tracemalloc.start()
    try:
        rep = build_index(src, tmp_path / "ix", progress=check)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(_paths(tmp_path / "ix")) == 5 and len(rep.skipped) == 4  # the noise is binary
    assert seen == {"zipfiles": [], "open": []}
    # one member at a time (3 MB and its copies, ~6-9.5 MB traced in a full session), not the
    # 12 MB of archives held at once
    assert peak < 11_500_000


# ---------------------------------------------------------------- durability
def test_the_generation_is_on_disk_before_current_names_it(docs: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fsync and rename the build makes, in order (the real calls, recorded): each
    file of the new generation and its folder are flushed before CURRENT is replaced,
    and the index folder after."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        events.append(("replace", str(dst)))

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs Linux /proc/self/fd")
    out = tmp_path / "ix"
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    rep = build_index(docs, out)
    gen = (out / rep.generation).resolve()
    switch = events.index(("replace", str(out / CURRENT)))
    flushed = {path for kind, path in events[:switch] if kind == "fsync"}
    assert {str(p) for p in gen.iterdir()} | {str(gen)} <= flushed
    assert ("fsync", str(out.resolve())) in events[switch:]


def test_help_says_what_is_followed_capped_and_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("Followed: links to files inside the folder", "Capped:", "Refused with one line",
                  "--follow-links", "--max-archive-mb", "--max-docx-xml-mb", "--max-pdf-pages"):
        assert words in text, words
    for panel in ("Inputs", "Outputs", "Models and profile", "Performance", "Advanced"):
        assert f"─ {panel} ─" in text, panel


# ---------------------------------------------------------------- wide HTML
def test_a_page_with_a_very_wide_element_is_read_without_trafilatura(tmp_path: Path) -> None:
    from sanctuary_local.corpus.extract import HTML_TOO_WIDE, WIDE_CHILDREN, extract

    spans = "".join(f"<span>Sentence {i} about the harbour.</span> " for i in range(WIDE_CHILDREN + 500))
    page = ("<html><head><title>Wide</title><link rel='canonical' href='https://wide.example/'></head><body>"
            "<nav><a href='/'>Home</a> <a href='/x'>Sections</a></nav>"
            f"<div>{spans}</div><footer>All rights reserved</footer><script>var x;</script></body></html>")
    got = extract("wide.html", page.encode())
    text = got.units[0].text
    assert got.flags == (HTML_TOO_WIDE,) and (got.units[0].title, got.units[0].url) == ("Wide", "https://wide.example/")
    assert "Sentence 0 about" in text and f"Sentence {WIDE_CHILDREN + 499} about" in text
    assert "Sections" not in text and "All rights reserved" not in text and "var x" not in text
    normal = extract("eiffel-tower.html", (EXAMPLES / "eiffel-tower.html").read_bytes())
    assert normal.flags == () and "Landmarks" not in normal.units[0].text  # trafilatura still reads the rest
