#!/usr/bin/env bash
# The 2-GPU sequence-parallel benchmark of docs/benchmarks.md, on an nvidia-h200-x2 machine:
# builds the engine (docs/building.md, GPU server), then in one session
#   1. the packed-row check and Qwen2.5-7B-shaped LoRA at 32K on one GPU;
#   2. the same at 32K and 64K with Ulysses 2 on two GPUs (torchrun --no-python);
#   3. PyTorch's all_to_all_single at the training's message sizes;
#   4. loss curves, 50 steps, 0.5B shape at 16K, one GPU vs Ulysses 2;
#   5. odyssey-train's own launcher: the quickstart on 2 GPUs (Ulysses 2) vs one GPU.
# Results go to $OUT (or ./bench-out).
set -u
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" \
  -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu --target odyssey-train odyssey-bench > "$OUT/build.log" 2>&1 || { grep -B2 -A8 error "$OUT/build.log" | head -60; exit 1; }
B=build-gpu/app/odyssey-bench
T=build-gpu/app/odyssey-train
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.csv"
echo "== 1 GPU"; $B --check --shape qwen2.5-7b --mode lora --seq 32768 --steps 3 --warmup 1 --out "$OUT/one.jsonl" 2>&1 | tail -3
echo "== 2 GPUs"; torchrun --no-python --nproc-per-node 2 $B --shape qwen2.5-7b --mode lora --seq 32768,65536 --steps 3 --warmup 1 --out "$OUT/two.jsonl" 2>&1 | tail -4
echo "== a2a"; torchrun --nproc-per-node 2 tests/bench/a2a_bench.py --bytes 117440512,150994944,234881024,301989888,1073741824 --out "$OUT/a2a.jsonl" 2>&1 | tail -6
echo "== loss curves"; $B --shape qwen2.5-0.5b --mode lora --seq 16384 --steps 50 --warmup 0 --out "$OUT/curve-one.jsonl" > /dev/null 2>&1
torchrun --no-python --nproc-per-node 2 $B --shape qwen2.5-0.5b --mode lora --seq 16384 --steps 50 --warmup 0 --out "$OUT/curve-two.jsonl" > /dev/null 2>&1
echo "== launcher"; python3 resources/quickstart/make_model.py > /dev/null 2>&1
for n in 1 2; do $T run presets/quickstart.yaml --name gpu$n --set device=cuda --set torch_dtype=bfloat16 --set nproc_per_node=$n \
  --set sequence_parallel_size=$n --set max_steps=30 --set output_dir="$OUT/runs" > "$OUT/launcher-$n.log" 2>&1; echo "gpus $n exit $?"; done
tail -4 "$OUT"/launcher-2.log
