"""The machine's matrix-multiply speed on the model's own shapes, and the layout the forward uses.

For T rows (the tokens of one forward pass) it times every projection of the 30 layers plus
the LM head, on the loaded weights (so they stream from memory as in a real pass): `F.linear(x, W)`
(x @ Wᵀ, what transformers does), `W @ xᵀ` (what our forward does with MKL), `W @ xᵀ` on T padded to
`matmul_rows(T)` (ditto, for small T) and, where torch has it, oneDNN's fp32 kernel on a packed copy
of the weights (what our forward runs from the rows it measured faster at, kernel_tiers.py). Reports ms
per forward's worth of matmuls and GFLOP/s of the fastest way — the denominator for "how close to the
machine" figures.

    python -m bench.matmul [--quick] [--rows 1,2,8,16,32,64,512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from .common import publish
from .machine import describe, wait_until_idle


def _time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _onednn_forms(linears: list, weights: list[torch.Tensor]) -> list:
    """oneDNN's packed form of each weight: the engine's own tier where it runs one (bench.decode measures around
    each run, and packing the model again each time would copy 538 MB), else packed here."""
    from symphony_core.model.quant import OnednnLinear, RowsSwitchLinear

    own = [
        next((tier for _, tier in lin.tiers if isinstance(tier, OnednnLinear)), None)
        if isinstance(lin, RowsSwitchLinear)
        else None
        for lin in linears
    ]
    return [o if o is not None else OnednnLinear(w) for o, w in zip(own, weights)]


def measure(model, rows: list[int], repeats: int, idle_wait: float) -> list[dict]:
    from symphony_core.model.llama import matmul_rows
    from symphony_core.model.quant import onednn_fp32
    from symphony_core.model.weight_formats import fp32_weight

    linears = [w for layer in model.layers for w in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)]
    linears.append(model.lm_head)
    weights = [fp32_weight(w) for w in linears]
    params = sum(w.numel() for w in weights)
    packed = _onednn_forms(linears, weights) if onednn_fp32() and weights[0].device.type == "cpu" else []
    inputs = {n: {w.shape[1] for w in weights} for n in rows}
    out = []
    for t in rows:
        xs = {k: torch.randn(t, k) for k in inputs[t]}
        padded = {k: F.pad(x, (0, 0, 0, matmul_rows(t) - t)) for k, x in xs.items()}

        def linear(xs=xs):
            for w in weights:
                F.linear(xs[w.shape[1]], w)

        def transposed(xs=xs):
            for w in weights:
                torch.mm(w, xs[w.shape[1]].t())

        def padded_transposed(padded=padded):
            for w in weights:
                torch.mm(w, padded[w.shape[1]].t())

        def onednn(xs=xs):
            for lin in packed:
                lin(xs[lin.shape[1]])

        ways = [("linear", linear), ("wxt", transposed), ("padded", padded_transposed)]
        ways += [("onednn", onednn)] if packed else []
        wait_until_idle(idle_wait)
        row = {"rows": t, "padded_to": matmul_rows(t)}
        for name, fn in ways:
            row[name] = _time(fn, repeats)
        row["gflops"] = 2 * params * t / min(row[name] for name, _ in ways) / 1e9
        out.append(row)
    return out


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rows 1 and 8, 2 repeats")
    ap.add_argument("--rows", default=None, help="comma-separated row counts (default 1,2,4,8,12,16,32,64,512)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--idle-wait", type=float, default=None, help="seconds to wait for idle CPUs (default 60; quick 0)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [1, 8] if args.quick else [1, 2, 4, 8, 12, 16, 32, 64, 512]
    if args.rows:
        rows = [int(r) for r in args.rows.split(",")]
    repeats = 2 if args.quick else args.repeats
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 60.0)
    from symphony_core import Engine

    eng = Engine(num_pages=16)
    with torch.inference_mode():
        results = measure(eng.model, rows, repeats, idle_wait)
    lines = [
        f"### Matrix multiply on the model's shapes (30 layers' projections + LM head), median of {repeats}",
        "",
        f"Machine: {describe()}",
        "",
        "| rows | F.linear (x·Wᵀ) ms | W·xᵀ ms | W·xᵀ padded ms (to rows) | oneDNN packed ms | best GFLOP/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        onednn = f"{1e3 * r['onednn']:.1f}" if "onednn" in r else "—"
        lines.append(
            f"| {r['rows']} | {1e3 * r['linear']:.1f} | {1e3 * r['wxt']:.1f} | {1e3 * r['padded']:.1f} ({r['padded_to']}) "
            f"| {onednn} | {r['gflops']:.0f} |"
        )
    lines += [
        "",
        "One row of the table is one forward pass's matmuls at that many tokens. Our forward runs "
        "W·xᵀ, padded for small row counts (`matmul_rows` in symphony_core/model/llama.py), or oneDNN's "
        "kernel where it measured faster (kernel_tiers.py); transformers runs F.linear. —: torch has no oneDNN here.",
    ]
    md = "\n".join(lines)
    print(md)
    publish(__name__, {"rows": [{"rows": r["rows"], "gflops": r["gflops"]} for r in results]})
    return md


if __name__ == "__main__":
    main()
