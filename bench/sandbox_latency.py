"""Extra latency of a sandboxed LIP's syscalls over an in-process LIP's.

Runs the same decode loop (one token per `pred`) as an in-process LIP and as a sandboxed one
(worker process, proxy `sym`, logits through shared memory), alternating, and reports the
median time per `pred` of each and the difference. A cheap syscall (`detokenize`) isolates
the round trip itself from the forward pass.

    python -m bench.sandbox_latency [--quick] [--preds 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics

from .common import publish
from .machine import describe

SOURCE = """
import time

def decode(sym, n):
    kv = sym.kv_create()
    toks = sym.tokenize("The quick brown fox")
    sym.pred(kv, toks)                    # prefill, not timed
    t0 = time.perf_counter()
    for _ in range(n):
        toks = [sym.pred(kv, [toks[-1]]).argmax()]
    t1 = time.perf_counter()
    sym.kv_close(kv)
    return (t1 - t0) / n

def roundtrip(sym, n):
    t0 = time.perf_counter()
    for _ in range(n):
        sym.detokenize([1])
    return (time.perf_counter() - t0) / n
"""


def measure(preds: int, rounds: int) -> dict:
    """Alternate in-process and sandboxed runs `rounds` times; medians and paired differences."""
    import torch

    from symphony_core import Engine
    from symphony_core.sandbox.job import SandboxJob
    from symphony_core.sandbox.pool import SandboxManager
    from symphony_core.sandbox.twin import inprocess_lip, sandboxed_lip

    torch.set_num_threads(2)
    eng = Engine(num_pages=256)
    mgr = SandboxManager(eng, max_workers=2)
    mgr.start()
    enforced = (mgr.probe() or {}).get("enforced", [])

    def once(entry: str, sandboxed: bool, n: int) -> float:
        job = SandboxJob(SOURCE, entry, [n], {}, entry, mgr.spec_for({}))
        if sandboxed:
            return eng.launch(sandboxed_lip, mgr, job, name=entry).result()
        return eng.launch(inprocess_lip, job, name=entry).result()

    try:
        once("decode", False, 4), once("decode", True, 4)  # warm up
        res: dict[str, list[float]] = {k: [] for k in ("pred_inproc", "pred_sandbox", "rt_inproc", "rt_sandbox")}
        for r in range(rounds):
            res["pred_inproc"].append(once("decode", False, preds))
            res["pred_sandbox"].append(once("decode", True, preds))
            res["rt_inproc"].append(once("roundtrip", False, 500))
            res["rt_sandbox"].append(once("roundtrip", True, 500))
            print(
                f"  round {r + 1}/{rounds}: pred {res['pred_inproc'][-1] * 1e3:.2f} ms in-process, "
                f"{res['pred_sandbox'][-1] * 1e3:.2f} ms sandboxed",
                flush=True,
            )
    finally:
        mgr.shutdown()
        eng.shutdown()
    med = {k: statistics.median(v) for k, v in res.items()}
    diffs = [s - i for s, i in zip(res["pred_sandbox"], res["pred_inproc"])]
    return {
        "pred_extra_ms_median_of_paired_rounds": round(statistics.median(diffs) * 1e3, 3),
        "pred_ms_inprocess": round(med["pred_inproc"] * 1e3, 3),
        "pred_ms_sandboxed": round(med["pred_sandbox"] * 1e3, 3),
        "syscall_roundtrip_us_inprocess": round(med["rt_inproc"] * 1e6, 1),
        "syscall_roundtrip_us_sandboxed": round(med["rt_sandbox"] * 1e6, 1),
        "syscall_extra_us": round((med["rt_sandbox"] - med["rt_inproc"]) * 1e6, 1),
        "preds_per_run": preds,
        "rounds": rounds,
        "device": str(eng.device),
        "sandbox": enforced,
    }


def table(r: dict) -> str:
    return "\n".join(
        [
            f"### Sandboxed LIP latency (issue 5): {r['preds_per_run']} single-token preds per run, "
            f"median of {r['rounds']} alternating rounds",
            "",
            f"Machine: {describe()}",
            "",
            "| | in-process | sandboxed worker | extra |",
            "|---|---:|---:|---:|",
            f"| ms per `pred` (decode, real model) | {r['pred_ms_inprocess']:.2f} | {r['pred_ms_sandboxed']:.2f} "
            f"| {r['pred_extra_ms_median_of_paired_rounds']:+.2f} (median of paired rounds) |",
            f"| µs per cheap syscall (`detokenize`, round trip) | {r['syscall_roundtrip_us_inprocess']:.1f} "
            f"| {r['syscall_roundtrip_us_sandboxed']:.1f} | {r['syscall_extra_us']:+.1f} |",
            "",
            "The sandboxed program runs in a confined worker process and reaches the engine over IPC (a Unix "
            "socket, logits through shared memory); the extra per `pred` is that round trip, small next to the "
            "forward pass. Sandbox layers in force: " + ("; ".join(r["sandbox"]) or "none reported") + ".",
        ]
    )


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description="extra latency of a sandboxed LIP's syscalls")
    ap.add_argument("--quick", action="store_true", help="toy size (seconds, for the tests)")
    ap.add_argument("--preds", type=int, default=None, help="preds per run (default 64; quick 4)")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 5; quick 1)")
    a = ap.parse_args(argv)
    r = measure(a.preds or (4 if a.quick else 64), a.rounds or (1 if a.quick else 5))
    publish(__name__, r)
    md = table(r)
    print(md)
    return md


if __name__ == "__main__":
    main()
