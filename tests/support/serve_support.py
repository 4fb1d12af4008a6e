"""Helpers of the serve tests: a real server process (``tests/support/serve_stub.py``: the stand-in
LLM, real retrieval) on a free loopback port, raw HTTP requests, a hostile corpus."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "tests" / "data" / "tiny_cpu.toml")
STUB = ROOT / "tests" / "support" / "serve_stub.py"
#: Keep every retrieved snippet (the stub's one question is far from any page): the pages get evidence.
KEEP_SNIPPETS = ("--set", "retrieval.retriever.similarity_threshold=0")
EVIL = '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Server:
    """``sanctuary-local serve`` (stand-in LLM) in its own process."""

    def __init__(self, corpus: Path, data: Path, *args: str, latency_s: float = 0.0, log: Path | None = None,
                 profile: str = TINY, real_model: bool = False, env: dict[str, str] | None = None) -> None:
        self.log = log or data.parent / f"{data.name}.log"
        head = [sys.executable, "-m", "sanctuary_local.cli", "serve"] if real_model else [sys.executable, str(STUB), str(latency_s)]
        self.cmd = [*head, "--corpus", str(corpus), "--data", str(data), "--profile", profile, "--port", "0", *args]
        env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(self.cmd, env=env, cwd=data.parent, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "wb"))  # noqa: SIM115 - the process owns it
        self.port = self._port()

    def _port(self, timeout: float = 180) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if m := re.search(r"serving http://[^:]+:(\d+)/", self.log.read_text(errors="replace")):
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"serve did not start: {self.log.read_text()[-3000:]}")

    def wait_ready(self, timeout: float = 300, **headers: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.request("GET", "/api/status", headers=headers).json().get("state")
            if state == "ready":
                return
            assert state in ("starting", "loading models"), self.log.read_text()[-3000:]
            time.sleep(0.2)
        raise AssertionError("the models did not load in time")

    def request(self, method: str, path: str, body: bytes | dict | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        """One request, raw path as given (no normalisation, no redirects followed)."""
        headers = dict(headers or {})
        if isinstance(body, dict):
            body = orjson.dumps(body)
            headers.setdefault("content-type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def wait_done(self, check_id: str, timeout: float = 300, **headers: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = self.request("GET", f"/api/checks/{check_id}", headers=headers).json()
            if view["status"] in ("done", "failed"):
                return view
            time.sleep(0.2)
        raise AssertionError(f"check {check_id} did not finish: {view}")

    def stop(self, sig: int = 15, timeout: float = 30) -> float:
        """Send ``sig``; the seconds until the process was gone."""
        t = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout)
        return time.monotonic() - t

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def build_index(corpus: Path, out: Path) -> Path:
    from sanctuary_local.cli import main

    assert main(["index", str(corpus), "--out", str(out), "--quiet"]) == 0
    return out


def hostile_corpus(root: Path) -> Path:
    """examples/corpus plus a page whose text is markup, a file whose name is markup, and a
    symlink to a file outside the corpus."""
    import shutil

    corpus = root / "corpus"
    shutil.copytree(ROOT / "examples" / "corpus", corpus)
    # the stand-in LLM's question is "What does the claim say?": this page is what retrieval finds for it
    (corpus / "evil-page.txt").write_text(f"What does the claim say? It says so. {EVIL} Water boils at 100 degrees.\n",
                                          encoding="utf-8")
    (corpus / 'name"<img src=x onerror=alert(2)>.md').write_text("Water boils at a lower temperature on mountains.\n", encoding="utf-8")
    secret = root / "outside-secret.txt"
    secret.write_text("not for the server\n")
    (corpus / "link-out.txt").symlink_to(secret)
    return corpus


def tree(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``roots``: path → (size, mtime ns) (to prove nothing was written there)."""
    out = {}
    for r in roots:
        for p in sorted(r.rglob("*")):
            if p.is_file() and not p.is_symlink():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def many_checks(data: Path, n: int, after: int = 0) -> list[str]:
    """A ``--data`` folder holding ``n`` finished checks whose ids follow ``after`` (as if
    ``after`` checks had been given before and deleted); their ids, oldest first."""
    from sanctuary_local.serve.jobs import CheckStore

    (data / "checks").mkdir(parents=True, exist_ok=True)
    (data / "checks" / ".last-id").write_text(str(after))
    store = CheckStore(data)
    try:
        ids = []
        for i in range(n):
            rec = store.create(f"Claim number {i + 1} of the history.", None)
            rec.status, rec.label = "done", "Supported"
            store.save(rec)
            ids.append(rec.id)
        return ids
    finally:
        store.close()
