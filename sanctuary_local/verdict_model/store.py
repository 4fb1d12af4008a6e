"""A verdict model's directory: its card, its hash, atomic writes and loading by name.

A model directory holds ``model_card.json`` (kind, settings, training data, metrics) and the
kind's files. ``packaged:NAME`` names a model shipped in the package
(``sanctuary_local/data/verdict_models/NAME``); any other name is a directory path. A
shipped model's card pins the SHA-256 of its files (``files_sha256``), checked on load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from sanctuary_local.errors import MissingModel, UserError
from sanctuary_local.verdict_model.base import VerdictModel

CARD = "model_card.json"
RULE = "decision_rule.json"
PACKAGED = "packaged:"
#: Model kinds a card may name → what loads them (``load_model``).
KINDS = ("tfidf", "encoder")


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
    """SHA-256 over the model's files (names and bytes, sorted), the card and rule excluded:
    the same weights give the same hash wherever they were trained or copied."""
    h = hashlib.sha256()
    for f in sorted(p for p in directory.rglob("*") if p.is_file() and p.name not in (CARD, RULE)):
        h.update(f.relative_to(directory).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def read_card(directory: Path) -> dict[str, Any]:
    try:
        card = json.loads((directory / CARD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{directory / CARD}: unreadable model card: {exc}") from None
    if card.get("kind") not in KINDS:
        raise UserError(f"{directory / CARD}: unknown model kind {card.get('kind')!r}; valid kinds: {', '.join(KINDS)}")
    return card


def load_model(name: str, threads: int = 2) -> VerdictModel:
    """Load a verdict model by name (``packaged:NAME`` or a directory), its hash checked
    against the card's ``files_sha256``."""
    directory = resolve(name)
    card = read_card(directory)
    sha = directory_sha256(directory)
    if card.get("files_sha256") and card["files_sha256"] != sha:
        raise MissingModel(f"verdict model '{name}': its files hash to {sha[:16]}…, the card pins "
                           f"{card['files_sha256'][:16]}…; the model in {directory} is damaged or was changed")
    settings = card.get("settings", {})
    words, focus = int(settings.get("answer_words", 48)), bool(settings.get("answer_focus", False))
    if card["kind"] == "tfidf":
        from sanctuary_local.verdict_model.tfidf import TfidfModel

        return TfidfModel(directory, sha, words, focus)
    from sanctuary_local.verdict_model.encoder import EncoderModel

    return EncoderModel(directory, sha, words, int(settings.get("max_length", 256)), threads, focus)


def read_rule(directory: Path) -> dict[str, Any] | None:
    """The decision rule fitted for this model (``verdict-model fit-rule``), if any."""
    path = directory / RULE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"{path}: unreadable decision rule: {exc}") from None


def _fsync_tree(directory: Path) -> None:
    for p in [*directory.rglob("*"), directory]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_out_dir(out: Path) -> None:
    """``--out`` must be absent, empty, or a model directory (it is then replaced whole)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / CARD).is_file())):
        raise UserError(f"{out}: exists and is not a verdict model directory; choose a new --out")


def staging_dir(out: Path) -> Path:
    """A fresh directory beside ``out`` to build the model in (removed if left by a crash)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """Make the finished ``tmp`` the model at ``out`` in one rename (durable first): a reader
    sees the old model or the new one, never half of one."""
    _fsync_tree(tmp)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(tmp, out)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
