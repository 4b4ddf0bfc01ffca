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

from bench.debugger_overhead import PROMPTS, completion

from .common import publish


def run_once(engine, n_lips: int, n_tokens: int) -> tuple[float, float]:
    """Generated tokens per wall-clock second and per CPU second of this process (the steadier
    figure on a shared machine: it counts the profiler's own work, not the neighbours')."""
    t0, c0 = time.perf_counter(), time.process_time()
    procs = [engine.run(completion, PROMPTS[i % len(PROMPTS)] + f" ({i})", n_tokens) for i in range(n_lips)]
    total = sum(p.result(timeout=600) for p in procs)
    return total / (time.perf_counter() - t0), total / (time.process_time() - c0)


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
    if args.stub:  # the worst case for a relative overhead: only host-side work is left
        zeros = torch.zeros(256, eng.config.vocab_size)
        eng.model.forward = lambda fb, k, v: zeros[: fb.output_rows.shape[0]]
    run_once(eng, lips, 4)  # warm-up
    off, on, build_s, rows, bus_only = [], [], [], 0, []
    for r in range(repeats):
        for profiled in (False, True) if r % 2 == 0 else (True, False):
            col = ProfileCollector().attach(eng.bus) if profiled else None
            tps = run_once(eng, lips, n_tokens)
            if col is not None:
                col.detach()
                t = time.perf_counter()
                prof = col.profile()
                build_s.append(time.perf_counter() - t)
                rows = len(prof.lines)
            (on if profiled else off).append(tps)
            if r == 0 and not profiled:  # once: a do-nothing subscriber, the events' own cost
                unsub = eng.bus.subscribe(lambda ev: None)
                bus_only.append(run_once(eng, lips, n_tokens))
                unsub()
            print(
                f"  run {r + 1}/{repeats} profiler {'on ' if profiled else 'off'}: {tps[0]:8.1f} tok/s, "
                f"{tps[1]:8.1f} tok/CPU-s",
                flush=True,
            )
    paired = statistics.median(b[0] / a[0] for a, b in zip(off, on))
    paired_cpu = statistics.median(b[1] / a[1] for a, b in zip(off, on))
    w_off, w_on = statistics.median(x[0] for x in off), statistics.median(x[0] for x in on)
    c_off, c_on = statistics.median(x[1] for x in off), statistics.median(x[1] for x in on)
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
    return {
        "wall_off": w_off,
        "wall_on": w_on,
        "cpu_off": c_off,
        "cpu_on": c_on,
        "paired_ratio": paired,
        "paired_ratio_cpu": paired_cpu,
        "runs": {"off": off, "on": on},
        "events_only": bus_only[0],
        "build_ms": 1e3 * statistics.median(build_s),
    }


def suite(argv=None) -> str:
    """For `python -m bench`: the table as markdown, the numbers published (bench/common.py)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r = main(argv)
    text = buf.getvalue()
    print(text, end="")
    publish(__name__, r)
    lines = text.splitlines()
    table = "\n".join(line for line in lines if not line.startswith("  run "))
    runs = "\n".join("- " + line.strip() for line in lines if line.startswith("  run "))
    return (
        "### LIP profiler off vs on\n\n"
        + table.strip()
        + "\n\nThe runs, in order:\n\n"
        + runs
        + f"\n\nThroughput with the profiler on ÷ off, median over adjacent pairs: **{r['paired_ratio']:.3f}** wall, "
        f"{r['paired_ratio_cpu']:.3f} per CPU-second."
    )


if __name__ == "__main__":
    main()
