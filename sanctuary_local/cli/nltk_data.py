"""WordNet 3.0 and Punkt for METEOR, installed or checked offline: ``python -m
sanctuary_local.cli.nltk_data install SRC [DEST]`` / ``check`` (``scripts/install_nltk_data.sh``,
which ``make install`` runs). The work is ``evaluation.nltk_data``'s; this module only reads argv (not a sub-command: no ``register``)."""

from __future__ import annotations

import sys
from pathlib import Path

from sanctuary_local.errors import UserError
from sanctuary_local.evaluation.nltk_data import find_wordnet_dir, install_wordnet, load_wordnet, punkt_parameters


def main(argv: list[str] | None = None) -> int:
    """``python -m sanctuary_local.cli.nltk_data install SRC [DEST]`` / ``check``."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["install"] and len(args) in (2, 3):
            dest = install_wordnet(Path(args[1]), Path(args[2]) if len(args) == 3 else None)
            print(f"WordNet 3.0 installed in {dest}")
        elif args == ["check"]:
            print(f"WordNet {load_wordnet().get_version()} at {find_wordnet_dir()}; Punkt English OK ({len(punkt_parameters().abbrev_types)} abbreviations)")
        else:
            print("usage: python -m sanctuary_local.cli.nltk_data install SRC_DIR [DEST_DIR] | check", file=sys.stderr)
            return 64
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
