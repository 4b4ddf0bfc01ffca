"""One stepping semantics and one session model behind every front-end.

The same scenario — a program that spawns sampling threads, stepped from entry to its end with
`step` alone — through the Python API (`Debugger`), the TUI (Textual's pilot pressing `s`) and
the notebook's widget model (`LabRun.step`, the run view): the same stops in the same order,
stepping into each spawned thread and back out to the program's next one. Plus the parts: step
over / step out, what a stop after `pred` says the model preferred and the program took, the
shared `SessionState`, and the notebook's run view (lanes per thread, the KV tree kept after
the run ends, scoped to its process).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from symphony_lab.debugger import Debugger
from symphony_lab.session_state import SessionState, scope_kv_tree

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lab_lips  # noqa: E402

LIPS = os.path.join(HERE, "lab_lips.py")


@pytest.fixture(scope="module")
def engine():
    """A private engine: the TUI's process pane lists every process."""
    from symphony_core import Engine

    eng = Engine(num_pages=512)
    yield eng
    eng.shutdown()


def key(stop: dict) -> tuple:
    """What makes two stops the same stop, whichever front-end met it."""
    res = stop.get("result") or {}
    taken = (res.get("taken") or {}).get("token") if isinstance(res, dict) else None
    return (
        stop["tid"],
        stop["where"],
        stop.get("call"),
        tuple(stop.get("reasons") or [stop["reason"]]),
        stop.get("line"),
        stop.get("seq"),
        taken,
    )


def python_api_stops(engine) -> list[tuple]:
    with Debugger(engine, stop_on_entry=True) as dbg:
        pid = dbg.launch(lab_lips.threads_in_turn)["pid"]
        stops = []
        s = dbg.wait_stopped(pid, timeout=60)
        while "exited" not in s:
            stops.append(key(s))
            dbg.step(pid, s["tid"])
            s = dbg.wait_stopped(pid, timeout=60)
        assert s["status"] == "finished"
    return stops


def tui_stops(engine) -> list[tuple]:
    pytest.importorskip("textual")
    from symphony_lab.tui import EmbeddedSession, SymphonyLab

    session = EmbeddedSession(f"{LIPS}:threads_in_turn", engine=engine)
    app = SymphonyLab(session)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            t0 = time.monotonic()
            while True:
                procs = app.state.get("processes", [])
                done = session.pid is not None and any(p["pid"] == session.pid and p.get("done") for p in procs)
                if done:
                    return
                held = [s for s in session.model.stops.values() if s["pid"] == session.pid]
                if (
                    held
                    and app.busy is None
                    and app.focused_stop() is not None
                    and app.focused_stop()["stop_id"] == held[-1]["stop_id"]
                ):
                    n = len(session.model.stop_log)
                    await pilot.press("s")
                    while len(session.model.stop_log) == n and not any(
                        p["pid"] == session.pid and p.get("done") for p in app.state.get("processes", [])
                    ):
                        assert time.monotonic() - t0 < 120, "the TUI's step never landed"
                        await pilot.pause(0.05)
                assert time.monotonic() - t0 < 120, "the TUI session did not reach the end"
                await pilot.pause(0.05)

    try:
        asyncio.run(drive())
        return [key(s) for s in session.model.stop_log if s["pid"] == session.pid]
    finally:
        session.close()


def widget_stops(engine) -> tuple[list[tuple], list[tuple], dict]:
    from symphony_lab.lab import Lab

    lab = Lab(engine=engine)
    lab.wait(60)
    try:
        run = lab.run(lab_lips.threads_in_turn, stop_on_entry=True, display=False)
        returned = []
        s = run.wait_stopped()
        while "exited" not in s:
            returned.append(key(s))
            s = run.step(tid=s["tid"])
        run.wait(60)
        folded = [key(s) for s in lab.state.stop_log if s["pid"] == run.pid]
        return returned, folded, run.view()
    finally:
        lab.shutdown()


def test_the_same_stops_through_the_python_api_the_tui_and_the_widget_model(engine):
    api = python_api_stops(engine)
    # entry; main's prefill; into thread 2 (a follow: not a breakpoint); its next pred; thread 2
    # ends, so the step lands where main's join returns (issue 50: the process's next stop point);
    # main spawns thread 3: into it; its next pred; its end: main's join again; the end.
    tids = [k[0] for k in api]
    assert tids == [1, 1, 2, 2, 1, 3, 3, 1], api
    assert [k[3] for k in api] == [
        ("entry",),
        ("step",),
        ("step", "follow"),
        ("step",),
        ("step",),
        ("step", "follow"),
        ("step",),
        ("step",),
    ], api
    assert all(k[6] is not None for k in api if k[0] > 1), "a pred(sampler=) stop says the token the engine took"
    tui = tui_stops(engine)
    assert tui == api
    returned, folded, view = widget_stops(engine)
    assert returned == api and folded == api
    # the run view: one lane per thread; the KV tree of the run is still there after the end
    lanes = {lane["tid"]: lane for lane in view["lanes"]}
    assert sorted(lanes) == [1, 2, 3]
    assert len(lanes[2]["tokens"]) == 2 and len(lanes[3]["tokens"]) == 2
    assert view["status"] == "finished"
    assert view["kv_tree"]["source"] == "kept" and len(view["kv_tree"]["files"]) >= 2
    assert view["kv_tree"]["edges"], "the forks of the prefill are in the kept tree"


def test_step_over_and_step_out(engine):
    with Debugger(engine, stop_on_entry=True) as dbg:
        pid = dbg.launch(lab_lips.threads_in_turn)["pid"]
        dbg.wait_stopped(pid)
        dbg.step_over(pid, 1)  # main's own pred
        s = dbg.wait_stopped(pid)
        assert (s["tid"], s["call"], s["where"]) == (1, "pred", "after")
        dbg.step_over(pid, 1)  # the threads' preds run through: main has no other pred
        assert dbg.wait_stopped(pid)["exited"]

        pid = dbg.launch(lab_lips.threads_in_turn)["pid"]
        dbg.wait_stopped(pid)
        dbg.step(pid, 1)
        dbg.wait_stopped(pid)
        dbg.step(pid, 1)
        s = dbg.wait_stopped(pid)
        assert s["tid"] == 2 and s["reasons"] == ["step", "follow"]
        dbg.step_out(pid, 2)  # out of one_answer: thread 2 ends, main stops when its join returns
        s = dbg.wait_stopped(pid)
        assert (s["tid"], s["call"], s["where"], s["reasons"]) == (1, "join", "after", ["step"])
        dbg.continue_(pid)
        assert dbg.wait_process(pid)["status"] == "finished"


def test_a_stop_says_what_the_model_preferred_and_what_the_program_took(engine):
    with Debugger(engine, stop_on_entry=True) as dbg:
        q, unsub = dbg.event_queue(["taken"])
        pid = dbg.launch(lab_lips.greedy_then_sample_yourself)["pid"]
        dbg.wait_stopped(pid)
        dbg.step(pid, 1)
        s = dbg.wait_stopped(pid)
        res = s["result"]
        top = res["topk"][0]
        assert res["preferred"]["token"] == top["token"]
        assert res["taken"] is None and res["chosen"]["by"] == "argmax"  # it samples on its own: not known yet
        dbg.step(pid, 1)
        s2 = dbg.wait_stopped(pid)
        ev = q.get(timeout=10)["body"]
        assert (ev["stop_id"], ev["seq"], ev["by"]) == (s["stop_id"], s["seq"], "fed")
        assert ev["token"] == s2["input"]["ids"][0]  # what it fed next is what it took
        # an override is what the program takes
        r = dbg.override(pid, 1, token=res["topk"][2]["token"])
        assert r["stop"]["result"]["taken"] == {
            **r["stop"]["result"]["taken"],
            "token": res["topk"][2]["token"],
            "by": "override",
        }
        dbg.continue_(pid)
        dbg.wait_process(pid)
        unsub()


def test_session_state_folds_the_event_stream():
    st = SessionState()
    ev = lambda name, **b: {"type": "event", "event": name, "body": b}  # noqa: E731
    st.apply(ev("process_start", pid=1, tid=1, args={"name": "p"}))
    st.apply(ev("thread_start", pid=1, tid=2, args={"name": "t"}))
    st.apply(
        ev(
            "syscall_enter",
            pid=1,
            tid=2,
            call="pred",
            seq=1,
            file="f.py",
            line=3,
            args={"tokens": [5, 6], "n_tokens": 2, "file": 9},
        )
    )
    st.apply(ev("syscall_exit", pid=1, tid=2, call="pred", seq=1, result={"argmax": 7, "token": 8}))
    st.apply(ev("syscall_enter", pid=1, tid=2, call="pred", seq=2, args={"tokens": [8], "n_tokens": 1, "file": 9}))
    st.apply(
        ev("stopped", stop_id=4, pid=1, tid=2, where="before", call="pred", seq=2, reason="pause", reasons=["pause"])
    )
    assert list(st.stops) == [4] and st.locations[(1, 2)]["line"] == 3
    st.apply(ev("continued", stop_id=4, pid=1, tid=2))
    assert not st.stops and len(st.stop_log) == 1
    lane = st.lane(1, 2, text_of=str)
    assert lane["prompt"] == "56" and [t["token"] for t in lane["tokens"]] == [8]
    assert st.lanes(1).keys() == {2}
    tree = {
        "files": [{"file": 9, "held_by": [1], "ancestry": []}, {"file": 10, "held_by": [2], "ancestry": []}],
        "edges": [],
        "roots": [9, 10],
    }
    st.apply({"type": "event", "event": "view", "ts": 1.0, "body": {"view": "kv_tree", "data": tree}})
    st.apply(ev("process_exit", pid=1, tid=1, args={"status": "finished"}))
    assert st.processes[1].done and st.processes[1].status == "finished"
    assert st.kv_tree() == tree  # kept after the end
    assert [f["file"] for f in scope_kv_tree(tree, {1})["files"]] == [9]


def test_a_scoped_user_must_name_the_process_to_step_over_or_out(engine):
    """Over a `symphony serve` connection a user steps only their own processes: step_over and
    step_out, like step, need a pid (without one they could act on another user's stop)."""
    from symphony_lab.debugger.scope import UserScope

    with Debugger(engine, stop_on_entry=True) as dbg:
        pid = dbg.launch(lab_lips.threads_in_turn, user="bob")["pid"]
        dbg.wait_stopped(pid)
        alice = UserScope("alice")
        for command in ("step_over", "step_out"):
            r = alice.handle(dbg, {"type": "request", "seq": 1, "command": command, "arguments": {}})
            assert not r["success"] and r["error"] == "ScopeError", r
            r = alice.handle(dbg, {"type": "request", "seq": 2, "command": command, "arguments": {"pid": pid}})
            assert not r["success"] and r["error"] == "ScopeError", r
        assert dbg.stops()["stops"][0]["pid"] == pid  # bob's stop is still held
        dbg.continue_(pid)
        dbg.wait_process(pid)
