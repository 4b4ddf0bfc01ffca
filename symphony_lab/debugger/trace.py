"""Export a run as a Chrome trace (the JSON trace-event format Perfetto and chrome://tracing open).

Layout:
- one trace *process* per LIP process (named `<name> (pid N)`), one *thread* track per LIP
  thread; each syscall is a `B`/`E` pair on its thread's track (arguments on `B`, the result
  summary on `E`); a debugger stop is a `B`/`E` pair nested inside the syscall it held (or on
  its own before the LIP starts, for a stop on entry); process and thread starts and exits
  are instant events;
- trace process 0, "scheduler": thread 1 "batches" holds every fired batch as an `X` event
  whose `args` list its members; counter tracks (`C`) `queue_depth`, `pages_used` and
  `batch_tokens` sample the scheduler at every batch.

Times are microseconds on the engine's clock (`symphony_core.events.now`).
`validate_trace` checks what Perfetto relies on: required fields per phase, numeric times,
`B`/`E` balanced and properly nested per track, `X` events on a track nested or disjoint.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from typing import Any

from .viewdata import jsonable

SCHED_PID = 0
BATCH_TID = 1
_PHASES = {"B", "E", "X", "i", "I", "C", "M"}


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _literal(text: str) -> Any:
    """A value stored as its repr (plain literals: dicts, lists, numbers, strings, None)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _lifecycle(kind: str, pid: int, tid: int, args: dict) -> dict:
    """A process's or thread's start or exit: an instant event on its thread's track."""
    return {"name": kind, "cat": "lifecycle", "ph": "i", "s": "t", "pid": pid, "tid": tid, "args": jsonable(args)}


def chrome_trace(events: Iterable[Any], names: dict[int, str] | None = None, end_ts: float | None = None) -> dict:
    """Build the trace from kernel/scheduler events (`Event`) and the debugger's stop marks.

    `events` holds `symphony_core.events.Event`s, syscall events in the debugger's compact
    form (tuples: `("syscall_enter", ts, pid, tid, call, seq, file, line, repr(args))` and
    `("syscall_exit", ts, pid, tid, call, seq, repr(result), error)`), and dicts `{"kind":
    "dbg_stop" | "dbg_resume", "ts", "pid", "tid", "reason", "call"}`. Syscalls still open at the end are
    closed at `end_ts` (marked `unfinished`) so every track stays balanced.
    """
    names = dict(names or {})
    out: list[dict] = []
    threads: dict[tuple[int, int], str] = {}
    open_slices: dict[tuple[int, int], list[str]] = {}
    rows: list[tuple[float, int, dict]] = []
    last_ts = 0.0
    order = 0

    def add(ts: float, ev: dict) -> None:
        nonlocal order, last_ts
        rows.append((ts, order, ev))
        order += 1
        last_ts = max(last_ts, ts)

    for ev in events:
        if isinstance(ev, tuple):  # a syscall event as the debugger stores it (see core._on_event)
            if ev[0] == "syscall_enter":
                _, ts, pid, tid, call, seq, file, line, args = ev
                add(
                    ts,
                    {
                        "name": call,
                        "cat": "syscall",
                        "ph": "B",
                        "pid": pid,
                        "tid": tid,
                        "args": jsonable({**_literal(args), "seq": seq, "file": file, "line": line}),
                    },
                )
            else:
                _, ts, pid, tid, call, seq, result, error = ev
                a = {"result": _literal(result)} if error is None else {"error": error}
                add(ts, {"name": call, "cat": "syscall", "ph": "E", "pid": pid, "tid": tid, "args": jsonable(a)})
            continue
        if isinstance(ev, dict):
            kind, ts, pid, tid = ev["kind"], ev["ts"], ev.get("pid"), ev.get("tid")
            if kind == "dbg_stop":
                add(
                    ts,
                    {
                        "name": f"stopped: {ev.get('reason')}",
                        "cat": "debugger",
                        "ph": "B",
                        "pid": pid,
                        "tid": tid,
                        "args": jsonable({k: v for k, v in ev.items() if k not in ("kind", "ts", "pid", "tid")}),
                    },
                )
            elif kind == "dbg_resume":
                add(
                    ts,
                    {
                        "name": f"stopped: {ev.get('reason')}",
                        "cat": "debugger",
                        "ph": "E",
                        "pid": pid,
                        "tid": tid,
                        "args": jsonable({"action": ev.get("action")}),
                    },
                )
            continue
        kind, ts = ev.kind, ev.ts
        if kind == "syscall_enter":
            add(
                ts,
                {
                    "name": ev.call,
                    "cat": "syscall",
                    "ph": "B",
                    "pid": ev.pid,
                    "tid": ev.tid,
                    "args": jsonable({**ev.args, "seq": ev.seq, "file": ev.file, "line": ev.line}),
                },
            )
        elif kind == "syscall_exit":
            a = {"result": ev.result} if ev.error is None else {"error": ev.error}
            add(ts, {"name": ev.call, "cat": "syscall", "ph": "E", "pid": ev.pid, "tid": ev.tid, "args": jsonable(a)})
        elif kind in ("process_start", "thread_start"):
            if kind == "process_start" and ev.args.get("name"):
                names.setdefault(ev.pid, ev.args["name"])
            threads[(ev.pid, ev.tid)] = (
                "main" if kind == "process_start" else str(ev.args.get("name", f"thread {ev.tid}"))
            )
            add(ts, _lifecycle(kind, ev.pid, ev.tid, ev.args))
        elif kind in ("process_exit", "thread_exit"):
            tid = ev.tid if ev.tid is not None else 1
            add(ts, _lifecycle(kind, ev.pid, tid, {**ev.args, "error": ev.error}))
        elif kind == "batch":
            r = ev.args
            t0, t1 = r["t_start"], r["t_end"]
            add(
                t0,
                {
                    "name": f"batch {r['bid']}",
                    "cat": "batch",
                    "ph": "X",
                    "pid": SCHED_PID,
                    "tid": BATCH_TID,
                    "dur": max(0.0, _us(t1) - _us(t0)),
                    "args": jsonable(
                        {
                            "bid": r["bid"],
                            "members": r["members"],
                            "tokens": r["tokens"],
                            "size": r.get("size"),
                            "queue_depth": r["queue_depth"],
                            "pages_used": r["pages_used"],
                            "policy": r["policy"],
                            "errors": r.get("errors", 0),
                        }
                    ),
                },
            )
            add(
                t0,
                {
                    "name": "queue_depth",
                    "ph": "C",
                    "pid": SCHED_PID,
                    "tid": 0,
                    "args": {"queue_depth": r["queue_depth"]},
                },
            )
            add(
                t0,
                {"name": "pages_used", "ph": "C", "pid": SCHED_PID, "tid": 0, "args": {"pages_used": r["pages_used"]}},
            )
            add(t0, {"name": "batch_tokens", "ph": "C", "pid": SCHED_PID, "tid": 0, "args": {"tokens": r["tokens"]}})
            add(
                t1,
                {
                    "name": "queue_depth",
                    "ph": "C",
                    "pid": SCHED_PID,
                    "tid": 0,
                    "args": {"queue_depth": max(0, r["queue_depth"] - r.get("size", len(r["members"])))},
                },
            )
    rows.sort(key=lambda r: (r[0], r[1]))
    for ts, _, ev in rows:
        ev["ts"] = _us(ts)
        key = (ev["pid"], ev["tid"])
        if ev["ph"] == "B":
            open_slices.setdefault(key, []).append(ev["name"])
        elif ev["ph"] == "E":
            stack = open_slices.get(key)
            if not stack:
                continue  # its begin happened before the debugger attached
            stack.pop()
        if ev["pid"] != SCHED_PID:
            threads.setdefault(key, "main" if ev["tid"] == 1 else f"thread {ev['tid']}")
        out.append(ev)
    end = _us(end_ts if end_ts is not None else last_ts)
    for (pid, tid), stack in open_slices.items():
        for name in reversed(stack):
            out.append({"name": name, "ph": "E", "pid": pid, "tid": tid, "ts": end, "args": {"unfinished": True}})
    meta = [
        {"name": "process_name", "ph": "M", "pid": SCHED_PID, "tid": 0, "args": {"name": "scheduler"}},
        {"name": "thread_name", "ph": "M", "pid": SCHED_PID, "tid": BATCH_TID, "args": {"name": "batches"}},
        {"name": "process_sort_index", "ph": "M", "pid": SCHED_PID, "tid": 0, "args": {"sort_index": -1}},
    ]
    for pid in sorted({k[0] for k in threads}):
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"name": f"{names.get(pid, 'lip')} (pid {pid})"},
            }
        )
    for (pid, tid), tname in sorted(threads.items()):
        meta.append(
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"{tname} (tid {tid})"}}
        )
    return {"traceEvents": meta + out, "displayTimeUnit": "ms", "otherData": {"producer": "symphony_lab.debugger"}}


def validate_trace(trace: dict | list) -> list[str]:
    """Problems that would make Perfetto / chrome://tracing reject or misdraw the trace ([] = valid)."""
    errs: list[str] = []
    try:
        json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as e:
        errs.append(f"not JSON-serialisable: {e}")
    evs = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(evs, list):
        return errs + ["traceEvents must be a list"]
    tracks: dict[tuple, list[tuple[float, int, dict]]] = {}
    for i, ev in enumerate(evs):
        where = f"event {i}"
        if not isinstance(ev, dict):
            errs.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if ph not in _PHASES:
            errs.append(f"{where}: unknown or missing ph {ph!r}")
            continue
        if ph != "E" and not isinstance(ev.get("name"), str):
            errs.append(f"{where} ({ph}): name must be a string")
        if not isinstance(ev.get("pid"), int):
            errs.append(f"{where} ({ph}): pid must be an int")
        if ph in ("B", "E", "X", "i", "I") and not isinstance(ev.get("tid"), int):
            errs.append(f"{where} ({ph}): tid must be an int")
        if ph != "M":
            ts = ev.get("ts")
            if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
                errs.append(f"{where} ({ph}): ts must be a number >= 0, got {ts!r}")
                continue
        if "args" in ev and not isinstance(ev["args"], dict):
            errs.append(f"{where} ({ph}): args must be an object")
        if ph == "X":
            d = ev.get("dur")
            if not isinstance(d, (int, float)) or isinstance(d, bool) or d < 0:
                errs.append(f"{where} (X): dur must be a number >= 0, got {d!r}")
                continue
        if ph == "C":
            a = ev.get("args")
            if not isinstance(a, dict) or not a or not all(isinstance(v, (int, float)) for v in a.values()):
                errs.append(f"{where} (C): args must map series names to numbers")
        if (
            ph == "M"
            and (not isinstance(ev.get("args"), dict) or "name" not in ev["args"])
            and ev.get("name") in ("process_name", "thread_name")
        ):
            errs.append(f"{where} (M): {ev.get('name')} needs args.name")
        if ph in ("i", "I") and ev.get("s", "t") not in ("g", "p", "t"):
            errs.append(f"{where} (i): scope s must be g, p or t")
        if ph in ("B", "E", "X"):
            tracks.setdefault((ev["pid"], ev["tid"]), []).append((float(ev["ts"]), i, ev))
    for key, rows in tracks.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        stack: list[tuple[str, float, float]] = []  # name, start, end (inf for an open B)
        for ts, i, ev in rows:
            while stack and stack[-1][2] != float("inf") and stack[-1][2] <= ts:
                stack.pop()  # X slices that have ended
            if ev["ph"] == "B":
                if stack and stack[-1][2] != float("inf") and stack[-1][2] < ts:
                    errs.append(f"track {key}: B {ev['name']!r} at {ts} starts inside an X slice it outlives")
                stack.append((ev["name"], ts, float("inf")))
            elif ev["ph"] == "X":
                end = ts + float(ev["dur"])
                if stack and end > stack[-1][2]:
                    errs.append(f"track {key}: X {ev['name']!r} [{ts}, {end}] overlaps {stack[-1][0]!r} partially")
                stack.append((ev["name"], ts, end))
            else:  # E
                while stack and stack[-1][2] != float("inf"):
                    if stack[-1][2] > ts:
                        errs.append(f"track {key}: E at {ts} closes a B while X {stack[-1][0]!r} is still open")
                    stack.pop()
                if not stack:
                    errs.append(f"track {key}: E at {ts} (event {i}) without a matching B")
                    continue
                name, start, _ = stack.pop()
                if "name" in ev and ev["name"] != name:
                    errs.append(f"track {key}: E {ev['name']!r} at {ts} closes B {name!r} (bad nesting)")
        if any(s[2] == float("inf") for s in stack):
            errs.append(f"track {key}: {sum(1 for s in stack if s[2] == float('inf'))} B event(s) never closed")
    return errs


__all__ = ["chrome_trace", "validate_trace"]
