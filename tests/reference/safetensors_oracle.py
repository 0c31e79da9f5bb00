"""The reference side of tests/core/tst_safetensors.cpp: the real safetensors and
transformers libraries write files Odyssey must read bit-exactly, and read the files
Odyssey wrote. Prints one JSON document on stdout; progress and errors go to stderr.

  safetensors_oracle.py write DIR
      DIR/single.safetensors   safetensors.torch.save_file: BF16/F16/F32, 0-d and empty
                               tensors, NaN/inf/-0/subnormals, metadata
      DIR/refused.safetensors  F64 and I64 tensors next to an F32 one
      DIR/sharded/             a tiny Qwen2 model saved by transformers' save_pretrained
                               with a small max_shard_size (several shards + index)
    JSON: per file and tensor its dtype, shape, the sha256 of its raw bytes and of its
    conversions by torch to float32/float16/bfloat16; the sharded weight_map.

  safetensors_oracle.py check DIR [REFERENCE_MODEL_DIR]
    Reads every *.safetensors under DIR with safetensors.torch.load_file (and safe_open
    for the metadata); when REFERENCE_MODEL_DIR is given, also loads DIR/sharded with
    transformers' from_pretrained and compares every parameter with the reference model.
"""
import hashlib
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32",
         torch.float64: "F64", torch.int64: "I64"}


def sha(t):
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def describe(t, conversions):
    d = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "sha256": sha(t)}
    if conversions:
        d["as"] = {NAMES[dt]: sha(t.to(dt)) for dt in (torch.float32, torch.float16, torch.bfloat16)}
    return d


def with_specials(t):
    flat = t.reshape(-1)
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 1e-40, 65504.0, 3.0e38, -1.0e-7]
    for i, v in enumerate(specials[: flat.numel()]):
        flat[i] = v
    return t


def write(out):
    torch.manual_seed(1234)
    single = {
        "model.bf16.matrix": with_specials(torch.randn(37, 19) * 100).to(torch.bfloat16),
        "model.f16.vector": with_specials(torch.randn(101)).to(torch.float16),
        "model.f32.cube": with_specials(torch.randn(3, 4, 5) * 1e5),
        "model.f32.scalar": torch.tensor(3.25),
        "model.bf16.scalar": torch.tensor(-7.5, dtype=torch.bfloat16),
        "model.f16.empty": torch.zeros(0, 7, dtype=torch.float16),
        "model.bf16.empty": torch.zeros(4, 0, 2, dtype=torch.bfloat16),
        "lm_head.weight": torch.randn(5, 3, dtype=torch.float32),
    }
    meta = {"format": "pt", "producer": "safetensors_oracle"}
    save_file(single, os.path.join(out, "single.safetensors"), metadata=meta)
    refused = {"f64.x": torch.randn(3, dtype=torch.float64), "i64.ids": torch.arange(5),
               "f32.ok": torch.ones(2)}
    save_file(refused, os.path.join(out, "refused.safetensors"))

    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    sharded = os.path.join(out, "sharded")
    model.save_pretrained(sharded, max_shard_size="10KB")
    with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
        index = json.load(f)
    state = {k: v for k, v in model.state_dict().items()}
    return {
        "files": {
            "single.safetensors": {"metadata": meta,
                                   "tensors": {k: describe(v, True) for k, v in single.items()}},
            "refused.safetensors": {"metadata": None,
                                    "tensors": {k: describe(v, False) for k, v in refused.items()}},
        },
        "sharded": {"weight_map": index["weight_map"],
                    "total_size": index["metadata"]["total_size"],
                    "tensors": {k: describe(v, False) for k, v in state.items()}},
    }


def check(root, reference_model):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith(".safetensors"):
                continue
            path = os.path.join(dirpath, name)
            with safe_open(path, framework="pt") as f:
                meta = f.metadata()
            tensors = load_file(path)
            files[os.path.relpath(path, root)] = {
                "metadata": meta, "tensors": {k: describe(v, False) for k, v in tensors.items()}}
    result = {"files": files}
    if reference_model:
        from transformers import AutoModelForCausalLM
        ours, info = AutoModelForCausalLM.from_pretrained(os.path.join(root, "sharded"),
                                                          output_loading_info=True)
        ref = AutoModelForCausalLM.from_pretrained(reference_model)
        ref_state, our_state = ref.state_dict(), ours.state_dict()
        differ = [k for k in ref_state if k not in our_state or
                  ref_state[k].dtype != our_state[k].dtype or sha(ref_state[k]) != sha(our_state[k])]
        result["transformers"] = {
            "missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
            "mismatched": sorted(str(k) for k in info["mismatched_keys"]), "differ": differ,
            "dtype": str(ours.dtype), "parameters": len(our_state)}
    return result


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    result = write(sys.argv[2]) if sys.argv[1] == "write" else check(
        sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
