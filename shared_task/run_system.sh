#!/usr/bin/env bash
# FEVER-8 convention, step 3: time the whole inference of a split (60 s/claim budget).
# Usage: shared_task/run_system.sh [SPLIT=dev] [BASE_DIR=.]
# Writes BASE_DIR/timings/{split}.json: start/end (UTC), wall seconds, claims, s/claim.
set -euo pipefail
SPLIT="${1:-dev}"
BASE_DIR="$(cd "${2:-.}" && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$BASE_DIR/timings"
TIMING_FILE="$BASE_DIR/timings/$SPLIT.json"
START_ISO="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
START_NS="$(date +%s%N)"
"$HERE/system_inference.sh" "$SPLIT" "$BASE_DIR"
END_NS="$(date +%s%N)"
END_ISO="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
python3 - "$BASE_DIR/data_store/averitec/$SPLIT.json" "$TIMING_FILE" "$SPLIT" "${PROFILE:-paper}" \
  "$START_ISO" "$END_ISO" "$START_NS" "$END_NS" <<'PY'
import json, sys
claims, out, split, profile, start, end, t0, t1 = sys.argv[1:]
n = len(json.load(open(claims, encoding="utf-8")))
wall = (int(t1) - int(t0)) / 1e9
rec = {"split": split, "profile": profile, "start": start, "end": end, "wall_s": round(wall, 3),
       "n_claims": n, "s_per_claim": round(wall / n, 3) if n else None, "budget_s_per_claim": 60}
open(out, "w", encoding="utf-8").write(json.dumps(rec, indent=2) + "\n")
print(json.dumps(rec))
PY
echo "timings: $TIMING_FILE"
