"""Many short programs: do 1,000 concurrent tiny LIPs keep the engine as busy as a few long ones?

Each LIP prefills its own short prompt (8-16 tokens, windows of one English text) and then
decodes greedily with `pred`, one token per call, no stop at EOS. The reference is 32 programs
x 64 new tokens; the workloads under test are 256 and 1,000 programs x 8 new tokens, all on
one engine, all launched at once. Tokens/s counts generated tokens only (the short programs
also pay for 8x more prompts per generated token: that is part of what is measured). The
target (issue: CPU performance) is 1,000 programs at >= 0.9x the reference's tokens/s.

The engine is the default one, its prefix cache on (kvfs/prefix_cache.py): windows of one text
often start alike, and a prompt whose start another program already computed reuses its K/V. The
cache is emptied before every timed run, so programs only share within a run. The same workloads on
an engine without the cache (a second engine, with its own reference row; `--skip-cache-off` leaves
them out) show what the cache is worth; "positions" count the token positions the model computed.

    python -m bench.short_programs [--quick] [--repeats 2] [--skip-cache-off]
"""

from __future__ import annotations

import argparse
import statistics
import time

from .common import publish
from .decode import make_prompts, matmul_params
from .machine import describe, wait_until_idle

TARGET = 0.9


def _greedy(sym, prompt: list[int], new: int) -> int:
    kv = sym.kv_create()
    tok = sym.pred(kv, prompt).argmax()
    for _ in range(new - 1):
        tok = sym.pred(kv, [tok]).argmax()
    sym.kv_close(kv)
    return new


def run(eng, prompts: list[list[int]], new: int) -> dict:
    """All programs launched at once, the prefix cache (if any) empty; wall time until the last finishes."""
    log = eng.runtime.batch.log
    cache = eng.kvfs.prefix_cache
    if cache is not None:
        cache.clear()
    r0 = cache.reused_tokens if cache is not None else 0
    b0, f0, fc0 = log.total_batches, log.forward_s, log.forward_cpu_s
    t0 = time.perf_counter()
    procs = [eng.run(_greedy, p, new) for p in prompts]
    generated = sum(p.result() for p in procs)
    wall = time.perf_counter() - t0
    batches = log.total_batches - b0
    reused = (cache.reused_tokens - r0) if cache is not None else 0
    # token positions the model computed: every prompt token and decoded token, less what the cache gave
    positions = sum(len(p) for p in prompts) + len(prompts) * (new - 1) - reused
    return {
        "programs": len(prompts),
        "new": new,
        "tok_s": generated / wall,
        "wall_s": wall,
        "mean_batch": len(prompts) * new / max(batches, 1),  # preds per forward pass
        "forward_share": (log.forward_s - f0) / wall,
        # the forward's own thread on a CPU for this share of its wall time (the rest: waiting for the GIL
        # or a core while LIP threads run beside it)
        "forward_cpu_share": (log.forward_cpu_s - fc0) / max(log.forward_s - f0, 1e-9),
        "positions_per_token": positions / generated,
        "positions_s": positions / wall,
        "reused_share": reused / sum(len(p) for p in prompts),  # of the prompt tokens
    }


def _measure(eng, cases, repeats: int, prefix_cache: bool) -> list[dict]:
    """Each case `repeats` times, in rounds: every round runs the reference and then each workload once,
    and a workload's ratio is the median over rounds of its tok/s over the same round's reference. A
    round takes under a minute, so a change in the shared machine's load over the run moves a ratio's
    two sides together, where the medians of whole blocks of runs would compare different minutes."""
    tok = eng.tokenize
    run(eng, make_prompts(tok, 4, 8, 16, seed=99), 2)  # warm-up
    prompts = [make_prompts(tok, n, 8, 16, seed=n) for _, n, _ in cases]
    runs: list[list[dict]] = [[] for _ in cases]
    for _ in range(repeats):
        for k, (_, _, new) in enumerate(cases):
            runs[k].append(run(eng, prompts[k], new))
    keys = (
        "tok_s",
        "wall_s",
        "mean_batch",
        "forward_share",
        "forward_cpu_share",
        "positions_per_token",
        "positions_s",
        "reused_share",
    )
    rows = []
    for (kind, n, new), rs in zip(cases, runs):
        row = {k: statistics.median(r[k] for r in rs) for k in keys}
        row.update(kind=kind, programs=n, new=new, prefix_cache=prefix_cache)
        row["round_ratios"] = [r["tok_s"] / ref["tok_s"] for r, ref in zip(rs, runs[0])]
        row["ratio"] = statistics.median(row["round_ratios"])
        rows.append(row)
    head = eng.model.lm_head.numel()
    body = matmul_params(eng.model) - head
    ref_cost = rows[0]["positions_per_token"] * body + head
    for row in rows:
        # The ratio if this workload ran the matmuls at the reference's own rate per FLOP: every computed
        # position costs the body's weights once, every generated token one row of the LM head.
        row["flop_ratio"] = ref_cost / (row["positions_per_token"] * body + head)
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="toy sizes (for the tests)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (each runs every case once)")
    ap.add_argument("--idle-wait", type=float, default=30.0)
    ap.add_argument("--skip-cache-off", action="store_true", help="no rows for an engine without the prefix cache")
    args = ap.parse_args(argv)
    from symphony_core import Engine

    if args.quick:
        cases = [("reference", 4, 8), ("short", 16, 2)]
    else:
        cases = [("reference", 32, 64), ("short", 256, 8), ("short", 1000, 8)]
    repeats = 1 if args.quick else args.repeats
    wait_until_idle(args.idle_wait if not args.quick else 0)
    eng = Engine(num_pages=4096)
    rows = _measure(eng, cases, repeats, True)
    eng.shutdown()
    if not args.skip_cache_off:
        eng = Engine(num_pages=4096, prefix_cache=False)
        rows += _measure(eng, [cases[0], cases[-1]], repeats, False)
        eng.shutdown()
    widest = next(r for r in reversed(rows) if r["prefix_cache"])
    off = [r for r in rows if not r["prefix_cache"]]
    publish(
        __name__,
        {
            "rows": rows,
            "ratio": widest["ratio"],
            "programs": widest["programs"],
            "target": TARGET,
            "ratio_cache_off": off[-1]["ratio"] if off else None,
        },
    )
    lines = [
        f"### Many short programs: generated tok/s against {rows[0]['programs']} programs x {rows[0]['new']} "
        f"tokens on the same engine, median of {repeats} rounds",
        "",
        describe(),
        "",
        "| prefix cache | programs | new tokens each | generated tok/s | ratio | wall s | mean batch "
        "| in forward passes | forward thread on CPU | prompt tokens from the cache "
        "| positions computed per generated token | positions/s | ratio at the reference's rate per FLOP "
        "| ratio in each round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {'on' if r['prefix_cache'] else 'off'} | {r['programs']} | {r['new']} | {r['tok_s']:.1f} "
            f"| {r['ratio']:.2f}× | {r['wall_s']:.1f} | {r['mean_batch']:.1f} | {100 * r['forward_share']:.0f}% "
            f"| {100 * r['forward_cpu_share']:.0f}% | {100 * r['reused_share']:.0f}% "
            f"| {r['positions_per_token']:.2f} | {r['positions_s']:.0f} | {r['flop_ratio']:.2f}× "
            f"| {', '.join(f'{x:.2f}' for x in r['round_ratios'])} |"
        )
    lines += [
        "",
        "Each ratio is against the reference row of its own engine: the median, over rounds, of the workload's "
        "tok/s over the reference's in the same round (each round runs every case once, in the table's order). "
        "Positions: the token positions the model computed (prompts and decoded tokens, less the prompt tokens "
        "the prefix cache gave, the last token's decode excluded). Ratio at the reference's rate per FLOP: the "
        "ratio if this workload's matmuls ran as fast per FLOP as the reference's (each computed position "
        "multiplies by the layers' weights, each generated token by the LM head's); the measured ratio over it is "
        "the workload's efficiency against the reference. Forward thread on CPU: the share of the forward "
        "passes' wall time their thread was on a CPU; below 100% it waited, for the GIL or for a core (the "
        "programs' OS threads run their own Python beside it, and so may other processes). The cache is emptied "
        "before every run; the prompts are windows of one 159-token text, so many start alike.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
