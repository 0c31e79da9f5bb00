#!/usr/bin/env python3
"""Join benchmark JSON lines of Hugging Face (tests/bench/hf_bench.py, "impl": "hf") and
Odyssey (odyssey-bench, "impl": "odyssey") measured in the same machine lease, and print
Markdown tables.

    python tests/bench/compare.py hf.jsonl odyssey.jsonl [more.jsonl ...] [--allow-mixed-leases]

Lines pair only within one lease: the same `lease` key (host/boot_id/GPU UUID, written by both
programs). A line without one (files written before the key existed, such as most of
docs/bench-results/) is of an "unknown lease", which equals no other. An Odyssey line whose
(shape, mode, seq) has HF lines only in other or unknown leases is refused (listed on stderr,
exit status 3) unless --allow-mixed-leases pairs it anyway, labelled "mixed" in the table.

First table, "HF settings": every HF line per lease and (shape, mode, seq): its checkpointing
(layers recomputed), whether the model output was held through backward (the step before
2026-12-02; the default is transformers' Trainer.training_step), tokens/s, peak GiB, MFU,
or OOM. When a setting appears more than once in a lease, the last line wins (the same for an
Odyssey label).

Second table, one row per Odyssey line (its --label: fast, lean, ...) with the layers it
recomputed, set against two HF settings of the same lease:
  (a) HF's fastest setting that did not run out of memory: the speed-up for the fast rows;
  (b) HF's fastest setting whose peak is at least Odyssey's: the speed-up at equal or larger
      memory for HF, the figure for the lean rows ("—" when every HF setting needed less
      memory than the Odyssey row).
Both are taken among the HF lines with the Odyssey line's LoRA dropout (lora_dropout, absent
meaning 0) where the lease has any. Both prefer HF lines with the Trainer step; held-output lines are used only where a lease
has no other, and say so. Speed-up = Odyssey tokens/s ÷ HF tokens/s; memory ratio = Odyssey
peak GiB ÷ HF peak GiB (below 1: Odyssey needs less). Differences in the settings the two
sides ran with (LoRA rank, dtype, device, layers, vocabulary, batch) are listed under the
table. Exit status: 0, 1 no benchmark lines, 2 bad input, 3 mixed-lease pairs refused.

Frontier lines (odyssey-bench --frontier: "frontier": true, label "frontier @ G GiB") also get a
table per sweep (each budget's policy, tokens/s, peak, the planner's prediction and error, and
which points are on the frontier), then every HF line of the same lease read against the
frontier at its peak: the fastest point whose measured peak is at most the HF line's (the
figure of docs/benchmarks.md's frontier rows). --frontier-plot DIR draws each sweep as a PNG
(matplotlib): tokens/s against peak, the frontier as a step line, the HF lines as points.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

IMPLS = ("hf", "odyssey")
# Settings that must agree for a pair to compare like with like (when both sides report them).
SAME = ("lora_r", "lora_dropout", "dtype", "device_name", "layers", "vocab", "batch")


class Lease:
    """A lease key, or the unknown lease of the lines of one file that carry none."""

    def __init__(self, key: str | None, path: str):
        self.key = key
        self.path = None if key else path
        self.name = ""  # L1, L2, ... / U1, U2, ... (set in order of appearance)

    def ident(self):
        return ("key", self.key) if self.key else ("file", self.path)

    def same(self, other: "Lease") -> bool:
        """Two lines shared a lease only when both name it."""
        return self.key is not None and self.key == other.key


def read(paths):
    """The benchmark lines of `paths`: (odyssey, hf) dicts, the last line of each
    (lease, shape, mode, seq, label or HF setting) winning, and the leases seen."""
    leases = {}
    ody, hf = {}, {}
    for path in paths:
        try:
            fh = open(path, encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"compare.py: cannot read {path}: {e.strerror or e}") from None
        with fh:
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
                    continue  # --check, --profile and other lines
                try:
                    key = (str(r["shape"]).lower(), str(r["mode"]).lower(), int(r["seq"]))
                except (KeyError, TypeError, ValueError):
                    print(f"compare.py: {path}:{n}: no shape/mode/seq, skipped", file=sys.stderr)
                    continue
                lk = r.get("lease")
                lk = str(lk) if isinstance(lk, str) and lk.strip() else None
                lease = Lease(lk, path)
                lease = leases.setdefault(lease.ident(), lease)
                r["_lease"] = lease
                if r["impl"] == "odyssey":
                    ody[(lease.ident(), *key, str(r.get("label", "")))] = r
                else:
                    hf[(lease.ident(), *key, hf_setting(r))] = r
    known = [le for le in leases.values() if le.key]
    unknown = [le for le in leases.values() if not le.key]
    for i, le in enumerate(known, 1):
        le.name = f"L{i}"
    for i, le in enumerate(unknown, 1):
        le.name = f"U{i}"
    return ody, hf, list(leases.values())


def hf_checkpointing(r) -> str:
    """hf_bench says 'on'/'off'; older lines too."""
    return {"all": "on", "none": "off"}.get(str(r.get("checkpointing", "on")), str(r.get("checkpointing", "on")))


def held(r) -> bool:
    """Lines written before hold_logits existed held the output (hf_bench's old default)."""
    return bool(r.get("hold_logits", True))


def hf_setting(r) -> str:
    s = f"ckpt {hf_checkpointing(r)}"
    if held(r):
        s += ", outputs held"
    if r.get("sdpa_priority") not in (None, "default"):
        s += f", SDPA {r['sdpa_priority']} first"
    if r.get("quant"):  # hf_bench.py --quant: bitsandbytes 4-bit (QLoRA)
        s += f", bnb {str(r['quant']).split()[0]}"
    if r.get("liger"):  # hf_bench.py --liger: a setting of its own, not a repeat of the plain line
        s += ", Liger"
    if r.get("lora_dropout"):  # hf_bench.py --lora-dropout P (absent or 0: none)
        s += f", dropout {r['lora_dropout']:g}"
    return s


def hf_recomputed(r) -> str:
    layers = r.get("layers", "?")
    n = r.get("checkpointed_layers")
    if n is None:
        n = layers if hf_checkpointing(r) == "on" else 0
    return f"{n}/{layers}"


def ody_recomputed(r) -> str:
    if r.get("checkpointed_layers") is None:
        return "—"
    s = f"{r['checkpointed_layers']}/{r.get('layers', '?')}"
    if r.get("offload_activations") and r["checkpointed_layers"]:
        s += " + offload"  # the checkpointed layers' inputs in pinned host memory
    if r.get("mlp_recomputed_layers"):
        s += f" + {r['mlp_recomputed_layers']} MLP"
    if r.get("mlp_offloaded_layers"):
        s += f" + {r['mlp_offloaded_layers']} MLP offloaded"
    return s


def seq_label(s: int) -> str:
    return f"{s // 1024}K" if s % 1024 == 0 and s >= 1024 else str(s)


def num(r, k):
    if r is None or r.get("oom"):
        return None
    v = r.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def tok(v):
    return f"{v:,.0f}"


def gib(v):
    return f"{v:.1f}"


def pct(v):
    return f"{100 * v:.1f}%"


def cell(r, k, fmt):
    if r is None:
        return "—"
    if r.get("oom"):
        return "OOM"
    v = num(r, k)
    return "—" if v is None else fmt(v)


def ratio(a, b, fmt="{:.2f}×"):
    return fmt.format(a / b) if a is not None and b not in (None, 0.0) else "—"


def dropout_of(r) -> float:
    """The line's LoRA dropout (hf_bench.py and odyssey-bench --lora-dropout; absent: 0)."""
    return float(r.get("lora_dropout") or 0.0)


def fastest(lines):
    """The fastest line that ran (tokens/s known); None when all ran out of memory."""
    ran = [r for r in lines if num(r, "tokens_per_s") is not None]
    return max(ran, key=lambda r: num(r, "tokens_per_s")) if ran else None


def choose(cands, ody):
    """(a) HF's fastest setting that ran, (b) the fastest with a peak at least Odyssey's.
    The Trainer step is preferred; held-output lines count only where none other ran."""
    trainer = [r for r in cands if not held(r)]
    pool = trainer if any(num(r, "tokens_per_s") is not None for r in trainer) else cands
    a = fastest(pool)
    peak = num(ody, "peak_gib")
    b = None
    if peak is not None:
        b = fastest([r for r in pool if num(r, "peak_gib") is not None and num(r, "peak_gib") >= peak])
    return a, b


def hf_cell(r, lease_note: str) -> str:
    if r is None:
        return "—"
    s = f"{hf_setting(r)} ({hf_recomputed(r)}): {cell(r, 'tokens_per_s', tok)}/s"
    if num(r, "peak_gib") is not None:
        s += f", {cell(r, 'peak_gib', gib)} GiB"
    return s + lease_note


def tables(ody, hf, leases, allow_mixed: bool):
    """(markdown text, refused pairs)."""
    out, notes, refused = [], [], []
    by_key = {}
    for (lid, shape, mode, seq, _), r in hf.items():
        by_key.setdefault((shape, mode, seq), []).append(r)

    # HF settings, every line.
    hrows = ["| lease | shape | mode | seq | HF setting | recomputed layers | tokens/s | peak GiB | MFU |",
             "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in sorted(hf.values(), key=lambda r: (r["_lease"].name, str(r["shape"]).lower(), str(r["mode"]),
                                                 int(r["seq"]), hf_setting(r))):
        peak = cell(r, "peak_gib", gib)
        if r.get("oom") and num({"v": r.get("peak_gib_at_oom")}, "v") is not None:
            peak = f"OOM (at {r['peak_gib_at_oom']:.1f})"
        hrows.append("| " + " | ".join([r["_lease"].name, str(r["shape"]).lower(), str(r["mode"]).lower(),
                                        seq_label(int(r["seq"])), hf_setting(r), hf_recomputed(r),
                                        cell(r, "tokens_per_s", tok), peak, cell(r, "mfu", pct)]) + " |")

    # Odyssey against HF.
    head = ["lease", "shape", "mode", "seq", "Odyssey mode", "recomputed layers", "Odyssey tokens/s",
            "Odyssey peak GiB", "planned GiB (error)", "Odyssey MFU", "(a) HF fastest that ran", "speed-up",
            "memory ratio", "(b) HF fastest at ≥ Odyssey's peak", "speed-up at ≥ memory"]
    orows = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 6 + ["---:"] * 4 + ["---", "---:", "---:",
                                                                                             "---", "---:"]) + "|"]
    for (lid, shape, mode, seq, label), o in sorted(ody.items(), key=lambda kv: (kv[1]["_lease"].name, *kv[0][1:])):
        lease = o["_lease"]
        everywhere = by_key.get((shape, mode, seq), [])
        same = [r for r in everywhere if r["_lease"].same(lease)]
        mixed = False
        if same:
            cands = same
        elif everywhere and allow_mixed:
            cands, mixed = everywhere, True
        elif everywhere:
            others = sorted({r["_lease"].name for r in everywhere})
            refused.append(f"odyssey {shape} {mode} {seq_label(seq)} {label or '(no label)'} (lease {lease.name}) "
                           f"with HF in lease {', '.join(others)}")
            continue
        else:
            cands = []
        # An Odyssey line with LoRA dropout against the anchors with the same dropout (the
        # anchor's cost of dropout is part of the comparison), where the lease has any.
        same_dropout = [r for r in cands if dropout_of(r) == dropout_of(o)]
        if same_dropout:
            cands = same_dropout
        a, b = choose(cands, o) if cands else (None, None)
        lease_cell = lease.name
        if mixed:
            hl = sorted({r["_lease"].name for r in (a, b) if r is not None})
            lease_cell = f"{lease.name} × {', '.join(hl) or '—'} (mixed)"
        planned = "—"
        if num(o, "planned_peak_gib") is not None and num(o, "planner_error") is not None:
            planned = f"{num(o, 'planned_peak_gib'):.1f} ({100 * num(o, 'planner_error'):+.1f}%)"
        if b is None and a is not None and num(o, "peak_gib") is not None:
            b_cell = f"— (every HF peak below {num(o, 'peak_gib'):.1f})"
        elif b is not None and b is a:
            b_cell = "= (a)"
        else:
            b_cell = hf_cell(b, "")
        if cands and a is None:
            a_cell = "every HF setting OOM"
        else:
            a_cell = hf_cell(a, "")
        ot = num(o, "tokens_per_s")
        orows.append("| " + " | ".join([
            lease_cell, shape, mode, seq_label(seq), label or "—", ody_recomputed(o),
            cell(o, "tokens_per_s", tok), cell(o, "peak_gib", gib), planned, cell(o, "mfu", pct),
            a_cell, ratio(ot, num(a, "tokens_per_s")), ratio(num(o, "peak_gib"), num(a, "peak_gib")),
            b_cell, ratio(ot, num(b, "tokens_per_s")),
        ]) + " |")
        for h in {id(x): x for x in (a, b) if x is not None}.values():
            for k in SAME:
                if k in h and k in o and h[k] != o[k]:
                    note = (f"- {shape} {mode} {seq_label(seq)} {label or ''}: {k} differs "
                            f"(hf {h[k]!r}, odyssey {o[k]!r})")
                    if note not in notes:
                        notes.append(note)

    out.append("HF settings (every line; OOM: ran out of memory, with the peak reached):\n")
    out.append("\n".join(hrows) if hf else "(no HF lines)")
    out.append("\nOdyssey against HF in the same lease ((a): speed-up for the fast rows; (b): at equal or "
               "larger memory for HF, for the lean rows):\n")
    out.append("\n".join(orows) if len(orows) > 2 else "(no Odyssey lines paired)")

    # Leases: where and when, from the lines themselves.
    legend = []
    for le in sorted(leases, key=lambda le: le.name):
        lines = [r for r in (*ody.values(), *hf.values()) if r["_lease"] is le]
        if not lines:
            continue
        if le.key:
            first = lines[0]
            what = f"`{le.key}`"
            where = ", ".join(f"{k} {first[k]}" for k in ("host", "gpu", "gpu_uuid") if first.get(k))
            if where:
                what += f" ({where})"
        else:
            what = f"unknown lease: the lines of {os.path.basename(le.path)} carry no lease key"
        parts = []
        for impl in IMPLS:
            rs = [r for r in lines if r["impl"] == impl]
            if not rs:
                continue
            commits = sorted({str(r.get("commit", "not recorded")) for r in rs})
            times = sorted(str(r["time"]) for r in rs if r.get("time"))
            span = f", {times[0]} to {times[-1]}" if times else ""
            parts.append(f"{impl}: {len(rs)} line(s), commit {' / '.join(commits)}{span}")
        legend.append(f"- {le.name}: {what}; " + "; ".join(parts))
    out.append("\nLeases:\n" + "\n".join(legend))
    if any(not le.key for le in leases) and allow_mixed:
        out.append("\nLines without a lease key are of an unknown lease: every pair they enter is mixed "
                   "(--allow-mixed-leases).")

    versions = []
    for impl in IMPLS:
        seen = {tuple((k, r.get(k)) for k in ("torch", "transformers", "peft", "device_name") if r.get(k) is not None)
                for r in (*ody.values(), *hf.values()) if r["impl"] == impl}
        for s in sorted(seen):
            if s:
                versions.append(f"- {impl}: " + ", ".join(f"{k} {v}" for k, v in s))
    if versions:
        out.append("\nRan with:\n" + "\n".join(versions))
    if notes:
        out.append("\nNot like for like:\n" + "\n".join(notes))
    return "\n".join(out), refused


def frontier_groups(ody):
    """odyssey-bench --frontier lines by (lease ident, shape, mode, seq, sweep label), by budget."""
    groups = {}
    for (lid, shape, mode, seq, label), r in ody.items():
        if r.get("frontier"):
            groups.setdefault((lid, shape, mode, seq, label.rsplit(" @ ", 1)[0]), []).append(r)
    return {k: sorted(v, key=lambda r: float(r.get("frontier_budget_gib") or 0)) for k, v in sorted(groups.items())}


def pareto(points):
    """The points that ran and that no other beats on both counts (less peak memory and more
    tokens/s), by peak."""
    ran = sorted((r for r in points if num(r, "tokens_per_s") is not None and num(r, "peak_gib") is not None),
                 key=lambda r: (num(r, "peak_gib"), -num(r, "tokens_per_s")))
    front, best = [], None
    for r in ran:
        if best is None or num(r, "tokens_per_s") > best:
            front.append(r)
            best = num(r, "tokens_per_s")
    return front


def read_off(points, cap):
    """The frontier's figure at `cap` GiB: the fastest point that ran with a measured peak at
    most `cap` (None when every point needed more)."""
    return fastest([r for r in points if num(r, "peak_gib") is not None and num(r, "peak_gib") <= cap])


def anchors_of(hf, shape, mode, seq, lease):
    """The HF lines of one frontier's (shape, mode, seq) and lease that ran (tokens/s and peak
    known), by setting."""
    return [h for (_, hs, hm, hq, _), h in sorted(hf.items(), key=lambda kv: kv[0][4])
            if (hs, hm, hq) == (shape, mode, seq) and h["_lease"].same(lease)
            and num(h, "tokens_per_s") is not None and num(h, "peak_gib") is not None]


def frontier_tables(ody, hf):
    """Markdown: each frontier's points, then each HF line's tokens/s against the frontier read
    at that line's peak (same lease, shape, mode and seq). "" without frontier lines."""
    groups = frontier_groups(ody)
    if not groups:
        return ""
    out = ["\nSpeed-memory frontier (odyssey-bench --frontier; each point is one budget, the planner choosing "
           "and the allocator capped to it; * on the frontier: no other point has both less peak and more "
           "tokens/s):\n"]
    reads = ["| lease | shape | mode | seq | HF setting | HF tokens/s | HF peak GiB | Odyssey at ≤ that peak "
             "(read off the frontier) | speed-up |", "|---|---|---|---|---|---:|---:|---|---:|"]
    for (lid, shape, mode, seq, sweep), pts in groups.items():
        lease = pts[0]["_lease"]
        front = {id(r) for r in pareto(pts)}
        out.append(f"{shape} {mode} {seq_label(seq)} ({sweep}, lease {lease.name}):\n")
        rows = ["| budget GiB | recomputed layers | tokens/s | peak GiB | planned GiB (error) | |",
                "|---:|---|---:|---:|---:|---|"]
        for r in pts:
            planned = "—"
            if num(r, "planned_peak_gib") is not None and num(r, "planner_error") is not None:
                planned = f"{num(r, 'planned_peak_gib'):.1f} ({100 * num(r, 'planner_error'):+.1f}%)"
            budget = f"{float(r.get('frontier_budget_gib') or 0):.1f}" + (" (whole GPU)" if r.get("frontier_device") else "")
            peak = cell(r, "peak_gib", gib)
            if r.get("oom") and num({"v": r.get("peak_gib_at_oom")}, "v") is not None:
                peak = f"OOM (at {r['peak_gib_at_oom']:.1f})"
            elif r.get("error") and not r.get("oom"):
                peak = "error: " + str(r["error"])[:80]
            rows.append("| " + " | ".join([budget, ody_recomputed(r), cell(r, "tokens_per_s", tok), peak, planned,
                                           "*" if id(r) in front else ""]) + " |")
        out.append("\n".join(rows) + "\n")
        for h in anchors_of(hf, shape, mode, seq, lease):
            cap = num(h, "peak_gib")
            o = read_off(pts, cap)
            at = "— (every point needed more)" if o is None else (
                f"{cell(o, 'tokens_per_s', tok)}/s at {cell(o, 'peak_gib', gib)} GiB "
                f"(budget {float(o.get('frontier_budget_gib') or 0):.1f})")
            reads.append("| " + " | ".join([lease.name, shape, mode, seq_label(seq), hf_setting(h),
                                            cell(h, "tokens_per_s", tok), cell(h, "peak_gib", gib), at,
                                            ratio(num(o, "tokens_per_s"), num(h, "tokens_per_s"))]) + " |")
    if len(reads) > 2:
        out.append("Each HF line against the frontier at its peak (the row's figure):\n")
        out.append("\n".join(reads))
    return "\n".join(out)


def plot_frontiers(ody, hf, outdir):
    """One PNG per frontier in `outdir` (tokens/s against measured peak; the frontier as a step
    line, every point that ran, the HF lines of the same lease as marked points). Returns the
    paths written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("compare.py: --frontier-plot needs matplotlib (packaging/install-deps.sh installs it "
                         "into the reference environment)") from None
    os.makedirs(outdir, exist_ok=True)
    written = []
    markers = "s^Dvph*"
    groups = frontier_groups(ody)
    rows = [(shape, mode, seq, sweep) for (_, shape, mode, seq, sweep) in groups]
    for (lid, shape, mode, seq, sweep), pts in groups.items():
        lease = pts[0]["_lease"]
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
        ran = [r for r in pts if num(r, "tokens_per_s") is not None and num(r, "peak_gib") is not None]
        ax.scatter([num(r, "peak_gib") for r in ran], [num(r, "tokens_per_s") for r in ran], color="#1f77b4",
                   zorder=3, label="Odyssey, one budget each")
        front = pareto(pts)
        if front:
            xs = [num(r, "peak_gib") for r in front]
            ys = [num(r, "tokens_per_s") for r in front]
            ax.step(xs, ys, where="post", color="#1f77b4", zorder=2, label="Odyssey frontier")
        failed = [r for r in pts if r not in ran]
        for i, h in enumerate(anchors_of(hf, shape, mode, seq, lease)):
            ax.scatter([num(h, "peak_gib")], [num(h, "tokens_per_s")], marker=markers[i % len(markers)], s=60,
                       color=f"C{i + 1}", zorder=4, label=f"transformers + PEFT, {hf_setting(h)}")
            o = read_off(pts, num(h, "peak_gib"))
            if o is not None:
                ax.annotate(f"{num(o, 'tokens_per_s') / num(h, 'tokens_per_s'):.2f}×",
                            (num(h, "peak_gib"), num(o, "tokens_per_s")), textcoords="offset points",
                            xytext=(4, 4), fontsize=8, color=f"C{i + 1}")
                ax.plot([num(h, "peak_gib")] * 2, [num(h, "tokens_per_s"), num(o, "tokens_per_s")], ":",
                        color=f"C{i + 1}", zorder=1)
        commit = str(pts[0].get("commit") or "")[:7]
        title = f"{shape} {mode} {seq_label(seq)} (lease {lease.name}" + (f", commit {commit})" if commit else ")")
        if failed:
            title += f"; {len(failed)} budget(s) ran out of memory"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("peak GPU memory, GiB (torch max allocated)")
        ax.set_ylabel("tokens/s")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        name = f"frontier-{shape}-{mode}-{seq_label(seq)}" + (f"-{sweep}" if sweep != "frontier" else "")
        if rows.count((shape, mode, seq, sweep)) > 1:  # the same sweep in several leases: one file each
            name += f"-{lease.name}"
        path = os.path.join(outdir, "".join(c if c.isalnum() or c in ".-_" else "_" for c in name) + ".png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="JSON-lines files from hf_bench.py and odyssey-bench")
    ap.add_argument("--allow-mixed-leases", action="store_true",
                    help="pair Odyssey and HF lines of different or unknown leases (labelled mixed)")
    ap.add_argument("--frontier-plot", metavar="DIR",
                    help="draw each speed-memory frontier (odyssey-bench --frontier) as a PNG in DIR")
    args = ap.parse_args(argv)
    ody, hf, leases = read(args.files)
    if not ody and not hf:
        print("compare.py: no benchmark lines found", file=sys.stderr)
        return 1
    text, refused = tables(ody, hf, leases, args.allow_mixed_leases)
    print(text)
    front = frontier_tables(ody, hf)
    if front:
        print(front)
    if args.frontier_plot:
        for path in plot_frontiers(ody, hf, args.frontier_plot):
            print(f"compare.py: wrote {path}", file=sys.stderr)
    if refused:
        old = any(not le.key for le in leases)
        print(f"compare.py: refused {len(refused)} pair(s) across leases: their HF lines were measured in another "
              "lease or one without a lease key, so the two sides did not share a machine"
              + (" (lines written before the lease key existed, as in docs/bench-results/, are each of an unknown "
                 "lease)" if old else "")
              + ". Measure both in one lease, or pass --allow-mixed-leases to pair them anyway, labelled mixed:\n  "
              + "\n  ".join(refused), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
