"""Where a LIP's `pred` spends its wall time, one program's preds at a time (issue 48).

B LIPs (one by default) each make N greedy single-token preds on the real model; every pred is timed at six points,
by wrapping the functions each point is in (nothing in the engine is changed for it):

  submit    the call is queued (`BatchScheduler.submit`)
  fire      the executor is asked to run the batch it is in (`Executor.run` entered)
  fwd_end   the forward pass and the batch's argmax are done (`Executor.run` returned)
  set       its thread's signal is set (`Signal.set`)
  resume    the LIP thread runs again (`PendingPred.await_result` returned)
  next      the program submits its next pred (the LIP's own Python, `argmax`, the syscall layer)

The same greedy loop through `Engine.pred_batch` on the calling thread (the engine-only
reference) is timed per step beside it, and the two alternate in rounds. The report is the
median of each segment, and the LIP step's excess over the engine-only step: that difference is
what the runtime costs a program, wherever it lies.

    python -m bench.pred_timeline [--preds N] [--rounds R] [--weights fp32|q8|q4]

Set OMP_WAIT_POLICY / GOMP_SPINCOUNT in the environment to see how OpenMP's spinning workers
change the hand-offs (they decide whether a woken thread finds a free core).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from symphony_core import Engine
from symphony_core.executor import Executor, PredCall
from symphony_core.sched.batch_scheduler import BatchScheduler
from symphony_core.sched.pending import PendingPred, Signal

from .common import publish, take_published

SEGMENTS = [
    ("submit", "fire", "queued until the batch fires"),
    ("fire", "fwd_end", "forward pass (with the batch's argmax)"),
    ("fwd_end", "set", "completing the batch until the signal"),
    ("set", "resume", "wake-up: signal to the LIP thread running"),
    ("resume", "next", "the program's own step until its next pred"),
]

PROMPT = "The capital of France is"


class Timeline:
    """Wraps the engine's hand-off points to stamp each pred of every program (OS-thread runner)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.by_thread: dict[int, list[dict[str, float]]] = {}
        self._last: dict[int, dict[str, float]] = {}  # each LIP thread's latest pred
        self._by_call: dict[int, dict[str, float]] = {}
        self._by_signal: dict[int, dict[str, float]] = {}
        self._saved: list[tuple[type, str, object]] = []

    def _wrap(self, cls: type, name: str, make) -> None:
        orig = getattr(cls, name)
        self._saved.append((cls, name, orig))
        setattr(cls, name, make(orig))

    def __enter__(self) -> Timeline:
        tl = self
        clock = time.perf_counter

        def submit(orig):
            def wrapped(sched, p: PendingPred):
                t = clock()
                me = threading.get_ident()
                last = tl._last.get(me)
                if last is not None:
                    last["next"] = t
                row = {"submit": t}
                tl.rows.append(row)
                tl.by_thread.setdefault(me, []).append(row)
                tl._last[me] = row
                tl._by_call[id(p.call)] = row
                if p.finished is not None:
                    tl._by_signal[id(p.finished)] = row
                return orig(sched, p)

            return wrapped

        def run(orig):
            def wrapped(ex, calls, *a, **kw):
                rows = [r for r in map(tl._by_call.pop, map(id, calls), [None] * len(calls)) if r is not None]
                t0 = clock()
                out = orig(ex, calls, *a, **kw)
                t1 = clock()
                for r in rows:
                    r["fire"], r["fwd_end"] = t0, t1
                return out

            return wrapped

        def sig_set(orig):
            def wrapped(sig):
                row = tl._by_signal.pop(id(sig), None)
                if row is not None:
                    row["set"] = clock()
                return orig(sig)

            return wrapped

        def wait(orig):
            def wrapped(p, th):
                out = orig(p, th)
                row = tl._last.get(threading.get_ident())
                if row is not None:
                    row["resume"] = clock()
                return out

            return wrapped

        self._wrap(BatchScheduler, "submit", submit)
        self._wrap(Executor, "run", run)
        self._wrap(Signal, "set", sig_set)
        self._wrap(PendingPred, "await_result", wait)
        return self

    def __exit__(self, *exc) -> None:
        for cls, name, orig in reversed(self._saved):
            setattr(cls, name, orig)


def greedy_lip(sym, prompt: str, n: int) -> int:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    for _ in range(n):
        toks = [sym.pred(kv, toks).argmax()]
    sym.kv_close(kv)
    return n


def lip_steps(eng: Engine, n: int, programs: int = 1) -> tuple[list[dict[str, float]], float]:
    """Every program's decode preds, stamped (its prompt and first pred left out); and the median
    time between two of a program's submits."""
    with Timeline() as tl:
        procs = [eng.run(greedy_lip, f"{PROMPT} ({i})", n) for i in range(programs)]
        for p in procs:
            p.result(timeout=600)
    rows, steps = [], []
    for mine in tl.by_thread.values():
        rows += [r for r in mine[2:] if all(k in r for k in ("submit", "fire", "fwd_end", "set", "resume", "next"))]
        steps += [b["submit"] - a["submit"] for a, b in zip(mine[2:], mine[3:])]
    return rows, statistics.median(steps)


def batch_steps(eng: Engine, n: int, programs: int = 1) -> tuple[float, float]:
    """The same greedy loops as one `pred_batch` a step on this thread: median step, and median `pred_batch` call."""
    kvs = [eng.kv_create() for _ in range(programs)]
    toks = [eng.tokenize(f"{PROMPT} ({i})") for i in range(programs)]
    steps, fwd = [], []
    for i in range(n):
        t0 = time.perf_counter()
        res = eng.pred_batch([PredCall(kv, t) for kv, t in zip(kvs, toks)])
        t1 = time.perf_counter()
        toks = [[r.argmax()] for r in res]
        if i > 1:
            steps.append(time.perf_counter() - t0)
            fwd.append(t1 - t0)
    for kv in kvs:
        eng.kv_close(kv)
    return statistics.median(steps), statistics.median(fwd)


def measure(weights: str, preds: int, rounds: int, programs: int = 1) -> dict:
    eng = Engine(weights=weights, prefix_cache=False)
    try:
        lip_steps(eng, 8)
        batch_steps(eng, 8)
        seg: dict[str, list[float]] = {a: [] for a, _, _ in SEGMENTS}
        lip, ref, ref_fwd = [], [], []
        for _ in range(rounds):
            b, bf = batch_steps(eng, preds, programs)
            rows, step = lip_steps(eng, preds, programs)
            ref.append(b)
            ref_fwd.append(bf)
            lip.append(step)
            for a, z, _ in SEGMENTS:
                seg[a].append(statistics.median(r[z] - r[a] for r in rows))
    finally:
        eng.shutdown()
    med = {a: 1e3 * statistics.median(v) for a, v in seg.items()}
    return {
        "weights": weights,
        "programs": programs,
        "segments_ms": med,
        "lip_step_ms": 1e3 * statistics.median(lip),
        "pred_batch_step_ms": 1e3 * statistics.median(ref),
        "pred_batch_call_ms": 1e3 * statistics.median(ref_fwd),
        "lip_over_pred_batch": statistics.median(b / a for a, b in zip(ref, lip)),
    }


def table(r: dict) -> str:
    lines = [
        f"### One program's `pred`, where the wall time goes ({r['weights']}, SmolLM2-135M, {r['programs']} programs, median)",
        "",
        "| segment | ms |",
        "|---|---:|",
    ]
    for a, z, what in SEGMENTS:
        lines.append(f"| {what} ({a} → {z}) | {r['segments_ms'][a]:.3f} |")
    lines += [
        f"| **a LIP's step, submit to submit** | **{r['lip_step_ms']:.3f}** |",
        f"| the same step through `pred_batch` on one thread (engine-only reference) | {r['pred_batch_step_ms']:.3f} |",
        "",
        f"LIP step / `pred_batch` step: {r['lip_over_pred_batch']:.3f} (paired by round; below 1.00 the program is faster).",
    ]
    return "\n".join(lines)


def suite(argv: list[str] | None = None) -> str:
    """`python -m bench`'s section: 1, 8 and 32 programs in fp32 and q4 (at toy size 1 and 8 in fp32, 1 in q4)."""
    quick = ["--quick"] if argv and "--quick" in argv else []
    parts, numbers = [], {}
    cases = [(1, "fp32"), (8, "fp32"), (1, "q4")] if quick else [(b, w) for w in ("fp32", "q4") for b in (1, 8, 32)]
    for programs, weights in cases:
        parts.append(main([*quick, "--programs", str(programs), "--weights", weights]))
        numbers[f"{weights}_{programs}"] = take_published(__name__)
    publish(__name__, numbers)
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(prog="python -m bench.pred_timeline", description=__doc__.split("\n")[0])
    ap.add_argument("--preds", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--weights", default="fp32")
    ap.add_argument("--programs", type=int, default=1, help="programs at once (one sequence each)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.preds, args.rounds = 16, 2
    r = measure(args.weights, args.preds, args.rounds, args.programs)
    publish(__name__, r)
    md = table(r)
    print(md)
    return md


if __name__ == "__main__":
    main()
