"""Throughput of 32 concurrent completions with and without a debugger attached (no breakpoints).

An attached `symphony_lab.debugger.Debugger` sits in the kernel's enter and leave steps (`hook.before`
/ `hook.after` on every syscall), subscribes to the event bus (so every syscall builds its
events, which the debugger keeps for the trace) and watches process starts. With no breakpoint,
stepping, pause, recording or replay in force, the hook returns after one check; the events
cost what building them costs. A `pred`'s exit summary names its argmax: the engine takes it
once per batch for every row while someone observes, and the LIP's own `.argmax()` reuses it
(taken per row in the LIP threads, the summary's numpy argmax measured ~60 us of thread CPU per
pred in this workload, over cold rows, and the LIP's torch argmax another ~55 us). The issue's
target: throughput drops by at most 5%.

Runs alternate (off, on, off, on, ...) so drift in a shared machine hits both sides alike; the
figure is the ratio of the medians. `--stub` replaces the model's forward with zeros, which
leaves only host-side cost: the worst case for a relative overhead.

    python -m bench.debugger_overhead [--quick] [--stub] [--repeats 13] [--tokens 24]
"""

from __future__ import annotations

import argparse
import time

import torch

from .paired_runs import alternate, concurrent_completions, section, stub_forward, summary
from .runtime_overhead import syscall_steps


def dispatch_cost(engine, n: int = 20_000) -> dict:
    """Per-syscall cost through the engine's kernel, detached vs attached (no breakpoints):
    a no-op call, and a pred-like call returning a Dist (whose exit event summarises it)."""
    from symphony_core import Dist
    from symphony_core.sched.process import Limits, Process
    from symphony_lab.debugger import Debugger

    kernel = engine.runtime.kernel
    proc = Process(lambda s: None, (), {}, "bench", "bench", 0, Limits())
    th = proc.new_thread("main")
    logits = torch.randn(engine.config.vocab_size)
    cases = {"noop": (lambda: None), "dist": (lambda: Dist(logits))}
    out = {}
    for attached in (False, True):
        dbg = Debugger(engine) if attached else None
        for name, impl in cases.items():
            m = n if name == "noop" else n // 10
            t = time.perf_counter_ns()
            call = "pred" if name == "dist" else "noop"
            for _ in range(m):
                syscall_steps(kernel, th, call, lambda: {"tokens": [1]}, impl)
            out[f"{name}_{'on' if attached else 'off'}_us"] = (time.perf_counter_ns() - t) / m / 1000
        if dbg is not None:
            dbg.detach()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 tokens, 2 repeats")
    ap.add_argument("--stub", action="store_true", help="model forward replaced by zeros (host overhead only)")
    ap.add_argument("--lips", type=int, default=32)
    # Shorter runs, more pairs: a shared machine's speed drifts by 10-20% over a few seconds, and the
    # median of many adjacent off/on pairs settles where a few long ones did not (7 pairs of 32 tokens:
    # 0.93-1.02 over runs whose attached cost, measured directly, was 0.8%).
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=13)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from symphony_core import Engine
    from symphony_lab.debugger import Debugger

    eng = Engine(num_pages=4096)
    if args.stub:
        stub_forward(eng)
    n_tokens, repeats = (8, 2) if args.quick else (args.tokens, args.repeats)
    concurrent_completions(eng, args.lips, 4)  # warm-up: threads, allocator, kernels

    def run(attached: bool) -> tuple[float, float]:
        dbg = Debugger(eng) if attached else None
        rate = concurrent_completions(eng, args.lips, n_tokens)
        if dbg is not None:
            dbg.detach()
        return rate

    off, on = alternate(repeats, "debugger", run)
    s = summary(off, on)
    w_off, w_on, c_off, c_on = s["wall_off"], s["wall_on"], s["cpu_off"], s["cpu_on"]
    paired, paired_cpu = s["paired_ratio"], s["paired_ratio_cpu"]
    cost = dispatch_cost(eng)
    # What attaching adds per generated token: 3 syscalls (pred, detokenize, send), one of them a pred.
    extra_us = (cost["dist_on_us"] - cost["dist_off_us"]) + 2 * (cost["noop_on_us"] - cost["noop_off_us"])
    per_token_us = 1e6 / w_off
    print(
        f"{args.lips} concurrent completions x {n_tokens} tokens, {eng.model_name} on {eng.device}, "
        f"{torch.get_num_threads()} threads{' (stub forward)' if args.stub else ''}, median of {repeats}"
    )
    print("| debugger | tokens/s (wall) | tokens per CPU-second |")
    print("|---|---|---|")
    print(f"| detached | {w_off:.1f} | {c_off:.1f} |")
    print(f"| attached, no breakpoints | {w_on:.1f} | {c_on:.1f} |")
    print(
        f"ratio attached/detached, median of the {repeats} adjacent pairs: wall {paired:.3f}, CPU {paired_cpu:.3f}"
        f" (ratio of the medians: wall {w_on / w_off:.3f}, CPU {c_on / c_off:.3f})"
    )
    print(
        f"per syscall: no-op {cost['noop_off_us']:.1f} -> {cost['noop_on_us']:.1f} us, pred-like "
        f"{cost['dist_off_us']:.1f} -> {cost['dist_on_us']:.1f} us; attaching adds ~{extra_us:.0f} us per "
        f"generated token = {100 * extra_us / per_token_us:.2f}% of the {per_token_us:.0f} us a token takes"
    )
    eng.shutdown()
    return {
        **s,
        **cost,
        "extra_us_per_token": extra_us,
        "us_per_token": per_token_us,
    }


def suite(argv=None) -> str:
    """W6 for `python -m bench`: the table as markdown, the numbers published (bench/common.py)."""
    return section(
        __name__,
        main,
        argv,
        "Debugger attached, no breakpoints (W6)",
        lambda r: (
            f"Throughput attached ÷ detached, median over adjacent off/on pairs: **{r['paired_ratio']:.3f}** wall, "
            f"{r['paired_ratio_cpu']:.3f} CPU (target ≥ 0.95). Runs alternate off/on and each pair is compared "
            "within itself, so the machine's drift over the run cancels; the per-run lines above show the drift."
        ),
    )


if __name__ == "__main__":
    main()
