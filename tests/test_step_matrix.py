"""The thread-stepping matrix (tests/step_matrix.py) through every front-end: the Python API, the
protocol over WebSocket, the notebook widget's comm, and the TUI (Textual pilot) — the same
expectations table for each. Issue 50: a step never runs the process to its end while a stop
point remains, and the TUI keeps focus on the thread it stepped."""

from __future__ import annotations

import pytest

from symphony_lab.debugger import Debugger, DebugServer, RemoteDebugger
from symphony_lab.debugger.stepping import lands_on
from tests.step_matrix import CASES, EXITED, Case, landing, walk

IDS = [c.name for c in CASES]


@pytest.fixture(scope="module")
def dbg(engine):
    d = Debugger(engine)
    yield d
    d.detach()
    engine.kvfs.check()


def _walk_api(client, case: Case) -> list:
    pid = client.launch(case.fn, stop_on_entry=True)["pid"]
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
    assert _walk_api(dbg, case) == case.landings


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_protocol_over_websocket(dbg, case):
    server = DebugServer(dbg, allow_launch=True)
    remote = RemoteDebugger(server.url)
    try:
        assert _walk_api(remote, case) == case.landings
    finally:
        remote.close()
        server.close()


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

    assert walk(case, w.view["stops"][0], step_from) == case.landings


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
    assert seen == case.landings
