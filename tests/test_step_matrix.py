"""The thread-stepping matrix (tests/step_matrix.py) through every front-end: the Python API, the
protocol over WebSocket (in this process, and to a real `symphony serve --plugin debugger`), the
notebook widget's comm, and the TUI (Textual pilot) — the same expectations table for each. Issue 50: a step never runs the process to its end while a stop
point remains, and the TUI keeps focus on the thread it stepped."""

from __future__ import annotations

import faulthandler
import os
import threading

import pytest

from symphony_lab.debugger import DebugServer, RemoteDebugger
from symphony_lab.debugger.stepping import lands_on
from tests.step_matrix import CASES, ENTRY, EXITED, JOIN, PRED, Case, landing, walk

IDS = [c.name for c in CASES]

# Which of the two threads a step into spawns gets to its first pred first is a race (they run at
# once; the step lands on the first, the other is held there). The table's rows are the first
# spawned thread's win; when the second wins, the steps through it end while the main thread waits
# in `join` on the first, held at its first pred: the step lands on that held stop (stepping.py),
# and both joins return at the end.
SECOND_THREAD_FIRST = {
    "thread_ends_and_join_blocks": [ENTRY, (1, *PRED)]
    + [(3, *PRED)] * 4
    + [(2, *PRED)] * 4
    + [(1, *JOIN)] * 2
    + [EXITED],
}


def assert_landings(seen: list, case: Case) -> None:
    """`seen` is the case's table, or its row for the second spawned thread's win of the race."""
    other = SECOND_THREAD_FIRST.get(case.name)
    if other is not None and len(seen) > 2 and seen[2] == other[2]:
        assert seen == other
    else:
        assert seen == case.landings


def _walk_api(client, case: Case, launch=None) -> list:
    pid = launch(case) if launch is not None else client.launch(case.fn, stop_on_entry=True)["pid"]
    for bp in case.breakpoints:
        client.set_breakpoint(pid=pid, **bp)
    first = client.wait_stopped(pid, timeout=60)

    def step_from(stop: dict) -> dict:
        r = client.step(pid, stop["tid"])
        return client.wait_stopped(pid, timeout=60, after=r["after"], step=r["step"])

    seen = walk(case, first, step_from)
    client.clear_breakpoints()
    return seen


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_python_api(dbg, case):
    assert_landings(_walk_api(dbg, case), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_protocol_over_websocket(dbg, case):
    server = DebugServer(dbg, allow_launch=True)
    remote = RemoteDebugger(server.url)
    try:
        assert_landings(_walk_api(remote, case), case)
    finally:
        remote.close()
        server.close()


@pytest.fixture(scope="module")
def served():
    """A real `symphony serve --plugin debugger` (programs in-process, sent as source) and a
    client attached to its debug route."""
    from symphony_lab.debugger import connect
    from tests.server_harness import Server

    server = Server([], extra=["--plugin", "debugger", "--no-sandbox"])
    remote = connect(server.url.replace("http://", "ws://") + "/v1/debug", timeout=120)
    yield remote
    remote.close()
    assert server.stop() == 0, server.log()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_protocol_over_a_server(served, case):
    import tests.step_lips as lips

    with open(lips.__file__) as f:
        source = f.read()

    def launch(c: Case) -> int:
        return served.run_program(source, c.lip, stop_on_entry=True)["pid"]

    assert_landings(_walk_api(served, case, launch), case)


def test_every_pred_of_the_issue_program_is_a_stop(dbg):
    """Issue 50's program: from the entry stop, all 9 preds stop (as `stopped` events) and the
    process never finishes while one remains."""
    q, unsub = dbg.event_queue(["stopped"])
    try:
        assert _walk_api(dbg, CASES[0]) == CASES[0].landings
    finally:
        unsub()
    preds: dict[int, int] = {}
    while not q.empty():
        b = q.get_nowait()["body"]
        if (b["call"], b["where"]) == ("pred", "after"):
            preds[b["tid"]] = max(preds.get(b["tid"], 0), b["preds"])
    assert preds == {1: 1, 2: 4, 3: 4}


def test_keep_step_passes_over_a_stop_and_the_step_goes_on(dbg):
    """`continue` with `keep_step` (how the TUI and the DAP adapter pass over a stop their own
    breakpoint rule excludes): the stepped thread goes on as if it had not stopped there, and the
    step it carries lands where it would have; a plain `continue` ends the step."""
    for keep, landed in ((True, (1, "pred", "after", "step")), (False, (2, "kv_create", "before", "breakpoint"))):
        pid = dbg.launch("tests.step_lips:helper_first", stop_on_entry=True)["pid"]
        dbg.wait_stopped(pid, timeout=60)
        bp = dbg.set_breakpoint("kv_create", pid=pid)
        r = dbg.step(pid, 1)
        s = dbg.wait_stopped(pid, timeout=60, after=r["after"], step=r["step"])
        assert landing(s) == (1, "kv_create", "before", "breakpoint")
        dbg.continue_(pid, 1, keep_step=keep)
        s = dbg.wait_stopped(pid, timeout=60, after=s["stop_id"])
        assert landing(s) == landed and (s["step"] == r["step"]) == keep
        dbg.remove_breakpoint(bp["id"])
        dbg.continue_(pid)
        assert dbg.wait_process(pid, timeout=60)["status"] == "finished"


@pytest.fixture(scope="module")
def lab(engine):
    from symphony_lab.lab import Lab

    lab = Lab(engine=engine)
    lab.wait(300)
    yield lab
    lab.shutdown()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_widget_model(lab, case):
    """The widget's comm: `step` requests from the browser end, landings read from its live view."""
    import importlib

    from tests.test_widgets import CommSpy, wait_for

    fn = getattr(importlib.import_module("tests.step_lips"), case.lip)
    run = lab.run(fn, stop_on_entry=True, display=False, breakpoints=[dict(bp) for bp in case.breakpoints])
    w, pid = run.widget, run.wait_launched()
    spy = CommSpy(w)
    wait_for(lambda: w.view.get("status") == "stopped", what="the entry stop")

    def step_from(stop: dict) -> dict:
        resp = spy.request("step", pid=pid, tid=stop["tid"])
        assert resp["success"], resp
        r = resp["body"]

        def landed():
            v = w.view
            if v.get("status") == "finished":
                return {"exited": True}
            mine = [s for s in v.get("stops") or [] if lands_on(s, r)]
            return min(mine, key=lambda s: s["stop_id"]) if mine else None

        return wait_for(landed, timeout=60, what="the step's landing in the widget")

    assert_landings(walk(case, w.view["stops"][0], step_from), case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_tui_pilot(engine, case):
    """The TUI: `s` on the focused thread; the focus follows the step's landing (and stays on the
    stepped thread when it is the one that lands), never another thread stopped meanwhile."""
    import asyncio

    from symphony_lab.tui.app import SymphonyLab
    from symphony_lab.tui.embedded import EmbeddedSession
    from tests.tui_pilot import wait_until

    session = EmbeddedSession(case.fn, (), {}, engine=engine)
    app = SymphonyLab(session)

    async def drive() -> list:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: app.focused_stop() is not None, "the stop on entry")
            pid = app.focus_pt[0]
            for bp in case.breakpoints:
                session.request("set_breakpoint", pid=pid, **bp)

            def now():
                proc = app.focused_proc() or {}
                if proc.get("status") in ("finished", "failed"):
                    return {"exited": True}
                s = app.focused_stop()
                return s if s is not None and app.busy is None else None

            async def land(previous: int | None) -> dict:
                await wait_until(
                    pilot, lambda: (s := now()) is not None and s.get("stop_id") != previous, "the landing", 60
                )
                return now()

            stop = await land(None)
            seen = [landing(stop)]
            while seen[-1] != EXITED and len(seen) < 30:
                await pilot.press("s")
                stop = await land(stop["stop_id"])
                seen.append(landing(stop))
            return seen

    try:
        seen = asyncio.run(drive())
    finally:
        session.close()
    assert_landings(seen, case)


def dap_source_breakpoints(bp: dict, path: str) -> list[dict]:
    """A case's breakpoint (`set_breakpoint` arguments: a syscall and conditions) as DAP source
    breakpoints: one on each line of `path` that calls the syscall, with the other conditions as
    its `condition` expression (the same condition, evaluated by the adapter)."""
    condition = " and ".join(f"{k} == {v!r}" for k, v in sorted(bp.items()) if k != "call")
    with open(path) as f:
        lines = [n for n, text in enumerate(f, 1) if f"sym.{bp['call']}(" in text]
    return [{"line": n, **({"condition": condition} if condition else {})} for n in lines]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_dap_adapter(engine, case):
    """The DAP adapter (`stepIn`): each step's landing is the `stopped` event without
    `preserveFocusHint`; a thread held meanwhile (a spawned thread at its first pred) is reported
    with the hint, so the editor's focus stays where the step landed. The breakpoint case sets
    source breakpoints on the lines that call its syscall, the thread as their condition
    (`tid == 2`): the main thread's stop at its own such line, ruled out by the condition, does
    not end the step it carries."""
    from tests.test_dap import dap

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_lips.py")
    with dap(engine) as c:
        c.request("launch", {"program": f"{path}:{case.lip}", "stopOnEntry": True})
        c.event("initialized")
        if case.breakpoints:
            specs = [s for bp in case.breakpoints for s in dap_source_breakpoints(bp, path)]
            r = c.request("setBreakpoints", {"source": {"path": path}, "breakpoints": specs})
            assert len(specs) > 1 and all(b["verified"] for b in r["body"]["breakpoints"]), r
        c.request("configurationDone")
        ev = c.event("stopped", reason="entry")["body"]
        seen = [(ev["threadId"], None, "entry", "entry")]
        while len(seen) < 30:
            c.request("stepIn", {"threadId": seen[-1][0]})
            ev = wait_landing(c)
            if ev is None:
                seen.append(EXITED)
                break
            where, call = ev["description"].split(" ", 1)
            seen.append((ev["threadId"], call, where, ev["reason"]))
        assert_landings(seen, case)


def wait_landing(c) -> dict | None:
    """The next `stopped` event that is a step's landing (no preserveFocusHint), or None once the
    program has exited."""

    def landing_or_exit(m: dict) -> bool:
        if m.get("type") != "event":
            return False
        return m["event"] == "exited" or (m["event"] == "stopped" and not m["body"].get("preserveFocusHint"))

    try:
        m = c._wait(landing_or_exit, 120, "the step's landing")
    except AssertionError:  # where every thread is (the adapter's, the LIP threads'), for the report
        faulthandler.dump_traceback(all_threads=True)
        raise
    return None if m["event"] == "exited" else m["body"]


def test_a_step_through_a_thread_end_lands_on_the_held_thread_the_main_thread_joins(dbg):
    """The race the matrix's two workers can run (the second spawned thread preds first, the first
    is held at its first pred), forced: the main thread waits in `join` on thread 2, held; thread 3
    is stepped to its end. No thread can carry the step on (the main thread's join returns only
    once thread 2 is resumed): it lands on thread 2's held stop at once, re-announced with the
    step, rather than waiting for ever on a join that cannot return."""
    pid = dbg.launch("tests.step_lips:two_workers", n=1, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    bps = [dbg.set_breakpoint("pred", pid=pid, tid=t, when="after")["id"] for t in (2, 3)]
    bps.append(dbg.set_breakpoint("join", pid=pid, tid=1)["id"])  # the main thread is in join (told) from here
    dbg.continue_(pid, 1)
    held = {t: dbg.wait_stopped(pid, t, timeout=60) for t in (1, 2, 3)}
    assert [(s["call"], s["where"]) for s in held.values()] == [("join", "before")] + [("pred", "after")] * 2
    for b in bps:
        dbg.remove_breakpoint(b)
    q, unsub = dbg.event_queue(["stopped"])
    try:
        dbg.continue_(pid, 1)  # into its join on thread 2, which cannot return while thread 2 is held
        r = dbg.step(pid, 3)  # thread 3 ends
        s = dbg.wait_stopped(pid, timeout=30, after=r["after"], step=r["step"])
        assert (s["tid"], s["stop_id"], s["step"]) == (2, held[2]["stop_id"], r["step"])
        ev = q.get(timeout=10)["body"]
        while ev["stop_id"] != s["stop_id"]:  # the stops of the set-up, announced once held
            ev = q.get(timeout=10)["body"]
        assert (ev["tid"], ev["step"]) == (2, r["step"])  # announced again, now the step's landing
    finally:
        unsub()
        dbg.continue_(pid)
    assert dbg.wait_process(pid, timeout=60)["status"] == "finished"


class _AnnounceGate:
    """The kernel hook's announce lock, counting the threads that come to it."""

    def __init__(self, lock, cv: threading.Condition) -> None:
        self.lock, self.arrived, self.cv = lock, 0, cv

    def __enter__(self) -> None:
        with self.cv:
            self.arrived += 1
            self.cv.notify_all()
        self.lock.acquire()

    def __exit__(self, *exc) -> None:
        self.lock.release()


def test_two_threads_stopping_at_once_are_announced_in_stop_id_order(dbg):
    """A front-end that takes a step's first `stopped` event as its landing (the DAP adapter, the
    TUI) must see the stop `wait_stopped` answers, the oldest: forced here, the first of two
    threads to stop is delayed between taking its stop id and being held until the second has
    come to its own stop (and announced it, were ids, holds and events not given in one order).
    The events come in the order of the stop ids."""
    pid = dbg.launch("tests.step_lips:two_workers", n=1, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    bps = [dbg.set_breakpoint("pred", pid=pid, tid=t, when="after")["id"] for t in (2, 3)]
    hook, table = dbg.hook, dbg.stop_table
    cv = threading.Condition()
    gate = _AnnounceGate(getattr(hook, "_announce", threading.Lock()), cv)
    announced: list[int] = []

    def on_stop(m: dict) -> None:
        with cv:
            announced.append(m["body"]["stop_id"])
            cv.notify_all()

    real_hold, first = table.hold, []

    def hold(stop) -> None:
        if stop.pid == pid and not first:
            first.append(stop.id)
            with cv:  # until the other thread announced its stop, or waits to
                cv.wait_for(lambda: len(announced) > 0 or gate.arrived > 1, timeout=30)
        real_hold(stop)

    table.hold, hook._announce = hold, gate
    unsub = dbg.subscribe(on_stop, ["stopped"])
    try:
        dbg.continue_(pid, 1)
        stops = [dbg.wait_stopped(pid, t, timeout=60)["stop_id"] for t in (2, 3)]
        with cv:
            assert cv.wait_for(lambda: len(announced) == 2, timeout=30), announced
        assert announced == sorted(stops) and announced[0] == first[0], (announced, first)
    finally:
        unsub()
        del table.hold
        hook._announce = gate.lock
        for b in bps:
            dbg.remove_breakpoint(b)
        dbg.continue_(pid)
    assert dbg.wait_process(pid, timeout=60)["status"] == "finished"
