#!/usr/bin/env python3
"""Oracle for GaLore (tests/core/tst_galore.cpp): a few full fine-tuning steps of the tiny
random Qwen2 of train_reference.py, with galore-torch's GaLore AdamW on the targeted weights.

    galore_reference.py OUT_DIR [--steps 6] [--rank 8] [--gap 2] [--scale 0.25]

What runs (CPU, float32, sdpa, one thread):
  model      train_reference.build_model (Qwen2, vocab 512, hidden 64, 2 layers, 4 heads, 2 KV
             heads, intermediate 128, tied embeddings; seed 0), saved to OUT_DIR/model.
  data       train_reference.make_batches(steps): one packed padding-free row per step.
  optimizer  galore_torch 1.0's AdamW (galore_torch/adamw.py) on every 2-D q/k/v/o/gate/up/down
             weight of the layers, param group {rank, update_proj_gap, scale, proj_type "std"};
             torch.optim.AdamW(fused=True) on every other parameter (embeddings, norms, biases),
             as Odyssey does. lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (biases and
             norm weights exempt, as transformers' Trainer does), constant schedule, no clipping,
             no gradient accumulation (galore-torch takes the SVD of the step's gradient).
  loss       model(..., labels, num_items_in_batch = label tokens).loss, backward, step.

galore_torch/__init__.py imports its 8-bit optimizers, which need bitsandbytes; the package is
installed without it (packaging/install-deps.sh), so this script loads galore_projector.py and
adamw.py under the package name without running __init__.py.

Writes OUT_DIR/reference.safetensors: batch.<k>.{input_ids,labels,position_ids} (float32),
init.<name> and final.<name> for every parameter, proj.<name> (each targeted weight's last
projection matrix, after the last step); OUT_DIR/reference.json: hyper-parameters, losses.
"""
import argparse
import importlib.util
import json
import os
import sys
import types

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_reference as tr  # noqa: E402

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def load_galore_adamw():
    spec = importlib.util.find_spec("galore_torch")
    if spec is None or not spec.submodule_search_locations:
        print("galore_reference.py: galore-torch 1.0 is not installed (bash packaging/install-deps.sh)", file=sys.stderr)
        sys.exit(3)
    root = list(spec.submodule_search_locations)[0]
    pkg = types.ModuleType("galore_torch")
    pkg.__path__ = [root]
    sys.modules["galore_torch"] = pkg
    for name in ("galore_projector", "adamw"):
        s = importlib.util.spec_from_file_location(f"galore_torch.{name}", os.path.join(root, f"{name}.py"))
        m = importlib.util.module_from_spec(s)
        sys.modules[f"galore_torch.{name}"] = m
        s.loader.exec_module(m)
    return sys.modules["galore_torch.adamw"].AdamW


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--gap", type=int, default=2)
    ap.add_argument("--scale", type=float, default=0.25)
    args = ap.parse_args()
    tr.check_pins()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    GaLoreAdamW = load_galore_adamw()

    model = tr.build_model(args.out)
    batches = tr.make_batches(args.steps)
    hp = {"steps": args.steps, "rank": args.rank, "update_proj_gap": args.gap, "scale": args.scale,
          "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "schedule": "constant",
          "max_norm": 0.0, "accum": 1, "versions": {"torch": torch.__version__, "galore_torch": "1.0"}}

    galore, decay, no_decay = [], [], []
    targeted = []
    for n, p in model.named_parameters():
        if p.dim() == 2 and n.startswith("model.layers.") and n.endswith(".weight") and \
                n[:-len(".weight")].split(".")[-1] in TARGETS:
            galore.append(p)
            targeted.append(n)
        elif n.endswith(".bias") or n.endswith("norm.weight"):
            no_decay.append(p)
        else:
            decay.append(p)
    g_opt = GaLoreAdamW([{"params": galore, "rank": args.rank, "update_proj_gap": args.gap, "scale": args.scale,
                          "proj_type": "std"}], lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"],
                        weight_decay=hp["weight_decay"])
    a_opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"], fused=True)
    hp["targeted"] = targeted

    tensors = {f"init.{n}": p.detach().clone().contiguous() for n, p in model.named_parameters()}
    losses = []
    model.train()
    for k, b in enumerate(batches):
        for key in ("input_ids", "labels", "position_ids"):
            tensors[f"batch.{k}.{key}"] = b[key].float().contiguous()
        n_items = int((b["labels"][:, 1:] != -100).sum())
        out = model(input_ids=b["input_ids"], position_ids=b["position_ids"], labels=b["labels"],
                    num_items_in_batch=n_items, use_cache=False)
        out.loss.backward()
        losses.append(out.loss.item())
        g_opt.step()
        a_opt.step()
        g_opt.zero_grad(set_to_none=True)
        a_opt.zero_grad(set_to_none=True)
    for n, p in model.named_parameters():
        tensors[f"final.{n}"] = p.detach().clone().contiguous()
    by_param = {p: n for n, p in model.named_parameters()}
    for p, st in g_opt.state.items():
        tensors[f"proj.{by_param[p]}"] = st["projector"].ortho_matrix.detach().clone().contiguous()
    hp["losses"] = losses
    save_file(tensors, os.path.join(args.out, "reference.safetensors"))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(hp, f, indent=2)
    print(f"galore_reference: {args.steps} steps, losses {['%.6f' % x for x in losses]}")


if __name__ == "__main__":
    main()
