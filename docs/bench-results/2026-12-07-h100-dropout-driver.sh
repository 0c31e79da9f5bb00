#!/bin/bash
# The record of the 2026-12-07 18:42Z call (docs/benchmarks.md, "2026-12-07 (18:42-18:51Z)"), run as head-run.sh in the
# repository root with ODYSSEY_COMMIT=3213db2: build, selftest (the new lora_dropout rows), the dropout phase. The
# second call on the same machine ran, in the repository root:
#   build-gpu/app/odyssey-bench --label "dropout 0.05 under 29.88 GiB profiled" --checkpointing auto --offload auto \
#     --memory-gib 29.88 --lora-dropout 0.05 --shape qwen2.5-7b --mode lora --seq 24576 --steps 3 --warmup 2 \
#     --profile $OUT/profile-dropout.jsonl --out $OUT/dropout-profile-odyssey.jsonl
#   PARK_ROWS="qwen2.5-7b:24576:27.92:9:3" bash tests/bench/run_kernels_h200.sh park-ab
set -u
export ODYSSEY_COMMIT=${ODYSSEY_COMMIT:-unknown}
if [ ! -x build-gpu/app/odyssey-bench ]; then bash tests/bench/run_kernels_h200.sh build || exit 1; fi
echo "== selftest $(date +%T)"
timeout 120 build-gpu/app/odyssey-train selftest > "$OUT/selftest.txt" 2>&1; echo "selftest exit $?"
grep -E "lora_dropout" "$OUT/selftest.txt" | grep -v " ok$" | head; grep -c "lora_dropout.* ok$" "$OUT/selftest.txt"; tail -1 "$OUT/selftest.txt"
bash tests/bench/run_kernels_h200.sh ${PHASES:-dropout}
echo "== done $(date +%T)"
