#!/bin/bash
# The record of the 2026-12-07 14:22Z, 14:54Z and 14:59Z calls (docs/benchmarks.md), run as head-run.sh in the
# repository root: PHASE=1 the build and issue 28's LoRA rows beside their Liger anchors (7B 24K, 1.5B 24K, 7B 32K at
# the anchor's peak and without a budget); PHASE=2 the 8B QLoRA row beside HF + PEFT + bitsandbytes with the
# planner's park and none, the 7B strided park, the whole-GPU 7B step profiled, 24 checkpointed under 34.8 GiB;
# PHASE=3 (the same machine, after 2) odyssey-train selftest and fused_parity_gpu on the 1.5B LoRA and QLoRA cases.
# (The PHASE=2 profile line and PHASE=3 were added after the PHASE=1 call, which ran the same PHASE=1 lines.)
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/gpu.txt"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
if [ ! -x build-gpu/app/odyssey-bench ]; then
echo "== build $(date +%T)"
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" \
  -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF \
  -DODYSSEY_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu --target odyssey-bench > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -E "error|FAILED" "$OUT/build.log" | head -60; exit 1; }
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
R="--steps 3 --warmup 2"
peak() { python3 -c "import json,sys;l=[json.loads(x) for x in open('$OUT/hf.jsonl') if x.strip()];print(l[-1]['peak_gib'])"; }
anchor() { echo "== anchor $* $(date +%T)"; python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --mode lora --checkpointing on $R "$@" --out "$OUT/hf.jsonl" 2>&1 | grep -v '^{' | grep -v -i warn | tail -1 | cut -c1-300; }
ody() { local tag=$1; shift; echo "== $tag $(date +%T)"
  build-gpu/app/odyssey-bench --label "$tag" --mode lora $R --checkpointing auto --offload auto "$@" --out "$OUT/odyssey.jsonl" 2>&1 | tail -1 | cut -c1-300; }
if [ "${PHASE:-1}" = 1 ]; then
  anchor --liger --shape qwen2.5-7b --seq 24576; G=$(peak)
  ody "7b 24k at liger peak $G" --shape qwen2.5-7b --seq 24576 --memory-gib "$G"
  anchor --liger --shape qwen2.5-1.5b --seq 24576; G=$(peak)
  ody "1.5b 24k at liger peak $G" --shape qwen2.5-1.5b --seq 24576 --memory-gib "$G"
  anchor --liger --shape qwen2.5-7b --seq 32768; G=$(peak)
  ody "7b 32k unlimited" --shape qwen2.5-7b --seq 32768
  ody "7b 32k at liger peak $G" --shape qwen2.5-7b --seq 32768 --memory-gib "$G"
elif [ "${PHASE:-1}" = 2 ]; then
  anchor --quant nf4 --shape llama-3.1-8b --seq 16384; G=$(peak)
  ody "8b qlora 16k at bnb peak $G park auto" --shape llama-3.1-8b --seq 16384 --quant nf4 --memory-gib "$G" --mlp-park auto
  ody "8b qlora 16k at bnb peak $G park 0" --shape llama-3.1-8b --seq 16384 --quant nf4 --memory-gib "$G" --mlp-park 0
  ody "7b 32k 32.3 park 13 stride 2" --shape qwen2.5-7b --seq 32768 --memory-gib 32.3 --mlp-park 13 --mlp-park-stride 2
  ody "7b 32k unlimited profiled" --shape qwen2.5-7b --seq 32768 --profile "$OUT/profile-7b-32k.jsonl"
  ody "7b 32k 24 ckpt 34.8" --shape qwen2.5-7b --seq 32768 --checkpointing 24 --memory-gib 34.8
fi
if [ "${PHASE:-1}" = 3 ]; then
  echo "== parity build $(date +%T)"
  cmake --build build-gpu --target odyssey-train fused_parity_gpu > "$OUT/build-parity.log" 2>&1 || { grep -B2 -A12 -E "error|FAILED" "$OUT/build-parity.log" | head -60; exit 1; }
  echo "== selftest $(date +%T)"
  build-gpu/app/odyssey-train selftest > "$OUT/selftest.txt" 2>&1; echo "selftest exit $?"; tail -3 "$OUT/selftest.txt"
  for c in qwen2.5-1.5b:lora qwen2.5-1.5b:qlora; do echo "== fused parity $c $(date +%T)"
    build-gpu/tests/gpu/fused_parity_gpu --case $c --work /tmp/fp-$c --out "$OUT/fused-parity.jsonl" 2>&1 | grep -v -E "^\[(bf16|fp32)\]|it/s\]" > "$OUT/fused-parity-$c.txt"
    echo "fused_parity_gpu exit ${PIPESTATUS[0]}"; grep -E "^qwen|  (per-token|loss curve|grad norm)|PASS|FAIL" "$OUT/fused-parity-$c.txt" | tail -8; done
fi
echo "== done $(date +%T)"
