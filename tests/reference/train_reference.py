#!/usr/bin/env python3
"""Oracle for the training-loop parity test (tests/core/tst_train_parity.cpp): a few optimizer
steps of a tiny random Qwen2 trained by the real libraries, on packed padding-free rows.

    train_reference.py OUT_DIR --mode lora|full [--rslora] [--quant nf4|fp4 [--no-double-quant]]
                       [--dtype float32|bfloat16 [--optimizer-dtype bf16|fp32]] [--steps 6] [--accum 2]

What runs (CPU, float32, attn_implementation="sdpa"):

  model      Qwen2ForCausalLM(vocab 512, hidden 64, 2 layers, 4 heads, 2 KV heads, intermediate
             128, q/k/v bias, tied embeddings), torch seed 0, saved with save_pretrained to
             OUT_DIR/model. config.use_cache = False, as transformers' Trainer sets it
             (TrainingArguments.use_cache defaults to False): with a cache object present,
             transformers does not detect packed rows (see below).
  data       numpy default_rng(1): steps × accum micro-batches, each ONE row of 2–3 samples of
             6..40 random ids in [3, 512); positions restart at 0 per sample; labels = ids with
             a random prompt prefix (at least the first token) of every sample set to -100, so
             no sample's first token is the target of the previous sample.
  packing    checked first: transformers 5.17 detects packed rows from position_ids when no
             attention_mask and no cache is given (masking_utils._preprocess_mask_arguments ->
             find_packed_sequence_indices, ANDed into the causal mask by create_causal_mask), so
             attention does not cross samples. The packed logits must equal each sample run
             alone (max abs diff < 1e-5); if not, every sample is run separately and the losses
             summed (printed as a warning; reference.json "packed_rows": false).
  tuner      lora: PEFT LoraConfig(r=4, alpha=8, dropout 0, q/k/v/o/gate/up/down, bias none,
             use_rslora per flag), get_peft_model after torch.manual_seed(2), PEFT's init
             (lora_B = 0); only LoRA parameters train. full: every parameter trains.
  optimizer  torch.optim.AdamW(fused=True), lr 1e-3 (lora) / 1e-4 (full), betas (0.9, 0.95),
             eps 1e-8, weight decay 0.1 except the parameters transformers' Trainer exempts
             (Trainer.get_decay_parameter_names: biases and norm weights).
  schedule   get_cosine_schedule_with_warmup(warmup ceil(0.2 × steps), steps).
  step       n = label tokens of all accum micro-batches (labels[..., 1:] != -100, the Trainer's
             count); each micro-batch: loss_i = model(..., labels, num_items_in_batch=n).loss
             (transformers' fixed_cross_entropy: summed cross-entropy / n), backward; step loss
             = Σ loss_i; grad norm = clip_grad_norm_(trainable, 1.0) (before clipping); lr =
             the scheduler's value used by this step; optimizer.step(); scheduler.step();
             zero_grad.

bfloat16 (--dtype bfloat16, full fine-tuning of the Qwen2 model): the saved fp32 model cast to
bf16 trains in bf16 on the CPU. --optimizer-dtype bf16: torch's fused AdamW on the bf16 weights
themselves (gradients accumulated in bf16, moments in bf16: what the Trainer does with a model
loaded in bf16). fp32: Fp32Masters below (fp32 master weights, gradients and moments; the bf16
weights are the masters rounded after each step); the masters are saved as master.<name>.

Writes OUT_DIR/reference.safetensors:
  batch.<k>.input_ids, batch.<k>.labels, batch.<k>.position_ids   float32 [1, T] (ids are exact), k < steps × accum
  (losses, grad_norms and lrs per step are lists in reference.json)
  init.<name>, final.<name>                                       float32, the trainable parameters
      before the first and after the last step; names as PEFT saves them
      (get_peft_model_state_dict: base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight)
      or, for full, transformers' (model.layers.0.self_attn.q_proj.weight)
and OUT_DIR/reference.json with every hyper-parameter and the names of the no-decay parameters.

QLoRA (--quant, LoRA only): the saved fp32 model is loaded again by transformers with
bitsandbytes 0.50 (BitsAndBytesConfig load_in_4bit, the given type, double quantization
unless --no-double-quant, compute dtype float32) on the CPU, saved to OUT_DIR/model4 (the
"-bnb-4bit" layout: packed uint8 weights and their quant state), and PEFT trains on that
4-bit model. Every projection has a whole number of 64-value blocks per row (hidden 64,
intermediate 128): bitsandbytes 0.50's AVX-512 CPU dequantizer misreads rows that do not.

Pinned: transformers 5.17.0, peft 0.21.0, torch 2.11 (setup.sh installs them).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM, Trainer, get_cosine_schedule_with_warmup

PINS = {"transformers": "5.17.0", "peft": "0.21.0"}
VOCAB = 512
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def check_pins():
    import peft
    found = {"transformers": transformers.__version__, "peft": peft.__version__}
    bad = [f"{k} {found[k]} found, {v} pinned" for k, v in PINS.items() if found[k] != v]
    if bad:
        print("train_reference.py: " + "; ".join(bad), file=sys.stderr)
        sys.exit(3)


def quantize_model(out, quant, double_quant):
    """The fp32 model of OUT/model quantized by transformers + bitsandbytes, saved to OUT/model4."""
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    from transformers import BitsAndBytesConfig
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant, bnb_4bit_use_double_quant=double_quant,
                             bnb_4bit_compute_dtype=torch.float32)
    m = Qwen2ForCausalLM.from_pretrained(os.path.join(out, "model"), quantization_config=bnb, device_map="cpu",
                                         dtype=torch.float32, attn_implementation="sdpa")
    m.save_pretrained(os.path.join(out, "model4"))
    m.config.use_cache = False
    return m


def build_model(out, arch="qwen2"):
    if arch == "qwen3_moe":
        # Mixture of experts (docs/moe.md): 5 experts, top 2, the load-balancing loss in the loss.
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        cfg = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                             num_experts=5, num_experts_per_tok=2, norm_topk_prob=True, output_router_logits=True,
                             router_aux_loss_coef=0.3, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rope_theta=10000.0,
                             rms_norm_eps=1e-6, tie_word_embeddings=True, use_cache=False)
        torch.manual_seed(0)
        m = Qwen3MoeForCausalLM(cfg).float()
        m.save_pretrained(os.path.join(out, "model"))
        m = Qwen3MoeForCausalLM.from_pretrained(os.path.join(out, "model"), dtype=torch.float32,
                                                attn_implementation="sdpa")
        m.config.use_cache = False
        return m
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, use_cache=False)
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(cfg).float()
    m.save_pretrained(os.path.join(out, "model"))
    m = Qwen2ForCausalLM.from_pretrained(os.path.join(out, "model"), dtype=torch.float32, attn_implementation="sdpa")
    m.config.use_cache = False  # as transformers' Trainer does (TrainingArguments.use_cache = False)
    return m


def make_batches(count):
    """count micro-batches: one padding-free row each, of 2-3 samples."""
    rng = np.random.default_rng(1)
    out = []
    for _ in range(count):
        ids, labels, pos, lens = [], [], [], []
        for _ in range(int(rng.integers(2, 4))):
            n = int(rng.integers(6, 41))
            x = rng.integers(3, VOCAB, size=n)
            y = x.copy()
            y[:int(rng.integers(1, n - 1))] = -100  # prompt (>= the first token); >= 2 targets remain
            ids.append(x)
            labels.append(y)
            pos.append(np.arange(n))
            lens.append(n)
        t = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.int64)).reshape(1, -1)
        out.append({"input_ids": t(ids), "labels": t(labels), "position_ids": t(pos), "lengths": lens})
    return out


def split(b):
    """The samples of a packed row, each as its own batch of one."""
    parts, start = [], 0
    for n in b["lengths"]:
        parts.append({k: b[k][:, start:start + n] for k in ("input_ids", "labels", "position_ids")})
        start += n
    return parts


def packed_rows_are_packed(model, batches):
    """True when a packed row's logits equal those of its samples run alone."""
    worst = 0.0
    with torch.no_grad():
        for b in batches:
            packed = model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits
            alone = torch.cat([model(input_ids=s["input_ids"], position_ids=s["position_ids"], use_cache=False).logits
                               for s in split(b)], dim=1)
            worst = max(worst, (packed - alone).abs().max().item())
        # For the record: with a cache object (use_cache=True, the config default of most
        # models), transformers skips the packed-sequence detection and attention crosses samples.
        b = batches[0]
        cached = model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=True).logits
        alone = torch.cat([model(input_ids=s["input_ids"], position_ids=s["position_ids"], use_cache=False).logits
                           for s in split(b)], dim=1)
        crossed = (cached - alone).abs().max().item()
    print(f"packed row vs samples alone: max abs diff {worst:.3g} (use_cache=False), {crossed:.3g} (use_cache=True)")
    return worst < 1e-5, worst, crossed


def trainable_named(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def state_names(model, lora):
    """{parameter name in named_parameters: name as saved} for the trainable parameters."""
    if not lora:
        return {n: n for n, _ in trainable_named(model)}
    from peft import get_peft_model_state_dict
    saved = set(get_peft_model_state_dict(model).keys())
    names = {}
    for n, _ in trainable_named(model):
        s = n.replace(".default.", ".")
        assert s in saved, f"{n} -> {s} is not in PEFT's state dict"
        names[n] = s
    assert set(names.values()) == saved, "PEFT saves tensors that are not trainable parameters"
    return names


def snapshot(model, names, prefix):
    return {prefix + names[n]: p.detach().float().clone().contiguous() for n, p in trainable_named(model)}


def make_optimizer(model, names, hp, masters=None):
    """torch's fused AdamW with the Trainer's decay groups, and the cosine schedule with warmup.
    Records the no-decay and trainable names in hp. With `masters` it updates their fp32 copies."""
    decay = set(Trainer.get_decay_parameter_names(None, model))  # the Trainer's own rule
    trainable = trainable_named(model)
    hp["no_decay"] = [names[n] for n, _ in trainable if n not in decay]
    hp["trainable"] = [names[n] for n, _ in trainable]
    own = (lambda p: masters.master_of[id(p)]) if masters else (lambda p: p)
    groups = [{"params": [own(p) for n, p in trainable if n in decay], "weight_decay": hp["weight_decay"]},
              {"params": [own(p) for n, p in trainable if n not in decay], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    opt = torch.optim.AdamW(groups, lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"], fused=True)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=hp["warmup_steps"],
                                            num_training_steps=hp["steps"])
    return opt, sched


class Fp32Masters:
    """Mixed precision with fp32 master weights (--optimizer-dtype fp32), as DeepSpeed's bf16
    optimizer keeps them: an fp32 copy of every trained 16-bit weight; after each backward the
    weight's 16-bit gradient (summed by autograd within that backward) is added to the master's
    fp32 gradient and dropped; clipping and AdamW act on the masters; each step ends by copying
    the updated masters into the 16-bit weights (rounded to nearest)."""

    def __init__(self, model):
        self.pairs = [(p, p.detach().float().clone().requires_grad_(True)) for _, p in trainable_named(model)]
        self.master_of = {id(p): m for p, m in self.pairs}

    def accumulate(self):
        for p, m in self.pairs:
            if p.grad is None:
                continue
            g = p.grad.float()
            m.grad = g if m.grad is None else m.grad + g
            p.grad = None

    def publish(self):
        with torch.no_grad():
            for p, m in self.pairs:
                p.copy_(m)


def train_steps(model, opt, sched, batches, hp, packed=True, log=print, masters=None):
    """hp["steps"] optimizer steps of hp["accum"] micro-batches each, as the Trainer runs them.
    Returns the per-step losses, gradient norms (before clipping) and learning rates. With
    `masters` (Fp32Masters), `opt` updates the fp32 masters."""
    losses, norms, lrs = [], [], []
    params = [m for _, m in masters.pairs] if masters else [p for _, p in trainable_named(model)]
    accum = hp["accum"]
    for s in range(hp["steps"]):
        micro = batches[s * accum:(s + 1) * accum]
        n = sum(int(b["labels"][..., 1:].ne(-100).sum()) for b in micro)  # the Trainer's count
        n = torch.tensor(n)
        step_loss = 0.0
        for b in micro:
            rows = [b] if packed else split(b)
            for r in rows:
                out = model(input_ids=r["input_ids"], position_ids=r["position_ids"], labels=r["labels"],
                            num_items_in_batch=n, use_cache=False)
                loss = out.loss
                del out  # as the Trainer: only the loss survives into backward
                loss.backward()
                if masters:
                    masters.accumulate()
                step_loss += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=hp["max_norm"]).item()
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if masters:
            masters.publish()
        losses.append(step_loss)
        norms.append(norm)
        lrs.append(lr)
        log(f"step {s + 1}: loss {step_loss:.8f} grad_norm {norm:.6g} lr {lr:.6g} targets {int(n)}")
    return losses, norms, lrs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--mode", choices=["lora", "full"], required=True)
    ap.add_argument("--rslora", action="store_true")
    ap.add_argument("--quant", choices=["nf4", "fp4"], help="QLoRA: train LoRA on the model quantized to 4 bits")
    ap.add_argument("--no-double-quant", action="store_true")
    ap.add_argument("--arch", choices=["qwen2", "qwen3_moe"], default="qwen2",
                    help="the tiny model: Qwen2, or a Qwen3-MoE whose loss includes the load-balancing loss")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the weights' dtype (bfloat16: full fine-tuning only)")
    ap.add_argument("--optimizer-dtype", choices=["bf16", "fp32"], default="bf16",
                    help="bfloat16 weights: AdamW on the weights themselves (bf16, as the Trainer trains a bf16 "
                         "model) or on fp32 master copies (fp32)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--accum", type=int, default=2)
    args = ap.parse_args()
    check_pins()
    # One thread: the tensors are tiny, and on a busy machine intra-op threads spin against
    # other processes (measured 22 s instead of 0.9 s for the loop); results are identical.
    torch.set_num_threads(1)
    if args.rslora and args.mode != "lora":
        ap.error("--rslora needs --mode lora")
    if args.quant and args.mode != "lora":
        ap.error("--quant needs --mode lora (a 4-bit base is frozen)")
    if args.dtype == "bfloat16" and (args.mode != "full" or args.arch != "qwen2"):
        ap.error("--dtype bfloat16 needs --mode full and the qwen2 model")
    os.makedirs(args.out, exist_ok=True)
    lora = args.mode == "lora"

    model = build_model(args.out, args.arch)
    if args.quant:
        model = quantize_model(args.out, args.quant, not args.no_double_quant)
    batches = make_batches(args.steps * args.accum)
    packed, packed_diff, crossed_diff = packed_rows_are_packed(model, batches)
    if args.dtype == "bfloat16":  # after the packing check, which compares in fp32 (bf16 rounding is 1e-2)
        model = model.to(torch.bfloat16)  # the saved fp32 model, rounded as loading it in bf16 does
    if not packed:
        print("WARNING: transformers does not treat a row with restarting position_ids as packed under sdpa "
              f"(max abs diff {packed_diff:.3g}); computing every sample separately and summing the losses",
              file=sys.stderr)

    hp = {"mode": args.mode, "steps": args.steps, "accum": args.accum, "vocab_size": VOCAB,
          "lr": 1e-3 if lora else 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
          "warmup_steps": math.ceil(0.2 * args.steps), "schedule": "cosine", "max_norm": 1.0,
          "optimizer": "torch.optim.AdamW(fused=True)", "attn_implementation": "sdpa", "dtype": args.dtype,
          "optimizer_dtype": args.optimizer_dtype if args.dtype == "bfloat16" else "fp32",
          "torch_threads": torch.get_num_threads(), "packed_rows": packed, "packed_max_abs_diff": packed_diff, "use_cache_true_max_abs_diff": crossed_diff,
          "loss": "sum over micro-batches of model(..., num_items_in_batch=n).loss; n = label tokens of the step",
          "seeds": {"model": 0, "data": 1, "lora": 2},
          "quant": args.quant or "", "double_quant": bool(args.quant) and not args.no_double_quant,
          "versions": {"transformers": transformers.__version__, "torch": torch.__version__}, "arch": args.arch}
    if args.arch == "qwen3_moe":
        hp["router_aux_loss_coef"] = model.config.router_aux_loss_coef
    if lora:
        import peft
        from peft import LoraConfig, get_peft_model
        hp.update(r=4, alpha=8.0, dropout=0.0, rslora=args.rslora, target_modules=TARGETS, bias="none")
        hp["scaling"] = hp["alpha"] / (math.sqrt(hp["r"]) if args.rslora else hp["r"])
        hp["versions"]["peft"] = peft.__version__
        torch.manual_seed(2)
        model = get_peft_model(model, LoraConfig(r=hp["r"], lora_alpha=hp["alpha"], lora_dropout=0.0,
                                                 target_modules=TARGETS, use_rslora=args.rslora, bias="none"))
    else:
        hp.update(rslora=False)
        for p in model.parameters():
            p.requires_grad_(True)
    model.train()

    names = state_names(model, lora)
    masters = Fp32Masters(model) if args.dtype == "bfloat16" and args.optimizer_dtype == "fp32" else None
    opt, sched = make_optimizer(model, names, hp, masters)
    tensors = snapshot(model, names, "init.")
    losses, norms, lrs = train_steps(model, opt, sched, batches, hp, packed, masters=masters)
    tensors.update(snapshot(model, names, "final."))
    if masters:
        tensors.update({"master." + names[n]: m.detach().clone().contiguous()
                        for (n, _), (_, m) in zip(trainable_named(model), masters.pairs)})
    for k, b in enumerate(batches):
        for key in ("input_ids", "labels", "position_ids"):
            # float32 (exact below 2**24): Odyssey's safetensors reader loads floating types only.
            tensors[f"batch.{k}.{key}"] = b[key].to(torch.float32).contiguous()
    # Per-step figures as JSON doubles (exact), beside the hyper-parameters.
    hp["losses"], hp["grad_norms"], hp["lrs"] = losses, norms, lrs
    save_file(tensors, os.path.join(args.out, "reference.safetensors"),
              # One key: safetensors writes the metadata of a dict in hash order (not reproducible).
              metadata={"reference": json.dumps({"mode": args.mode, "transformers": transformers.__version__,
                                                 "torch": torch.__version__}, sort_keys=True)})
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(hp, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(hp['trainable'])} trainable tensors, {args.steps} steps × {args.accum} micro-batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
