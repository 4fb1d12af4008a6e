#!/usr/bin/env bash
# FEVER-8 convention, step 2: predictions for one split.
#   reads  data_store/averitec/{split}.json and knowledge_store/{split}/{i}.json
#   writes leaderboard_submission/submission.csv
# Usage: shared_task/system_inference.sh [SPLIT=dev] [BASE_DIR=.]
# Env: PROFILE (paper), VENV (.venv), RUN_ARGS (extra `sanctuary-local run` options).
set -euo pipefail
SPLIT="${1:-dev}"
BASE_DIR="$(cd "${2:-.}" && pwd)"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PROFILE="${PROFILE:-paper}"
VENV="${VENV:-$REPO/.venv}"
CLAIMS="$BASE_DIR/data_store/averitec/$SPLIT.json"
STORE="$BASE_DIR/knowledge_store/$SPLIT"
OUT="$BASE_DIR/runs/$SPLIT-$PROFILE"
SUBMISSION="$BASE_DIR/leaderboard_submission/submission.csv"
[ -f "$CLAIMS" ] || { echo "system_inference.sh: claims file not found: $CLAIMS" >&2; exit 2; }
[ -e "$STORE" ] || { echo "system_inference.sh: knowledge store not found: $STORE" >&2; exit 2; }
BIN="$VENV/bin/sanctuary-local"
[ -x "$BIN" ] || BIN="sanctuary-local"  # e.g. inside the Docker image
cd "$REPO"  # models/ and indexes/ are resolved from the repository root
rc=0
# shellcheck disable=SC2086  # RUN_ARGS is a list of options on purpose
"$BIN" run --profile "$PROFILE" --claims "$CLAIMS" --store "$STORE" --out "$OUT" --quiet ${RUN_ARGS:-} || rc=$?
# 3 = finished, some claims degraded (flagged in predictions.json): still a submission.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  echo "system_inference.sh: sanctuary-local run failed (exit $rc); see $OUT/run.log" >&2
  exit "$rc"
fi
mkdir -p "$(dirname "$SUBMISSION")"
cp "$OUT/submission.csv" "$SUBMISSION"
echo "wrote $SUBMISSION (run dir $OUT, exit $rc)"
