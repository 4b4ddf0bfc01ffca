"""`/health` reports a stalled sandbox I/O thread (issue 53).

Since #53 the one I/O thread that reads every worker never writes to a worker's socket, so a
program that floods requests and reads no answer cannot block it (tests/test_hostile_neighbours.py,
`test_flooding_an_ended_thread_stalls_no_one`, samples `/health` through such a flood). What can
still hold it is the server's own side: a callback it runs for a worker (the print sink, which
takes the record's lock) or a zygote that stops reading its control socket. The stall report is
the alarm for that: here a print sink is held on purpose, and `/health` must say `degraded` with
`sandbox.io_stalled_s` past 5 s while it is held, then `ok` again once it is let go, when a benign
program started during the stall completes with its exact output.
"""

from __future__ import annotations

import threading
import time

import pytest
from starlette.testclient import TestClient

from tests.server_harness import LIPS

SOURCE = (
    open(LIPS).read()
    + """

def print_once(sym):
    print("hello")
    return "printed"


def greedy6(sym):
    kv = sym.kv_create()
    out, toks = [], [504, 3458, 282, 4649, 314, 2113, 30, 378, 1345]
    for _ in range(6):
        toks = [int(sym.pred(kv, toks).argmax())]
        out.append(toks[0])
    return out
"""
)


@pytest.fixture(scope="module")
def sandbox(engine):
    from symphony_core.sandbox.pool import SandboxManager

    mgr = SandboxManager(engine, max_workers=4)
    mgr.start()
    yield mgr
    mgr.shutdown()


def _run(engine, mgr, entry, on_stdout=None, user="tester"):
    from symphony_core.sandbox.job import SandboxJob
    from symphony_core.sandbox.twin import sandboxed_lip

    job = SandboxJob(SOURCE, entry, [], {}, entry, mgr.spec_for({}))
    if on_stdout is not None:
        job.on_stdout = on_stdout
    return engine.launch(sandboxed_lip, mgr, job, user=user, name=entry)


def test_health_reports_a_stalled_io_thread_and_recovers(engine, sandbox):
    from symphony_core.server.app import create_app
    from symphony_core.server.state import ServerConfig
    from symphony_core.server.users import Users

    app = create_app(engine, Users({}), ServerConfig(), sandbox)
    ref = _run(engine, sandbox, "greedy6").result(120)
    held, entered = threading.Event(), threading.Event()

    def stuck_sink(stream: str, text: str) -> None:  # the I/O thread runs it: a record's lock held too long
        entered.set()
        held.wait(120)

    with TestClient(app) as http:
        assert http.get("/health").json()["status"] == "ok"
        stuck = _run(engine, sandbox, "print_once", on_stdout=stuck_sink, user="mallory")
        try:
            assert entered.wait(60), "the print never reached the server"
            benign = _run(engine, sandbox, "greedy6", user="alice")
            time.sleep(6.5)
            h = http.get("/health").json()
            assert h["status"] == "degraded" and h["sandbox"]["io_stalled_s"] >= 5, h
            assert not benign.done  # its worker's frames wait for the one I/O thread
        finally:
            held.set()
        assert benign.result(120) == ref
        assert stuck.result(120) == "printed"
        h = http.get("/health").json()
        assert h["status"] == "ok" and h["sandbox"]["io_stalled_s"] < 5, h
