"""The matmul kernels behind the weight formats, timed at the model's own shapes: which wins at how many rows.

For T rows, one model step's worth of matmuls (the 30 layers' four projections + the LM head)
through: fp32 `W·xᵀ` (padded as the forward pads it), int8 weight-only and int4 weight-only
(torch's kernels, bf16 activations). The kernels alternate within each repeat (a noisy
shared machine then slows all of them alike); the figure is the median. This is what set
`INT4_MAX_ROWS` and `INT8_MAX_ROWS` in symphony_core/model/weight_formats.py.

    python -m bench.kernels [--quick] [--rows 1,2,4,8,16,32,512] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from .common import publish
from .machine import describe


def measure(rows: list[int], repeats: int) -> list[dict]:
    from symphony_core import Engine
    from symphony_core.model.llama import matmul_rows

    fp32 = Engine(num_pages=16)
    q4 = Engine(num_pages=16, weights="q4")
    attrs = ("wqkv", "wo", "w_gate_up", "w_down")
    dense = [getattr(layer, a) for layer in fp32.model.layers for a in attrs] + [fp32.model.lm_head]
    switch = [getattr(layer, a) for layer in q4.model.layers for a in attrs]
    head8 = q4.model.lm_head.tiers[0][1]
    int4 = [s.tiers[0][1] for s in switch] + [head8]  # the LM head stays int8 in q4
    int8 = [s.tiers[1][1] for s in switch] + [head8]
    out = []
    for t in rows:
        xs = {k: torch.randn(t, k) for k in {w.shape[1] for w in dense}}
        padded = {k: F.pad(x, (0, 0, 0, matmul_rows(t) - t)) for k, x in xs.items()}
        fns = {
            "fp32": lambda padded=padded: [torch.mm(w, padded[w.shape[1]].t()) for w in dense],
            "int8": lambda xs=xs: [lin(xs[lin.shape[1]]) for lin in int8],
            "int4": lambda xs=xs: [lin(xs[lin.shape[1]]) for lin in int4],
        }
        times = {k: [] for k in fns}
        with torch.inference_mode():
            for fn in fns.values():
                fn()
            for _ in range(repeats):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t0)
        row = {"rows": t, **{k: 1e3 * statistics.median(v) for k, v in times.items()}}
        print(f"  rows {t}: " + ", ".join(f"{k} {row[k]:.1f} ms" for k in fns), flush=True)
        out.append(row)
    return out


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rows 1 and 8, 2 repeats")
    ap.add_argument("--rows", default="1,2,4,8,16,32,512")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [1, 8] if args.quick else [int(r) for r in args.rows.split(",")]
    res = measure(rows, 2 if args.quick else args.repeats)
    publish(__name__, {"rows": res})
    lines = [
        "### Matmul kernels of the weight formats, one model step's matmuls (ms, median, alternating)",
        "",
        f"Machine: {describe()}",
        "",
        "| rows | fp32 W·xᵀ (padded) | int8 weight-only, bf16 activations | int4 weight-only, bf16 activations | fastest |",
        "|---:|---:|---:|---:|---|",
    ]
    for r in res:
        best = min(("fp32", "int8", "int4"), key=lambda k: r[k])
        lines.append(f"| {r['rows']} | {r['fp32']:.1f} | {r['int8']:.1f} | {r['int4']:.1f} | {best} |")
    lines += [
        "",
        'The int4 column\'s LM head runs int8 (as in `weights="q4"`); fp32 reads 538 MB a step, '
        "int8 ~134 MB, int4 ~53 MB + the 28 MB int8 LM head.",
    ]
    md = "\n".join(lines)
    print(md)
    return md


if __name__ == "__main__":
    main()
