#!/usr/bin/env bash
# The optimizer issue's H200 measurements (docs/optimizers.md, docs/benchmarks.md):
#   build   the engine (run_kernels_h200.sh build)
#   svd     torch.linalg.svd time of the Qwen2.5-7B weight shapes (GaLore's refresh cost)
#   one     Qwen2.5-7B-shaped full fine-tuning on one GPU at 4K and 32K tokens, every layer
#           checkpointed: AdamW (pure bf16), GaLore and Q-GaLore (rank 128)
#   two     Qwen2.5-14B-shaped full fine-tuning at 32K on two GPUs, Ulysses 2: ZeRO-2 with offload,
#           and GaLore (TWO_OPTIMIZERS overrides; torchrun --no-python; needs nvidia-h200-x2)
# `bash tests/bench/run_optimizers_h200.sh build svd one` runs those phases in order.
# Results go to $OUT (or ./bench-out).
set -u
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
B=build-gpu/app/odyssey-bench
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
phase() { echo "== $1 $(date +%T)"; }
short() { python3 -c '
import json, sys
for line in sys.stdin:
    try: d = json.loads(line)
    except Exception: print(line.rstrip()[:300]); continue
    keys = ["shape", "mode", "seq", "optimizer", "galore_rank", "world", "tokens_per_s", "step_ms", "warmup_step_ms",
            "peak_gib", "peak_gib_per_rank", "planned_peak_gib", "planner_error", "optimizer_state_gib",
            "optimizer_host_gib", "optimizer_bytes_per_param", "planned_optimizer_gib", "mfu", "loss", "oom", "error"]
    print({k: d[k] for k in keys if k in d})'; }
for p in "$@"; do
  case $p in
  build)
    bash tests/bench/run_kernels_h200.sh build || exit 1 ;;
  svd)
    phase svd
    python3 - <<'PY' | tee "$OUT/svd.txt"
import time, torch
for shape in [(3584, 3584), (512, 3584), (18944, 3584), (3584, 18944)]:
    g = torch.randn(shape, device="cuda")
    torch.linalg.svd(g, full_matrices=False); torch.cuda.synchronize()
    t = time.time(); torch.linalg.svd(g, full_matrices=False); torch.cuda.synchronize()
    print(f"svd {shape[0]}x{shape[1]} fp32 on {torch.cuda.get_device_name()}: {time.time() - t:.3f} s")
PY
    ;;
  one)
    phase one
    for opt in galore q-galore adamw; do  # adamw last: it may not fit
      $B --shape qwen2.5-7b --mode full --optimizer $opt --galore-rank 128 --checkpointing all --seq 4096,32768 \
        --steps 3 --warmup 1 --out "$OUT/optim-one.jsonl" 2>&1 | short
    done ;;
  two)
    phase two
    # ZeRO-2 without offload does not fit (measured: out of memory at 138 GiB; planned 141.6 GiB).
    for opt in ${TWO_OPTIMIZERS:-zero2-offload galore}; do
      torchrun --no-python --nproc-per-node 2 $B --shape qwen2.5-14b --mode full --optimizer $opt --checkpointing all \
        --seq 32768 --steps 2 --warmup 1 --out "$OUT/optim-two.jsonl" 2>&1 | short
    done ;;
  *) echo "unknown phase $p"; exit 2 ;;
  esac
done
