#!/usr/bin/env python3
"""Oracle for the fused path's GPU parity test (tests/gpu/fused_parity_gpu.cpp): a real-shaped,
randomly initialised Qwen2.5 model trained on one CUDA GPU by transformers (+ PEFT for LoRA), in
bf16 (the run being compared) and in fp32 (the yardstick both bf16 runs are measured against).

    fused_parity_reference.py OUT_DIR --shape qwen2.5-1.5b --mode lora|full|qlora [--layers N]
                              [--seq 4096] [--steps 20]

What runs:

  model      resources/model-shapes/<shape> (tests/bench/hf_bench.load_shape), optionally only its
             first N layers, built by hf_bench.build_model (N(0, 0.02) matrices, zero biases, unit
             norms; seed 0) in bf16 on cuda and saved with save_pretrained to OUT_DIR/model. Both
             runs load that directory: the bf16 one as bf16, the fp32 one upcast (the same values).
             attn_implementation "sdpa"; config.use_cache False (as the Trainer sets it). TF32 off.
  data       numpy default_rng(1): `steps` packed padding-free rows of `seq` tokens, each of several
             samples (lengths 256..1536, the last one filling the row); a sample is a walk of a fixed
             random Markov chain over 512 token ids (a random successor table, 4 successors per
             token), so there is something to learn and the loss falls; positions restart at 0 per
             sample; labels = ids with the sample's first 10..100 tokens set to -100 (a prompt).
  per-token  before training, the per-token negative log-likelihood of row 0 (logits upcast to fp32,
             cross-entropy with reduction none, shifted targets), bf16 and fp32 models.
  tuner      lora: PEFT LoraConfig(r=16, alpha=32, dropout 0, q/k/v/o/gate/up/down), created on the
             bf16 model after torch.manual_seed(2) (adapters in fp32, PEFT's autocast_adapter_dtype);
             the fp32 model gets the same initial adapter tensors. full: every parameter trains, in the
             model's dtype (pure bf16 AdamW in the bf16 run, as transformers does without amp).
             qlora: lora on a 4-bit base. The bf16 model is loaded once by transformers + bitsandbytes
             (BitsAndBytesConfig load_in_4bit, NF4, double quantization, compute dtype bf16: every
             decoder projection a Linear4bit) and saved to OUT_DIR/model4, which both runs (and
             Odyssey) load; the fp32 run loads it with dtype float32 and each Linear4bit's
             compute_dtype set to float32 (bitsandbytes dequantizes to the stored bf16 and casts to
             the input's dtype: both runs multiply by the same base, only the arithmetic differs).
             prepare_model_for_kbit_training is not applied (it would move the bf16 run's norms and
             embeddings to fp32).
  loop       train_reference.make_optimizer / train_steps: torch's fused AdamW (betas 0.9, 0.95,
             eps 1e-8, weight decay 0.1 except biases and norms), cosine schedule with 2 warmup steps,
             one row per step (accum 1), clip_grad_norm_(1.0); lr 2e-4 (lora) / 1e-4 (full: at 1e-5 most
             pure-bf16 updates round away and both bf16 runs barely move, which would make the curve
             blind to a broken update).

Writes OUT_DIR/model (config.json, safetensors; qlora: OUT_DIR/model4 too) and
  OUT_DIR/reference.safetensors  batch.<k>.{input_ids,labels,position_ids} (float32, exact),
                                 nll.bf16, nll.fp32 [T] (0 where the target is -100),
                                 init.<name> (the trainable parameters before step 1; LoRA names as
                                 PEFT saves them, full names as transformers')
  OUT_DIR/reference.json         hyper-parameters, per-step losses / grad norms / lrs of both runs,
                                 seconds per run.

Pinned: transformers 5.17.0, peft 0.21.0, torch 2.11 (qlora: bitsandbytes 0.50.2).
"""
import argparse
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "bench"))
import train_reference as tr  # noqa: E402
import hf_bench  # noqa: E402

import transformers  # noqa: E402

CHAIN_TOKENS = 512
SUCCESSORS = 4


def make_rows(steps: int, seq: int, vocab: int):
    rng = np.random.default_rng(1)
    tokens = rng.choice(np.arange(1000, vocab), size=CHAIN_TOKENS, replace=False)
    successors = rng.integers(0, CHAIN_TOKENS, size=(CHAIN_TOKENS, SUCCESSORS))
    rows = []
    for _ in range(steps):
        ids, labels, pos, lens = [], [], [], []
        left = seq
        while left > 0:
            n = int(rng.integers(256, 1537))
            if left - n < 256:
                n = left
            state = int(rng.integers(0, CHAIN_TOKENS))
            walk = np.empty(n, dtype=np.int64)
            for i in range(n):
                walk[i] = tokens[state]
                state = int(successors[state, rng.integers(0, SUCCESSORS)])
            y = walk.copy()
            y[:int(rng.integers(10, 101))] = -100
            ids.append(walk)
            labels.append(y)
            pos.append(np.arange(n))
            lens.append(n)
            left -= n
        t = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.int64)).reshape(1, -1)
        rows.append({"input_ids": t(ids), "labels": t(labels), "position_ids": t(pos), "lengths": lens})
    return rows


def to_device(rows, device):
    return [{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in r.items()} for r in rows]


def token_nll(model, row) -> torch.Tensor:
    """[T] fp32 per-token loss of a row (0 where the shifted target is -100)."""
    with torch.no_grad():
        logits = model(input_ids=row["input_ids"], position_ids=row["position_ids"], use_cache=False).logits
        logits = logits[0].float()
        targets = torch.nn.functional.pad(row["labels"][0, 1:], (0, 1), value=-100)
        nll = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100, reduction="none")
        del logits
    return nll.cpu()


def load(model_dir, dtype, device, quantized=False):
    if not quantized:
        m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
        m.config.use_cache = False
        return m.to(device)
    import bitsandbytes as bnb
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa",
                                                          device_map={"": device.index or 0})
    m.config.use_cache = False
    linears = [mod for mod in m.modules() if isinstance(mod, bnb.nn.Linear4bit)]
    assert linears, f"{model_dir}: no bitsandbytes Linear4bit was loaded"
    for mod in linears:
        mod.compute_dtype = dtype
    return m


def quantize_4bit(model_dir, out_dir, device):
    """The bf16 model quantized by transformers + bitsandbytes (NF4, double quantization) on the
    GPU and saved as a pre-quantized checkpoint."""
    from transformers import BitsAndBytesConfig
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.bfloat16)
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, quantization_config=q,
                                                          device_map={"": device.index or 0})
    m.save_pretrained(out_dir)
    del m


def run(model_dir, dtype, device, rows, hp, lora_init, log):
    """Per-token loss of row 0, then the training loop. Returns (nll, losses, norms, lrs, init, seconds)."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    quantized = hp["mode"] == "qlora"
    model = load(model_dir, dtype, device, quantized)
    nll = token_nll(model, rows[0])
    # Every layer recomputed in backward (the same arithmetic; the fp32 7B run fits an H200 this way).
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = hp["mode"] in ("lora", "qlora")
    if lora:
        torch.manual_seed(2)
        model = get_peft_model(model, LoraConfig(r=hp["r"], lora_alpha=hp["alpha"], lora_dropout=0.0,
                                                 target_modules=tr.TARGETS, bias="none"))
        if lora_init is not None:  # the fp32 run starts from the bf16 run's adapters
            res = set_peft_model_state_dict(model, {k: v.to(device) for k, v in lora_init.items()})
            assert not res.unexpected_keys, res.unexpected_keys
    else:
        for p in model.parameters():
            p.requires_grad_(True)
    model.train()
    names = tr.state_names(model, lora)
    init = {k[len("init."):]: v.cpu() for k, v in tr.snapshot(model, names, "init.").items()}
    opt, sched = tr.make_optimizer(model, names, hp)
    t0 = time.perf_counter()
    losses, norms, lrs = tr.train_steps(model, opt, sched, rows, hp, packed=True, log=log)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    del model, opt, sched
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return nll, losses, norms, lrs, init, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", required=True, help="a resources/model-shapes name, e.g. qwen2.5-1.5b")
    ap.add_argument("--mode", choices=["lora", "full", "qlora"], required=True)
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers (0: all)")
    ap.add_argument("--seq", type=int, default=4096, help="tokens per packed row")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of this script only")
    args = ap.parse_args()
    tr.check_pins()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("fused_parity_reference.py: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(args.out, exist_ok=True)
    cfg = hf_bench.load_shape(args.shape)
    if args.layers:
        cfg["num_hidden_layers"] = min(args.layers, cfg["num_hidden_layers"])
    t0 = time.perf_counter()
    model = hf_bench.build_model(cfg, SimpleNamespace(dtype="bfloat16", seed=0), device)
    model_dir = os.path.join(args.out, "model")
    model.save_pretrained(model_dir)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    print(f"built and saved {args.shape} ({cfg['num_hidden_layers']} layers) in {time.perf_counter() - t0:.1f} s")
    if args.mode == "qlora":
        quantize_4bit(model_dir, os.path.join(args.out, "model4"), device)
        model_dir = os.path.join(args.out, "model4")
        gc.collect()
        torch.cuda.empty_cache()

    lora = args.mode in ("lora", "qlora")
    hp = {"mode": args.mode, "shape": args.shape, "layers": cfg["num_hidden_layers"], "seq": args.seq,
          "steps": args.steps, "accum": 1, "lr": 2e-4 if lora else 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
          "weight_decay": 0.1, "warmup_steps": 2, "schedule": "cosine", "max_norm": 1.0,
          "optimizer": "torch.optim.AdamW(fused=True)", "attn_implementation": "sdpa",
          "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "tf32": False,
          "seeds": {"model": 0, "data": 1, "lora": 2},
          "versions": {"transformers": transformers.__version__, "torch": torch.__version__}}
    if lora:
        import peft
        hp.update(r=16, alpha=32.0, rslora=False, target_modules=tr.TARGETS)
        hp["versions"]["peft"] = peft.__version__
    if args.mode == "qlora":
        hp.update(quant="nf4", double_quant=True, blocksize=64)
        hp["versions"]["bitsandbytes"] = hf_bench.bnb_version()
    rows_cpu = make_rows(args.steps, args.seq, cfg["vocab_size"])
    rows = to_device(rows_cpu, device)

    results = {}
    init = None
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        log = lambda line, n=name: print(f"[{n}] {line}", flush=True)
        nll, losses, norms, lrs, got_init, seconds = run(model_dir, dtype, device, rows, hp,
                                                         init if lora else None, log)
        if init is None:
            init = got_init
        results[name] = {"nll": nll, "losses": losses, "grad_norms": norms, "lrs": lrs, "seconds": seconds}
    assert results["bf16"]["lrs"] == results["fp32"]["lrs"]

    tensors = {f"init.{k}": v.float().contiguous() for k, v in init.items()}
    for name in ("bf16", "fp32"):
        tensors[f"nll.{name}"] = results[name]["nll"].contiguous()
    for k, r in enumerate(rows_cpu):
        for key in ("input_ids", "labels", "position_ids"):
            tensors[f"batch.{k}.{key}"] = r[key].to(torch.float32).contiguous()
    for name in ("bf16", "fp32"):
        for key in ("losses", "grad_norms", "seconds"):
            hp[f"{key}_{name}"] = results[name][key]
    hp["lrs"] = results["bf16"]["lrs"]
    hp["samples_per_row"] = [len(r["lengths"]) for r in rows_cpu]
    save_file(tensors, os.path.join(args.out, "reference.safetensors"),
              metadata={"reference": json.dumps({"shape": args.shape, "mode": args.mode}, sort_keys=True)})
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(hp, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(init)} trainable tensors, {args.steps} steps of {args.seq} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
