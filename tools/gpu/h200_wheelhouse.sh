#!/usr/bin/env bash
# The air-gapped recipe on the lent H200, through the project's own commands, in one device call. Before it,
# on the same warm machine: `bash tools/gpu/h200_speed.sh stage` with .gpu-stage/xfer1 carried (gpu-kit's
# xfer1 into /tmp/stage). This call carries .gpu-stage/xfer2 and .whl (the tool's invoke and tenacity; in
# .whl/serving, wheels the slim stage lacks, e.g. supervisor).
#   1. the slim vLLM tree unpacked to /tmp/slimtree (on no PYTHONPATH), repacked with the stage's wheels into the
#      wheelhouse /tmp/wheelhouse over the image's python3 (tools/gpu/wheelhouse_from_stage.py)
#   2. provision --tags venv: the venv role pushes the wheelhouse and builds the env with --no-index over python3
#      (venv_system_site_packages), verified by import, versions and from_base recorded
#   3. a stand-in flash-attn-4 (the Blackwell-only line, tests/fakes/wheels) planted in that env
#   4. provision: flash-attn-pinning removes it on SM 9.0 and says why; vLLM starts from the env
#   5. provision again (changed=0), status --json, teardown
# Everything for $OUT goes into one tarball.
set -uo pipefail
T_START=$(date +%s)
OUT=${OUT:-/tmp/h200-out}; R="$OUT/wheelhouse"; mkdir -p "$R"
export PYTHONUNBUFFERED=1
DEADLINE=$(( T_START + ${BUDGET_S:-560} ))  # the device call's limit is 600 s: keep time to pack what came
ENV_PY=/tmp/dflash-h200/venv/current/bin/python
INV=(-i tools/gpu/h200-wheelhouse-inventory.yaml --host h200)
finish() { tar -czf "$OUT/wheelhouse.tgz" -C "$OUT" wheelhouse && rm -rf "$R"; }
# step NAME CMD...: run CMD (a command: with what is left of the budget, less RESERVE s kept for the teardown;
# a function of this script: as it is), its output in NAME.out, its rc and duration in steps.txt.
step() { local name=$1; shift; local left=$(( DEADLINE - $(date +%s) - ${RESERVE:-30} ))
         [ $left -gt 20 ] || { echo "$name skipped (no time)" | tee -a "$R/steps.txt"; return 1; }
         local limit=(timeout $left); [ "$(type -t "$1")" = function ] && limit=()
         local t0; t0=$(date +%s.%N); "${limit[@]}" "$@" > "$R/$name.out" 2>&1; local rc=$?
         echo "$name rc=$rc $(python3 -c "print(round($(date +%s.%N)-$t0,1))")s" | tee -a "$R/steps.txt"; return $rc; }

# 0. the stage and the tool itself (skipped where an earlier call of this machine left them)
unpack() ( cp .gpu-stage/xfer2/* /tmp/stage/ && cd /tmp/stage && cat vllm-slim.tar.xz.part-* > vllm-slim.tar.xz &&
           sha256sum -c vllm-slim.sha256 && rm -rf /tmp/slimtree && mkdir -p /tmp/slimtree &&
           tar -xJf vllm-slim.tar.xz -C /tmp/slimtree )
if [ ! -d /tmp/slimtree/vllm ]; then
  [ -d /tmp/stage/wheels ] || { echo "no /tmp/stage: run h200_speed.sh stage with .gpu-stage/xfer1 first" | tee "$R/steps.txt"; finish; exit 3; }
  step unpack unpack || { finish; exit 3; }
fi
[ -d /tmp/ctl/invoke ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ctl .whl/*.whl || exit 3
export PYTHONPATH=/tmp/ctl HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
{ python3 -c 'import sys; print("python3:", sys.executable, sys.version.split()[0], "prefix", sys.prefix, "base_prefix", sys.base_prefix)'
  cat "$(python3 -c 'import sys; print(sys.prefix)')/pyvenv.cfg" 2>/dev/null
  "$(python3 -c 'import sys; print(sys._base_executable)')" -c 'import ensurepip; print("ensurepip: yes")'
  python3 -m pip --version; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
} > "$R/host.txt" 2>&1

# 1. the wheelhouse
MORE=(); [ -d .whl/serving ] && MORE=(--more-wheels .whl/serving)
rm -rf /tmp/wheelhouse
step wheelhouse python3 tools/gpu/wheelhouse_from_stage.py /tmp/slimtree /tmp/stage/wheels /tmp/wheelhouse --base-python python3 "${MORE[@]}"
cp /tmp/wheelhouse/*.txt "$R/" 2>/dev/null; ls -l /tmp/wheelhouse > "$R/wheelhouse-files.txt" 2>&1

# 2. the env, built by the venv role alone
step venv python3 -m invoke provision "${INV[@]}" --tags venv --report "$R/venv.json"

# 3. the wrong flash-attn line, planted
plant() { local whl; whl=$(python3 -c 'import sys; from tests.fakes.wheels import fa4_wheel; print(fa4_wheel(sys.argv[1]))' /tmp/standin) &&
          "$ENV_PY" -m pip install --no-index --no-deps "$whl" && "$ENV_PY" -m pip list 2>/dev/null | grep -i flash; }
step plant plant

# 4. and 5. the whole provision, twice, status, teardown
step provision python3 -m invoke provision "${INV[@]}" --report "$R/provision.json"
{ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; ps -eo pid,args | grep '[v]llm.entrypoints'
  "$ENV_PY" -c 'import torch, vllm; print("vllm", vllm.__version__, vllm.__file__); print("torch", torch.__version__, torch.__file__)'
  "$ENV_PY" -m pip list 2>/dev/null | grep -i -E '^(flash|vllm|torch) '; } > "$R/serving.txt" 2>&1
step provision2 python3 -m invoke provision "${INV[@]}" --report "$R/provision2.json"
step status python3 -m invoke status "${INV[@]}" --json
RESERVE=0 step teardown python3 -m invoke teardown "${INV[@]}" --report "$R/teardown.json"

# what the env holds and what the server said
cp /tmp/dflash-h200/venv/current/.dfp-lock.txt "$R/env-lock.txt" 2>/dev/null
grep -h -E 'Resolved architecture|SpeculativeConfig|FlashAttention version|Starting vLLM|Application startup|Error' \
  /tmp/dflash-h200/logs/vllm.log* 2>/dev/null | cut -c1-400 > "$R/vllm-log-markers.txt"
python3 - "$R" > "$R/summary.txt" 2>&1 <<'EOF'
import json, os, sys
for report in ("venv.json", "provision.json", "provision2.json"):
    path = os.path.join(sys.argv[1], report)
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    print(f"== {report}: exit {r.get('exit_code')}, recap {r.get('recap')}")
    for t in r["tasks"]:
        if t["module"] in ("python_env", "flash_attn", "vllm_server") or t["status"] == "failed":
            print(f"{t['module']} {t['status']}: {t['msg'][:600]}")
            d = t.get("data") or {}
            keep = ("from_base", "versions", "vllm_version", "torch_version", "torch_cuda", "cuda_available", "installer",
                    "python_version", "removed", "reason", "dists_before", "dists_after", "output_tail")
            print("   ", json.dumps({k: d[k] for k in keep if k in d}))
EOF
finish
