"""PyTorch's all_to_all_single bus bandwidth on this machine, the reference figure for the
Ulysses all-to-alls odyssey-bench reports (docs/benchmarks.md, docs/parallel.md); with
--op sendrecv, a ring shift (every rank sends to rank + 1 and receives from rank - 1, one
batch_isend_irecv), the reference for ring attention's K/V rotation.

    torchrun --nproc-per-node 2 tests/bench/a2a_bench.py --bytes 117440512,150994944 [--op sendrecv] [--out F]

One JSON line per size: bytes per rank (nccl-tests' "size"), mean time over --iters calls
after --warmup, algbw = bytes / time, busbw = algbw * (n - 1) / n for all-to-all and
algbw for send/recv (nccl-tests' conventions).
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
    ap.add_argument("--op", choices=["alltoall", "sendrecv"], default="alltoall")
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    rank = dist.get_rank()

    def call(y, x):
        if a.op == "alltoall":
            dist.all_to_all_single(y, x)
        else:
            ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, y, (rank - 1 + n) % n)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
    for size in [int(s) for s in a.bytes.split(",")]:
        elems = size // 2 // n * n
        x = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        for _ in range(a.warmup):
            call(y, x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            call(y, x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        if dist.get_rank() == 0:
            algbw = elems * 2 / dt / 1e9
            rec = {"impl": "pytorch", "op": "all_to_all_single" if a.op == "alltoall" else "send_recv", "world": n,
                   "bytes": elems * 2, "time_ms": round(dt * 1e3, 4), "algbw_gb_per_s": round(algbw, 2),
                   "bus_gb_per_s": round(algbw * (n - 1) / n if a.op == "alltoall" else algbw, 2),
                   "torch": torch.__version__}
            print(json.dumps(rec), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
