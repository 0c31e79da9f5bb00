#!/usr/bin/env python3
"""bitsandbytes as the oracle of Odyssey's 4-bit quantization (tests/core/tst_quant4.cpp).

    bnb_oracle.py cases OUT.safetensors
    bnb_oracle.py model OUT_DIR [nf4|fp4] [dq|nodq]
    bnb_oracle.py moe OUT_DIR [nf4|fp4] [dq|nodq]

`model`: a tiny random Llama (hidden 64, 2 layers, 4 heads, 2 KV heads, intermediate 128,
vocab 256, fp32) saved to OUT_DIR/model16, loaded again by transformers with bitsandbytes
(load_in_4bit, the type, double quantization or not, compute dtype float32) on the CPU and
saved to OUT_DIR/model4; OUT_DIR/logits.safetensors holds `input_ids` (float32, 2 x 16), the
4-bit model's `logits` and `loss` (labels = input_ids) as transformers computes them, and
`exact_logits` / `exact_loss` of the fp32 model holding bitsandbytes' dequantized weights.

`moe`: 4-bit experts (docs/moe.md). A tiny random Qwen3-MoE (hidden 64, 2 layers, 5 experts,
top-2, expert width 64, fp32) saved to OUT_DIR/model16 by transformers (one tensor per expert);
OUT_DIR/model4 is what a transformers 4 + bitsandbytes checkpoint of it holds, where experts
are Linear modules: every projection, every expert's gate/up/down and the router (mlp.gate) 4-bit,
each quantized on its own by bitsandbytes (QuantState.as_dict(packed=True) beside it).
Two fp32 references, each saved as a model directory transformers wrote plus its logits:
OUT_DIR/exact_stack holds, for every expert parameter, bitsandbytes' dequantization of the
whole stacked tensor [E, 2I, hidden] / [E, hidden, I] quantized at once (what quantizing on
load computes, the router 16-bit), OUT_DIR/exact_pieces that of each per-expert tensor and of the
router of model4; both with the attention projections as model4 has them. logits.safetensors: `input_ids` (2 x 16) and
`stack_logits`, `pieces_logits` (transformers' fp32 forward of those two models).
OUT_DIR/model4_t5: model16 loaded by transformers 5 with bitsandbytes and saved, whose experts
stay 16-bit (stacked parameters, not Linear modules).

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


def tiny_model(out, quant_type, double_quant):
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).float().save_pretrained(os.path.join(out, "model16"))
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=double_quant,
                             bnb_4bit_compute_dtype=torch.float32)
    m = LlamaForCausalLM.from_pretrained(os.path.join(out, "model16"), quantization_config=bnb, device_map="cpu",
                                         dtype=torch.float32, attn_implementation="sdpa")
    m.save_pretrained(os.path.join(out, "model4"))
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        o = m(input_ids=ids, labels=ids)
    # The same model with every 4-bit weight dequantized by bitsandbytes from the saved file
    # (QuantState.from_dict, dequantize_4bit) into an fp32 Llama: the exact fp32 computation.
    # transformers' own forward differs from it by ~3e-3: bitsandbytes 0.50 repacks 4-bit
    # weights loaded on the CPU for its CPU kernel, which does not compute in fp32.
    from safetensors import safe_open
    from bitsandbytes.functional import QuantState
    exact = LlamaForCausalLM.from_pretrained(os.path.join(out, "model16"), dtype=torch.float32,
                                             attn_implementation="sdpa")
    f = safe_open(os.path.join(out, "model4", "model.safetensors"), "pt")
    keys = set(f.keys())
    params = dict(exact.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if f"{name}.absmax" not in keys:
                p.copy_(f.get_tensor(name).float())
                continue
            qs = {k[len(name) + 1:]: f.get_tensor(k) for k in keys if k.startswith(name + ".")}
            st = QuantState.from_dict(qs, device="cpu")
            st.dtype = torch.float32
            p.copy_(F.dequantize_4bit(f.get_tensor(name), st).reshape(p.shape))
        e = exact(input_ids=ids, labels=ids)
    save_file({"input_ids": ids.float(), "logits": o.logits.float().contiguous(), "loss": o.loss.reshape(1).float(),
               "exact_logits": e.logits.float().contiguous(), "exact_loss": e.loss.reshape(1).float()},
              os.path.join(out, "logits.safetensors"))
    return 0


def _quantized(w, quant_type, double_quant):
    """bitsandbytes' 4-bit form of w (fp32) and its dequantization (fp32, w's shape)."""
    packed, st = F.quantize_4bit(w.contiguous(), blocksize=64, compress_statistics=double_quant,
                                 quant_type=quant_type)
    absmax = st.absmax
    if double_quant:
        absmax = F.dequantize_blockwise(st.absmax, st.state2) + st.offset
    code = F.get_4bit_type(quant_type, device="cpu")
    back = _dequantize_4bit_compute(packed.reshape(-1), absmax.float(), code, 64, w.shape, torch.float32)
    return packed, st, back.reshape(w.shape)


def tiny_moe(out, quant_type, double_quant):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=5,
                         num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=128,
                         tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(cfg).float()
    model.save_pretrained(os.path.join(out, "model16"))
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    layer_ids = range(cfg.num_hidden_layers)
    proj = [f"model.layers.{i}.self_attn.{p}_proj.weight" for i in layer_ids for p in "qkvo"]
    routers = [f"model.layers.{i}.mlp.gate.weight" for i in layer_ids]

    four, stack, pieces = {}, {}, {}

    def put4(key, weight):
        """weight quantized by bitsandbytes into `four` as Params4bit saves it; its dequantization."""
        packed, st, back = _quantized(weight, quant_type, double_quant)
        four[key] = packed
        for k, v in st.as_dict(packed=True).items():
            four[f"{key}.{k}"] = v
        return back

    for name, w in sd.items():
        if name in proj:
            stack[name] = pieces[name] = put4(name, w)
        elif name in routers:
            stack[name] = w
            pieces[name] = put4(name, w)
        elif name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            stack[name] = _quantized(w, quant_type, double_quant)[2]
            prefix = name[: -len("gate_up_proj")] if name.endswith("gate_up_proj") else name[: -len("down_proj")]
            i = cfg.moe_intermediate_size
            back_all = torch.empty_like(w)
            for e in range(cfg.num_experts):
                parts = ([("gate_proj", w[e, :i], slice(0, i)), ("up_proj", w[e, i:], slice(i, 2 * i))]
                         if name.endswith("gate_up_proj") else [("down_proj", w[e], slice(None))])
                for pname, piece, rows in parts:
                    back_all[e, rows] = put4(f"{prefix}{e}.{pname}.weight", piece)
            pieces[name] = back_all
        else:
            four[name] = w
            stack[name] = w
            pieces[name] = w
    os.makedirs(os.path.join(out, "model4"), exist_ok=True)
    save_file({k: v.contiguous() for k, v in four.items()}, os.path.join(out, "model4", "model.safetensors"),
              metadata={"format": "pt"})
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False, "bnb_4bit_quant_type": quant_type,
          "bnb_4bit_use_double_quant": double_quant, "bnb_4bit_compute_dtype": "float32",
          "bnb_4bit_quant_storage": "uint8", "llm_int8_skip_modules": None}
    cfg_json = json.load(open(os.path.join(out, "model16", "config.json")))
    cfg_json["quantization_config"] = qc
    json.dump(cfg_json, open(os.path.join(out, "model4", "config.json"), "w"), indent=2)

    from transformers import BitsAndBytesConfig
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=double_quant,
                             bnb_4bit_compute_dtype=torch.float32)
    Qwen3MoeForCausalLM.from_pretrained(os.path.join(out, "model16"), quantization_config=bnb, device_map="cpu",
                                        dtype=torch.float32).save_pretrained(os.path.join(out, "model4_t5"))

    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(5))
    result = {"input_ids": ids.float()}
    for tag, weights in (("stack", stack), ("pieces", pieces)):
        m = Qwen3MoeForCausalLM(cfg).float()
        m.load_state_dict(weights)
        m.save_pretrained(os.path.join(out, f"exact_{tag}"))
        with torch.no_grad():
            result[f"{tag}_logits"] = m(input_ids=ids).logits.float().contiguous()
    save_file(result, os.path.join(out, "logits.safetensors"))
    return 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "moe":
        return tiny_moe(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "nf4",
                        (sys.argv[4] if len(sys.argv) > 4 else "dq") == "dq")
    if len(sys.argv) >= 3 and sys.argv[1] == "model":
        return tiny_model(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "nf4",
                          (sys.argv[4] if len(sys.argv) > 4 else "dq") == "dq")
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
