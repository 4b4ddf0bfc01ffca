"""Where a forward pass spends its time: torch.profiler over decode steps and a long prefill.

The explanation behind the suite's figures. For each case it prints
the wall time per forward and the operators that take it, grouped into a few buckets
(matmul, attention, K/V gather and write, elementwise) — the profiler's own overhead inflates
the small operators, so read the buckets as shares and the wall time (median, without the
profiler) as the truth.

    python -m bench.profile_forward [--quick] [--decode 1,8,32] [--prefill 512] [--steps 10] [--table] [--weights fp32,q4]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from .common import publish
from .machine import wait_until_idle

BUCKETS = {
    "matmul": (
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "quantized::linear_dynamic",
        "aten::_weight_int4pack_mm_for_cpu",
        "aten::_weight_int8pack_mm",
        "mkldnn::_linear_pointwise",
    ),
    "attention": (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
    ),
    "K/V gather + write": ("aten::index_select", "aten::index_copy_"),
}
# Symphony's compiled kernels, seen through `_recorded` (named "symphony::<function>")
COMPILED_BUCKETS = {"decode_attention": "attention"}


class _Recorded:
    """The compiled kernels' module with every call inside a profiler range: torch.profiler records
    dispatcher ops only, and a pybind11 call into the extension is not one."""

    def __init__(self, mod) -> None:
        self.mod = mod

    def __getattr__(self, name: str):
        fn = getattr(self.mod, name)

        def call(*args, **kwargs):
            with torch.profiler.record_function(f"symphony::{name}"):
                return fn(*args, **kwargs)

        return call


def _recorded(model):
    """Route every holder of the compiled kernels in `model` through `_Recorded`; returns the undo."""
    holders = [model, model.attention]
    linears = [getattr(layer, attr) for layer in model.layers for attr in vars(layer)] + [model.lm_head]
    for lin in linears:
        holders += [tier for _, tier in getattr(lin, "tiers", [])] + [lin]
    swapped = []
    for h in holders:
        for attr in ("ops", "kernels"):
            mod = getattr(h, attr, None)
            if mod is not None and not isinstance(mod, (_Recorded, torch.Tensor)):
                setattr(h, attr, _Recorded(mod))
                swapped.append((h, attr, mod))

    # A decode step's layers in one compiled call (fused_decode.py) would be one opaque range: profile the
    # per-call loop, which runs the same kernels, instead (the wall time is measured before, fused).
    fused = getattr(model, "fused", None)
    enabled = fused is not None and fused.enabled
    if fused is not None:
        fused.enabled = False

    def undo() -> None:
        for h, attr, mod in swapped:
            setattr(h, attr, mod)
        if fused is not None:
            fused.enabled = enabled

    return undo


def _bucket(name: str) -> str:
    if name.startswith("symphony::"):
        fn = name.removeprefix("symphony::")
        return "matmul" if fn.endswith("_linear") else COMPILED_BUCKETS.get(fn, "other ops")
    for bucket, ops in BUCKETS.items():
        if name in ops:
            return bucket
    return "other ops"


def profile(step, n: int, table: bool, idle_wait: float, model=None) -> dict[str, float]:
    for _ in range(2):
        step()
    wait_until_idle(idle_wait)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    undo = _recorded(model) if model is not None else (lambda: None)
    try:
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(n):
                step()
    finally:
        undo()
    events = prof.key_averages()
    shares: dict[str, float] = {}
    for ev in events:
        shares[_bucket(ev.key)] = shares.get(_bucket(ev.key), 0.0) + ev.self_cpu_time_total
    total = sum(shares.values()) or 1.0
    if table:
        print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50))
    return {"wall_ms": wall * 1e3, **{k: 100 * v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}}


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="decode of 2 sequences and a 64-token prefill, 3 steps")
    ap.add_argument("--decode", default="1,8,32", help="decode batch sizes")
    ap.add_argument("--prefill", type=int, default=512, help="prefill length (0: skip)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="also print the profiler's operator table")
    ap.add_argument("--idle-wait", type=float, default=60.0, help="seconds to wait for idle CPUs before each case")
    ap.add_argument("--weights", default="fp32,q4", help="weight formats to profile (Engine(weights=...))")
    args = ap.parse_args(argv)
    if args.quick:
        args.decode, args.prefill, args.steps, args.idle_wait, args.weights = "2", 64, 3, 0.0, "fp32"
    torch.set_num_threads(args.threads)
    from symphony_core import Engine

    rows = []
    for fmt in args.weights.split(","):
        # the prefix cache off: the profiled prefills compute their prompts
        rows += _profile_format(Engine(num_pages=4096, weights=fmt, prefix_cache=False), fmt, args)
    publish(__name__, {"rows": [{"case": case, **r} for case, r in rows]})
    return _table(rows)


def _profile_format(eng, fmt: str, args) -> list[tuple[str, dict]]:
    from symphony_core import PredCall

    rng = random.Random(0)
    rows = []
    for b in [int(x) for x in args.decode.split(",") if x]:
        kvs = [eng.kv_create() for _ in range(b)]
        toks = [eng.pred(kv, [rng.randrange(100, 40000) for _ in range(rng.randint(32, 64))]).argmax() for kv in kvs]

        def step(kvs=kvs, toks=toks):
            res = eng.pred_batch([PredCall(kv, [t]) for kv, t in zip(kvs, toks)])
            toks[:] = [d.argmax() for d in res]

        rows.append((f"{fmt}: decode, {b} sequences", profile(step, args.steps, args.table, args.idle_wait, eng.model)))
        for kv in kvs:
            eng.kv_close(kv)
    if args.prefill:
        kv = eng.kv_create()
        prompt = [rng.randrange(100, 40000) for _ in range(args.prefill)]

        def prefill():
            eng.pred(kv, prompt)
            eng.kv_truncate(kv, 0)

        rows.append(
            (
                f"{fmt}: prefill, {args.prefill} tokens",
                profile(prefill, max(2, args.steps // 4), args.table, args.idle_wait, eng.model),
            )
        )
        eng.kv_close(kv)
    eng.shutdown()
    return rows


def _table(rows: list[tuple[str, dict]]) -> str:
    names = list(BUCKETS) + ["other ops"]
    lines = [
        "### Where a forward pass spends its time (torch.profiler, self time by operator kind)",
        "",
        "| case | ms per forward | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for case, r in rows:
        lines.append(f"| {case} | {r['wall_ms']:.1f} | " + " | ".join(f"{r.get(n, 0):.0f}%" for n in names) + " |")
    lines += [
        "",
        '"other ops": norms, RoPE, SiLU, residual adds, copies — dozens of small operators per '
        "layer (fused into one call each where the compiled kernels load). Symphony's compiled kernels are "
        "counted by what they do: their matmuls as matmul, `decode_attention` as attention, the fused norms, "
        "RoPE + K/V write and SiLU as other ops; torch's weight-only kernels count as matmul. Decode steps are "
        "timed as they run (their layers in one compiled call where they qualify) but profiled through the "
        "per-call loop, which runs the same kernels one by one: its shares include the calls' overhead that "
        "the one call saves.",
    ]
    md = "\n".join(lines)
    print(md)
    return md


if __name__ == "__main__":
    main()
