"""A verdict model's directory: its card, its hash, atomic writes and loading by name.

A model directory holds ``model_card.json`` (kind, settings, training data, metrics) and the
kind's files. ``packaged:NAME`` names a model shipped in the package
(``sanctuary_local/data/verdict_models/NAME``); any other name is a directory path. A
shipped model's card pins the SHA-256 of its files (``files_sha256``), checked on load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import VerdictModel

CARD = "model_card.json"
RULE = "decision_rule.json"
CONFIDENCE = "confidence_rule.json"
PACKAGED = "packaged:"
#: Model kinds a card may name → what loads them (``load_model``).
KINDS = ("tfidf", "pair-tfidf", "stance", "encoder", "pair-encoder", "stack")


def packaged_dir() -> Path:
    """Where shipped verdict models live."""
    return Path(str(resources.files("sanctuary_local") / "data" / "verdict_models"))


def resolve(name: str) -> Path:
    """The directory of ``packaged:NAME`` or of a path; ``MissingModel`` if absent."""
    if name.startswith(PACKAGED):
        path = packaged_dir() / name.removeprefix(PACKAGED)
        shipped = sorted(p.name for p in packaged_dir().iterdir() if p.is_dir()) if packaged_dir().is_dir() else []
        hint = f"shipped: {', '.join(PACKAGED + s for s in shipped) or 'none'}"
    else:
        path, hint = Path(name).expanduser(), "train one with `sanctuary-local verdict-model train`"
    if not (path / CARD).is_file():
        raise MissingModel(f"verdict model '{name}' not found: no {CARD} in {path} ({hint})")
    return path


def directory_sha256(directory: Path) -> str:
    """SHA-256 over the model's files (names and bytes, sorted), the card and the two fitted
    rules excluded: the same weights give the same hash wherever they were trained or copied."""
    h = hashlib.sha256()
    for f in sorted(p for p in directory.rglob("*") if p.is_file() and p.name not in (CARD, RULE, CONFIDENCE)):
        h.update(f.relative_to(directory).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


#: The card's settings that loading reads: (type, least value, default).
_LOAD_SETTINGS = {"answer_words": (int, 1, 48), "max_length": (int, 1, 256), "answer_focus": (bool, None, False),
                  "max_pairs": (int, 0, 10)}


def read_card(directory: Path) -> dict[str, Any]:
    """The model card, checked to be an object with a known kind, a ``files_sha256`` pin and
    the settings loading reads (``_LOAD_SETTINGS``) of the right types."""
    path = directory / CARD
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable model card: {exc}") from None
    if not isinstance(card, dict):
        raise UserError(f"{path}: not a model card (a JSON object), got {type(card).__name__}")
    if card.get("kind") not in KINDS:
        raise UserError(f"{path}: unknown model kind {card.get('kind')!r}; valid kinds: {', '.join(KINDS)}")
    pin = card.get("files_sha256")
    if not (isinstance(pin, str) and len(pin) == 64 and all(ch in "0123456789abcdef" for ch in pin)):
        raise UserError(f"{path}: the card pins no files_sha256 (the SHA-256 of the model's files), "
                        "so the files cannot be checked; retrain the model with `verdict-model train`")
    settings = card.setdefault("settings", {})
    if not isinstance(settings, dict):
        raise UserError(f"{path}: 'settings' must be an object, got {type(settings).__name__}")
    for key, (kind, least, default) in _LOAD_SETTINGS.items():
        value = settings.setdefault(key, default)
        if type(value) is not kind or (least is not None and value < least):
            raise UserError(f"{path}: settings.{key} must be {f'an integer >= {least}' if kind is int else 'true or false'}, "
                            f"got {value!r}")
    return card


def verify(name: str) -> tuple[Path, dict[str, Any], str]:
    """The directory, card and files' SHA-256 of the model ``name``; a one-line error if it is
    absent, its card is bad, or its files are not the ones the card pins."""
    directory = resolve(name)
    card = read_card(directory)
    sha = directory_sha256(directory)
    if card["files_sha256"] != sha:
        raise MissingModel(f"verdict model '{name}': its files hash to {sha[:16]}…, the card pins "
                           f"{card['files_sha256'][:16]}…; the model in {directory} is damaged or was changed")
    return directory, card, sha


def load_model(name: str, threads: int = 2) -> VerdictModel:
    """Load a verdict model by name (``packaged:NAME`` or a directory), its hash checked
    against the card's ``files_sha256``."""
    directory, card, sha = verify(name)
    settings = card["settings"]
    words, focus, pairs = settings["answer_words"], settings["answer_focus"], settings["max_pairs"]
    if card["kind"] == "stack":
        return _load_stack(name, directory, sha, threads)
    try:
        if card["kind"] == "tfidf":
            from sanctuary_local.verdict_model.tfidf import TfidfModel

            return TfidfModel(directory, sha, words, focus, pairs)
        if card["kind"] == "pair-tfidf":
            from sanctuary_local.verdict_model.pair_tfidf import PairTfidfModel

            return PairTfidfModel(directory, sha, words, focus, pairs, settings.get("pair_pool", "logmean"))
        if card["kind"] == "stance":
            from sanctuary_local.verdict_model.stance import StanceModel

            return StanceModel(directory, sha, words, focus, pairs)
        if card["kind"] == "pair-encoder":
            from sanctuary_local.verdict_model.pair_encoder import PairEncoderModel

            return PairEncoderModel(directory, sha, words, settings["max_length"], threads, focus, pairs,
                                    settings.get("pair_pool", "logmean"))
        from sanctuary_local.verdict_model.encoder import EncoderModel

        return EncoderModel(directory, sha, words, settings["max_length"], threads, focus)
    except Exception as exc:  # noqa: BLE001 - files that match the pin yet do not load: a card edited to fit them
        raise UserError(f"verdict model '{name}': its files in {directory} cannot be loaded as the card's {card['kind']!r} "
                        f"model ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


def _load_stack(name: str, directory: Path, sha: str, threads: int) -> VerdictModel:
    """A stack's members, each loaded by name and checked against the files it had when the
    stack was made; a member that is itself a stack is refused (no loops)."""
    from sanctuary_local.verdict_model.stack import StackModel, member_path, read_members

    members, weights = [], []
    for m in read_members(directory):
        where = member_path(directory, m["model"])
        if read_card(resolve(where)).get("kind") == "stack":
            raise UserError(f"verdict model '{name}': its member '{m['model']}' is a stack; a stack's members are single models")
        model = load_model(where, threads)
        if model.sha256 != m["files_sha256"]:
            raise MissingModel(f"verdict model '{name}': its member '{m['model']}' is not the one it was made with "
                               f"(files {model.sha256[:16]}…, the stack pins {m['files_sha256'][:16]}…); "
                               "make the stack again with `verdict-model stack`")
        members.append(model)
        weights.append(float(m["weight"]))
    return StackModel(directory, sha, members, weights)


def read_rule(directory: Path, model_sha256: str | None = None) -> dict[str, Any] | None:
    """The decision rule fitted for this model (``verdict-model fit-rule``), if any: an object
    with one finite offset per label, fitted for the model whose files hash to ``model_sha256``
    (when the rule records one)."""
    path = directory / RULE
    if not path.is_file():
        return None
    try:
        rule = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable decision rule: {exc}") from None
    offsets = rule.get("offsets") if isinstance(rule, dict) else None
    if not (isinstance(offsets, list) and len(offsets) == len(LABELS)
            and all(type(v) in (int, float) and math.isfinite(v) for v in offsets)):
        raise UserError(f"{path}: not a decision rule: it needs 'offsets', {len(LABELS)} finite numbers "
                        f"({', '.join(LABELS)}); refit it with `verdict-model fit-rule`")
    fitted = rule.get("model_sha256")
    if model_sha256 is not None and fitted is not None and fitted != model_sha256:
        raise UserError(f"{path}: the rule was fitted for another model (files {str(fitted)[:16]}…, these hash to "
                        f"{model_sha256[:16]}…); refit it with `verdict-model fit-rule`")
    return rule


def read_confidence(directory: Path, model_sha256: str | None = None) -> dict[str, Any] | None:
    """The confidence rule fitted for this model (``verdict-model fit-confidence``), if any: an
    object whose ``threshold`` is a probability in [0, 1] or null (never confident), fitted for
    the model whose files hash to ``model_sha256`` (when the rule records one)."""
    path = directory / CONFIDENCE
    if not path.is_file():
        return None
    try:
        rule = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable confidence rule: {exc}") from None
    t = rule.get("threshold", "absent") if isinstance(rule, dict) else "absent"
    if not (t is None or (type(t) in (int, float) and 0.0 <= t <= 1.0)):
        raise UserError(f"{path}: not a confidence rule: 'threshold' must be a probability (0 to 1) or null; "
                        "refit it with `verdict-model fit-confidence`")
    fitted = rule.get("model_sha256")
    if model_sha256 is not None and fitted is not None and fitted != model_sha256:
        raise UserError(f"{path}: the rule was fitted for another model (files {str(fitted)[:16]}…, these hash to "
                        f"{model_sha256[:16]}…); refit it with `verdict-model fit-confidence`")
    return rule


def _fsync_tree(directory: Path) -> None:
    for p in [*directory.rglob("*"), directory]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_out_dir(out: Path, inputs: Sequence[Path] = ()) -> None:
    """``--out`` must be absent, empty, or a model directory holding its model's files alone
    (it is then replaced whole); never a link, a shipped model, a path inside a model (its
    files' hash would change), or a directory holding one of ``inputs``."""
    from sanctuary_local.io.files import check_writable

    if out.is_symlink():
        raise UserError(f"{out}: is a symbolic link; give the directory itself or a new path as --out")
    check_writable(out, "the model")
    real, shipped, cwd = out.resolve(), packaged_dir().resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:  # '.': renaming it into place failed (EBUSY) after the training
        raise UserError(f"{out}: is the working directory (or holds it); name a new directory, e.g. {out / 'model'}")
    if real == shipped or shipped in real.parents:
        raise UserError(f"{out}: is a model shipped in the package; train into a new --out (and copy it in to ship it)")
    if within := next((p for p in real.parents if (p / CARD).is_file()), None):
        raise UserError(f"{out}: is inside the verdict model {within}; choose a new --out")
    for given in inputs:
        if real == Path(given).resolve() or real in Path(given).resolve().parents:
            raise UserError(f"{out}: holds the input {given}, which replacing it would delete; choose a new --out")
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not out.is_dir() or not (out / CARD).is_file():
        raise UserError(f"{out}: exists and is not a verdict model directory; choose a new --out")
    try:
        pinned = read_card(out).get("files_sha256")
    except UserError:
        pinned = None
    if pinned != directory_sha256(out):
        raise UserError(f"{out}: holds files that are not its model's (or changed ones), which replacing it "
                        "would delete; move them or choose a new --out")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def staging_dir(out: Path) -> Path:
    """A fresh directory beside ``out`` to build the model in. Those a killed train left
    (``kill -9``: its staging folder, or the old model it was replacing) are removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for left in out.parent.iterdir():
        kind, _, pid = left.name.removeprefix(f".{out.name}.").partition("-")
        if (left.name.startswith(f".{out.name}.") and kind in ("partial", "old") and pid.isdigit()
                and left.is_dir() and not left.is_symlink() and not _alive(int(pid))):
            shutil.rmtree(left, ignore_errors=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back, then delivered on leaving to the handlers they had (in the
    main thread, where Python runs its handlers). A handler that records them, not a blocked
    mask: a process-directed signal goes to any thread that does not block it (torch's, a
    pool's), and Python then runs the main thread's handler all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda n, _frame: caught.append(n)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def publish(tmp: Path, out: Path) -> None:
    """Make the finished ``tmp`` the model at ``out`` in one rename (durable first): a reader
    sees the old model or the new one, never half of one. SIGINT and SIGTERM wait out the two
    renames (old model aside, new one in), so a signal never leaves ``out`` missing."""
    _fsync_tree(tmp)
    old = out.parent / f".{out.name}.old-{os.getpid()}" if out.exists() else None
    try:
        with _signals_held():  # Ctrl-C between the two renames would leave no model at out
            if old is not None:
                os.replace(out, old)
            os.replace(tmp, out)
    finally:  # a signal held back is raised on leaving: the old model is still removed
        if out.exists() and not tmp.exists():
            fd = os.open(out.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)


def write_json(path: Path, data: dict[str, Any], what: str = "JSON") -> None:
    """Write ``data`` to ``path`` whole or not at all (``atomic_write_bytes``); a path that
    cannot be written is one error line naming it."""
    from sanctuary_local.io.files import writing
    from sanctuary_local.io.safe_io import atomic_write_bytes

    with writing(path, what):
        atomic_write_bytes(path, (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode())
