"""The benchmark harness at toy size, so it never rots (the figures come from full runs)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_quick_runs_every_workload_and_reports_ratios(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    assert text.startswith("# Benchmark results") and "commit" in text
    ratios = re.findall(r"\| ([0-9.]+)× \|", text)
    assert ratios and all(float(r) > 0 for r in ratios), text
    assert "transformers" in text


def test_runtime_overhead_quick():
    from bench.runtime_overhead import main

    rows = main(["--quick"])
    assert [r["subscriber"] for r in rows] == [False, True]
    assert all(r["us_per_pred"] > 0 and r["mean_batch"] >= 1 for r in rows)
