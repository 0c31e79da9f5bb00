#!/usr/bin/env python3
"""Greedy generation on the GPU against transformers (docs/inference.md): the tiny random models
of tests/reference/make_tiny_models.py, continued by transformers' generate() (CPU, fp32:
tests/reference/generate_oracle.py) and by `odyssey-train generate --device cuda` in fp32, with
the same prompt ids (prompt_ids lines, one batch of three prompts of different lengths: left
padding). Prints one line per model: identical or the first row and step where they part, with
the oracle's smallest top-2 logit gap for that row (a part at a gap of ~1e-5 is rounding: the GPU's
fp32 kernels add in another order). Exit 1 when a model parts at a gap above 1e-3.

    generate_parity_gpu.py --odyssey-train build-gpu/app/odyssey-train --work /tmp/gen-parity [--out FILE]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMES = "qwen2,qwen3,llama3,mistral,llama_hd,smollm,granite,gemma2,phi3,gemma3,rope_yarn,rope_longrope"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--odyssey-train", required=True)
    ap.add_argument("--work", default="/tmp/gen-parity")
    ap.add_argument("--out")
    a = ap.parse_args()
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    subprocess.run([py, str(REPO / "tests/reference/make_tiny_models.py"), str(w), "--bad"], check=True,
                   capture_output=True)
    subprocess.run([py, str(REPO / "tests/reference/generate_oracle.py"), str(w), NAMES, str(w / "oracle.json")],
                   check=True, capture_output=True)
    oracle = json.loads((w / "oracle.json").read_text())
    # Only the tiny Qwen2 has a tokenizer (ids < 512): lend it to the others (prompts are ids).
    for name in NAMES.split(","):
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if not (w / name / f).exists():
                (w / name / f).write_bytes((w / "qwen2" / f).read_bytes())
    lines, worst = [], 0.0
    for name, o in oracle.items():
        model = w / ("qwen2" if name == "qwen2_lora" else name)
        prompts = w / f"{name}.prompts.jsonl"
        prompts.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in o["prompts"]))
        out = w / f"{name}.out.jsonl"
        cmd = [a.odyssey_train, "generate", "--model", str(model), "--prompts", str(prompts), "--out", str(out),
               "--max-new-tokens", str(o["new_tokens"]), "--ignore-eos", "--batch-size", "3", "--device", "cuda",
               "--dtype", "float32"]
        if "adapter" in o:
            cmd += ["--adapter", o["adapter"]]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            lines.append(f"{name}: odyssey-train failed: {p.stderr.strip()[-400:]}")
            worst = float("inf")
            continue
        got = [json.loads(x)["ids"] for x in out.read_text().splitlines()]
        parts = []
        for row, (g, want) in enumerate(zip(got, o["greedy"])):
            step = next((i for i, (x, y) in enumerate(zip(g, want)) if x != y), None)
            if step is not None:
                gap = o["min_margin"][row]
                parts.append(f"row {row} parts at step {step} (oracle's smallest top-2 gap in the row {gap:.1e})")
                worst = max(worst, gap)
        lines.append(f"{name}: " + ("identical, " + f"3 rows x {o['new_tokens']} tokens" if not parts else "; ".join(parts)))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
    return 1 if worst > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
