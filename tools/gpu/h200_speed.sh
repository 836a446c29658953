#!/usr/bin/env bash
# Speed figures on the lent H200 through the project's own commands (device tool, few full calls):
#   stage          copy gpu-kit's xfer1 (carried as .gpu-stage/xfer1) to /tmp/stage
#   bench PAIRS    (first bench call also installs xfer2 + .whl) for each pair (agreeing,random): provision with
#                  tiny_pair=PAIR, then serving-bench --compare-baseline --repeat 2 at concurrency 1,16 (256 tokens a
#                  request, 3 repetitions of at least MIN_S seconds after a warm-up, in turns), status --json
#   tune PAIR KS   tune -k KS at concurrency 1 and 16 (one k per level; the schedule where vLLM takes one)
# Everything for $OUT goes into one tarball per call.
set -uo pipefail
T_START=$(date +%s)
PHASE=$1; PAIR=${2:-agreeing}; KS=${3:-1,3,7}
OUT=${OUT:-/tmp/h200-out}; NAME="speed-$PHASE-${PAIR//,/-}"; R="$OUT/$NAME"; mkdir -p "$R"
export PYTHONUNBUFFERED=1
finish() { tar -czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME" && rm -rf "$R"; }
if [ "$PHASE" = stage ]; then mkdir -p /tmp/stage && cp -r .gpu-stage/xfer1/* /tmp/stage/ && du -sm /tmp/stage; exit; fi
PY=$(python3 -c 'import sys; print(sys.executable)')
if [ ! -d /tmp/site/vllm ]; then
  cp .gpu-stage/xfer2/* /tmp/stage/ && STAGE=/tmp/stage SITE=/tmp/site bash /tmp/stage/install.sh > "$R/install.log" 2>&1 || { tail "$R/install.log"; finish; exit 3; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ctl .whl/*.whl || exit 3
  # the `vllm` command beside the serving python (a venv would have it; here vLLM lives in /tmp/site)
  printf '#!/bin/sh\nPYTHONPATH=/tmp/site exec %s -m vllm.entrypoints.cli.main "$@"\n' "$PY" > "$(dirname "$PY")/vllm"
  chmod +x "$(dirname "$PY")/vllm"
fi
export PYTHONPATH=/tmp/ctl HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
MIN_S=${MIN_S:-5}
# The tiny pair answers a chat with its end-of-text token almost at once: its speed is measured on random tokens
# (EOS ignored), as the pair is built to accept every draft (agreeing) or almost none (random).
INV=(-i tools/gpu/h200-speed-inventory.yaml --host h200 -e "venv_python=$PY" -e "speed_min_seconds=$MIN_S"
     -e "speed_workload=${WORKLOAD:-random}")
DEADLINE=$(( T_START + ${BUDGET_S:-570} ))  # the device call's limit is 600 s: keep time to pack what came
step() { name=$1; shift; local left=$(( DEADLINE - $(date +%s) )); [ $left -gt 20 ] || { echo "$name skipped (no time)" | tee -a "$R/steps.txt"; return; }
         local t0=$(date +%s.%N); timeout $left python3 -m invoke "$@" > "$R/$name.out" 2>&1; local rc=$?;
         echo "$name rc=$rc $(python3 -c "print(round($(date +%s.%N)-$t0,1))")s" | tee -a "$R/steps.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv > "$R/gpu.txt"
if [ "$PHASE" = bench ]; then
  for P in ${PAIR//,/ }; do
    step "provision-$P" provision "${INV[@]}" -e "tiny_pair=$P" --skip-tags venv --report "$R/provision-$P.json"
    step "serving-bench-$P" serving-bench "${INV[@]}" -e "tiny_pair=$P" --compare-baseline --repeat 2 --concurrency 1,16 \
      --max-tokens 256 --repetitions 3 --json "$R/bench-$P.json" --html "$R/html-$P"
  done
  step status status -i tools/gpu/h200-speed-inventory.yaml --host h200 -e "venv_python=$PY" --json
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >> "$R/gpu.txt"
elif [ "$PHASE" = tune ]; then
  step provision provision "${INV[@]}" -e "tiny_pair=$PAIR" --skip-tags venv --report "$R/provision.json"
  step tune tune "${INV[@]}" -e "tiny_pair=$PAIR" -k "$KS" --concurrency 1,16 --max-tokens 256 --repetitions 3 \
    --json "$R/tune.json" --html "$R/html"
  cp tools/gpu/host_vars/h200.yaml "$R/host_vars-h200.yaml" 2>/dev/null
  step status status -i tools/gpu/h200-speed-inventory.yaml --host h200 -e "venv_python=$PY" --json
fi
cat "$R/steps.txt"; tail -5 /tmp/dflash-h200/logs/vllm.log > "$R/vllm-log-tail.txt" 2>/dev/null
finish
