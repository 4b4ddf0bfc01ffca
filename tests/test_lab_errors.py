"""The lab says what failed: a TUI follow-up that fails shows as a notice, a widget view that
cannot be refreshed carries the error (and loses it once it builds again), a breakpoint's
predicate that raises says so in the breakpoint, a broken event subscriber is logged and the LIP
goes on."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import pytest

from symphony_lab.debugger import Debugger
from symphony_lab.lab import Lab
from symphony_lab.tui import SymphonyLab
from symphony_lab.tui.debug_session import DebuggerSession
from symphony_lab.tui.session import StaticSession

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def two_preds(sym, prompt: str) -> int:
    kv = sym.kv_create()
    t = sym.pred(kv, sym.tokenize(prompt)).argmax()
    t = sym.pred(kv, [t]).argmax()
    sym.kv_close(kv)
    return t


def wait_for(fn, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- the TUI ---------------------------------------------------------------------------------------


def test_a_failed_tui_follow_up_is_a_notice_once(engine):
    dbg = Debugger(engine)
    session = DebuggerSession(dbg)
    try:
        session.start()
        session._reactor.submit("continue past stop 7", lambda: session.request("step", pid=987654, tid=1))
        notices = session.state()["notices"]
        assert len(notices) == 1 and notices[0].startswith("continue past stop 7 failed: SessionError")
        assert "987654" in notices[0], "the debugger's own message travels with it"
        assert session.state()["notices"] == [], "each notice is shown once"
    finally:
        session.close()
        dbg.detach()


def test_the_app_shows_the_sessions_notices():
    with open(os.path.join(ROOT, "tests", "data", "tui_session_state.json")) as f:
        recorded = json.load(f)
    state = {**recorded["state"], "notices": ["continue past stop 3 failed: TimeoutError: no response"]}
    app = SymphonyLab(StaticSession(state, "notices"), poll=0)

    async def run() -> None:
        async with app.run_test() as pilot:
            t0 = time.monotonic()
            while app.last_error is None:
                assert time.monotonic() - t0 < 10, "the notice never showed"
                await pilot.pause(0.05)
            assert app.last_error == "continue past stop 3 failed: TimeoutError: no response"
            assert "-shown" in app.query_one("#notice").classes

    asyncio.run(run())


# --- the debugger core -----------------------------------------------------------------------------


def test_a_breakpoint_predicate_that_raises_says_so(engine, caplog):
    dbg = Debugger(engine)
    try:
        bp = dbg.set_breakpoint("pred", where=lambda toks: toks[10**6] > 0)
        with caplog.at_level(logging.WARNING, logger="symphony_lab.debugger.breakpoints"):
            pid = dbg.launch(two_preds, "Hello there")["pid"]
            done = dbg.wait_process(pid, timeout=60)
            assert done["status"] == "finished", "the breakpoint does not stop: the LIP finishes"
        shown = next(b for b in dbg.breakpoints()["breakpoints"] if b["id"] == bp["id"])
        assert shown["where_error"] == "IndexError: list index out of range"
        assert shown["hits"] == 0
        assert sum("its `where` predicate raised" in r.getMessage() for r in caplog.records) == 1, "logged once"
    finally:
        dbg.detach()


def test_a_broken_subscriber_is_logged_and_the_lip_goes_on(engine, caplog):
    dbg = Debugger(engine)
    seen: list[str] = []

    def broken(msg: dict) -> None:
        raise ValueError("front-end bug")

    try:
        dbg.subscribe(broken)
        dbg.subscribe(lambda m: seen.append(m["event"]))
        with caplog.at_level(logging.WARNING, logger="symphony_lab.debugger.event_stream"):
            pid = dbg.launch(two_preds, "Hello there")["pid"]
            assert dbg.wait_process(pid, timeout=60)["status"] == "finished"
        assert "process_exit" in wait_for(lambda: seen if "process_exit" in seen else None, what="the exit event")
        assert any("an event subscriber failed" in r.getMessage() and r.exc_info for r in caplog.records)
    finally:
        dbg.detach()


# --- the notebook ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(engine):
    lab = Lab(engine=engine)
    lab.wait(300)
    yield lab
    lab.shutdown()


def test_a_widget_view_that_fails_to_refresh_says_so(lab, monkeypatch):
    run = lab.run(two_preds, "Hello there", display=False)
    run.result(timeout=60)
    w = run.widget
    wait_for(lambda: w.view.get("status") == "finished", what="the finished view")
    good = dict(w.view)

    def broken(_run):
        raise RuntimeError("the engine moved under the view")

    monkeypatch.setattr(lab.run_views, "run_view", broken)
    lab.mark_dirty(run.pid)
    wait_for(lambda: w.view.get("view_error"), what="the widget to carry the error")
    assert w.view["view_error"] == (
        f"the view of process {run.pid} could not be refreshed: RuntimeError: the engine moved under the view"
    )
    assert w.view["status"] == good["status"], "the last good view stays under the error"
    monkeypatch.undo()  # the view builds again (the pump retried it meanwhile): the error goes
    wait_for(lambda: "view_error" not in w.view, what="the error to clear")
