#!/usr/bin/env python3
"""Reference side of Odyssey's side-by-side training benchmark: Hugging Face transformers
(+ PEFT for LoRA) on one sequence per step, random init, gradient checkpointing on or off, AdamW.

One JSON line per configuration (shape × mode × seq) is printed and appended to --out;
tests/bench/compare.py joins these lines with odyssey-bench's. docs/benchmarks.md
explains what is measured.

    python tests/bench/hf_bench.py --shape qwen2.5-7b --mode lora --seq 4096,16384,32768 \
        --checkpointing on,off --steps 5 --warmup 2 --device cuda --out hf.jsonl

A step is forward (labels = input ids, HF's causal LM loss) + backward + one optimizer
step + zero_grad; it is timed between torch.cuda.synchronize() calls. By default the step
is transformers' Trainer.training_step: compute_loss returns the loss alone, so the model
output (the bf16 logits) is released before backward; --hold-logits keeps the output
referenced through backward, as the runs before 2026-12-02 did (their lines say
"hold_logits": true). Every line also carries where and when it was measured (commit,
time, host, GPU and its UUID, and the lease key compare.py pairs lines by). Peak memory is
torch.cuda.max_memory_allocated() / max_memory_reserved() over the measured steps (the
counters are reset after warm-up, when AdamW's states already exist).

FLOPs and MFU: `step_flops` below is a transcription of core/planner/flops.{h,cpp}
(model FLOPs exclude the recomputation of checkpointed layers; hardware FLOPs include
it). Keep the two in sync: tests/core/tst_flops.cpp and `--self-test` here assert the
same reference numbers.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHAPES_DIR = REPO / "resources" / "model-shapes"
H200_PEAK_BF16_FLOPS = 989e12  # dense bf16, = planner::kH200PeakBf16Flops
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ---- FLOPs: transcription of core/planner/flops.h (keep in sync) -------------------------

def step_flops(cfg: dict, lengths, lora: bool = False, lora_rank: int = 8, targets=LORA_TARGETS,
               checkpointed_layers: int = 0, lm_head_recomputed: bool = False) -> dict:
    """FLOPs of one training step on samples of `lengths` tokens (one row, attention per sample).

    F_lin  = 2·T·L·(h·q + 2·h·kv + q·h + 3·h·i)   F_head = 2·T·h·V
    F_lora = 2·T·L·Σ_targets r·(in + out)           F_att  = 2·d·H·L·Σ s_i²   (causal: half of 4·s²·d·H)
    backward: full 2·(F_lin + F_head) + 2·F_att; LoRA 1·(F_lin + F_head) + 2·F_lora + 2·F_att
    model = forward + backward; hardware = model + checkpointed_layers · one layer's forward
    (+ F_head when the loss recomputes its logits).
    """
    h = cfg["hidden_size"]
    i = cfg["intermediate_size"]
    L = cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    d = cfg.get("head_dim") or h // H
    hkv = cfg.get("num_key_value_heads") or H
    V = cfg["vocab_size"]
    q, kv = H * d, hkv * d
    lengths = [s for s in lengths if s > 0]
    T = float(sum(lengths))
    pairs = sum(float(s) * s for s in lengths) / 2.0

    block_macs = h * q + 2 * h * kv + q * h + 3 * h * i
    widths = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
              "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    lora_macs = lora_rank * sum(a + b for name, (a, b) in widths.items() if name in targets) if lora else 0

    layer_linear = 2.0 * T * block_macs
    layer_lora = 2.0 * T * lora_macs
    layer_attention = 2.0 * 2.0 * d * H * pairs
    f = {"tokens": int(T), "linear_forward": L * layer_linear, "lm_head_forward": 2.0 * T * h * V,
         "lora_forward": L * layer_lora, "attention_forward": L * layer_attention,
         "layer_forward": layer_linear + layer_lora + layer_attention}
    f["forward"] = f["linear_forward"] + f["lm_head_forward"] + f["lora_forward"] + f["attention_forward"]
    base = 1.0 if lora else 2.0
    f["backward"] = (base * (f["linear_forward"] + f["lm_head_forward"]) + 2.0 * f["lora_forward"]
                     + 2.0 * f["attention_forward"])
    f["model"] = f["forward"] + f["backward"]
    ckpt = max(0, min(checkpointed_layers, L))
    f["recompute"] = ckpt * f["layer_forward"] + (f["lm_head_forward"] if lm_head_recomputed else 0.0)
    f["hardware"] = f["model"] + f["recompute"]
    return f


def self_test() -> None:
    """The numbers tests/core/tst_flops.cpp asserts (tiny shape and Qwen2.5-7B at 32K)."""
    tiny = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256}
    f = step_flops(tiny, [8], checkpointed_layers=2)
    assert (f["forward"], f["backward"], f["model"], f["hardware"]) == (1458176, 2916352, 4374528, 5570560), f
    f = step_flops(tiny, [8], lora=True, lora_rank=4)
    assert (f["lora_forward"], f["backward"], f["model"]) == (131072, 1736704, 3325952), f
    assert step_flops(tiny, [3, 0, 5])["attention_forward"] == 8704
    q7 = load_shape("qwen2.5-7b")
    f = step_flops(q7, [32768], lora=True, lora_rank=16, checkpointed_layers=28)
    assert f["linear_forward"] == 427641303728128, f
    assert f["lm_head_forward"] == 35716948033536, f
    assert f["lora_forward"] == 2645699854336, f
    assert f["attention_forward"] == 215504279044096, f
    assert f["model"] == 1581166440218624, f
    assert f["hardware"] == 2226957722845184, f
    assert step_flops(q7, [32768])["model"] == 2036587592417280

    class Props:  # what torch.cuda.get_device_properties(...).uuid offers: 16 bytes, or only a string
        class uuid:  # noqa: N801
            bytes = list(range(0xF0, 0x100))
    assert gpu_uuid(Props) == "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff", gpu_uuid(Props)
    Props.uuid = "F0F1F2F3-F4F5-F6F7-F8F9-FAFBFCFDFEFF"
    assert gpu_uuid(Props) == "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff", gpu_uuid(Props)
    print("hf_bench.py self-test: FLOPs transcription agrees with tst_flops.cpp; GPU UUIDs format as nvidia-smi's")


# ---- shapes ------------------------------------------------------------------------------

def shape_names() -> dict:
    """qwen2.5-7b -> resources/model-shapes/Qwen--Qwen2.5-7B.json (name after the org, lowercase)."""
    out = {}
    for p in sorted(SHAPES_DIR.glob("*.json")):
        name = p.stem.split("--", 1)[-1].lower()
        out[name] = p
    return out


def load_shape(shape: str) -> dict:
    p = Path(shape)
    if not (p.suffix == ".json" and p.is_file()):
        names = shape_names()
        if shape.lower() not in names:
            raise SystemExit(f"unknown shape {shape!r}; bundled: {', '.join(names)} (or a config.json path)")
        p = names[shape.lower()]
    return json.loads(p.read_text())


# ---- where and when a line was measured ------------------------------------------------

def source_commit(repo: Path = REPO) -> tuple[str, str]:
    """(commit, source) of the source this script runs from. The ODYSSEY_COMMIT environment
    variable, when set and not empty, wins (source "ODYSSEY_COMMIT", declared, not checked): a
    device machine's copy of the working tree can carry a .git of another commit (the session's
    base, seen 2026-12-02), so the person who sends the tree declares what it is. Else `git
    rev-parse HEAD`, with "-dirty" when `git status --porcelain` lists anything (tracked changes
    or untracked files that are not ignored), source "git", when `repo` is a repository's top
    level; else ("unknown", "none"). Never raises."""
    env = os.environ.get("ODYSSEY_COMMIT", "").strip()
    if env:
        return env, "ODYSSEY_COMMIT"
    def git(*a: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(repo), *a], check=True,
                              capture_output=True, text=True, timeout=60).stdout.strip()
    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if top == repo.resolve():  # not a repository further up that holds a copy of the tree
            head = git("rev-parse", "HEAD")
            return head + ("-dirty" if git("status", "--porcelain") else ""), "git"
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown", "none"


def gpu_uuid(props) -> str | None:
    """A CUDA device's UUID as nvidia-smi prints it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx);
    odyssey-bench formats cudaDeviceProp::uuid the same way, so the two lease keys agree."""
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    raw = getattr(u, "bytes", None)
    if raw is not None and len(raw) == 16:
        h = bytes(b & 0xFF for b in raw).hex()
    else:
        h = "".join(c for c in str(u).lower().removeprefix("gpu-") if c in "0123456789abcdef")
        if len(h) != 32:
            return str(u)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or "unknown-boot"
    except OSError:
        return "unknown-boot"


def lease_key(host: str, uuid: str | None) -> tuple[str, str]:
    """(key, source): one machine lease is one host, one boot and one GPU:
    "<host>/<boot_id>/<GPU UUID or cpu>", as odyssey-bench writes it; ODYSSEY_LEASE (when set
    and not empty) overrides it (source "ODYSSEY_LEASE")."""
    env = os.environ.get("ODYSSEY_LEASE", "").strip()
    if env:
        return env, "ODYSSEY_LEASE"
    return f"{host}/{boot_id()}/{uuid or 'cpu'}", "machine"


def utc_now() -> str:
    """ISO 8601, UTC, whole seconds: 2026-12-01T03:58:05+00:00."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---- one configuration -------------------------------------------------------------------

def is_oom(e: BaseException) -> bool:
    import torch
    if isinstance(e, torch.OutOfMemoryError):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "ALLOC_FAILED" in msg)


class SdpaProbe:
    """Wraps F.scaled_dot_product_attention to record which SDPA backend ATen picks for the
    exact arguments of HF's first attention call (torch._fused_sdp_choice, what SDPA
    dispatches on), under the sdpa_kernel priority in force."""

    def __init__(self):
        import torch.nn.functional as F
        self.F = F
        self.orig = F.scaled_dot_product_attention
        self.choice = None

    def __enter__(self):
        probe = self

        def wrapped(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
            if probe.choice is None:
                probe.choice = probe.backend_name(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                  enable_gqa)
            return probe.orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                              scale=scale, enable_gqa=enable_gqa)

        self.F.scaled_dot_product_attention = wrapped
        return self

    def __exit__(self, *exc):
        self.F.scaled_dot_product_attention = self.orig
        return False

    @staticmethod
    def backend_name(q, k, v, mask, p, causal, scale, gqa) -> str:
        import torch
        from torch.nn.attention import SDPBackend
        try:
            c = torch._fused_sdp_choice(q, k, v, mask, p, causal, scale=scale, enable_gqa=gqa)
            return {SDPBackend.MATH.value: "math", SDPBackend.FLASH_ATTENTION.value: "flash",
                    SDPBackend.EFFICIENT_ATTENTION.value: "efficient", SDPBackend.CUDNN_ATTENTION.value: "cudnn",
                    SDPBackend.OVERRIDEABLE.value: "overrideable"}.get(int(c), f"choice {int(c)}")
        except Exception as e:  # noqa: BLE001 - a probe must never stop the benchmark
            return f"unknown ({type(e).__name__})"


def sdpa_priority(name: str):
    """Context that puts one SDPA backend first in ATen's priority order (others still allowed)."""
    import contextlib
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    order = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    first = order[name]
    return sdpa_kernel([first] + [b for b in order.values() if b != first], set_priority=True)


def build_model(cfg_dict: dict, args, device, use_cache: bool = False):
    """The shape as transformers builds it (args.dtype, args.seed), randomly initialised; with
    use_cache for generation (tests/bench/generate_bench.py), without for training steps."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    d = dict(cfg_dict)
    model_type = d.pop("model_type")
    d.pop("architectures", None)
    d.pop("torch_dtype", None)
    d["use_cache"] = use_cache
    config = transformers.AutoConfig.for_model(model_type, **d)
    dtype = getattr(torch, args.dtype)
    # Build on the device, skipping torch's and HF's initialisers (slow for 7B on a CPU), then
    # initialise like HF's _init_weights: N(0, 0.02) matrices, zero biases, unit norms.
    with torch.device(device), no_init_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    gen = torch.Generator(device=device).manual_seed(args.seed)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                mod.weight.normal_(0.0, 0.02, generator=gen)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.zero_()
            elif "RMSNorm" in type(mod).__name__ and getattr(mod, "weight", None) is not None:
                mod.weight.fill_(1.0)
        # Mixture of experts (transformers 5): the routers and the stacked expert weights are
        # parameters of modules that are not nn.Linear; HF's _init_weights draws them N(0, 0.02) too.
        for name, p in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj", "mlp.gate.weight")):
                p.normal_(0.0, 0.02, generator=gen)
    # Built under no_init_weights, lm_head is not tied to the embedding even when the config says
    # so (transformers 5.17): tie it, or the model carries a second vocab x hidden matrix that the
    # real model (and Odyssey) does not have: 136M more trainable parameters on Qwen2.5-0.5B.
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return model


def bnb_version() -> str:
    import importlib.metadata
    return importlib.metadata.version("bitsandbytes")


def quantize_bnb(model, args) -> None:
    """QLoRA's base as transformers + bitsandbytes build it (load_in_4bit): every nn.Linear of
    the decoder layers (not lm_head) becomes a bitsandbytes Linear4bit holding the same random
    weight quantized (blocksize 64, double quantization), compute dtype = --dtype. The 16-bit
    copy is freed layer by layer; the peak is reset before the measured steps anyway.
    prepare_model_for_kbit_training is not applied (it casts the remaining weights to fp32,
    which would only raise the anchor's memory)."""
    import torch
    import bitsandbytes as bnb

    dtype = getattr(torch, args.dtype)
    for layer in model.model.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, torch.nn.Linear):
                    continue
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=dtype, compress_statistics=True, quant_type=args.quant,
                                      quant_storage=torch.uint8, device="meta")
                q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                             quant_type=args.quant, quant_storage=torch.uint8, blocksize=64)
                q.weight = q.weight.to(child.weight.device)  # quantizes
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(parent, name, q)
                del child
    torch.cuda.empty_cache()


def run_config(cfg_dict: dict, shape: str, mode: str, seq: int, checkpointing: str, args, device,
               meta: dict) -> dict:
    import torch

    on_cuda = device.type == "cuda"
    rec = {"impl": "hf", "shape": shape, "mode": mode, "seq": seq, **meta, "time": utc_now(),
           "layers": cfg_dict["num_hidden_layers"], "vocab": cfg_dict["vocab_size"], "batch": 1, "dtype": args.dtype,
           "checkpointing": checkpointing,
           "checkpointed_layers": cfg_dict["num_hidden_layers"] if checkpointing == "on" else 0,
           "optimizer": f"AdamW ({args.optim})",
           "sdpa_priority": args.sdpa_backend, "steps": args.steps, "warmup": args.warmup,
           "hold_logits": args.hold_logits, "liger": bool(args.liger),
           "step": "held outputs" if args.hold_logits else "Trainer.training_step"}
    if mode == "lora":
        rec.update(lora_r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                   lora_targets="all-linear (7)")

    if args.quant:
        rec.update(quant=f"{args.quant} (double quantization)", bitsandbytes=bnb_version())
    model = opt = ids = None
    try:
        model = build_model(cfg_dict, args, device)
        if getattr(model.config, "num_experts", None) or getattr(model.config, "num_local_experts", None):
            rec["experts_implementation"] = model.config._experts_implementation  # grouped_mm unless unavailable
        if args.quant:
            quantize_bnb(model, args)
        if checkpointing == "on":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mode == "lora":
            from peft import LoraConfig, get_peft_model
            lcfg = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                              target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
            model = get_peft_model(model, lcfg)  # adapters in fp32 (autocast_adapter_dtype)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        rec["trainable_params"] = sum(p.numel() for p in params)
        rec["total_params"] = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0,
                                fused=args.optim == "fused", foreach=args.optim == "foreach")
        gen = torch.Generator(device=device).manual_seed(args.seed + seq)
        ids = torch.randint(0, cfg_dict["vocab_size"], (1, seq), device=device, generator=gen)

        def sync():
            if on_cuda:
                torch.cuda.synchronize(device)

        # What transformers' Trainer passes: num_items_in_batch, the label tokens the causal
        # loss counts (labels[..., 1:] that are not -100), computed before the step
        # (Trainer._get_num_items_in_batch); the loss is then a sum over that count.
        num_items = ids[..., 1:].ne(-100).sum()

        def compute_loss():
            # Trainer.compute_loss(return_outputs=False): the output object is dropped on return,
            # so only the loss (and the graph behind it) survives the forward.
            outputs = model(input_ids=ids, labels=ids, use_cache=False, num_items_in_batch=num_items)
            return outputs["loss"] if isinstance(outputs, dict) else outputs[0]

        def step():
            if not args.hold_logits:  # Trainer.training_step: loss alone, backward, loss.detach()
                loss = compute_loss()
                loss.backward()
            else:  # the runs before 2026-12-02: the model output (bf16 logits) referenced through backward
                out = model(input_ids=ids, labels=ids, use_cache=False)
                loss = out.loss
                loss.backward()
                del out
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        times, losses = [], []
        with sdpa_priority(args.sdpa_backend), SdpaProbe() as probe:
            for _ in range(args.warmup):
                step()
            sync()
            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device)
            for _ in range(args.steps):
                sync()
                t0 = time.perf_counter()
                losses.append(step())
                sync()
                times.append(time.perf_counter() - t0)
        rec["sdpa_backend_ran"] = probe.choice
        step_s = statistics.fmean(times)
        nl = cfg_dict["num_hidden_layers"]
        f = step_flops(cfg_dict, [seq], lora=mode == "lora", lora_rank=args.lora_r,
                       checkpointed_layers=nl if checkpointing == "on" else 0)
        rec.update(
            tokens_per_s=sig(seq / step_s),
            step_ms=round(step_s * 1e3, 2),
            step_ms_min=round(min(times) * 1e3, 2),
            step_ms_median=round(statistics.median(times) * 1e3, 2),
            loss=round(float(losses[-1].float().item()), 4),
            model_tflops_per_step=sig(f["model"] / 1e12),
            hardware_tflops_per_step=sig(f["hardware"] / 1e12),
            model_tflops_per_s=sig(f["model"] / step_s / 1e12),
            mfu=sig(f["model"] / (step_s * args.peak_tflops * 1e12), 4),
            hfu=sig(f["hardware"] / (step_s * args.peak_tflops * 1e12), 4),
            peak_tflops=args.peak_tflops,
        )
        if on_cuda:
            rec["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            rec["reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / 2**30, 2)
        else:
            rec["peak_gib"] = rec["reserved_gib"] = None
            rec["host_maxrss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    except Exception as e:  # noqa: BLE001 - only OOM is absorbed, anything else is re-raised
        if not is_oom(e):
            raise
        rec["oom"] = True
        rec["error"] = str(e).splitlines()[0][:300]
        if on_cuda:
            rec["peak_gib_at_oom"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    finally:
        # Drop everything before the next configuration (the traceback is gone by now).
        model = opt = ids = None
        gc.collect()
        if on_cuda:
            torch.cuda.empty_cache()
    return rec


def apply_liger(model_types) -> str:
    """Patch transformers' modeling code for these model types with Liger's kernels, as ms-swift's
    --use_liger_kernel true does (liger's own per-family function, with every kernel it offers:
    RoPE, RMSNorm, SwiGLU or GeGLU, and fused linear cross-entropy in place of the logits), before
    any model is built. Returns liger-kernel's version; an unsupported model type stops the run."""
    import inspect
    import importlib.metadata
    from liger_kernel.transformers import monkey_patch
    wanted = {"rope": True, "rms_norm": True, "swiglu": True, "geglu": True, "cross_entropy": False,
              "fused_linear_cross_entropy": True}
    for model_type in sorted(model_types):
        fn = monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
        if fn is None:
            raise SystemExit(f"hf_bench.py --liger: liger-kernel has no patch for model type {model_type!r}")
        accepted = inspect.signature(fn).parameters
        fn(**{k: v for k, v in wanted.items() if k in accepted})
    return importlib.metadata.version("liger-kernel")


def sig(x: float, n: int = 6) -> float:
    """x rounded to n significant digits (JSON stays readable at every scale)."""
    return float(f"{x:.{n}g}")


def parse_list(s: str, conv=str) -> list:
    return [conv(x.strip()) for x in s.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b",
                    help="bundled shape(s), comma-separated (qwen2.5-0.5b, qwen2.5-7b, ...) or a config.json")
    ap.add_argument("--seq", default="4096,16384,32768", help="sequence lengths, comma-separated")
    ap.add_argument("--mode", default="lora", help="lora, full or lora,full")
    ap.add_argument("--steps", type=int, default=5, help="measured steps")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured steps first (kernels, allocator, AdamW states)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--layers", type=int, default=0, help="keep only the first K layers (CPU smoke tests)")
    ap.add_argument("--vocab-override", type=int, default=0,
                    help="CPU smoke tests only: a smaller vocabulary (the 152K-row embedding dominates a 1-layer model)")
    ap.add_argument("--lora-r", type=int, default=16, help="LoRA rank (16: the ANCHORS.md measurements)")
    ap.add_argument("--lora-alpha", type=float, default=32.0)
    ap.add_argument("--lora-dropout", type=float, default=0.0,
                    help="LoRA dropout (0 in every benchmark row unless asked; ms-swift's default is 0.05)")
    ap.add_argument("--optim", default="fused", choices=["fused", "foreach"], help="torch AdamW implementation")
    ap.add_argument("--sdpa-backend", default="default", choices=["default", "cudnn", "flash", "efficient", "math"],
                    help="SDPA backend put first in ATen's priority (default: PyTorch's own order)")
    ap.add_argument("--checkpointing", default="on",
                    help="HF gradient checkpointing: on, off, or both in one call (on,off): a line each, OOM included")
    ap.add_argument("--hold-logits", action="store_true",
                    help="keep the model output (bf16 logits) referenced through backward, as the runs before "
                         "2026-12-02 and ANCHORS.md's did; default: Trainer.training_step, only the loss survives")
    ap.add_argument("--release-logits", dest="hold_logits", action="store_false",
                    help="the default (Trainer.training_step); kept so old command lines still run")
    ap.add_argument("--liger", action="store_true",
                    help="patch the model with Liger kernels first (ms-swift's --use_liger_kernel true: RoPE, "
                         "RMSNorm, SwiGLU/GeGLU, fused linear cross-entropy); needs liger-kernel importable")
    ap.add_argument("--quant", choices=["nf4", "fp4"],
                    help="QLoRA: the decoder layers' Linear modules as bitsandbytes 4-bit (needs bitsandbytes, --mode lora)")
    ap.add_argument("--peak-tflops", type=float, default=H200_PEAK_BF16_FLOPS / 1e12, help="for MFU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="append JSON lines here")
    ap.add_argument("--self-test", action="store_true", help="check the FLOPs transcription and exit")
    args = ap.parse_args(argv)

    if args.self_test:
        self_test()
        return 0
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    checkpointings = parse_list(args.checkpointing.lower())
    if not checkpointings or any(c not in ("on", "off") for c in checkpointings):
        ap.error(f"--checkpointing {args.checkpointing!r}: on, off, or a comma-separated list of them (on,off)")
    modes = parse_list(args.mode.lower())
    if not modes or any(m not in ("lora", "full") for m in modes):
        ap.error(f"--mode {args.mode!r}: lora, full or lora,full")
    try:
        seqs = parse_list(args.seq, int)
    except ValueError:
        ap.error(f"--seq {args.seq!r}: comma-separated whole numbers of tokens")
    if not seqs or any(q < 2 for q in seqs):
        ap.error(f"--seq {args.seq!r}: every length must be at least 2 tokens")

    shapes = []
    for shape in parse_list(args.shape):  # every shape checked before the first one runs
        cfg = load_shape(shape)
        if args.layers > 0:
            cfg["num_hidden_layers"] = min(args.layers, cfg["num_hidden_layers"])
        if args.vocab_override > 0:
            cfg["vocab_size"] = args.vocab_override
        shapes.append((shape, cfg))
    if not shapes:
        ap.error("--shape: no shape given")

    import peft
    import torch
    import transformers
    transformers.logging.set_verbosity_error()

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("hf_bench.py: --device cuda but torch sees no CUDA device")
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    host = socket.gethostname()
    gpu = uuid = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu, uuid = props.name, gpu_uuid(props)
    commit, commit_source = source_commit()
    lease, lease_source = lease_key(host, uuid)
    meta = {"commit": commit, "commit_source": commit_source, "host": host, "gpu": gpu, "gpu_uuid": uuid,
            "lease": lease, "lease_source": lease_source,
            "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else (platform.processor() or platform.machine()) + f" ({torch.get_num_threads()} threads)",
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if device.type == "cuda":
        meta["cuda"] = torch.version.cuda
        meta["cudnn"] = torch.backends.cudnn.version()

    if args.liger:
        meta["liger"] = apply_liger({cfg["model_type"] for _, cfg in shapes})

    for shape, cfg in shapes:
        for mode in modes:
            for seq in seqs:
                for ckpt in checkpointings:
                    print(f"hf_bench: {shape} {mode} seq {seq} checkpointing {ckpt} ...", file=sys.stderr, flush=True)
                    rec = run_config(cfg, shape.lower(), mode, seq, ckpt, args, device, meta)
                    line = json.dumps(rec)
                    print(line, flush=True)
                    if args.out:
                        with open(args.out, "a") as fh:
                            fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
