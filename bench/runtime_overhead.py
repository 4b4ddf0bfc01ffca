"""Host overhead of the LIP runtime per `pred`, with the model replaced by a stub.

64 LIPs each make N single-token preds; the forward returns zeros at once, so what is left is
the runtime: syscall dispatch, validation, scheduling, KV reservation, batch building and the
thread hand-offs. Run with and without an event-bus subscriber.

    python -m bench.runtime_overhead [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _lip(sym, n: int) -> int:
    kv = sym.kv_create()
    tok = [1]
    for _ in range(n):
        sym.pred(kv, tok)
    sym.kv_close(kv)
    return n


def measure(engine, n_lips: int, n_preds: int, subscribe: bool) -> dict:
    unsubscribe = engine.bus.subscribe(lambda ev: None) if subscribe else None
    log = engine.runtime.batch.log
    b0 = log.total_batches
    t0 = time.perf_counter()
    procs = [engine.run(_lip, n_preds) for _ in range(n_lips)]
    for p in procs:
        p.result()
    wall = time.perf_counter() - t0
    if unsubscribe:
        unsubscribe()
    batches = log.total_batches - b0
    preds = n_lips * n_preds
    return {"us_per_pred": 1e6 * wall / preds, "us_per_batch": 1e6 * wall / batches, "mean_batch": preds / batches}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from symphony_core import Engine

    eng = Engine(num_pages=1024)
    vocab = eng.config.vocab_size
    eng.model.forward = lambda fb, k, v: torch.zeros(fb.output_rows.shape[0], vocab)
    n_lips, n_preds = (16, 10) if args.quick else (64, 50)
    rows = []
    for sub in (False, True):
        runs = [measure(eng, n_lips, n_preds, sub) for _ in range(1 if args.quick else args.repeats)]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row["subscriber"] = sub
        rows.append(row)
    print(f"runtime overhead, stub forward, {n_lips} LIPs x {n_preds} preds (median of {len(runs)})")
    print("| event subscriber | µs per pred | µs per batch | mean batch |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {'yes' if r['subscriber'] else 'no'} | {r['us_per_pred']:.1f} | {r['us_per_batch']:.0f} | {r['mean_batch']:.1f} |")
    eng.shutdown()
    cost = kernel_dispatch_cost(20_000 if args.quick else 200_000)
    print(f"kernel dispatch: bare call {cost['bare_ns']:.0f} ns; through the kernel, no subscriber "
          f"{cost['kernel_no_subscriber_ns']:.0f} ns; one subscriber {cost['kernel_one_subscriber_ns']:.0f} ns")
    return rows


def kernel_dispatch_cost(n: int = 200_000) -> dict:
    """ns per syscall through the kernel with no subscriber, with one, and a bare call."""
    from symphony_core.lip.events import EventBus
    from symphony_core.lip.kernel import Kernel
    from symphony_core.lip.process import Limits, Process

    bus = EventBus()
    k = Kernel(bus)
    proc = Process(lambda s: None, (), {}, "u", "bench", 0, Limits())
    th = proc.new_thread("main")
    impl, args = (lambda: None), (lambda: {"x": 1})
    out = {}
    t = time.perf_counter_ns()
    for _ in range(n):
        impl()
    out["bare_ns"] = (time.perf_counter_ns() - t) / n
    t = time.perf_counter_ns()
    for _ in range(n):
        k.syscall(th, "noop", impl, args)
    out["kernel_no_subscriber_ns"] = (time.perf_counter_ns() - t) / n
    unsub = bus.subscribe(lambda ev: None)
    t = time.perf_counter_ns()
    for _ in range(n // 10):
        k.syscall(th, "noop", impl, args)
    out["kernel_one_subscriber_ns"] = (time.perf_counter_ns() - t) / (n // 10)
    unsub()
    return out


if __name__ == "__main__":
    main()
