#!/usr/bin/env python3
"""bitsandbytes as the oracle of Odyssey's 4-bit quantization (tests/core/tst_quant4.cpp).

    bnb_oracle.py cases OUT.safetensors

Quantizes a fixed set of inputs (odd shapes, every blocksize bitsandbytes accepts, NF4 and
FP4, double quantization on and off, fp32/bf16/fp16 inputs, blocks of zeros and a single
block) with bitsandbytes.functional.quantize_4bit on the CPU and writes, per case k:

    k.input            the weight, in its dtype
    k.packed           uint8, bitsandbytes' packed codes
    k.absmax           fp32, or uint8 when double-quantized
    k.nested_absmax    fp32 (double quantization only)
    k.nested_code      fp32 [256] (double quantization only)
    k.offset           fp32 [1] (double quantization only)
    k.dequant          fp32, dequantized by bitsandbytes (see below)
    k.dequant_bf16     bf16, the same dequantized to bf16
    k.code             fp32 [16], bitsandbytes' get_4bit_type table (quant_map)

and the case list as JSON metadata ("cases": [{"name", "shape", "dtype", "quant_type",
"blocksize", "double_quant"}]).
"""
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
# Eager bitsandbytes: its CPU dequantizer is otherwise torch.compile-d, which needs a C++
# compiler at test time and recompiles for every shape.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cases():
    out = []
    shapes = [(7, 64), (3, 70), (33, 129), (1, 64), (5, 1), (128, 96), (300, 257)]
    for qt in ("nf4", "fp4"):
        for dq in (False, True):
            for i, shape in enumerate(shapes):
                dtype = ("float32", "bfloat16", "float16")[i % 3]
                out.append(dict(shape=list(shape), dtype=dtype, quant_type=qt, blocksize=64, double_quant=dq, kind="randn"))
            for bs in (32, 128, 256, 512, 1024, 2048, 4096):
                out.append(dict(shape=[41, 203], dtype="bfloat16", quant_type=qt, blocksize=bs, double_quant=dq,
                                kind="randn"))
            # Blocks of zeros, a constant block, values on the code's midpoints, and enough blocks
            # (> 256) for several nested blocks with a short last one.
            out.append(dict(shape=[4, 64], dtype="float32", quant_type=qt, blocksize=64, double_quant=dq, kind="zeros"))
            out.append(dict(shape=[6, 64], dtype="float32", quant_type=qt, blocksize=64, double_quant=dq,
                            kind="constant"))
            out.append(dict(shape=[16, 64], dtype="float32", quant_type=qt, blocksize=64, double_quant=dq,
                            kind="midpoints"))
            out.append(dict(shape=[600, 64], dtype="bfloat16", quant_type=qt, blocksize=64, double_quant=dq,
                            kind="wide"))
    for k, c in enumerate(out):
        c["name"] = f"c{k}"
    return out


def make_input(c, k):
    g = torch.Generator().manual_seed(1000 + k)
    shape = c["shape"]
    dtype = DTYPES[c["dtype"]]
    if c["kind"] == "zeros":
        x = torch.randn(shape, generator=g)
        x[1] = 0.0
        x[3, :5] = 0.0
    elif c["kind"] == "constant":
        x = torch.full(shape, 0.25)
        x[2] = -3.0
    elif c["kind"] == "midpoints":
        code = F.get_4bit_type(c["quant_type"], device="cpu").sort().values
        mids = (code[:-1] + code[1:]) / 2
        x = torch.cat([mids, code, torch.tensor([1.0])]).repeat(32)[: shape[0] * shape[1]].reshape(shape)
        x[::2, 0] = 1.0  # absmax 1 in half of the blocks: the midpoints exactly
    elif c["kind"] == "wide":
        x = torch.randn(shape, generator=g) * torch.logspace(-3, 1, shape[0]).unsqueeze(1)
    else:
        x = torch.randn(shape, generator=g) * 0.05
    return x.to(dtype)


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "cases":
        print(__doc__, file=sys.stderr)
        return 2
    tensors = {}
    meta = []
    for k, c in enumerate(cases()):
        x = make_input(c, k)
        packed, st = F.quantize_4bit(x, blocksize=c["blocksize"], compress_statistics=c["double_quant"],
                                     quant_type=c["quant_type"])
        n = c["name"]
        tensors[f"{n}.input"] = x.contiguous()
        tensors[f"{n}.packed"] = packed.contiguous()
        tensors[f"{n}.absmax"] = st.absmax.contiguous()
        if c["double_quant"]:
            tensors[f"{n}.nested_absmax"] = st.state2.absmax.contiguous()
            tensors[f"{n}.nested_code"] = st.state2.code.contiguous()
            tensors[f"{n}.offset"] = st.offset.reshape(1).float().contiguous()
        # Dequantized by bitsandbytes' portable implementation (backends/default), with the
        # nested constants expanded by its dequantize_blockwise: 0.50's native AVX-512 CPU
        # kernel takes each row's blocks from the row's start, so it misreads every row whose
        # length is not a whole number of blocks (shape [128, 96], element 128 scaled by block
        # 1's absmax instead of block 2's); its CUDA kernel and its quantizer use the flat
        # layout, which is the format.
        absmax = st.absmax
        if c["double_quant"]:
            absmax = F.dequantize_blockwise(st.absmax, st.state2) + st.offset
        code = F.get_4bit_type(c["quant_type"], device="cpu")
        flat = packed.reshape(-1)
        tensors[f"{n}.dequant"] = _dequantize_4bit_compute(flat, absmax.float(), code, c["blocksize"], x.shape,
                                                           torch.float32).contiguous()
        tensors[f"{n}.dequant_bf16"] = _dequantize_4bit_compute(flat, absmax.float(), code, c["blocksize"], x.shape,
                                                                torch.bfloat16).contiguous()
        tensors[f"{n}.code"] = code.contiguous()
        meta.append({key: c[key] for key in ("name", "shape", "dtype", "quant_type", "blocksize", "double_quant",
                                             "kind")})
    save_file(tensors, sys.argv[2], metadata={"cases": json.dumps(meta)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
