#!/usr/bin/env python3
"""Logits of a LoRA adapter (or a merged export) as PEFT and transformers compute them: the
oracle that an adapter or merged model written by Odyssey loads in the Python ecosystem and
computes what Odyssey computes (tests/core/tst_train_parity.cpp).

    peft_oracle.py MODEL_DIR ADAPTER_DIR IN.safetensors OUT.safetensors
    peft_oracle.py --merged-dir DIR IN.safetensors OUT.safetensors

IN holds `input_ids` [B, S] and optionally `position_ids` [B, S] and `attention_mask` [B, S]
(any integer or float dtype holding whole numbers). The model is loaded with transformers
(float32, attn_implementation="sdpa" or --attn's, CPU, use_cache off, eval mode; Gemma-2's
soft-capped attention needs --attn eager).

Adapter mode: PeftModel.from_pretrained(model, ADAPTER_DIR). Writes `logits` (float32
[B, S, vocab]) and `merged_logits`, the logits after merge_and_unload() (equal up to rounding).
Fails (exit 1, a message on stderr) when PEFT warns about anything while loading the adapter
(warnings are errors there, but for one false alarm of PEFT's Qwen3-MoE conversion, load_adapter), when a tensor of adapter_model.safetensors is not one PEFT's model
has or one PEFT's model has is missing from the file (PEFT itself ignores unexpected keys), or
when a loaded tensor differs from the file's. The base model must load without missing or
unexpected weights too.

--merged-dir DIR: an HF model directory (a merged export, or any model), loaded by transformers
alone, with no missing, unexpected or mismatched weights; writes its `logits`. --dtype bfloat16
loads it in bf16 instead (still on the CPU): the oracle of the bf16 CPU rows.

Pinned: transformers 5.17.0, peft 0.21.0, torch 2.11, safetensors 0.8.0.
"""
import argparse
import json
import os
import sys
import warnings

import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import AutoModelForCausalLM

PINS = {"transformers": "5.17.0", "peft": "0.21.0"}


class OracleError(Exception):
    pass


def check_pins():
    import peft
    found = {"transformers": transformers.__version__, "peft": peft.__version__}
    bad = [f"{k} {found[k]} found, {v} pinned" for k, v in PINS.items() if found[k] != v]
    if bad:
        raise OracleError("; ".join(bad))


ATTN = "sdpa"
DTYPE = torch.float32


def model_class(model_dir):
    """The class config.json's architectures names (Mistral3ForConditionalGeneration and
    LlavaForConditionalGeneration have no AutoModelForCausalLM mapping), else the auto class."""
    with open(os.path.join(model_dir, "config.json")) as f:
        arch = (json.load(f).get("architectures") or [""])[0]
    return getattr(transformers, arch, None) or AutoModelForCausalLM


def load_hf(model_dir):
    """transformers' model, refusing a checkpoint with missing, unexpected or mismatched weights."""
    model, info = model_class(model_dir).from_pretrained(model_dir, dtype=DTYPE, attn_implementation=ATTN,
                                                         output_loading_info=True)
    problems = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if info.get("error_msgs"):
        problems["error_msgs"] = list(info["error_msgs"])
    if problems:
        raise OracleError(f"{model_dir}: transformers could not load every weight: {json.dumps(problems)}")
    model.config.use_cache = False
    return model.eval()


def as_ids(t, name):
    if t.is_floating_point():
        if not torch.equal(t, t.round()):
            raise OracleError(f"{name}: not whole numbers")
    return t.to(torch.int64)


def read_inputs(path):
    t = load_file(path)
    if "input_ids" not in t:
        raise OracleError(f"{path}: no tensor 'input_ids' (found {sorted(t)})")
    ids = as_ids(t["input_ids"], "input_ids")
    if ids.dim() != 2:
        raise OracleError(f"{path}: input_ids must be [B, S], found {list(ids.shape)}")
    kw = {"input_ids": ids}
    for k in ("position_ids", "attention_mask"):
        if k in t:
            kw[k] = as_ids(t[k], k)
            if kw[k].shape != ids.shape:
                raise OracleError(f"{path}: {k} has shape {list(kw[k].shape)}, input_ids {list(ids.shape)}")
    return kw


def logits_of(model, kw):
    with torch.no_grad():
        return model(**kw, use_cache=False).logits.float().contiguous()


def load_adapter(base, adapter_dir):
    from peft import PeftModel, get_peft_model_state_dict
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Found missing adapter keys ..." and the like
        # One known false alarm: PEFT's own v4-to-v5 MoE conversion (Qwen3-MoE: gate_proj + up_proj in
        # target_modules become the experts' gate_up_proj at twice the rank) adds rank_pattern /
        # alpha_pattern keys for that parameter and then warns they matched no *module*, although the
        # parameter wrapper does take the doubled rank (the shape check below proves every tensor).
        warnings.filterwarnings("ignore", message=r"The following (rank|alpha)_pattern keys did not match any "
                                r"targeted module and were ignored: \['\.\*\\\\\.gate_up_proj'\]")
        try:
            model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=False)
        except Warning as w:
            raise OracleError(f"{adapter_dir}: PEFT warned while loading the adapter: {w}") from None
    weights = os.path.join(adapter_dir, "adapter_model.safetensors")
    if not os.path.exists(weights):
        raise OracleError(f"{weights}: missing")
    file_sd = load_file(weights)
    model_sd = get_peft_model_state_dict(model)
    missing = sorted(set(model_sd) - set(file_sd))
    unexpected = sorted(set(file_sd) - set(model_sd))
    if missing or unexpected:
        raise OracleError(f"{weights}: adapter keys do not match PEFT's model: missing {missing}, unexpected "
                          f"{unexpected}")
    for k, v in file_sd.items():
        if model_sd[k].shape != v.shape or not torch.equal(model_sd[k].float().cpu(), v.float()):
            raise OracleError(f"{weights}: {k} was not loaded as written (shape {list(v.shape)} in the file, "
                              f"{list(model_sd[k].shape)} in the model)")
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--merged-dir", metavar="DIR", help="an HF model directory, loaded by transformers alone")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="transformers' attention")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the model's dtype")
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="MODEL_DIR ADAPTER_DIR IN OUT, or IN OUT with --merged-dir")
    args = ap.parse_args()
    global ATTN, DTYPE
    ATTN = args.attn
    DTYPE = getattr(torch, args.dtype)
    want = 2 if args.merged_dir else 4
    if len(args.paths) != want:
        ap.error(f"expected {'IN OUT' if args.merged_dir else 'MODEL_DIR ADAPTER_DIR IN OUT'}, got {args.paths}")
    try:
        check_pins()
        torch.set_num_threads(1)  # tiny tensors: threads only spin on a busy machine
        torch.manual_seed(0)
        if args.merged_dir:
            inp, out = args.paths
            kw = read_inputs(inp)
            result = {"logits": logits_of(load_hf(args.merged_dir), kw)}
        else:
            model_dir, adapter_dir, inp, out = args.paths
            kw = read_inputs(inp)
            model = load_adapter(load_hf(model_dir), adapter_dir)
            logits = logits_of(model, kw)
            merged = model.merge_and_unload()
            result = {"logits": logits, "merged_logits": logits_of(merged, kw)}
            diff = (result["logits"] - result["merged_logits"]).abs().max().item()
            print(f"PEFT logits vs merged: max abs diff {diff:.3g}")
    except OracleError as e:
        print(f"peft_oracle.py: error: {e}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError, ValueError, KeyError) as e:  # unreadable files, shape mismatches in PEFT
        print(f"peft_oracle.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    save_file(result, out)
    print(f"wrote {out}: " + ", ".join(f"{k} {list(v.shape)}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
