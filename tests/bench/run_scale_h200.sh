#!/usr/bin/env bash
# Scale-out rows of docs/benchmarks.md on 4 (and later 8) H200s: device kinds nvidia-h200-x4 /
# nvidia-h200-x8. Qwen2.5-7B-shaped LoRA (4 KV heads), every layer checkpointed, attention
# recomputed, bf16, 3 steps after 1 warm-up: the same job as run_parallel_h200.sh's rows, with
# the sequence growing with the GPUs (32K tokens per GPU: weak scaling).
# Phases, run in the order given (`bash tests/bench/run_scale_h200.sh build u2 u4 r4 a2a4 nccl4`):
#   build   the engine, its CUDA kernels and the GPU tests (run_parallel_h200.sh build)
#   u2      the 2-GPU base on GPUs 0 and 1: Ulysses 2 at 64K
#   u4      Ulysses 4 at 128K on 4 GPUs (KV heads 4 = the degree: no replication)
#   r4      ring 4 at 128K on 4 GPUs (zigzag, K/V rotation overlapped)
#   u2r2    the hybrid, Ulysses 2 x ring 2, at 128K on 4 GPUs
#   dp2u2   data parallel 2 x Ulysses 2 at 64K per group on 4 GPUs (two rows a step; the
#           record's tokens/s counts both)
#   a2a4    the engine's all-to-all alone on 4 ranks at Ulysses 4's message sizes
#   nccl4   PyTorch's all_to_all_single and a batched send/recv ring shift on 4 ranks at the
#           same sizes (tests/bench/a2a_bench.py)
#   losses  the per-step losses of u4 and r4 side by side (the same global row: they must agree
#           within bf16 noise)
# Results go to $OUT (or ./bench-out).
set -u
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=build-gpu/app/odyssey-bench
MODEL="--shape qwen2.5-7b --mode lora --steps 3 --warmup 1 --checkpointing all --keep-attention none"
# Bytes per rank at 32K local tokens: Ulysses output (32768 x 3584 bf16) and packed Q/K/V
# (32768 x 4608 bf16); ring K/V (32768 x 1024 bf16) and dK/dV (fp32).
A2A_BYTES=234881024,301989888
P2P_BYTES=67108864,134217728
phase() { echo "== $1 $(date +%T)"; }
# One row at 128K on 4 GPUs; the arguments choose the layout (--ulysses U, the rest ring).
row4() {
  torchrun --no-python --nproc-per-node 4 $B $MODEL "$@" --seq 131072 --out "$OUT/scale.jsonl" 2>&1 | cut -c1-400 | tail -2
}
for p in "$@"; do
  case $p in
  build) bash tests/bench/run_parallel_h200.sh build || exit 1 ;;
  u2)
    phase u2
    CUDA_VISIBLE_DEVICES=0,1 torchrun --no-python --nproc-per-node 2 $B $MODEL --seq 65536 --out "$OUT/scale.jsonl" 2>&1 |
      cut -c1-400 | tail -2 ;;
  u4) phase u4; row4 --ulysses 4 ;;
  r4) phase r4; row4 --ulysses 1 ;;
  u2r2) phase u2r2; row4 --ulysses 2 ;;
  dp2u2)
    phase dp2u2
    torchrun --no-python --nproc-per-node 4 $B $MODEL --dp 2 --ulysses 2 --seq 65536 --out "$OUT/scale.jsonl" 2>&1 |
      cut -c1-400 | tail -2 ;;
  a2a4)
    phase a2a4
    torchrun --no-python --nproc-per-node 4 $B $MODEL --ulysses 4 --a2a-bytes $A2A_BYTES --out "$OUT/a2a.jsonl" 2>&1 | tail -3 ;;
  nccl4)
    phase nccl4
    torchrun --nproc-per-node 4 tests/bench/a2a_bench.py --bytes $A2A_BYTES --out "$OUT/nccl.jsonl" 2>&1 | tail -3
    torchrun --nproc-per-node 4 tests/bench/a2a_bench.py --op sendrecv --bytes $P2P_BYTES --out "$OUT/nccl.jsonl" 2>&1 | tail -3 ;;
  losses)
    phase losses
    python3 - "$OUT/scale.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
for r in rows:
    world = r.get("world", 1)
    coll = {c["op"]: c for c in r.get("collectives", [])}
    print(f"world {world} dp {r.get('dp', 1)} ulysses {r.get('ulysses', 1)} ring {r.get('ring', 1)} seq {r['seq']}: "
          f"{r['tokens_per_s']:.0f} tokens/s ({r['tokens_per_s'] / world:.0f} per GPU), "
          f"peak {r.get('peak_gib_per_rank', r['peak_gib'])} GiB (planned {r.get('planned_peak_gib')}), "
          f"comm {r.get('comm_share')}, losses {r.get('losses')}, collectives {sorted(coll)}")
same = [r for r in rows if r["seq"] == 131072]
for r in same[1:]:  # the same global row under each 4-GPU layout, against the first
    a, b = same[0]["losses"], r["losses"]
    print(f"ulysses {r.get('ulysses')} ring {r.get('ring')} vs ulysses {same[0].get('ulysses')} ring "
          f"{same[0].get('ring')}: worst relative loss difference", max(abs(x - y) / abs(y) for x, y in zip(a, b)))
PY
    ;;
  *) echo "unknown phase $p"; exit 2 ;;
  esac
done
