"""The sandbox pool's I/O thread, driven by hand: no zygote, no worker process, only the two
sockets whose order it must not depend on."""

from __future__ import annotations

import json
import mmap
import socket
from types import SimpleNamespace

from symphony_core.sandbox.confine import SandboxSpec
from symphony_core.sandbox.job import SandboxJob
from symphony_core.sandbox.pool import SandboxManager
from symphony_core.sandbox.protocol import encode
from symphony_core.sandbox.worker_link import N_SLOTS, Worker

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
