"""One snapshot builder for every front-end (symphony_lab/debugger/snapshot.py): the TUI's session
and the notebook's views read the same debugger state through it, under the same names."""

from __future__ import annotations

import time

import pytest

from symphony_lab.debugger import snapshot as snapshot_mod
from symphony_lab.debugger.snapshot import SNAPSHOT_KEYS, keep_processes
from symphony_lab.lab import Lab
from symphony_lab.tui.debug_session import DebuggerSession


def two_preds(sym, prompt: str) -> int:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    t = sym.pred(kv, toks).argmax()
    t = sym.pred(kv, [t]).argmax()
    sym.kv_close(kv)
    return t


@pytest.fixture(scope="module")
def fronts(engine):
    """A notebook Lab and a TUI session on the same debugger: one finished run, one stopped at entry
    with its KV file open."""
    lab = Lab(engine=engine)
    lab.wait(300)
    done = lab.run(two_preds, "Hello there", display=False)
    done.result(timeout=60)
    held = lab.run(two_preds, "Once upon a time", display=False, stop_on_entry=True)
    dbg = lab.debugger
    deadline = time.monotonic() + 30
    while not any(s["pid"] == held.pid for s in dbg.stops()["stops"]):
        assert time.monotonic() < deadline, "the run to stop on entry"
        time.sleep(0.02)
    tui = DebuggerSession(dbg)
    tui.start()
    yield lab, tui
    tui.close()
    p = held.process
    if p is not None and not p.done:
        p.cancel("test over")
        p.wait(10)
    lab.shutdown()


def without_ts(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if k in SNAPSHOT_KEYS and k != "ts"}


def test_tui_and_notebook_get_the_same_snapshot(fronts):
    lab, tui = fronts
    tui_state = tui.state()
    sidebar = lab.run_views.lab_view()
    assert set(SNAPSHOT_KEYS) <= set(tui_state) and set(SNAPSHOT_KEYS) <= set(sidebar)
    assert "kv" not in tui_state, "one name for the KV tree: kv_tree"
    assert without_ts(tui_state) == without_ts(sidebar)
    snap = without_ts(sidebar)
    assert [s["where"] for s in snap["stops"]] == ["entry"]
    assert {p["status"] for p in snap["processes"]} >= {"finished"}
    assert snap["timeline"]["batches"], "the finished run's preds are in the timeline"
    # the run view reads the same snapshot: its stops are the snapshot's, with the source added
    held = next(r for r in lab._runs.values() if r.pid == snap["stops"][0]["pid"])
    run_stops = lab.run_views.run_view(held)["stops"]
    assert [{k: v for k, v in s.items() if k != "source"} for s in run_stops] == snap["stops"]


def test_a_change_to_the_builder_shows_in_both(fronts, monkeypatch):
    lab, tui = fronts
    monkeypatch.setattr(snapshot_mod, "KEEP_DONE", 0)
    monkeypatch.setattr(snapshot_mod, "TIMELINE_LIMIT", 1)
    for snap in (tui.state(), lab.run_views.lab_view()):
        assert snap["processes"] and not any(p["done"] for p in snap["processes"])
        assert len(snap["timeline"]["batches"]) == 1


def test_keep_processes_keeps_live_ones_and_the_newest_done():
    procs = [{"pid": 1, "done": True}, {"pid": 2, "done": False}, {"pid": 3, "done": True}, {"pid": 4, "done": True}]
    assert [p["pid"] for p in keep_processes(procs, 2)] == [2, 3, 4]
    assert [p["pid"] for p in keep_processes(procs, 0)] == [2]
