"""The sandbox without the HTTP layer: a worker's proxy `sym` against the engine's real one.

A sandboxed program must behave exactly as the same program run in-process (the LIP API is the
contract), and the engine must see it as an ordinary process — its syscalls traced on the bus
with the LIP's own file and line.
"""

from __future__ import annotations

import pytest

from tests.server_harness import LIPS

SOURCE = open(LIPS).read()


@pytest.fixture(scope="module")
def sandbox(engine):
    from symphony_core.sandbox.pool import SandboxManager

    mgr = SandboxManager(engine, max_workers=4)
    mgr.start()
    mgr.probe()
    yield mgr
    mgr.shutdown()


def _run(engine, mgr, entry, *args, sandboxed=True, user="tester"):
    from symphony_core.sandbox.job import SandboxJob
    from symphony_core.sandbox.twin import inprocess_lip, sandboxed_lip

    job = SandboxJob(SOURCE, entry, list(args), {}, entry, mgr.spec_for({}))
    if sandboxed:
        return engine.launch(sandboxed_lip, mgr, job, user=user, name=entry)
    return engine.launch(inprocess_lip, job, user=user, name=entry)


def test_probe_reports_what_is_enforced(sandbox):
    conf = sandbox.confinement
    assert conf and conf["enforced"], conf
    assert all(isinstance(x, str) for x in conf["enforced"] + conf["missing"])


def test_sandboxed_program_behaves_like_in_process(engine, sandbox):
    """Multi-row Dists (inline bytes), one-row Dists (shared memory), seeded samplers, masks,
    forks, truncation, threads, named files, errors: the same results in and out of the sandbox."""
    inproc = _run(engine, sandbox, "features", sandboxed=False).result(120)
    boxed = _run(engine, sandbox, "features").result(120)
    assert boxed == inproc
    assert boxed["all_shape"][0] > 4 and boxed["pred_closed"].startswith("KVError")
    assert boxed["open_missing"] == "KVNotFound"


def test_sandboxed_syscalls_are_traced_as_a_normal_process(engine, sandbox):
    """The kernel traces a sandboxed program's syscalls with its own file and line."""
    events = []
    unsubscribe = engine.bus.subscribe(events.append)
    try:
        p = _run(engine, sandbox, "traced")
        assert p.result(120) == 3
        assert list(p.messages()) == ["x"]
    finally:
        unsubscribe()
    mine = [e for e in events if e.pid == p.pid and e.kind == "syscall_enter"]
    calls = [(e.call, e.line) for e in mine]
    lines = SOURCE.splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith("def traced"))
    assert calls == [("kv_create", start + 1), ("pred", start + 2), ("send", start + 3)], calls
    assert {e.file for e in mine} == {"<lip traced>"}
    assert any(e.kind == "process_exit" and e.pid == p.pid for e in events)
    done = [e for e in events if e.pid == p.pid and e.kind == "syscall_exit" and e.call == "pred"]
    assert done and done[0].result["argmax"] == engine.pred(engine.kv_create(), [1, 2, 3]).argmax()
