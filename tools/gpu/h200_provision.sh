#!/usr/bin/env bash
# GPU truth for the whole tool on the lent H200 (run through the device tool, second of two calls; the
# first copied ../shared/gpu-kit's xfer1 to /tmp/stage): install the staged vLLM 0.26.0, make gpu-kit's
# tiny target + DFlash drafter and REMOVE the drafter's config.json (drafter-config must write it), then
# provision twice (second run changed=0), status, restart-server, teardown, all through the real CLI.
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT/h200"; R="$OUT/h200"
export PYTHONUNBUFFERED=1
cp .gpu-stage/xfer2/* /tmp/stage/ && STAGE=/tmp/stage SITE=/tmp/site bash /tmp/stage/install.sh > "$R/install.log" 2>&1 || { tail "$R/install.log"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 NCCL_NVLS_ENABLE=0 VLLM_USE_FLASHINFER_SAMPLER=0
python3 /tmp/stage/make_tiny.py /tmp/tiny > "$R/make_tiny.log" 2>&1 || { tail "$R/make_tiny.log"; exit 3; }
mv /tmp/tiny/dflash/config.json "$R/gpu-kit-drafter-config.json"
PY=$(python3 -c 'import sys; print(sys.executable)')
INV=(-i tools/gpu/h200-inventory.yaml --host h200 -e "venv_python=$PY")
NO_VENV=(--skip-tags venv)  # provision only: restart-server and teardown have no venv task (a tag no task has is exit 4)
step() { name=$1; shift; local t0=$(date +%s.%N); python3 -m invoke "$@" > "$R/$name.out" 2>&1; local rc=$?;
         echo "$name rc=$rc $(python3 -c "print(round($(date +%s.%N)-$t0,1))")s" | tee -a "$R/steps.txt"; }
step provision1 provision "${INV[@]}" "${NO_VENV[@]}" --report "$R/provision1.json"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$R/nvidia-smi-serving.txt"
step provision2 provision "${INV[@]}" "${NO_VENV[@]}" --report "$R/provision2.json"
step status status -i tools/gpu/h200-inventory.yaml --host h200 -e "venv_python=$PY" --json
step restart restart-server "${INV[@]}" --report "$R/restart.json"
step teardown teardown "${INV[@]}" --report "$R/teardown.json"
step teardown2 teardown "${INV[@]}" --report "$R/teardown2.json"
nvidia-smi --query-gpu=memory.used --format=csv >> "$R/nvidia-smi-serving.txt"
cp /tmp/tiny/dflash/config.json "$R/drafter-config-written.json" 2>/dev/null
cat /tmp/dflash-h200/logs/vllm.log* > "$R/vllm-logs.txt" 2>/dev/null
tar -czf "$OUT/h200.tgz" -C "$OUT" h200 && rm -rf "$R"
echo done
