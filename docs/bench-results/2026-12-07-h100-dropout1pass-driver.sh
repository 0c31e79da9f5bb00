#!/bin/bash
set -u
export ODYSSEY_COMMIT=${ODYSSEY_COMMIT:-unknown}
T0=$(date +%s)
if [ ! -x build-gpu/app/odyssey-bench ]; then bash tests/bench/run_kernels_h200.sh build || exit 1; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== selftest $(date +%T)"
timeout 150 build-gpu/app/odyssey-train selftest > "$OUT/selftest.txt" 2>&1; echo "selftest exit $?"
grep -E "lora_dropout" "$OUT/selftest.txt" | grep -v " ok$" | head; grep -c "lora_dropout.* ok$" "$OUT/selftest.txt"; grep -v " ok$" "$OUT/selftest.txt" | tail -5
if [ -n "${PHASES:-}" ]; then bash tests/bench/run_kernels_h200.sh $PHASES; fi
if [ -n "${PROFILE_GIB:-}" ] && [ $(( $(date +%s) - T0 )) -lt ${PROFILE_BEFORE:-470} ]; then
  echo "== profile $(date +%T)"
  build-gpu/app/odyssey-bench --label "dropout 0.05 under $PROFILE_GIB GiB profiled" --checkpointing auto --offload auto \
    --memory-gib $PROFILE_GIB --lora-dropout 0.05 --shape qwen2.5-7b --mode lora --seq 24576 --steps 3 --warmup 2 \
    --profile $OUT/profile-dropout.jsonl --out $OUT/dropout-profile-odyssey.jsonl | cut -c1-400
fi
echo "== done $(date +%T) after $(( $(date +%s) - T0 )) s"
