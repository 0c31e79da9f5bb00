#!/usr/bin/env python3
"""Generation speed, side by side in one lease (docs/benchmarks.md, "Generation"): transformers'
generate() (static cache, SDPA, greedy) against `odyssey-train generate` on the same randomly
initialised model directory and the same prompt token ids.

    generate_bench.py --odyssey-train build-gpu/app/odyssey-train --out OUT_DIR [--shape qwen2.5-7b]

1. Builds the shape (resources/model-shapes) in bf16 on the GPU with hf_bench.py's
   initialisation (N(0, 0.02) matrices, unit norms), saves it with save_pretrained in --model-dir
   and copies the quickstart model's tokenizer beside it (ids < 1,024 are valid in any vocabulary;
   the bench gives token ids, so the tokenizer only decodes).
2. Rows: batch 1 and batch 16 with --prompt-len (1,024) prompt tokens and --new-tokens (256) new
   ones, end-of-sequence ignored; time to first token with a --long-prompt (32,000) token prompt.
   Each engine runs every row three times; the first is a warm-up, the figure is the better of
   the other two. decode tokens/s = batch x (new - 1) / (time of the whole generation - time to
   the first token); transformers' time to first token is generate(max_new_tokens=1).
3. Writes OUT_DIR/generate.jsonl (one line per engine and row, with commit, GPU and peak memory)
   and OUT_DIR/generate-compare.md (the table, the ratios, and how many leading greedy tokens of
   the batch-1 prompts the two engines agree on: a random bf16 model's logits are nearly flat, so
   they part after a few tokens; exactness is tests/core/tst_generate.cpp's, in fp32).
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_bench  # noqa: E402  (shapes, provenance)

REPO = Path(__file__).resolve().parents[2]


def build_model(shape, model_dir, seed):
    """hf_bench.py's random model of the shape in bf16 on the GPU, saved with the quickstart's
    tokenizer beside it."""
    from types import SimpleNamespace
    model = hf_bench.build_model(hf_bench.load_shape(shape), SimpleNamespace(dtype="bfloat16", seed=seed), "cuda",
                                 use_cache=True)
    model.generation_config.eos_token_id = None
    model.save_pretrained(model_dir, max_shard_size="5GB")
    quick = REPO / "resources" / "quickstart" / "model"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(quick / f, Path(model_dir) / f)
    return model


def hf_rows(model, prompts, args, cache="static"):
    """cache "static": generate() with a static cache, which transformers 5.17 compiles
    (torch.compile of the decode step); "dynamic": its default DynamicCache, eager (what
    `swift infer --infer_backend pt` runs)."""
    import torch
    rows = []
    engine = "transformers" if cache == "static" else "transformers-dynamic"
    kw = dict(do_sample=False, top_k=None, top_p=None, temperature=None, pad_token_id=0, eos_token_id=None)
    if cache == "static":
        kw["cache_implementation"] = "static"

    def timed(ids, new):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                 min_new_tokens=new, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t, out

    for batch in (1, 16):
        ids = torch.tensor(prompts[batch][:batch], device="cuda")
        torch.cuda.reset_peak_memory_stats()
        firsts, totals, outs = [], [], None
        for rep in range(3):
            t1, _ = timed(ids, 1)
            tn, out = timed(ids, args.new_tokens)
            if rep:
                firsts.append(t1)
                totals.append(tn)
                outs = out[:, ids.shape[1]:].tolist()
        best = min(range(2), key=lambda i: totals[i] - firsts[i])
        rows.append({"engine": engine, "row": f"batch {batch}", "batch": batch, "prompt_tokens": ids.shape[1],
                     "new_tokens": args.new_tokens, "time_to_first_token_s": firsts[best], "seconds": totals[best],
                     "decode_tokens_per_s": batch * (args.new_tokens - 1) / (totals[best] - firsts[best]),
                     "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "greedy": outs[0] if batch == 1 else None})
    if cache != "static":
        return rows
    ids = torch.tensor(prompts["long"][:1], device="cuda")
    torch.cuda.reset_peak_memory_stats()
    t = [timed(ids, 1)[0] for _ in range(3)][1:]
    rows.append({"engine": engine, "row": f"ttft {ids.shape[1]}", "batch": 1, "prompt_tokens": ids.shape[1],
                 "new_tokens": 1, "time_to_first_token_s": min(t), "peak_gib": torch.cuda.max_memory_allocated() / 2**30})
    return rows


def odyssey_rows(prompts, args, model_dir):
    rows = []

    def run(name, lines, batch, new):
        f = Path(args.out) / f"prompts-{name}.jsonl"
        f.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in lines))
        res = Path(args.out) / f"odyssey-{name}.jsonl"
        t = time.perf_counter()
        p = subprocess.run([args.odyssey_train, "generate", "--model", str(model_dir), "--prompts", str(f), "--out",
                            str(res), "--max-new-tokens", str(new), "--ignore-eos", "--batch-size", str(batch),
                            "--device", "cuda", "--dtype", "bfloat16"], capture_output=True, text=True)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print(f"odyssey-train generate {name}: rc {p.returncode}, {time.perf_counter() - t:.1f} s wall; {last}")
        if p.returncode != 0:
            raise SystemExit(p.stderr)
        out = [json.loads(line) for line in res.read_text().splitlines()]
        return [out[i * batch:(i + 1) * batch] for i in range(len(out) // batch)]

    for batch in (1, 16):
        batches = run(f"batch{batch}", prompts[batch][:batch] * 3, batch, args.new_tokens)[1:]  # the first: warm-up
        stats = []
        for b in batches:
            r = b[0]
            stats.append((batch * (r["new_tokens"] - 1) / (r["seconds"] - r["time_to_first_token_s"]),
                          r["time_to_first_token_s"], r["seconds"]))
        tps, ttft, secs = max(stats)
        rows.append({"engine": "odyssey", "row": f"batch {batch}", "batch": batch, "prompt_tokens": len(prompts[batch][0]),
                     "new_tokens": args.new_tokens, "time_to_first_token_s": ttft, "seconds": secs,
                     "decode_tokens_per_s": tps, "greedy": batches[-1][0]["ids"] if batch == 1 else None})
    batches = run("long", prompts["long"][:1] * 3, 1, 1)[1:]
    rows.append({"engine": "odyssey", "row": f"ttft {len(prompts['long'][0])}", "batch": 1,
                 "prompt_tokens": len(prompts["long"][0]), "new_tokens": 1,
                 "time_to_first_token_s": min(b[0]["time_to_first_token_s"] for b in batches)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--odyssey-train", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="qwen2.5-7b")
    ap.add_argument("--model-dir", default="/tmp/generate-bench-model")
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--long-prompt", type=int, default=32000)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    Path(args.out).mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed)
    rnd = lambda n, k: torch.randint(1, 1000, (n, k), generator=g).tolist()  # noqa: E731
    prompts = {1: rnd(1, args.prompt_len), 16: rnd(16, args.prompt_len), "long": rnd(1, args.long_prompt)}
    t = time.perf_counter()
    model = build_model(args.shape, args.model_dir, args.seed)
    print(f"model {args.shape} written to {args.model_dir} in {time.perf_counter() - t:.0f} s")
    hf = hf_rows(model, prompts, args)
    dyn = hf_rows(model, prompts, args, cache="dynamic")
    del model
    torch.cuda.empty_cache()
    od = odyssey_rows(prompts, args, args.model_dir)
    commit, source = hf_bench.source_commit()
    meta = {"commit": commit, "commit_source": source, "gpu": torch.cuda.get_device_name(0), "shape": args.shape,
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with open(Path(args.out) / "generate.jsonl", "a") as f:
        for r in hf + dyn + od:
            f.write(json.dumps({**meta, **{k: v for k, v in r.items() if k != "greedy"}}) + "\n")
    agree = 0
    for a, b in zip(hf[0]["greedy"], od[0]["greedy"]):
        if a != b:
            break
        agree += 1
    lines = [f"# Generation, {args.shape} bf16, {meta['gpu']}, commit {commit} ({meta['date']})", "",
             "| row | transformers, static cache (compiled) | transformers, dynamic cache | Odyssey | "
             "Odyssey / static | Odyssey / dynamic |", "|---|---|---|---|---|---|"]
    for i, (h, o) in enumerate(zip(hf, od)):
        d = dyn[i] if i < len(dyn) else None
        if "decode_tokens_per_s" in h:
            lines.append(f"| {h['row']}, prompt {h['prompt_tokens']}, {h['new_tokens']} new: decode tokens/s | "
                         f"{h['decode_tokens_per_s']:.1f} | {d['decode_tokens_per_s']:.1f} | {o['decode_tokens_per_s']:.1f} | "
                         f"{o['decode_tokens_per_s'] / h['decode_tokens_per_s']:.2f}x | "
                         f"{o['decode_tokens_per_s'] / d['decode_tokens_per_s']:.2f}x |")
        dt = f"{d['time_to_first_token_s']:.3f}" if d else "–"
        dr = f"{d['time_to_first_token_s'] / o['time_to_first_token_s']:.2f}x" if d else "–"
        lines.append(f"| {h['row']}: time to first token, s (lower is better; ratio: theirs / ours) | "
                     f"{h['time_to_first_token_s']:.3f} | {dt} | {o['time_to_first_token_s']:.3f} | "
                     f"{h['time_to_first_token_s'] / o['time_to_first_token_s']:.2f}x | {dr} |")
    lines += ["", f"Batch-1 greedy tokens identical before the engines part: {agree} of {args.new_tokens} "
              "(random bf16 weights: nearly flat logits)."]
    (Path(args.out) / "generate-compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
