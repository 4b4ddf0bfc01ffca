"""The benchmark harness at toy size, so it never rots (the figures come from full runs)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_bench_quick_runs_every_workload_and_reports_ratios(tmp_path):
    from bench.__main__ import WORKLOADS

    out = tmp_path / "RESULTS.md"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    assert text.startswith("# Benchmark results") and "commit" in text
    ratios = re.findall(r"\| ([0-9.]+)× \|", text)
    assert ratios and all(float(r) > 0 for r in ratios), text
    assert "transformers" in text
    for title in ("(W1/W2)", "Shared prefix (W3)", "ReAct agents (W4)", "Graph of thought (W7)"):
        assert title in text, title
    assert re.search(r"llama\.cpp: skipped \(llama-cpp-python not installed|\| llama\.cpp Q4_1 \|", text)
    # The budget is 2 minutes: measured 40-70 s on the 2-core dev machine, but up to ~6 min
    # while other jobs saturated it, so the time is reported, not asserted; what is asserted is
    # that every workload really ran at its toy size (below).
    print(f"quick benchmark suite: {took:.0f} s")

    numbers = json.loads((tmp_path / "results.json").read_text())
    assert set(WORKLOADS) - {"matmul", "profile", "kernels"} <= set(numbers), sorted(numbers)

    # the program path beside the engine-only one, same run, same greedy tokens
    wrows = {r["engine"]: r for r in numbers["weights"]["rows"]}
    for f in ("fp32", "q4"):
        lip, ref = wrows[f"ours {f} LIPs"], wrows[f"ours {f}"]
        assert lip["decode_1"] > 0 and lip["decode_4"] > 0 and lip["prefill"] > 0, lip
    # the LIP loop decodes what pred_batch decodes (a batch of other rows may flip one fp32 near tie)
    assert wrows["ours fp32 LIPs"]["same_4"] >= 3, wrows
    # fp32 from the GGUF's exact blocks and on its dense tensors: one sequence decodes the same tokens (bit for bit)
    assert wrows["ours fp32-dense"]["same_1"] == 1 and wrows["ours fp32-dense"]["decode_1"] > 0, wrows
    assert any(v[0] == "LIPs ÷ pred_batch, fp32" for v in numbers["weights"]["verdicts"])
    sp_rows = numbers["server_peer"]["rows"]
    assert numbers["server_peer"].get("skipped") or {r["server"] for r in sp_rows} == {
        "symphony q4",
        "llama-server Q4_1",
    }

    w3 = numbers["shared_prefix"]
    assert (w3["doc_tokens"], w3["questions"], w3["new"]) == (128, 4, 16)
    assert (numbers["agents"]["agents"], numbers["agents"]["steps"]) == (2, 2)
    assert numbers["decode"]["new"] == 8
    # target C: each of the widest batch's decode runs over the matmuls alone timed around it
    widest = max(numbers["decode"]["rows"], key=lambda r: r["batch"])
    assert len(widest["c_runs"]) == numbers["decode"]["repeats"] and all(c > 0 for c in widest["c_runs"]), widest
    assert widest["c_paired"] == statistics.median(widest["c_runs"])
    assert w3["ratio"] > 0 and w3["ours_s"] > 0 and w3["hf_s"] > 0
    assert 0 < w3["peak_pages"] and w3["pages_ratio"] <= 1.3, w3  # forks share the document's pages
    assert w3["peak_pages"] < w3["copies_pages"]
    assert 1 <= w3["same"] <= w3["questions"], w3  # same greedy answers as transformers

    w4 = numbers["agents"]
    assert w4["ratio"] > 0 and w4["lip_server_s"] > 0 and w4["client_s"] > 0
    work = w4["agents"] * w4["steps"] * w4["step_tokens"]
    assert w4["lip_generated"] == w4["client_generated"] == work, w4  # both sides decode the same tokens
    assert w4["client_short_steps"] == 0
    assert w4["lip_prompt_tokens"] < w4["client_prompt_tokens"]  # the LIP never re-feeds its history

    w7 = numbers["graph_of_thought"]
    assert w7["ratio"] > 0 and w7["ours_allocated"] < w7["independent_allocated"], w7
    assert w7["agree"]["thoughts"] >= 1, w7

    w5 = numbers["runtime_overhead"]["rows"]
    assert [(r["runner"], r["subscriber"]) for r in w5] == [("threads", False), ("threads", True), ("greenlets", False)]
    assert all(
        r["us_per_pred"] > 0 and r["cpu_us_per_pred"] > 0 and r["host_us_per_batch"] > 0 and r["mean_batch"] >= 1
        for r in w5
    )
    sp = numbers["short_programs"]
    # the default engine (prefix cache on), then one without it: each with its own reference row
    assert [(r["programs"], r["prefix_cache"]) for r in sp["rows"]] == [(4, True), (16, True), (4, False), (16, False)]
    assert sp["rows"][0]["ratio"] == sp["rows"][2]["ratio"] == 1.0 and sp["ratio_cache_off"] > 0
    assert all(r["tok_s"] > 0 and r["mean_batch"] >= 1 and 0 < r["forward_cpu_share"] <= 1.05 for r in sp["rows"]), sp
    # a ratio pairs each round's workload with the same round's reference (one round at toy size)
    assert all(len(r["round_ratios"]) == 1 and r["ratio"] == r["round_ratios"][0] for r in sp["rows"]), sp
    assert sp["rows"][1]["ratio"] == sp["rows"][1]["tok_s"] / sp["rows"][0]["tok_s"], sp
    # the FLOP ceiling: 1 for each reference; below 1 for a workload computing more positions per generated token
    assert sp["rows"][0]["flop_ratio"] == sp["rows"][2]["flop_ratio"] == 1.0, sp
    short, ref = sp["rows"][1], sp["rows"][0]
    assert (short["flop_ratio"] < 1) == (short["positions_per_token"] > ref["positions_per_token"]), sp
    tl = numbers["pred_timeline"]
    assert set(tl) == {"fp32_1", "fp32_8", "q4_1"}, tl
    for r in tl.values():  # each segment timed, the forward the largest, the step at least the forward
        seg = r["segments_ms"]
        assert all(v >= 0 for v in seg.values()) and max(seg, key=seg.get) == "fire", r
        assert r["lip_step_ms"] >= seg["fire"] > 0 and r["pred_batch_step_ms"] > 0 and r["lip_over_pred_batch"] > 0
    assert "One program's `pred`, where the wall time goes" in text
    w6 = numbers["debugger_overhead"]
    assert w6["wall_on"] > 0 and w6["wall_off"] > 0
    sb = numbers["sandbox_latency"]
    assert sb["pred_ms_inprocess"] > 0 and sb["pred_ms_sandboxed"] > 0 and sb["syscall_roundtrip_us_sandboxed"] > 0
    assert "Sandboxed LIP latency" in text
    # the targets table at the top judges every workload that ran (W5/W6 at toy size included)
    table = text.split("## Targets (this run)", 1)[1].split("\n\n", 2)[1]
    for wid in ("W1", "W2", "W3", "W4", "W5", "Short programs", "W6", "LIP path", "W7", "C"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {wid} |"))
        assert "not run" not in row, row
    assert "median of runs" in next(line for line in table.splitlines() if line.startswith("| C |"))

    # the plots (matplotlib is in the [dev] extra)
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["decode_tokens_per_s.png", "kv_pages.png", "programs_vs_prompts.png", "weights_vs_llama_cpp.png"], (
        pngs
    )
    assert all((tmp_path / "plots" / p).stat().st_size > 5000 for p in pngs)
    assert "![programs_vs_prompts](plots/programs_vs_prompts.png)" in text

    # Re-running one workload keeps the others' sections, each marked with the run it came from.
    again = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "runtime_overhead", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    text2 = out.read_text()
    kept = json.loads((tmp_path / "results.json").read_text())["_sections"]
    assert set(kept) == set(WORKLOADS) and "Shared prefix (W3)" in text2
    assert text2.count("_(from the run of") == len([k for k, v in kept.items() if v["markdown"]]) - 1
    w5_section = text2.split("### LIP runtime overhead", 1)[1].split("\n### ", 1)[0]
    assert "_(from the run of" not in w5_section  # this one is new

    # --render runs nothing and writes the same report from results.json.
    again = subprocess.run(
        [sys.executable, "-m", "bench", "--render", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert out.read_text() == text2


def test_peak_pages_counts_the_pages_a_decode_takes_inline(fresh_engine):
    """W3's page figure: a decode that opens a page takes it outside `PagePool.alloc` (the
    executor's inline path); the peak counts it all the same, and a page freed inside the block
    leaves the peak where it was."""
    from bench.common import PeakPages

    eng = fresh_engine(num_pages=8, page_size=16)
    a, b = eng.kv_create(), eng.kv_create()
    with PeakPages(eng) as peak:
        eng.pred(a, list(range(100, 116)))  # one full page, through `alloc`
        eng.pred(a, [7])  # the second page, inline
        eng.pred(b, [8])  # an empty file's first page, inline
        assert peak.pages == 3 and peak.allocated == 3
        eng.kv_close(b)
    assert peak.pages == 3 and eng.pool.used_pages == 2
    assert "take_free" not in vars(eng.pool) and "alloc" not in vars(eng.pool)  # the hooks are gone
    eng.kv_close(a)
