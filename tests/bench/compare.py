#!/usr/bin/env python3
"""Join benchmark JSON lines of Hugging Face (tests/bench/hf_bench.py, "impl": "hf") and
Odyssey (odyssey-bench, "impl": "odyssey") on (shape, mode, seq) and print a Markdown table.

    python tests/bench/compare.py hf.jsonl odyssey.jsonl [more.jsonl ...]

Keys read from each line: impl, shape, mode, seq, tokens_per_s, peak_gib, mfu, and oom
(true when the configuration ran out of memory). When a configuration appears more than
once for the same impl, the last line wins. Speed-up = Odyssey tokens/s ÷ HF tokens/s;
memory ratio = Odyssey peak GiB ÷ HF peak GiB (below 1: Odyssey needs less). "OOM": that
side ran out of memory; "—": no line, or a ratio that cannot be formed. Differences in
the settings the two sides ran with (LoRA rank, dtype, device, layers) are listed under
the table, because they make a row unfair.
"""

from __future__ import annotations

import argparse
import json
import sys

IMPLS = ("hf", "odyssey")
# Settings that must agree for a row to compare like with like (when both sides report them).
SAME = ("lora_r", "dtype", "device_name", "layers", "vocab", "batch", "checkpointing")


def normal(key: str, value):
    """hf_bench says checkpointing 'on'/'off', odyssey-bench 'all'/'none': the same settings."""
    if key == "checkpointing":
        return {"on": "all", "off": "none"}.get(value, value)
    return value


def read(paths):
    recs = {}
    for path in paths:
        with open(path) as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    print(f"compare.py: {path}:{n}: not JSON, skipped", file=sys.stderr)
                    continue
                if not isinstance(r, dict) or r.get("impl") not in IMPLS:
                    continue
                try:
                    key = (str(r["shape"]).lower(), str(r["mode"]).lower(), int(r["seq"]))
                except (KeyError, TypeError, ValueError):
                    print(f"compare.py: {path}:{n}: no shape/mode/seq, skipped", file=sys.stderr)
                    continue
                # odyssey-bench --label (fast, lean, ...) keeps each mode of the engine apart.
                label = str(r.get("label", "")) if r["impl"] == "odyssey" else ""
                recs[(r["impl"], *key, label)] = r
    return recs


def seq_label(s: int) -> str:
    return f"{s // 1024}K" if s % 1024 == 0 and s >= 1024 else str(s)


def num(r, k):
    if r is None or r.get("oom"):
        return None
    v = r.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def cell(r, k, fmt):
    if r is None:
        return "—"
    if r.get("oom"):
        return "OOM"
    v = num(r, k)
    return "—" if v is None else fmt(v)


def ratio(a, b, fmt="{:.2f}×"):
    return fmt.format(a / b) if a is not None and b not in (None, 0.0) else "—"


def table(recs) -> str:
    keys = sorted({k[1:] for k in recs if k[0] == "odyssey"} | {(*k[1:4], "") for k in recs if k[0] == "hf"},
                  key=lambda k: (k[0], k[1], k[2], k[3]))
    head = ["shape", "mode", "seq", "Odyssey mode", "HF tokens/s", "Odyssey tokens/s", "speed-up", "HF peak GiB",
            "Odyssey peak GiB", "memory ratio", "recomputed layers", "planned GiB (error)", "HF MFU", "Odyssey MFU"]
    rows = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * (len(head) - 4)) + "|"]
    notes = []
    labelled = {k[1:4] for k in recs if k[0] == "odyssey" and k[4]}
    for shape, mode, seq, label in keys:
        if not label and (shape, mode, seq) in labelled and ("odyssey", shape, mode, seq, "") not in recs:
            continue  # HF's row appears beside each labelled Odyssey mode
        hf, ody = recs.get(("hf", shape, mode, seq, "")), recs.get(("odyssey", shape, mode, seq, label))
        tok = lambda v: f"{v:,.0f}"  # noqa: E731
        gib = lambda v: f"{v:.1f}"  # noqa: E731
        pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
        planned = "—"
        if ody is not None and num(ody, "planned_peak_gib") is not None and num(ody, "planner_error") is not None:
            planned = f"{num(ody, 'planned_peak_gib'):.1f} ({100 * num(ody, 'planner_error'):+.1f}%)"
        layers = "—" if ody is None or ody.get("checkpointed_layers") is None else (
            f"{ody['checkpointed_layers']}/{ody.get('layers', '?')}" + (" + offload" if ody.get("offload_activations") else "")
            + (f" + {ody['mlp_recomputed_layers']} MLP" if ody.get("mlp_recomputed_layers") else ""))
        rows.append("| " + " | ".join([
            shape, mode, seq_label(seq), label or "—",
            cell(hf, "tokens_per_s", tok), cell(ody, "tokens_per_s", tok),
            ratio(num(ody, "tokens_per_s"), num(hf, "tokens_per_s")),
            cell(hf, "peak_gib", gib), cell(ody, "peak_gib", gib),
            ratio(num(ody, "peak_gib"), num(hf, "peak_gib")),
            layers, planned,
            cell(hf, "mfu", pct), cell(ody, "mfu", pct),
        ]) + " |")
        if hf is not None and ody is not None:
            for k in SAME:
                if k == "checkpointing" and label:
                    continue  # a labelled mode chooses its own recomputation (column "recomputed layers")
                if k in hf and k in ody and normal(k, hf[k]) != normal(k, ody[k]):
                    notes.append(f"- {shape} {mode} {seq_label(seq)}: {k} differs (hf {hf[k]!r}, odyssey {ody[k]!r})")
    out = "\n".join(rows)
    versions = []
    for impl in IMPLS:
        seen = {tuple((k, r.get(k)) for k in ("torch", "transformers", "peft", "device_name") if r.get(k) is not None)
                for (i, *_), r in recs.items() if i == impl}
        for s in sorted(seen):
            if s:
                versions.append(f"- {impl}: " + ", ".join(f"{k} {v}" for k, v in s))
    if versions:
        out += "\n\nRan with:\n" + "\n".join(versions)
    if notes:
        out += "\n\nNot like for like:\n" + "\n".join(notes)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="JSON-lines files from hf_bench.py and odyssey-bench")
    args = ap.parse_args(argv)
    recs = read(args.files)
    if not recs:
        print("compare.py: no benchmark lines found", file=sys.stderr)
        return 1
    print(table(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
