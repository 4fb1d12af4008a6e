#!/bin/bash
# Issue 15: the optional modes against the base profile on the quality harness, each reusing
# the base run's unchanged stages (run --reuse-from), then one comparison table.
#   bash benchmarks/quality/modes.sh [BASE_LABEL] [RANGE] [PROFILE] [MODES]
#     default: cpu_base_dev0-49 0:50 cpu "citations followup decompose"
# BASE_LABEL is a `quality/e2e.py` run of PROFILE on RANGE (runs/quality_e2e/<label>). When
# its run directory is missing (a fresh machine: runs/ is not committed), the base is run
# first under that label (about 60 min for 50 claims with the 1.5B on 2 cores). Citations
# reuse its stages 1-2 (only stage 3 runs), the follow-up round its stages 1-2,
# decomposition its stage 1. Each mode takes about 40-60 min of a 2-core machine with the
# 1.5B model; run nothing else meanwhile (the harness records the load average). MODES picks
# a subset, e.g. "citations", so a session can measure one mode at a time.
# Needs .venv (make install) and ../shared (the dev claims).
set -e
cd "$(dirname "$0")/.."
RANGE=${2:-0:50}; P=${3:-cpu}; MODES=${4:-citations followup decompose}
SUFFIX=dev$(echo "$RANGE" | awk -F: '{print $1 "-" $2-1}')
BASE=${1:-${P}_base_${SUFFIX}}
declare -A SETTING=([citations]=verdict.citations=true [followup]=followup.enabled=true [decompose]=decompose.enabled=true)
for name in $MODES; do
  [ -n "${SETTING[$name]:-}" ] || { echo "unknown mode '$name' (modes: ${!SETTING[*]})" >&2; exit 2; }
done
if [ ! -d "runs/quality_e2e/${BASE}/run" ]; then
  echo "base ${BASE} start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python benchmarks/quality/e2e.py --indices "$RANGE" --profile "$P" --no-oracle --quiet --label "$BASE"
fi
results=()
for name in $MODES; do
  echo "$name start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python benchmarks/quality/e2e.py --indices "$RANGE" --profile "$P" --no-oracle --quiet \
    --set "${SETTING[$name]}" --reuse-from "$BASE" --label "${P}_${name}_${SUFFIX}"
  results+=("benchmarks/results/quality/quality_e2e_${P}_${name}_${SUFFIX}.json")
done
.venv/bin/python benchmarks/quality/e2e.py --compare "benchmarks/results/quality/quality_e2e_${BASE}.json" "${results[@]}" \
  --label "modes_${P}_${SUFFIX}"
