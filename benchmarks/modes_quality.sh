#!/bin/bash
# Issue 15: the three optional modes against the base profile on the quality harness, each
# reusing the base run's unchanged stages (run --reuse-from), then one comparison table.
#   bash benchmarks/modes_quality.sh [BASE_LABEL] [RANGE] [PROFILE]
#     default: cpu_static_pre32_dev0-49 0:50 cpu
# BASE_LABEL is an earlier `quality_e2e.py` run of PROFILE on RANGE (runs/quality_e2e/<label>).
# Citations reuse its stages 1-2 (only stage 3 runs), the follow-up round its stages 1-2,
# decomposition its stage 1. Each mode takes about 40-60 min of a 2-core machine with the
# 1.5B model; run nothing else meanwhile (the harness records the load average).
# Needs .venv (make install) and ../shared (the dev claims).
set -e
cd "$(dirname "$0")/.."
BASE=${1:-cpu_static_pre32_dev0-49}; RANGE=${2:-0:50}; P=${3:-cpu}
SUFFIX=dev$(echo "$RANGE" | awk -F: '{print $1 "-" $2-1}')
[ -f benchmarks/results/quality_e2e_${BASE}.json ] || { echo "no base result benchmarks/results/quality_e2e_${BASE}.json" >&2; exit 2; }
for mode in "citations:verdict.citations=true" "followup:followup.enabled=true" "decompose:decompose.enabled=true"; do
  name=${mode%%:*}; setting=${mode#*:}
  echo "$name start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python benchmarks/quality_e2e.py --indices "$RANGE" --profile "$P" --no-oracle --quiet \
    --set "$setting" --reuse-from "$BASE" --label "${P}_${name}_${SUFFIX}"
done
.venv/bin/python benchmarks/quality_e2e.py --compare benchmarks/results/quality_e2e_${BASE}.json \
  benchmarks/results/quality_e2e_${P}_{citations,followup,decompose}_${SUFFIX}.json --label "modes_${P}_${SUFFIX}"
