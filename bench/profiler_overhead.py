"""Throughput of N concurrent completions with the LIP profiler off and on, side by side.

Off: no collector, so the kernel's hot path checks `bus.active` and publishes nothing. On: a
`symphony_lab.profiler.ProfileCollector` on the bus — every syscall publishes its enter/exit
events, the collector reads the thread's CPU clock and walks the LIP's frames at each, every
batch is split among its members, and a sampler thread reads the LIP threads' stacks every
5 ms. Runs alternate (off, on, on, off, ...) and the figure is the median ratio of adjacent
pairs, so the shared machine's drift hits both sides alike. The profile of each "on" run is
built too (its cost is reported apart: it happens after the run, when someone asks).

    python -m bench.profiler_overhead [--quick] [--stub] [--lips 16] [--tokens 24] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from .paired_runs import alternate, concurrent_completions, section, stub_forward, summary


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 LIPs x 6 tokens, 2 repeats")
    ap.add_argument("--lips", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--stub", action="store_true", help="model forward replaced by zeros (host overhead only)")
    args = ap.parse_args(argv)
    from symphony_core import Engine
    from symphony_lab.profiler import ProfileCollector

    lips, n_tokens, repeats = (4, 6, 2) if args.quick else (args.lips, args.tokens, args.repeats)
    eng = Engine(num_pages=4096)
    if args.stub:
        stub_forward(eng)
    concurrent_completions(eng, lips, 4)  # warm-up
    build_s: list[float] = []
    rows = 0
    bus_only = []

    def run(profiled: bool) -> tuple[float, float]:
        nonlocal rows
        col = ProfileCollector().attach(eng.bus) if profiled else None
        rate = concurrent_completions(eng, lips, n_tokens)
        if col is not None:
            col.detach()
            t = time.perf_counter()
            prof = col.profile()
            build_s.append(time.perf_counter() - t)
            rows = len(prof.lines)
        elif not bus_only:  # once: a do-nothing subscriber, the events' own cost
            unsub = eng.bus.subscribe(lambda ev: None)
            bus_only.append(concurrent_completions(eng, lips, n_tokens))
            unsub()
        return rate

    off, on = alternate(repeats, "profiler", run)
    s = summary(off, on)
    w_off, w_on, c_off, c_on = s["wall_off"], s["wall_on"], s["cpu_off"], s["cpu_on"]
    paired, paired_cpu = s["paired_ratio"], s["paired_ratio_cpu"]
    print(
        f"{lips} concurrent completions x {n_tokens} tokens, {eng.model_name} on {eng.device}, "
        f"{torch.get_num_threads()} threads{' (stub forward)' if args.stub else ''}, median of {repeats}"
    )
    print("| profiler | tokens/s (wall) | tokens per CPU-second |")
    print("|---|---|---|")
    print(f"| off | {w_off:.1f} | {c_off:.1f} |")
    print(f"| on | {w_on:.1f} | {c_on:.1f} |")
    print(f"| (events only: a do-nothing subscriber, one run) | {bus_only[0][0]:.1f} | {bus_only[0][1]:.1f} |")
    print(
        f"ratio on/off, median of the {repeats} adjacent pairs: wall {paired:.3f}, CPU {paired_cpu:.3f}; building a profile "
        f"({rows} line rows) took {1e3 * statistics.median(build_s):.1f} ms"
    )
    eng.shutdown()
    return {**s, "events_only": bus_only[0], "build_ms": 1e3 * statistics.median(build_s)}


def suite(argv=None) -> str:
    """For `python -m bench`: the table as markdown, the numbers published (bench/common.py)."""
    return section(
        __name__,
        main,
        argv,
        "LIP profiler off vs on",
        lambda r: (
            f"Throughput with the profiler on ÷ off, median over adjacent pairs: **{r['paired_ratio']:.3f}** wall, "
            f"{r['paired_ratio_cpu']:.3f} per CPU-second."
        ),
    )


if __name__ == "__main__":
    main()
