"""Issue 50: a step back keeps the override made at the stop it leaves, stops with its own reason
("step_back", not "breakpoint"), and from a thread with no pred says there is nothing to step
back instead of replaying the process; a replay that takes another path than its recording (a
named file there now that was not) reports the divergence."""

from __future__ import annotations

import pytest

from symphony_lab.debugger import Debugger, DebuggerError

GREEDY = "tests.lips_for_tests:greedy"
PATH = "/shared/step-back-test.kv"


@pytest.fixture
def dbg(engine):
    d = Debugger(engine)
    yield d
    d.detach()
    engine.kvfs.check()


def _step(dbg, pid: int, tid: int = 1) -> dict:
    r = dbg.step(pid, tid)
    return dbg.wait_stopped(pid, timeout=60, after=r["after"], step=r["step"])


def test_step_back_keeps_the_override_and_says_why_it_stopped(dbg, engine):
    pid = dbg.launch(GREEDY, "Once upon a time", max_tokens=4, stop_on_entry=True, record=True)["pid"]
    entry = dbg.wait_stopped(pid, timeout=60)
    with pytest.raises(DebuggerError, match="nothing to step back"):
        dbg.step_back(pid, 1)
    assert not engine.runtime.processes[pid].done, "the process is left as it was"
    assert dbg.wait_stopped(pid, timeout=5)["stop_id"] == entry["stop_id"]
    for _ in range(3):
        s = _step(dbg, pid)
    assert (s["call"], s["where"], s["preds"]) == ("pred", "after", 3)
    forced = s["result"]["topk"][3]["token"]  # the model's 4th choice
    dbg.override(pid, 1, token=forced)
    back = dbg.step_back(pid, 1)
    new = back["pid"]
    s2 = dbg.wait_stopped(new, timeout=60)
    assert (s2["reason"], s2["call"], s2["where"], s2["preds"]) == ("step_back", "pred", "after", 2)
    s3 = _step(dbg, new)
    assert s3["preds"] == 3 and s3["result"]["chosen"]["token"] == forced, "the override made before the step back"
    dbg.continue_(new)
    out = engine.runtime.processes[new].result(timeout=60)
    assert out[2] == forced
    assert dbg.replay_status(new)["diverged"] == []


def test_a_replay_that_takes_another_path_reports_the_divergence(dbg, engine):
    pid = dbg.launch("tests.step_lips:open_or_create", PATH, record=True)["pid"]
    try:
        assert engine.runtime.processes[pid].result(timeout=60) is False
        q, unsub = dbg.event_queue(["replay_diverged"])
        new = dbg.replay(pid)["pid"]  # the file is there now: kv_open returns where it raised
        assert engine.runtime.processes[new].result(timeout=60) is True
        unsub()
        ev = q.get(timeout=5)["body"]
        assert (ev["pid"], ev["tid"], ev["call"]) == (new, 1, "kv_open")
        (d,) = dbg.replay_status(new)["diverged"]
        assert d["call"] == "kv_open" and "raised KVNotFound" in d["why"]
    finally:
        engine.kv_remove(PATH)
