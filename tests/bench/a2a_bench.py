"""PyTorch's all_to_all_single bus bandwidth on this machine, the reference figure for the
Ulysses all-to-alls odyssey-bench reports (docs/benchmarks.md, docs/parallel.md).

    torchrun --nproc-per-node 2 tests/bench/a2a_bench.py --bytes 117440512,150994944 [--out F]

One JSON line per size: bytes per rank (nccl-tests' "size"), mean time over --iters calls
after --warmup, algbw = bytes / time, busbw = algbw * (n - 1) / n (nccl-tests' convention).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", default="16777216,67108864,268435456,1073741824")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    for size in [int(s) for s in a.bytes.split(",")]:
        elems = size // 2 // n * n
        x = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        for _ in range(a.warmup):
            dist.all_to_all_single(y, x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_to_all_single(y, x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        if dist.get_rank() == 0:
            rec = {"impl": "pytorch", "op": "all_to_all_single", "world": n, "bytes": elems * 2,
                   "time_ms": round(dt * 1e3, 4), "algbw_gb_per_s": round(elems * 2 / dt / 1e9, 2),
                   "bus_gb_per_s": round(elems * 2 / dt / 1e9 * (n - 1) / n, 2), "torch": torch.__version__}
            print(json.dumps(rec), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
