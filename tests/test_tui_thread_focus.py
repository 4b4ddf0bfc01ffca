"""Issue 50 in the TUI: four answer threads of the README's example stopped at once — `s` on one
of them steps that thread and the focus stays on it (it used to jump to another stopped thread);
`u` on a thread that has returned no pred says there is nothing to step back (it used to cancel
and replay the whole process)."""

from __future__ import annotations

import asyncio
import os

from symphony_lab.tui.app import SymphonyLab
from symphony_lab.tui.embedded import EmbeddedSession
from symphony_lab.tui.processes import ProcTree
from tests.tui_pilot import screen_text, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "lips", "prefix_parallel.py")


def test_step_keeps_focus_on_the_stepped_thread_and_step_back_needs_a_pred(engine):
    session = EmbeddedSession(
        f"{EXAMPLE}:prefix_parallel", (), {"max_tokens": 3, "path": "/shared/focus-test.kv"}, engine=engine
    )
    app = SymphonyLab(session)

    async def drive() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: app.focused_stop() is not None, "the stop on entry")
            pid = app.focus_pt[0]
            session.request("set_breakpoint", call="kv_fork", pid=pid, when="after")  # each answer thread
            await pilot.press("c")

            def answer_stops() -> list[dict]:
                return [s for s in app.state.get("stops", []) if s["pid"] == pid and s["call"] == "kv_fork"]

            await wait_until(pilot, lambda: len(answer_stops()) == 4, "four answer threads at their fork", 120)
            tids = sorted(s["tid"] for s in answer_stops())
            assert tids == [2, 3, 4, 5]
            app.post_message(ProcTree.Focus(pid, 5))
            await wait_until(pilot, lambda: app.focus_pt == (pid, 5), "the focus on t5")
            await pilot.press("s")

            def landed() -> dict | None:
                s = app.focused_stop()
                return s if app.busy is None and s is not None and s["call"] == "pred" else None

            await wait_until(pilot, lambda: landed() is not None, "t5's step", 120)
            s = landed()
            assert app.focus_pt == (pid, 5) and (s["tid"], s["where"], s["preds"]) == (5, "after", 1)
            assert sorted(x["tid"] for x in answer_stops()) == [2, 3, 4], "the others still held at their fork"
            assert f"pid {pid} t5" in screen_text(app), "the tokens pane shows the stepped thread"

            app.post_message(ProcTree.Focus(pid, 4))  # held after its fork: no pred returned yet
            await wait_until(pilot, lambda: app.focus_pt == (pid, 4), "the focus on t4")
            await pilot.press("u")
            await wait_until(pilot, lambda: "nothing to step back" in (app.last_error or ""), "the step back's answer")
            assert {s["pid"] for s in app.state.get("stops", [])} == {pid}, "no replay launched, the process kept"
            session.request("clear_breakpoints")
            await pilot.press("c")

    try:
        asyncio.run(drive())
    finally:
        session.close()
        engine.kv_remove("/shared/focus-test.kv")
