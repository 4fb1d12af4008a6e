"""`sanctuary-local serve`: the JSON API and the pages on a real server process (the stand-in
LLM of benchmarks/fake_llm.py, real retrieval over a corpus index), and the hostile inputs:
markup in the claim and in a page's text, path traversal, oversize bodies, CSRF-less forms,
a foreign Host, a missing or wrong token, an open --host without a token. Each gets the
stated answer, and nothing is written outside --data."""

from __future__ import annotations

import html
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sanctuary_local.cli import main
from sanctuary_local.records import LABELS
from tests.support.serve_support import EVIL, KEEP_SNIPPETS, Server, build_index, hostile_corpus, tree

CLAIM = "Water boils at 70 degrees Celsius on the summit of Mount Everest."
TOKEN = "s3cret-token-for-tests-0123"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("serve")
    corpus = hostile_corpus(root)
    index = build_index(corpus, root / "index")
    before = tree(corpus, index)
    server = Server(index, root / "data", *KEEP_SNIPPETS)
    try:
        server.wait_ready()
        yield server, root
    finally:
        server.close()
    assert tree(corpus, index) == before, "the server wrote into the corpus or its index"
    written = {p.name for p in root.iterdir()} - {"corpus", "index", "data", "data.log", "outside-secret.txt"}
    assert written == set(), f"written outside --data: {written}"


@pytest.fixture(scope="module")
def done(site: tuple[Server, Path]) -> dict:
    server, _ = site
    reply = server.request("POST", "/api/checks", {"claim": CLAIM, "claim_date": "2024-05-01"})
    assert reply.status == 202, reply.text
    view = server.wait_done(reply.json()["id"])
    assert view["status"] == "done", view
    return view


def test_api_check_lifecycle(site: tuple[Server, Path], done: dict) -> None:
    server, root = site
    assert done["claim"] == CLAIM and done["claim_date"] == "2024-05-01" and done["label"] in LABELS
    assert [s["state"] for s in done["stages"]] == ["done", "done", "done"]
    result = done["result"]  # the predictions.json record
    saved = orjson.loads((root / "data" / "checks" / done["id"] / "run" / "predictions.json").read_bytes())
    assert saved == [result] and result["pred_label"] == done["label"]
    download = server.request("GET", f"/checks/{done['id']}/download")
    assert download.status == 200 and orjson.loads(download.body) == saved
    assert "attachment" in download.headers["content-disposition"]
    history = server.request("GET", "/api/checks").json()["checks"]
    assert done["id"] in [c["id"] for c in history] and all("result" not in c for c in history)
    assert server.request("GET", "/api/checks/999999").status == 404
    assert server.request("GET", "/api/checks/..%2f..%2fetc").status == 404


def test_page_shows_the_result_with_highlighted_evidence(site: tuple[Server, Path], done: dict) -> None:
    server, _ = site
    page = server.request("GET", f"/checks/{done['id']}")
    assert page.status == 200 and 'http-equiv="refresh"' not in page.text
    assert f'id="verdict">{done["label"]}<' in page.text and html.escape(CLAIM) in page.text
    assert "<script" not in page.text.lower()
    evidence = done["result"]["evidence"]
    assert evidence and re.findall(r'id="source-(\d+)"', page.text)
    source = server.request("GET", f"/checks/{done['id']}/evidence/1")
    marked = re.search(r'<mark id="span">(.*?)</mark>', source.text, re.S)
    assert source.status == 200 and marked, source.text[-2000:]
    assert html.unescape(marked.group(1)).strip()
    assert server.request("GET", f"/checks/{done['id']}/evidence/99").status == 404
    home = server.request("GET", "/")
    assert home.status == 200 and f'href="/checks/{done["id"]}"' in home.text
    css = server.request("GET", "/static/serve.css")
    assert css.status == 200 and b"mark" in css.body


def test_label_probabilities_are_shown_when_the_verdict_has_them(tmp_path: Path) -> None:
    from sanctuary_local.serve.rendering import probabilities

    meta = {"label_scores": {"probabilities": [0.1, 0.6, 0.2, 0.1], "calibrated": True}}
    assert probabilities(meta) == ([(LABELS[1], 0.6), (LABELS[2], 0.2), (LABELS[0], 0.1), (LABELS[3], 0.1)], True)
    assert probabilities({}) == ([], False) and probabilities({"label_scores": {"probabilities": "x"}}) == ([], False)


def test_the_page_and_the_api_show_label_probabilities(site: tuple[Server, Path], done: dict, tmp_path: Path) -> None:
    """A verdict with label probabilities (``meta.label_scores``, as the trained classifier
    writes them) gets them on the page, best first, and in the API."""
    import shutil

    from sanctuary_local.serve.jobs import CheckRecord
    from sanctuary_local.serve.rendering import load_result, record_json, templates

    _, root = site
    run_dir = tmp_path / "run"
    shutil.copytree(root / "data" / "checks" / done["id"] / "run", run_dir)
    preds = orjson.loads((run_dir / "predictions.json").read_bytes())
    preds[0]["meta"]["label_scores"] = {"probabilities": [0.2, 0.7, 0.06, 0.04], "calibrated": True}
    (run_dir / "predictions.json").write_bytes(orjson.dumps(preds))
    result = load_result(run_dir, root / "index", set(), done["id"])
    rec = CheckRecord(id=done["id"], claim=CLAIM, status="done", label=LABELS[1])
    page = templates().get_template("serve_check.html").render(
        csrf="x", corpus_name="ix", login=False, server_state="ready", server_problem="", rec=rec, result=result,
        result_problem="", position=None, eta=None, stage_rows=[], refresh=None)
    rows = re.findall(r"<tr><td>([^<]+)</td><td><meter[^>]*>[^<]*</meter></td><td class=\"num\">([\d.]+)</td>", page)
    assert [(html.unescape(lab), p) for lab, p in rows] == [(LABELS[1], "0.70"), (LABELS[0], "0.20"), (LABELS[2], "0.06"),
                                                            (LABELS[3], "0.04")]
    assert "Label probabilities (calibrated)" in page
    view = record_json(rec, position=None, eta_s=None, stages=[], result=result)
    assert view["label_probabilities"] == {LABELS[1]: 0.7, LABELS[0]: 0.2, LABELS[2]: 0.06, LABELS[3]: 0.04}


def test_every_security_header_is_sent(site: tuple[Server, Path], done: dict) -> None:
    server, _ = site
    for path in ("/", f"/checks/{done['id']}", "/api/checks", "/nowhere"):
        headers = server.request("GET", path).headers
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp, path
        assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"


def test_markup_in_the_claim_is_text(site: tuple[Server, Path]) -> None:
    server, _ = site
    reply = server.request("POST", "/api/checks", {"claim": EVIL})
    view = server.wait_done(reply.json()["id"])
    assert view["claim"] == EVIL
    for path in (f"/checks/{view['id']}", "/"):
        text = server.request("GET", path).text
        assert EVIL in html.unescape(text)  # shown as text ...
        assert "<script" not in text.lower() and "<img" not in text.lower()  # ... never as markup


def test_markup_in_page_text_and_file_names_is_text(site: tuple[Server, Path], done: dict) -> None:
    server, _ = site
    paths = [e["url"] for e in done["result"]["evidence_all"]]
    assert "evil-page.txt" in paths, paths  # what the stand-in's question retrieves
    n = paths.index("evil-page.txt") + 1
    for path in (f"/checks/{done['id']}", f"/checks/{done['id']}/evidence/{n}"):
        text = server.request("GET", path).text
        assert "document.title" in text and "<script" not in text.lower() and "<img" not in text.lower()
    raw = server.request("GET", "/files/evil-page.txt")  # the file itself: sandboxed, no script may run
    assert raw.status == 200 and raw.headers["content-security-policy"].startswith("sandbox")
    named = server.request("GET", "/files/" + urllib.parse.quote('name"<img src=x onerror=alert(2)>.md'))
    assert named.status == 200 and named.body.startswith(b"Water boils")


@pytest.mark.parametrize("path", [
    "/files/../../../../etc/passwd", "/files/..%2f..%2f..%2fetc%2fpasswd", "/files/%2e%2e/%2e%2e/etc/passwd",
    "/files//etc/passwd", "/files/%2fetc%2fpasswd", "/files/link-out.txt", "/files/notes/../../outside-secret.txt",
    "/files/notes", "/files/", "/files/missing.txt", "/files/boiling-point.pdf%00.txt",
])
def test_files_outside_the_corpus_are_404(site: tuple[Server, Path], path: str) -> None:
    server, _ = site
    reply = server.request("GET", path)
    assert reply.status == 404, (path, reply.status)
    assert b"not for the server" not in reply.body and b"root:" not in reply.body


def test_indexed_files_are_served_sandboxed(site: tuple[Server, Path]) -> None:
    server, _ = site
    pdf = server.request("GET", "/files/boiling-point.pdf")
    assert pdf.status == 200 and pdf.body.startswith(b"%PDF") and pdf.headers["content-type"] == "application/pdf"
    note = server.request("GET", "/files/notes/honey.txt")
    assert note.status == 200 and "sandbox" in note.headers["content-security-policy"]


def test_claims_that_are_refused(site: tuple[Server, Path]) -> None:
    server, _ = site
    n_before = len(server.request("GET", "/api/checks").json()["checks"])
    long = server.request("POST", "/api/checks", {"claim": "x" * 2001})
    assert long.status == 422 and long.json()["error"] == "the claim has 2,001 characters; at most 2,000 are allowed"
    assert server.request("POST", "/api/checks", {"claim": "   "}).json()["error"] == "the claim is empty"
    # only invisible characters: zero-width spaces and joiners, a BOM, bidi controls (Unicode
    # category Cf), with whitespace around them, are empty too (they were checked as a claim)
    for invisible in ("\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200b \n\t\u00a0", "\u202e\u2066\u200f", "\u00ad\u061c"):
        reply = server.request("POST", "/api/checks", {"claim": invisible})
        assert reply.status == 422 and reply.json()["error"] == "the claim is empty", (invisible, reply.text)
    # a control character (NUL, ESC, DEL, a C1 code) is refused in one line saying which and where
    for claim, code, at in (("Water\x00boils", "U+0000", 6), ("\x1b[31mWater boils", "U+001B", 1),
                            ("Water boils\x7f", "U+007F", 12), ("Water\u0085boils", "U+0085", 6)):
        reply = server.request("POST", "/api/checks", {"claim": claim})
        error = reply.json()["error"]
        assert reply.status == 422 and f"control character ({code} at character {at})" in error, (claim, error)
        assert "\n" not in error and claim not in error
    # line breaks and tabs inside a claim, and a zero-width character beside real text, are fine
    assert server.request("POST", "/api/checks", {"claim": "Water\tboils\nat 70\u200b degrees"}).status == 202
    n_before += 1
    assert server.request("POST", "/api/checks", {"claim": "x", "claim_date": "01-05-2024"}).status == 422
    assert server.request("POST", "/api/checks", {"claim": 5}).status == 422
    assert server.request("POST", "/api/checks", {"text": "x"}).status == 422
    assert server.request("POST", "/api/checks", b"{not json", {"content-type": "application/json"}).status == 422
    plain = server.request("POST", "/api/checks", b'{"claim": "x"}', {"content-type": "text/plain"})
    assert plain.status == 415  # what a cross-site form could send
    huge = server.request("POST", "/api/checks", b'{"claim": "' + b"x" * 70_000 + b'"}', {"content-type": "application/json"})
    assert huge.status == 413 and "too large" in huge.json()["error"]
    assert server.request("GET", "/api/checks").json()["checks"].__len__() == n_before


def test_a_chunked_oversize_body_is_cut_off(site: tuple[Server, Path]) -> None:
    import http.client

    server, _ = site
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.putrequest("POST", "/api/checks")
    conn.putheader("content-type", "application/json")
    conn.putheader("transfer-encoding", "chunked")
    conn.endheaders()
    for _ in range(10):
        conn.send(b"2000\r\n" + b"x" * 0x2000 + b"\r\n")
    conn.send(b"0\r\n\r\n")
    assert conn.getresponse().status == 413
    conn.close()


def test_forms_need_their_csrf_token(site: tuple[Server, Path]) -> None:
    server, _ = site
    n_before = len(server.request("GET", "/api/checks").json()["checks"])
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert server.request("POST", "/checks", b"claim=forged", form).status == 403
    assert server.request("POST", "/checks", b"claim=forged&csrf=abc", {**form, "cookie": "sl_sid=" + "a" * 32}).status == 403
    home = server.request("GET", "/")
    sid = re.search(r"sl_sid=([^;]+)", home.headers["set-cookie"]).group(1)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', home.text).group(1)
    other_sid = "b" * 32  # a token is only good with the browser cookie it was made for
    refused = server.request("POST", "/checks", f"claim=forged&csrf={csrf}".encode(), {**form, "cookie": f"sl_sid={other_sid}"})
    assert refused.status == 403
    assert len(server.request("GET", "/api/checks").json()["checks"]) == n_before
    ok = server.request("POST", "/checks", f"claim=A+real+claim&csrf={csrf}".encode(), {**form, "cookie": f"sl_sid={sid}"})
    assert ok.status == 303 and re.fullmatch(r"/checks/\d{6}", ok.headers["location"])
    too_long = server.request("POST", "/checks", f"claim={'y' * 2001}&csrf={csrf}".encode(), {**form, "cookie": f"sl_sid={sid}"})
    assert too_long.status == 422 and "at most 2,000 are allowed" in too_long.text
    # a browser counts a line break in the textarea as one character (maxlength=2000) but sends
    # it as CRLF: 2,000 characters typed on 200 lines are accepted, and stored with plain \n
    lines = urllib.parse.quote(("x" * 9 + "\r\n") * 200)
    typed = server.request("POST", "/checks", f"claim={lines}&csrf={csrf}".encode(), {**form, "cookie": f"sl_sid={sid}"})
    assert typed.status == 303, typed.text[-500:]
    stored = server.request("GET", "/api" + typed.headers["location"]).json()["claim"]
    assert "\r" not in stored and stored == ("x" * 9 + "\n") * 199 + "x" * 9
    assert server.request("GET", "/checks").headers.get("location") == "/"  # a refused form's URL, reloaded
    blank = urllib.parse.quote("\u200b\u200b\r\n\u200b")  # typed in the form: refused as empty, not checked
    invisible = server.request("POST", "/checks", f"claim={blank}&csrf={csrf}".encode(), {**form, "cookie": f"sl_sid={sid}"})
    assert invisible.status == 422 and 'id="form-error">the claim is empty<' in invisible.text


def test_a_foreign_host_header_is_refused(site: tuple[Server, Path]) -> None:
    server, _ = site  # a page of evil.example whose name resolves to 127.0.0.1 (DNS rebinding)
    assert server.request("GET", "/api/checks", headers={"host": "evil.example:8000"}).status == 421
    assert server.request("GET", "/api/checks", headers={"host": f"localhost:{server.port}"}).status == 200


def test_an_open_host_needs_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str], repo_dir: Path) -> None:
    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    capsys.readouterr()
    code = main(["serve", "--corpus", str(index), "--data", str(tmp_path / "data"), "--host", "0.0.0.0", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "--host 0.0.0.0 is not a loopback address" in err and "--token" in err
    assert not (tmp_path / "data").exists()
    assert main(["serve", "--corpus", str(index), "--data", str(tmp_path / "data"), "--token", "short"]) == 2
    assert main(["serve", "--corpus", str(tmp_path), "--data", str(tmp_path / "data")]) == 2


def test_token_guards_the_api_and_the_pages(tmp_path: Path, repo_dir: Path) -> None:
    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data", "--token", TOKEN)
    try:
        bearer = {"authorization": f"Bearer {TOKEN}"}
        server.wait_ready(**bearer)
        assert server.request("GET", "/api/checks").status == 401
        assert server.request("GET", "/api/checks", headers={"authorization": "Bearer wrong-token-0000000000"}).status == 401
        assert server.request("POST", "/api/checks", {"claim": "x"}).status == 401
        assert server.request("GET", "/api/checks", headers=bearer).status == 200
        assert server.request("GET", "/").headers["location"] == "/login"
        assert server.request("GET", "/files/notes/honey.txt").status == 303
        login = server.request("GET", "/login")
        sid = re.search(r"sl_sid=([^;]+)", login.headers["set-cookie"]).group(1)
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', login.text).group(1)
        form = {"content-type": "application/x-www-form-urlencoded", "cookie": f"sl_sid={sid}"}
        assert server.request("POST", "/login", f"token=nope&csrf={csrf}".encode(), form).status == 401
        assert server.request("POST", "/login", f"token={TOKEN}".encode(), form).status == 403  # no CSRF token
        ok = server.request("POST", "/login", f"token={TOKEN}&csrf={csrf}".encode(), form)
        session = re.search(r"sl_session=([^;]+)", ok.headers["set-cookie"]).group(1)
        assert ok.status == 303 and TOKEN not in ok.headers["set-cookie"]
        home = server.request("GET", "/", headers={"cookie": f"sl_sid={sid}; sl_session={session}"})
        assert home.status == 200 and "Log out" in home.text
    finally:
        server.close()


def test_a_full_queue_answers_429(tmp_path: Path, repo_dir: Path) -> None:
    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data", "--max-queue", "1", latency_s=30)
    try:
        server.wait_ready()
        first = server.request("POST", "/api/checks", {"claim": "one"})  # runs (30 s per model call)
        while server.request("GET", f"/api/checks/{first.json()['id']}").json()["status"] != "running":
            time.sleep(0.1)
        assert server.request("POST", "/api/checks", {"claim": "two"}).status == 202  # waits
        full = server.request("POST", "/api/checks", {"claim": "three"})
        assert full.status == 429 and full.headers["retry-after"] and "the queue is full" in full.json()["error"]
    finally:
        server.close()


def test_flags_are_explained_on_the_check_page(tmp_path: Path, repo_dir: Path) -> None:
    """Each flag of a finished check is shown with its plain-language sentence
    (``flag_help.explain``), its code kept beside it; before, the page listed bare codes such
    as ``no_snippets:q0``. The stand-in's one question is far from every page: with the
    default threshold it finds no snippet, which flags ``no_snippets:q0``."""
    from sanctuary_local.flag_help import UNKNOWN_TEXT, explain

    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data")
    try:
        server.wait_ready()
        view = server.wait_done(server.request("POST", "/api/checks", {"claim": CLAIM}).json()["id"])
        flags = view["result"]["flags"]
        assert "no_snippets:q0" in flags, flags
        page = server.request("GET", f"/checks/{view['id']}").text
        shown = re.findall(r'<li><code class="flag" dir="auto">(.*?)</code> (.*?)</li>', re.search(
            r'<ul class="flags explained" id="flags">(.*?)</ul>', page, re.S).group(1))
        assert [(html.unescape(code), html.unescape(text)) for code, text in shown] == [(f, explain(f)) for f in flags]
        assert all(text != UNKNOWN_TEXT for _, text in shown)
        assert "for these questions nothing in the store was similar enough to count as evidence" in page
    finally:
        server.close()


def test_the_trained_verdict_is_resident_and_shows_its_stage(tmp_path: Path, repo_dir: Path) -> None:
    """Stage 3's trained verdict (the `cpu` profiles' default) runs on the server's resident
    model, loaded with the others, and its stage shows in each check's progress."""
    index = build_index(repo_dir / "examples" / "corpus", tmp_path / "index")
    server = Server(index, tmp_path / "data", *KEEP_SNIPPETS, "--set", "verdict.mode=trained")
    try:
        server.wait_ready()
        for claim in (CLAIM, "The Eiffel Tower grows in summer."):
            view = server.wait_done(server.request("POST", "/api/checks", {"claim": claim}).json()["id"])
            assert view["status"] == "done" and view["label_probabilities"], view
            assert [(s["name"], s["state"]) for s in view["stages"]] == [
                ("hyde", "done"), ("retrieval", "done"), ("verdict", "done")], view["stages"]
            # its justification lists "Not Enough Evidence 0.16": a probability, not a made-up citation
            page = server.request("GET", f"/checks/{view['id']}").text
            justification = re.search(r'id="justification"[^>]*>(.*?)</div>', page, re.S).group(1)
            assert re.search(r"Not Enough Evidence \d\.\d\d", justification) and "cite-missing" not in justification
    finally:
        server.close()


def test_the_resident_engine_loads_the_trained_verdict_once() -> None:
    from sanctuary_local.config.settings import load_config
    from sanctuary_local.serve.resident import ResidentEngine

    cfg = load_config("cpu-fast").verdict
    engine = ResidentEngine()
    first = engine.trained(cfg)
    assert engine.trained(cfg) is first
    engine.shutdown()
    assert engine.trained(cfg) is not first  # released, then loaded again
