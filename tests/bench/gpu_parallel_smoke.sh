#!/usr/bin/env bash
# Parallel smoke test on an nvidia-h200-x2 machine (docs/parallel.md, "On two H200s"): builds
# odyssey-train, then trains the quickstart (fp32, 20 steps) on one GPU and through the
# launcher on two over NCCL: ring 2 (coalesced send/recv), Ulysses 2, dp 2 (against one GPU
# with the same global batch); a GPU id that does not exist; and a rank killed with SIGKILL
# (the launcher's reaction time, the status, and no process left on the GPUs).
#   OUT=/tmp/smoke bash tests/bench/gpu_parallel_smoke.sh
set -u
OUT=${OUT:-$PWD/smoke-out}
mkdir -p "$OUT"
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" > $OUT/cmake.log 2>&1
cmake --build build-gpu --target odyssey-train > $OUT/build.log 2>&1 || { grep -A5 error $OUT/build.log | head -40; exit 1; }
python3 resources/quickstart/make_model.py > /dev/null 2>&1
T=build-gpu/app/odyssey-train
run() { n=$1; shift; $T run presets/quickstart.yaml --name $n --set device=cuda --set torch_dtype=float32 --set max_steps=20 --set output_dir=$OUT/runs "$@" > $OUT/$n.log 2>&1; echo "$n exit $?"; grep -E "^step (1|10|20)/|mesh:" $OUT/$n.log; }
run one
run ring2 --set nproc_per_node=2 --set sequence_parallel_size=2 --set ulysses_size=1
run uly2 --set nproc_per_node=2 --set sequence_parallel_size=2
run dp2 --set nproc_per_node=2 --set per_device_train_batch_size=2
run one-b8 --set per_device_train_batch_size=8
run dp2b --set nproc_per_node=2
echo "== bad gpu id"; $T run presets/quickstart.yaml --set device=cuda --set gpu_ids=[0,7] --set output_dir=$OUT/bad 2>&1 | tail -2
echo "== kill a rank"; ($T run presets/quickstart.yaml --name kill --set device=cuda --set nproc_per_node=2 --set sequence_parallel_size=2 --set max_steps=100000 --set output_dir=$OUT/kill > $OUT/kill.log 2>&1 &) ; sleep 25
L=$(pgrep -f "odyssey-train run presets/quickstart.yaml --name kill" | head -1); R=$(pgrep -P $L | tail -1); echo "launcher $L ranks $(pgrep -P $L | tr '\n' ' ')"; date +%s.%N; kill -9 $R; while kill -0 $L 2>/dev/null; do sleep 0.1; done; date +%s.%N
tail -4 $OUT/kill.log; sleep 1; echo "compute apps:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; python3 -c "import json,glob;s=json.load(open(glob.glob('$OUT/kill/*/status.json')[0]));print(s['state'],s.get('failed_rank'),s['reason'][:200])"
