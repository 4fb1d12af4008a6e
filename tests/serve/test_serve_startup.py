"""`sanctuary-local serve`'s start: every bad setting is a one-line `error:` and exit 2
before anything is bound or written (a bad --profile or --set, a port out of range, a body
cap under 1 KB, a token that could never match, a port in use, a --data inside the index,
a --corpus that is no index, a model or package of the profile that is not installed, a --data whose
secret cannot be written: then what the start created there is removed), and an open
server warns that its traffic can be read.

Each refusal runs the real CLI in its own process (`tests/support/serve_stub.py`: the stand-in LLM,
so a start that is wrongly accepted loads no real model) with a time limit: a server that
starts instead of refusing fails the test at that limit and is killed."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sanctuary_local.errors import UserError
from sanctuary_local.serve.app import ServeSettings, check_settings, exposure_warning
from sanctuary_local.serve.security import load_secret
from tests.support.serve_support import ROOT, STUB, TINY, build_index, tree

TOKEN = "s3cret-token-for-tests-0123"
#: A refused start takes a few seconds (imports); a server that starts instead is killed here.
LIMIT_S = 60


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(ROOT / "examples" / "corpus", tmp_path_factory.mktemp("startup") / "index")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SANCTUARY_SERVE_TOKEN"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}


def _defaults(args: tuple[str, ...]) -> list[str]:
    """``args`` after the test profile and port 0, each unless ``args`` gives its own (an
    option given twice is refused)."""
    given = {a.split("=")[0] for a in args}
    return [*(a for opt, v in (("--profile", TINY), ("--port", "0")) if opt not in given for a in (opt, v)), *args]


def refused(corpus: Path, data: Path, *args: str) -> str:
    """Run `serve` with these arguments; assert exit 2 with one `error:` line and no --data; that line."""
    cmd = [sys.executable, str(STUB), "0", "--corpus", str(corpus), "--data", str(data), *_defaults(args)]
    try:
        done = subprocess.run(cmd, env=_env(), cwd=data.parent, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"serve started instead of refusing {args}: {exc.stderr!r}") from None
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not data.exists(), f"a refused start created {data}: {sorted(p.name for p in data.iterdir())}"
    return lines[0]


def settings(index: Path, tmp_path: Path, **kw: object) -> ServeSettings:
    return ServeSettings(corpus=index, data=tmp_path / "data", profile=TINY, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- S1: --profile, --set
@pytest.mark.parametrize(("args", "says"), [
    (("--profile", "nosuch"), "profile 'nosuch' is neither a built-in profile"),
    (("--set", "nosuch.key=1"), "unknown config key 'nosuch'"),
    (("--set", "retrieval.segment_tokens=-1"), "retrieval.segment_tokens must be > 0"),
])
def test_a_profile_or_set_that_does_not_load_is_refused_at_start(index: Path, tmp_path: Path,
                                                                 args: tuple[str, ...], says: str) -> None:
    assert says in refused(index, tmp_path / "data", *args)


def test_the_config_is_resolved_without_loading_a_model(index: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="neither a built-in profile"):
        check_settings(ServeSettings(corpus=index, data=tmp_path / "data", profile="nosuch"))
    check_settings(settings(index, tmp_path, overrides={"retrieval": {"segment_tokens": 64}}))
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------- S3: --port range
@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_a_port_out_of_range_is_refused(index: Path, tmp_path: Path, port: str) -> None:
    assert f"--port must be in 0..65535 (0: any free port), got {port}" in refused(index, tmp_path / "data", "--port", port)


def test_port_bounds(index: Path, tmp_path: Path) -> None:
    for port in (0, 65535):
        check_settings(settings(index, tmp_path, port=port))
    for port in (-1, 65536, 70000):
        with pytest.raises(UserError, match="--port must be in 0..65535"):
            check_settings(settings(index, tmp_path, port=port))


# -------------------------------------------------------------------- S4: --max-body-kb
@pytest.mark.parametrize("kb", ["0", "-1"])
def test_a_body_cap_under_1_kb_is_refused(index: Path, tmp_path: Path, kb: str) -> None:
    assert f"--max-body-kb must be at least 1, got {kb}" in refused(index, tmp_path / "data", "--max-body-kb", kb)


# ------------------------------------------------------------------------- S5: --token
@pytest.mark.parametrize("token", [f" {TOKEN}", f"{TOKEN} ", f"{TOKEN}\t"])
def test_a_token_with_whitespace_at_an_end_is_refused(index: Path, tmp_path: Path, token: str) -> None:
    assert "--token begins or ends with whitespace" in refused(index, tmp_path / "data", "--token", token)


def test_a_token_that_cannot_cross_an_http_header_is_refused(index: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="printable ASCII"):
        check_settings(settings(index, tmp_path, token="pässwort-0123456789abc"))
    with pytest.raises(UserError, match="printable ASCII"):
        check_settings(settings(index, tmp_path, token="token-with\x01control-char"))
    check_settings(settings(index, tmp_path, token=TOKEN))


# ------------------------------------------------------------------ S6: a port in use
def test_a_port_in_use_leaves_no_data_behind(index: Path, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert "Address already in use" in refused(index, tmp_path / "data", "--port", str(port))
        # an existing --data is left as it was
        data = tmp_path / "kept"
        (data / "checks").mkdir(parents=True)
        (data / "mine.txt").write_text("the user's\n")
        before = tree(data)
        done = subprocess.run([sys.executable, str(STUB), "0", "--corpus", str(index), "--data", str(data),
                               "--profile", TINY, "--port", str(port)], env=_env(), capture_output=True, text=True,
                              timeout=LIMIT_S)
        assert done.returncode == 2 and "Address already in use" in done.stderr
        assert tree(data) == before and sorted(p.name for p in data.iterdir()) == ["checks", "mine.txt"]


# ---------------------------------------------------------- S7: --data inside the index
@pytest.mark.parametrize("inside", [".", "sub", "gen-000001/deeper"])
def test_data_in_the_index_is_refused(index: Path, tmp_path: Path, inside: str) -> None:
    before = tree(index)
    data = (index / inside) if inside != "." else index
    cmd = [sys.executable, str(STUB), "0", "--corpus", str(index), "--data", str(data), "--profile", TINY, "--port", "0"]
    try:
        done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"serve started with --data {data} inside the index") from None
    assert done.returncode == 2 and "is the corpus index" in done.stderr and "or inside it" in done.stderr, done.stderr
    assert tree(index) == before and not (index / "sub").exists()


def test_data_next_to_the_index_is_fine(index: Path, tmp_path: Path) -> None:
    check_settings(ServeSettings(corpus=index, data=index.parent / f"{index.name}-data", profile=TINY))
    link = tmp_path / "link"
    link.symlink_to(index)
    with pytest.raises(UserError, match="or inside it"):  # the same folder by another name
        check_settings(ServeSettings(corpus=link, data=index / "x", profile=TINY))


def test_data_inside_the_indexed_documents_is_refused(tmp_path: Path) -> None:
    """Checks and reports kept in the documents folder would be read as documents by the next
    `index` of it: refused, naming the folder; beside it is fine."""
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "examples" / "corpus", docs)
    index = build_index(docs, tmp_path / "index")
    with pytest.raises(UserError, match="inside the indexed documents folder"):
        check_settings(ServeSettings(corpus=index, data=docs / "serve-data", profile=TINY))
    assert sorted(p.name for p in docs.iterdir()) == sorted(p.name for p in (ROOT / "examples" / "corpus").iterdir())
    check_settings(ServeSettings(corpus=index, data=tmp_path / "serve-data", profile=TINY))


# -------------------------------------------------- S8: a documents folder, a missing one
def test_a_documents_folder_gets_the_commands_to_index_it(tmp_path: Path) -> None:
    docs = ROOT / "examples" / "corpus"
    line = refused(docs, tmp_path / "data")
    assert f"`sanctuary-local index {docs} --out my-index`" in line and "`sanctuary-local serve --corpus my-index`" in line
    assert f"--out {docs}" not in line  # never suggest writing the index into the documents


def test_a_missing_corpus_is_said_not_to_exist(tmp_path: Path) -> None:
    assert "does not exist" in refused(tmp_path / "nowhere", tmp_path / "data")
    (tmp_path / "file.txt").write_text("x")
    assert "not a folder" in refused(tmp_path / "file.txt", tmp_path / "data")


# ------------------------------------------------- S2: a warning on an open server
def _start_and_read(index: Path, data: Path, *args: str, env: dict[str, str]) -> str:
    """Start `serve`, wait for its address line, stop it; what it printed on stderr."""
    log = data.parent / f"{data.name}.log"
    cmd = [sys.executable, str(STUB), "0", "--corpus", str(index), "--data", str(data), *_defaults(args)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not re.search(r"serving http://", text := log.read_text(errors="replace")):
            assert proc.poll() is None and time.monotonic() < deadline, text
            time.sleep(0.1)
        return text
    finally:
        proc.kill()
        proc.wait(30)


def test_an_open_server_warns_that_its_traffic_and_token_can_be_read(index: Path, tmp_path: Path) -> None:
    text = _start_and_read(index, tmp_path / "argv", "--host", "0.0.0.0", "--token", TOKEN, env=_env())
    warning = [ln for ln in text.splitlines() if ln.startswith("warning: ")]
    assert len(warning) == 1, text
    assert "plain HTTP" in warning[0] and "token" in warning[0] and "ps" in warning[0]
    assert "SANCTUARY_SERVE_TOKEN" in warning[0] and TOKEN not in text

    text = _start_and_read(index, tmp_path / "env", "--host", "0.0.0.0", env=_env(SANCTUARY_SERVE_TOKEN=TOKEN))
    warning = [ln for ln in text.splitlines() if ln.startswith("warning: ")]
    assert len(warning) == 1 and "plain HTTP" in warning[0] and "(ps)" not in warning[0], text
    assert "(token required)" in text


def test_exposure_warning(index: Path, tmp_path: Path) -> None:
    assert exposure_warning(settings(index, tmp_path)) is None  # loopback, no token
    assert exposure_warning(settings(index, tmp_path, token=TOKEN)) is None  # from SANCTUARY_SERVE_TOKEN
    local = exposure_warning(settings(index, tmp_path, token=TOKEN, token_in_argv=True))
    assert local is not None and "(ps)" in local and "plain HTTP" not in local
    open_ = exposure_warning(settings(index, tmp_path, host="0.0.0.0", token=TOKEN))
    assert open_ is not None and "plain HTTP" in open_ and "(ps)" not in open_


# ------------------------------------------ S9: a model of the profile that is not installed
@pytest.mark.parametrize(("args", "says"), [
    (("--set", "hyde.llm.model=/nowhere/model.gguf"), "/nowhere/model.gguf: not found"),
    (("--set", "retrieval.retriever.model=packaged:no-such-embedder"), "unknown packaged model 'packaged:no-such-embedder'"),
    (("--set", "verdict.mode=trained", "--set", "verdict.trained_model=packaged:no-such-verdict"),
     "verdict model 'packaged:no-such-verdict' not found"),
])
def test_a_model_that_is_not_installed_is_refused_at_start(index: Path, tmp_path: Path,
                                                           args: tuple[str, ...], says: str) -> None:
    """Before, the server started and every check then failed on the missing model."""
    line = refused(index, tmp_path / "data", *args)
    assert says in line and "fix: " in line and f"sanctuary-local doctor --profile {TINY}" in line, line


def test_a_profile_file_naming_a_missing_model_is_refused(index: Path, tmp_path: Path) -> None:
    profile = tmp_path / "mine.toml"
    profile.write_text(f'base = "cpu-fast"\n\n[retrieval.sts]\nmodel = "{tmp_path / "no-embedder"}"\n')
    line = refused(index, tmp_path / "data", "--profile", str(profile))
    assert f"model (chunking): {tmp_path / 'no-embedder'}: not found" in line, line


def test_the_model_check_loads_and_assembles_nothing(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GGUF not assembled yet passes (the first check assembles it) and nothing is written
    to the model cache; an openai_http stage's model is its server's, not looked for here."""
    monkeypatch.setenv("SANCTUARY_CACHE", str(tmp_path / "cache"))
    check_settings(settings(index, tmp_path))
    check_settings(settings(index, tmp_path, overrides={"hyde": {"llm": {
        "backend": "openai_http", "base_url": "http://127.0.0.1:9/v1", "model": "served-by-the-server"}}}))
    assert not (tmp_path / "cache").exists() and not (tmp_path / "data").exists()


# ------------------------------------------------ S10: a --data that cannot be written
#: Runs serve_stub.py with every create of the names in $FULL (DATA/secret and its temp file
#: by default; a file or a folder) failing: disk full.
FULL_DISK = """import errno, os, runpy, sys
names = tuple(os.environ.get("FULL", "secret,.secret.").split(","))
def full(real):
    def failing(path, *args, **kw):
        flags = args[0] if real is os.open else os.O_CREAT
        if flags & os.O_CREAT and os.path.basename(os.fspath(path)).startswith(names):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))
        return real(path, *args, **kw)
    return failing
os.open, os.mkdir = full(os.open), full(os.mkdir)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _full_disk(index: Path, data: Path, full: str = "secret,.secret.") -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", FULL_DISK, str(STUB), "0", "--corpus", str(index), "--data", str(data),
           "--profile", TINY, "--port", "0"]
    try:
        return subprocess.run(cmd, env=_env(FULL=full), cwd=index.parent, capture_output=True, text=True,
                              timeout=LIMIT_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"serve started without its secret: {exc.stderr!r}") from None


def test_a_secret_that_cannot_be_written_is_one_line_and_leaves_no_data(index: Path, tmp_path: Path) -> None:
    """Before: a traceback (exit 1) and a half-made --data (checks/, serve.lock) left behind."""
    data = tmp_path / "new" / "data"  # neither folder there: both made by the start, both removed
    done = _full_disk(index, data)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: cannot write the server's secret") and "No space left" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [], sorted(tmp_path.rglob("*"))


def test_a_failed_start_leaves_an_existing_data_folder_as_it_was(index: Path, tmp_path: Path) -> None:
    data = tmp_path / "kept"
    data.mkdir(mode=0o750)
    (data / "mine.txt").write_text("the user's\n")
    before, mode = tree(data), data.stat().st_mode
    done = _full_disk(index, data)
    assert done.returncode == 2 and "cannot write the server's secret" in done.stderr, done.stderr
    assert tree(data) == before and data.stat().st_mode == mode and sorted(p.name for p in data.iterdir()) == ["mine.txt"]


def test_a_checks_folder_that_cannot_be_made_leaves_no_lock_behind(index: Path, tmp_path: Path) -> None:
    """Before: the refused start left DATA/serve.lock (it was made, then only closed)."""
    data = tmp_path / "kept"
    data.mkdir()
    (data / "mine.txt").write_text("the user's\n")
    before = tree(data)
    done = _full_disk(index, data, full="checks")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "cannot use it" in lines[0], done.stderr
    assert "No space left" in lines[0] and tree(data) == before, sorted(p.name for p in data.iterdir())


def test_the_secret_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails (here its fsync: an I/O error) leaves no partial or temporary file,
    and an old secret as it was; a written one is 32 bytes, mode 0600, read back next time."""
    (tmp_path / "secret").write_bytes(b"short")  # not a key: replaced
    real = os.fsync

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(UserError, match="cannot write the server's secret") as err:
        load_secret(tmp_path)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"] and (tmp_path / "secret").read_bytes() == b"short"
    monkeypatch.setattr(os, "fsync", real)
    key = load_secret(tmp_path)
    assert len(key) == 32 and (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    assert load_secret(tmp_path) == key and sorted(p.name for p in tmp_path.iterdir()) == ["secret"]


def test_a_backend_package_that_is_not_installed_is_refused(index: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile whose LLM backend's package is missing (here llama_cpp, looked up as not
    installed) is refused with the fix; before, the server started and every check failed."""
    import sanctuary_local.machine.doctor as doctor

    real = doctor._installed
    monkeypatch.setattr(doctor, "_installed", lambda module: module != "llama_cpp" and real(module))
    with pytest.raises(UserError) as err:
        check_settings(settings(index, tmp_path))
    said = str(err.value)
    assert said.startswith("cannot serve: a package is not installed: LLM backend (stage 1): llama_cpp: llama_cpp not "
                           "installed") and "pip install" in said and "\n" not in said, said
    assert not (tmp_path / "data").exists()
