"""Extra latency of a sandboxed LIP's syscalls over an in-process LIP's.

Runs the same decode loop (one token per `pred`) as an in-process LIP and as a sandboxed one
(worker process, proxy `sym`, logits through shared memory), alternating, and reports the
median time per `pred` of each and the difference. A cheap syscall (`detokenize`) isolates
the round trip itself from the forward pass.

    .venv/bin/python bench/sandbox_latency.py [--preds 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = '''
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
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preds", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args()

    import torch

    from symphony_core import Engine
    from symphony_core.server.sandbox import SandboxJob, SandboxManager, inprocess_lip, sandboxed_lip

    torch.set_num_threads(2)
    eng = Engine(num_pages=256)
    mgr = SandboxManager(eng, max_workers=2)
    mgr.start()
    mgr.probe()

    def once(entry: str, sandboxed: bool, n: int) -> float:
        job = SandboxJob(SOURCE, entry, [n], {}, entry, mgr.spec_for({}))
        if sandboxed:
            return eng.launch(sandboxed_lip, mgr, job, name=entry).result()
        return eng.launch(inprocess_lip, job, name=entry).result()

    once("decode", False, 4), once("decode", True, 4)  # warm up
    res: dict[str, list[float]] = {k: [] for k in ("pred_inproc", "pred_sandbox", "rt_inproc", "rt_sandbox")}
    for r in range(a.rounds):
        res["pred_inproc"].append(once("decode", False, a.preds))
        res["pred_sandbox"].append(once("decode", True, a.preds))
        res["rt_inproc"].append(once("roundtrip", False, 500))
        res["rt_sandbox"].append(once("roundtrip", True, 500))
        print(f"round {r + 1}/{a.rounds}: pred {res['pred_inproc'][-1] * 1e3:.2f} ms in-process, "
              f"{res['pred_sandbox'][-1] * 1e3:.2f} ms sandboxed", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in res.items()}
    diffs = [s - i for s, i in zip(res["pred_sandbox"], res["pred_inproc"])]
    out = {
        "pred_extra_ms_median_of_paired_rounds": round(statistics.median(diffs) * 1e3, 3),
        "pred_extra_ms_min_vs_min": round((min(res["pred_sandbox"]) - min(res["pred_inproc"])) * 1e3, 3),
        "pred_ms_inprocess": round(med["pred_inproc"] * 1e3, 3),
        "pred_ms_sandboxed": round(med["pred_sandbox"] * 1e3, 3),
        "pred_extra_ms": round((med["pred_sandbox"] - med["pred_inproc"]) * 1e3, 3),
        "syscall_roundtrip_us_inprocess": round(med["rt_inproc"] * 1e6, 1),
        "syscall_roundtrip_us_sandboxed": round(med["rt_sandbox"] * 1e6, 1),
        "syscall_extra_us": round((med["rt_sandbox"] - med["rt_inproc"]) * 1e6, 1),
        "preds_per_run": a.preds, "rounds": a.rounds, "device": str(eng.device),
    }
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    mgr.shutdown()
    eng.shutdown()


if __name__ == "__main__":
    main()
