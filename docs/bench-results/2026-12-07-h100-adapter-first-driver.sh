#!/bin/bash
# One-off A/B driver, the record of the 2026-12-07 13:01Z call (docs/benchmarks.md): kernels/linear.cpp and
# core/model/decoder.cpp before and after the adapter-first order, Qwen2.5-7B LoRA 32K under the Liger anchor's
# 32.3 GiB. It ran as ab-run.sh in the repository root of tree e7e6c0a, with the two files of cff4463 beside it:
#   git show cff4463:kernels/linear.cpp > ab-linear-old.cpp; git show cff4463:core/model/decoder.cpp > ab-decoder-old.cpp
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
echo "== build $(date +%T)"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" \
  -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF \
  -DODYSSEY_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu --target odyssey-bench > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -E "error|FAILED" "$OUT/build.log" | head -60; exit 1; }
cp build-gpu/app/odyssey-bench /tmp/bench-new
cp kernels/linear.cpp /tmp/linear-new.cpp && cp ab-linear-old.cpp kernels/linear.cpp
cp core/model/decoder.cpp /tmp/decoder-new.cpp && cp ab-decoder-old.cpp core/model/decoder.cpp
echo "== build old $(date +%T)"
cmake --build build-gpu --target odyssey-bench > "$OUT/build-old.log" 2>&1 || { tail -20 "$OUT/build-old.log"; exit 1; }
cp build-gpu/app/odyssey-bench /tmp/bench-old && cp /tmp/linear-new.cpp kernels/linear.cpp && cp /tmp/decoder-new.cpp core/model/decoder.cpp
R="--steps 3 --warmup 2"; M="--shape qwen2.5-7b --mode lora --seq 32768"; G=32.3
run() { local tag=$1 bin=$2; shift 2; echo "== $tag $(date +%T)"
  $bin --label "$tag" $M $R --checkpointing auto --offload auto --memory-gib "$G" "$@" --out "$OUT/odyssey.jsonl" 2>&1 | tail -1 | cut -c1-420; }
run "old auto" /tmp/bench-old
run "new auto" /tmp/bench-new
echo "== anchor $(date +%T)"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --liger $M --checkpointing on $R --out "$OUT/hf.jsonl" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
run "old auto again" /tmp/bench-old
run "new auto again" /tmp/bench-new
run "new park 13 stride 2" /tmp/bench-new --mlp-park 13 --mlp-park-stride 2
run "new 24 ckpt budget 34.8" /tmp/bench-new --checkpointing 24 --memory-gib 34.8
echo "== done $(date +%T)"
