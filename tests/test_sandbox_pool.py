"""The sandbox pool's I/O thread, driven by hand: no zygote, no worker process, only the two
sockets whose order it must not depend on."""

from __future__ import annotations

import json
import mmap
import queue
import socket
import threading
import time
from types import SimpleNamespace

from symphony_core.sandbox.confine import SandboxSpec
from symphony_core.sandbox.job import SandboxJob
from symphony_core.sandbox.pool import SandboxManager
from symphony_core.sandbox.protocol import encode
from symphony_core.sandbox.twin import _serve, woken_on_kill
from symphony_core.sandbox.worker_link import N_SLOTS, Worker
from symphony_core.sched.process import Cancelled, Limits, Process
from symphony_core.sched.thread_state import KILL_CHECK_S

VOCAB = 8


def test_a_worker_exit_frame_still_in_its_socket_wins_over_the_zygotes_exit_report():
    """A worker sends its exit frame and exits; the zygote reports the exit on another socket. When
    the I/O thread reads that report first, the program still finished (CI once saw 1 of 200
    programs fail as 'exited with code 0 before the program finished')."""
    mgr = SandboxManager(SimpleNamespace(config=SimpleNamespace(vocab_size=VOCAB)))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl, zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = SandboxJob("def main(sym): return 42", "main", [], {}, "tiny", SandboxSpec())
    w = Worker(1, job, ours, mmap.mmap(-1, N_SLOTS * VOCAB * 4), VOCAB, 0)
    w.pid = 4242
    mgr._by_pid[w.pid] = w
    mgr._ctl = ctl
    try:
        theirs.sendall(encode({"op": "exit", "ok": 42}))
        theirs.close()  # the worker has gone
        zygote.send(json.dumps({"op": "exited", "pid": w.pid, "code": 0}).encode())
        mgr._on_ctl()  # the zygote's report, read before the worker's socket
        assert w.exit_frame == {"op": "exit", "ok": 42} and w.eof
        kind, header, _ = w.queues[0].get_nowait()
        assert (kind, header) == ("exit", {"op": "exit", "ok": 42})  # before the "dead" that follows
        assert w.queues[0].get_nowait()[0] == "dead"
    finally:
        for s in (ours, ctl, zygote):
            s.close()
        w.shm.close()


def test_a_kill_wakes_the_in_engine_threads_waiting_for_their_workers_requests():
    """A program's in-engine threads sleep between their worker's requests; a kill (a cancel, a
    limit) wakes them at once, not at their own next look at the kill flag (KILL_CHECK_S), and each
    raises the kill's reason."""
    job = SandboxJob("def main(sym): pass", "main", [], {}, "tiny", SandboxSpec())
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    w = Worker(1, job, ours, mmap.mmap(-1, N_SLOTS * VOCAB * 4), VOCAB, 0)
    proc = Process(lambda s: None, (), {}, "u", "tiny", 0, Limits())
    sym = SimpleNamespace(_th=SimpleNamespace(proc=proc))
    w.queues[1] = queue.Queue()  # a second worker thread's queue
    raised: dict[int, BaseException] = {}

    def serve(wtid: int) -> None:
        try:
            _serve(sym, w, wtid)
        except BaseException as e:
            raised[wtid] = e

    try:
        with woken_on_kill(proc, w):
            threads = [threading.Thread(target=serve, args=(i,)) for i in (0, 1)]
            for t in threads:
                t.start()
            time.sleep(0.2)  # both asleep in their queues
            t0 = time.monotonic()
            proc.kill(Cancelled("stop"))
            for t in threads:
                t.join(10)
            took = time.monotonic() - t0
        assert proc.kill_wakers == []
    finally:
        for s in (ours, theirs):
            s.close()
        w.shm.close()
    assert set(raised) == {0, 1} and all(isinstance(e, Cancelled) for e in raised.values())
    assert took < KILL_CHECK_S / 2, f"the kill took {took:.3f}s to reach the serving threads"
