#!/usr/bin/env python3
"""Tests of the benchmark tools that need no GPU and no torch: compare.py's lease pairing
(refusal of mixed-lease pairs, --allow-mixed-leases, old lines without a lease key), its
choice of HF settings ((a) fastest that ran, (b) fastest at a peak at least Odyssey's), and
hf_bench.py's provenance helpers (commit outside a repository, lease key, time format).

    python3 tests/bench/test_bench_tools.py      (ctest: bench_tools)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402
import hf_bench  # noqa: E402  (imports torch only inside its functions)

LEASE_A = "gpu-host-1/0f6a0c9e-boot-a/GPU-11111111-2222-3333-4444-555555555555"
LEASE_B = "gpu-host-2/7d1b2c3d-boot-b/GPU-66666666-7777-8888-9999-000000000000"


def hf(lease, ckpt="on", tps=5000.0, peak=80.0, oom=False, hold=False, seq=32768, **kw):
    r = {"impl": "hf", "shape": "qwen2.5-7b", "mode": "lora", "seq": seq, "checkpointing": ckpt,
         "hold_logits": hold, "layers": 28, "lora_r": 16, "dtype": "bfloat16", "commit": "abc", "time": "t"}
    if lease is not None:
        r["lease"] = lease
    if oom:
        r.update(oom=True, error="CUDA out of memory", peak_gib_at_oom=139.0)
    else:
        r.update(tokens_per_s=tps, peak_gib=peak, mfu=0.25)
    r.update(kw)
    return r


def ody(lease, label, tps, peak, ckpt_layers=0, seq=32768, **kw):
    r = {"impl": "odyssey", "shape": "qwen2.5-7b", "mode": "lora", "seq": seq, "label": label,
         "checkpointed_layers": ckpt_layers, "layers": 28, "lora_r": 16, "dtype": "bfloat16",
         "tokens_per_s": tps, "peak_gib": peak, "mfu": 0.45, "commit": "def", "time": "t"}
    if lease is not None:
        r["lease"] = lease
    r.update(kw)
    return r


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, recs):
        p = Path(self.tmp.name) / name
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return str(p)

    def run_compare(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = compare.main(list(args))
            except SystemExit as e:  # argparse and unreadable files
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    @staticmethod
    def pair_rows(text):
        """The rows of the Odyssey-against-HF table, as lists of cells."""
        part = text.split("Odyssey against HF", 1)[1].split("Leases:", 1)[0]
        rows = [ln for ln in part.splitlines() if ln.startswith("| ") and not ln.startswith("| lease")]
        return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]

    def test_mixed_lease_pair_is_refused(self):
        h = self.write("hf.jsonl", [hf(LEASE_A)])
        o = self.write("ody.jsonl", [ody(LEASE_B, "fast", 10000.0, 110.0)])
        rc, out, err = self.run_compare(h, o)
        self.assertEqual(rc, 3)
        self.assertIn("refused 1 pair(s) across leases", err)
        self.assertIn("--allow-mixed-leases", err)
        self.assertEqual(self.pair_rows(out), [])  # nothing paired across the two machines

    def test_allow_mixed_leases_labels_the_pair(self):
        h = self.write("hf.jsonl", [hf(LEASE_A)])
        o = self.write("ody.jsonl", [ody(LEASE_B, "fast", 10000.0, 110.0)])
        rc, out, err = self.run_compare("--allow-mixed-leases", h, o)
        self.assertEqual(rc, 0, err)
        rows = self.pair_rows(out)
        self.assertEqual(len(rows), 1)
        self.assertIn("(mixed)", rows[0][0])
        self.assertEqual(rows[0][11], "2.00×")

    def test_same_lease_wins_over_other_leases(self):
        # HF in lease A is faster, but the Odyssey row of lease B pairs with lease B's HF line.
        h = self.write("hf.jsonl", [hf(LEASE_A, tps=8000.0), hf(LEASE_B, tps=4000.0)])
        o = self.write("ody.jsonl", [ody(LEASE_B, "fast", 10000.0, 110.0)])
        rc, out, err = self.run_compare(h, o)
        self.assertEqual(rc, 0, err)
        rows = self.pair_rows(out)
        self.assertEqual(len(rows), 1)
        self.assertNotIn("mixed", rows[0][0])
        self.assertEqual(rows[0][11], "2.50×")

    def test_lines_without_lease_are_unknown_and_never_equal(self):
        # Old result files: no lease key on either side, even in one file.
        both = self.write("old.jsonl", [hf(None), ody(None, "fast", 10000.0, 110.0)])
        rc, out, err = self.run_compare(both)
        self.assertEqual(rc, 3)
        self.assertIn("unknown lease", err)
        rc, out, err = self.run_compare("--allow-mixed-leases", both)
        self.assertEqual(rc, 0, err)
        self.assertIn("(mixed)", self.pair_rows(out)[0][0])
        self.assertIn("Lines without a lease key are of an unknown lease", out)

    def test_fastest_that_ran_and_equal_memory(self):
        lines = [hf(LEASE_A, "on", tps=5000.0, peak=86.0), hf(LEASE_A, "off", oom=True),
                 hf(LEASE_A, "on", tps=5400.0, peak=95.0, hold=True)]  # held outputs: not HF's Trainer step
        o = [ody(LEASE_A, "fast", 10000.0, 110.0), ody(LEASE_A, "lean", 7500.0, 22.7, ckpt_layers=28,
                                                       offload_activations=True)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines), self.write("ody.jsonl", o))
        self.assertEqual(rc, 0, err)
        rows = {r[4]: r for r in self.pair_rows(out)}
        # (a): the fastest HF setting that did not OOM, Trainer step preferred over held outputs.
        self.assertIn("ckpt on (28/28)", rows["fast"][10])
        self.assertNotIn("held", rows["fast"][10])
        self.assertEqual(rows["fast"][11], "2.00×")
        # (b): no HF setting reached the fast row's 110 GiB; the lean row's 22.7 GiB is below HF's 86.
        self.assertTrue(rows["fast"][13].startswith("— (every HF peak below 110.0)"), rows["fast"][13])
        self.assertEqual(rows["fast"][14], "—")
        self.assertEqual(rows["lean"][5], "28/28 + offload")
        self.assertEqual(rows["lean"][13], "= (a)")
        self.assertEqual(rows["lean"][14], "1.50×")
        # HF settings: the OOM is a line, with checkpointing off and 0 layers recomputed.
        self.assertRegex(out, r"\| L1 \| qwen2.5-7b \| lora \| 32K \| ckpt off \| 0/28 \| OOM \| OOM \(at 139.0\)")

    def test_held_outputs_used_only_when_nothing_else_ran(self):
        lines = [hf(LEASE_A, "on", tps=5300.0, peak=86.3, hold=True)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines),
                                        self.write("ody.jsonl", [ody(LEASE_A, "lean", 7387.0, 22.7)]))
        self.assertEqual(rc, 0, err)
        self.assertIn("ckpt on, outputs held (28/28)", self.pair_rows(out)[0][10])

    def test_liger_and_4bit_anchors_are_settings_of_their_own(self):
        # hf_bench.py --quant nf4 with and without --liger: two HF lines of one shape and length,
        # both listed; the fastest that ran pairs with the fast row.
        lines = [hf(LEASE_A, tps=5494.0, peak=33.6, quant="nf4 (double quantization)"),
                 hf(LEASE_A, tps=6161.0, peak=15.1, quant="nf4 (double quantization)", liger=True)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines),
                                        self.write("ody.jsonl", [ody(LEASE_A, "fast", 11222.0, 75.1)]))
        self.assertEqual(rc, 0, err)
        self.assertIn("| ckpt on, bnb nf4 | 28/28 | 5,494 |", out)
        self.assertIn("| ckpt on, bnb nf4, Liger | 28/28 | 6,161 |", out)
        self.assertIn("ckpt on, bnb nf4, Liger (28/28)", self.pair_rows(out)[0][10])

    def test_dropout_anchor_is_a_setting_of_its_own(self):
        # hf_bench.py --lora-dropout 0.05 beside the dropout-0 line of the same shape: two lines.
        lines = [hf(LEASE_A, tps=5870.0, peak=27.9, liger=True, lora_dropout=0.0),
                 hf(LEASE_A, tps=5500.0, peak=31.0, liger=True, lora_dropout=0.05)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines),
                                        self.write("ody.jsonl", [ody(LEASE_A, "fast", 9800.0, 22.5)]))
        self.assertEqual(rc, 0, err)
        self.assertIn("| ckpt on, Liger | 28/28 | 5,870 |", out)
        self.assertIn("| ckpt on, Liger, dropout 0.05 | 28/28 | 5,500 |", out)

    def test_dropout_lines_pair_with_the_anchor_of_their_dropout(self):
        # The dropout-0 anchor is faster; an Odyssey line with dropout 0.05 is set against the
        # dropout-0.05 anchor, the dropout-0 line against the dropout-0 one.
        lines = [hf(LEASE_A, tps=5884.0, peak=27.9, liger=True, lora_dropout=0.0),
                 hf(LEASE_A, tps=5543.0, peak=29.9, liger=True, lora_dropout=0.05)]
        odys = [ody(LEASE_A, "dropout 0.05", 9341.0, 25.1, lora_dropout=0.05),
                ody(LEASE_A, "dropout 0", 9863.0, 25.0, lora_dropout=0.0)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines), self.write("ody.jsonl", odys))
        self.assertEqual(rc, 0, err)
        rows = {r[4]: r for r in self.pair_rows(out)}
        self.assertIn("dropout 0.05 (28/28): 5,543/s", rows["dropout 0.05"][10])
        self.assertEqual(rows["dropout 0.05"][11], "1.69×")
        self.assertIn("Liger (28/28): 5,884/s", rows["dropout 0"][10])
        self.assertEqual(rows["dropout 0"][11], "1.68×")
        self.assertNotIn("lora_dropout differs", out)

    def test_every_hf_setting_oom(self):
        lines = [hf(LEASE_A, "on", oom=True), hf(LEASE_A, "off", oom=True)]
        rc, out, err = self.run_compare(self.write("hf.jsonl", lines),
                                        self.write("ody.jsonl", [ody(LEASE_A, "lean", 7387.0, 22.7)]))
        self.assertEqual(rc, 0, err)
        row = self.pair_rows(out)[0]
        self.assertEqual(row[10], "every HF setting OOM")
        self.assertEqual(row[11], "—")

    def frontier(self, lease, points, seq=32768):
        """odyssey-bench --frontier lines: (budget, tokens/s or None for an OOM, peak, planned)."""
        out = []
        for budget, tps, peak, planned in points:
            r = ody(lease, f"frontier @ {budget:.1f} GiB", tps, peak, seq=seq, frontier=True,
                    frontier_budget_gib=budget, frontier_device=budget > 139, memory_budget_gib=budget,
                    planned_peak_gib=planned, planner_error=(planned - peak) / peak if peak else 0.0)
            if tps is None:
                for k in ("tokens_per_s", "peak_gib", "planned_peak_gib", "planner_error"):
                    r.pop(k)
                r.update(oom=True, error="CUDA out of memory", peak_gib_at_oom=budget - 0.5)
            out.append(r)
        return out

    def test_frontier_read_at_each_anchors_peak(self):
        # Budgets 24 (OOM), 28, 32, 36 and the whole GPU; the 36 GiB point is slower than the
        # 32 GiB one (it is not on the frontier). Liger's line peaks at 32.3 GiB: the frontier's
        # figure there is the 32 GiB point (peak 31.0), not the 36 GiB one (peak 33.9 > 32.3).
        pts = self.frontier(LEASE_A, [(24.0, None, 0, 0), (28.0, 6000.0, 27.1, 26.5), (32.0, 7900.0, 31.0, 30.2),
                                      (36.0, 7800.0, 33.9, 34.0), (139.8, 10200.0, 110.0, 104.0)])
        anchors = [hf(LEASE_A, tps=5875.0, peak=32.3, liger=True), hf(LEASE_A, tps=5373.0, peak=86.3),
                   hf(LEASE_A, tps=5000.0, peak=20.0, checkpointing="on", sdpa_priority="math")]
        plots = Path(self.tmp.name) / "plots"
        rc, out, err = self.run_compare(self.write("hf.jsonl", anchors), self.write("ody.jsonl", pts),
                                        "--frontier-plot", str(plots))
        self.assertEqual(rc, 0, err)
        table = out.split("Speed-memory frontier", 1)[1]
        self.assertRegex(table, r"\| 24.0 \| 0/28 \| OOM \| OOM \(at 23.5\) \| — \|")
        self.assertRegex(table, r"\| 32.0 \| 0/28 \| 7,900 \| 31.0 \| 30.2 \(-2.6%\) \| \* \|")
        self.assertRegex(table, r"\| 36.0 \| 0/28 \| 7,800 \| 33.9 \| 34.0 \(\+0.3%\) \|  \|")
        self.assertRegex(table, r"\| 139.8 \(whole GPU\) \| 0/28 \| 10,200 \| 110.0 \|")
        reads = table.split("against the frontier at its peak", 1)[1]
        self.assertIn("| ckpt on, Liger | 5,875 | 32.3 | 7,900/s at 31.0 GiB (budget 32.0) | 1.34× |", reads)
        self.assertIn("| ckpt on | 5,373 | 86.3 | 7,900/s at 31.0 GiB (budget 32.0) | 1.47× |", reads)
        self.assertIn("| 20.0 | — (every point needed more) | — |", reads)
        # The frontier points are rows of the main table too, each with its own label.
        labels = {row[4] for row in self.pair_rows(out)}
        self.assertTrue({"frontier @ 28.0 GiB", "frontier @ 139.8 GiB"} <= labels, labels)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed (packaging/install-deps.sh installs it)")
        png = plots / "frontier-qwen2.5-7b-lora-32K.png"
        self.assertTrue(png.is_file(), err)
        self.assertEqual(png.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(png.stat().st_size, 10000)

    def test_pareto_drops_dominated_points(self):
        pts = self.frontier(LEASE_A, [(28.0, 6000.0, 27.1, 27.0), (30.0, 5900.0, 28.0, 28.0),
                                      (32.0, 7900.0, 31.0, 31.0)])
        self.assertEqual([r["frontier_budget_gib"] for r in compare.pareto(pts)], [28.0, 32.0])
        self.assertIsNone(compare.read_off(pts, 27.0))
        self.assertEqual(compare.read_off(pts, 30.0)["frontier_budget_gib"], 28.0)

    def test_bad_input(self):
        rc, out, err = self.run_compare(str(Path(self.tmp.name) / "missing.jsonl"))
        self.assertIn("cannot read", str(rc) + err)
        rc, out, err = self.run_compare(self.write("empty.jsonl", [{"check": "x"}]))
        self.assertEqual(rc, 1)
        self.assertIn("no benchmark lines", err)

    def test_old_result_files(self):
        """A pair of files from docs/bench-results (written before the lease key): refused,
        then compared with --allow-mixed-leases, every row labelled mixed."""
        d = HERE.parents[1] / "docs" / "bench-results"
        h, o = d / "2026-12-01-h200-late-lease-b-hf.jsonl", d / "2026-12-01-h200-late-lease-b-odyssey.jsonl"
        if not (h.is_file() and o.is_file()):
            self.skipTest("docs/bench-results/2026-12-01-h200-late-lease-b-*.jsonl not in this tree")
        rc, out, err = self.run_compare(str(h), str(o))
        self.assertEqual(rc, 3)
        self.assertIn("refused 5 pair(s)", err)
        rc, out, err = self.run_compare("--allow-mixed-leases", str(h), str(o))
        self.assertEqual(rc, 0, err)
        rows = self.pair_rows(out)
        self.assertEqual(len(rows), 5)
        self.assertTrue(all("(mixed)" in r[0] for r in rows))
        self.assertIn("outputs held", rows[0][10])  # those HF runs held the logits

    def test_cli_exit_status(self):
        """The script as a program (what ctest and the GPU scripts run)."""
        h = self.write("hf.jsonl", [hf(LEASE_A)])
        o = self.write("ody.jsonl", [ody(LEASE_B, "fast", 10000.0, 110.0)])
        p = subprocess.run([sys.executable, str(HERE / "compare.py"), h, o], capture_output=True, text=True)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("refused", p.stderr)
        p = subprocess.run([sys.executable, str(HERE / "compare.py"), "--allow-mixed-leases", h, o],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)


class HfBenchProvenanceTest(unittest.TestCase):
    def test_commit_outside_a_repository(self):
        # A copy of the tree without .git (as a device machine may get): "unknown", or the declared one.
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ)
            os.environ.pop("ODYSSEY_COMMIT", None)
            try:
                self.assertEqual(hf_bench.source_commit(Path(d)), ("unknown", "none"))
                os.environ["ODYSSEY_COMMIT"] = "0123abc-dirty"
                self.assertEqual(hf_bench.source_commit(Path(d)), ("0123abc-dirty", "ODYSSEY_COMMIT"))
            finally:
                os.environ.clear()
                os.environ.update(env)

    def test_declared_commit_wins_over_git(self):
        # A device machine's copy can carry a .git of another commit: the declaration wins.
        env = dict(os.environ)
        try:
            os.environ["ODYSSEY_COMMIT"] = "feedbeef"
            self.assertEqual(hf_bench.source_commit(), ("feedbeef", "ODYSSEY_COMMIT"))
        finally:
            os.environ.clear()
            os.environ.update(env)

    def test_commit_of_this_checkout(self):
        env = dict(os.environ)
        os.environ.pop("ODYSSEY_COMMIT", None)
        try:
            commit, source = hf_bench.source_commit()
        finally:
            os.environ.clear()
            os.environ.update(env)
        if source == "git":
            self.assertRegex(commit, r"^[0-9a-f]{40}(-dirty)?$")
        else:  # a copy without .git
            self.assertEqual(source in ("none", "ODYSSEY_COMMIT"), True)

    def test_lease_key(self):
        env = dict(os.environ)
        try:
            os.environ.pop("ODYSSEY_LEASE", None)
            key, source = hf_bench.lease_key("host-x", "GPU-aa")
            self.assertEqual(source, "machine")
            self.assertTrue(key.startswith("host-x/") and key.endswith("/GPU-aa"), key)
            self.assertTrue(hf_bench.lease_key("host-x", None)[0].endswith("/cpu"))
            os.environ["ODYSSEY_LEASE"] = "lease-42"
            self.assertEqual(hf_bench.lease_key("host-x", "GPU-aa"), ("lease-42", "ODYSSEY_LEASE"))
        finally:
            os.environ.clear()
            os.environ.update(env)

    def test_time_is_iso8601_utc(self):
        self.assertRegex(hf_bench.utc_now(), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")


if __name__ == "__main__":
    unittest.main(verbosity=2)
