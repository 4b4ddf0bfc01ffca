"""The server's end of one sandboxed worker process: its socket, its shared-memory logits
slots, the queues that route its requests to the in-engine threads, its KV handles, and how
it ended. The worker's own side is worker.py; the pool that starts them is pool.py.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import queue
import signal
import socket
import threading
from typing import Any, cast

import torch

from ..errors import KVError, SymphonyError
from ..kvfs import KV
from .job import SandboxJob
from .protocol import FrameReader, encode_head

N_SLOTS = 4
MAX_QUEUED = 32  # outstanding requests per worker thread before it counts as flooding
MAX_STDOUT = 256 << 10


class SandboxError(SymphonyError):
    """The sandbox could not run a program (no worker, a worker that died, a protocol violation)."""


def kv_handle_info(kv: KV, hid: int) -> dict:
    return {"h": hid, "len": kv.len, "path": kv.path, "mode": kv.mode}


class Worker:
    """The server's view of one sandboxed worker process."""

    def __init__(
        self, wid: int, job: SandboxJob, sock: socket.socket, shm: mmap.mmap, slot_floats: int, slot: int
    ) -> None:
        self.wid, self.job, self.sock, self.shm, self.slot = wid, job, sock, shm, slot
        self.slot_floats, self.n_slots = slot_floats, N_SLOTS
        self.slot_views = [
            torch.frombuffer(shm, dtype=torch.float32, count=slot_floats, offset=k * slot_floats * 4)
            for k in range(N_SLOTS)
        ]
        self.queues: dict[int, queue.Queue] = {0: queue.Queue()}
        self.reader = FrameReader(max_header=4 << 20, max_payload=16 << 20)
        self.pid: int | None = None
        self.spawned = threading.Event()
        self.spawn_error: str | None = None
        self.dead = threading.Event()
        self.death: dict | None = None
        self.eof = False
        self.violation: str | None = None
        self.exit_frame: dict | None = None
        self.handles: dict[int, KV] = {}
        self.closed_order: collections.deque[int] = collections.deque()
        self.threads: dict[int, Any] = {}
        self.samplers: dict = {}
        self.ended: set[int] = set()
        self.proc = None  # the in-engine Process, once the program started
        self.stdout_bytes = 0
        self._hids = itertools.count(1)
        self._wtids = itertools.count(1)
        self._wlock = threading.Lock()
        self.released = False

    # handles, threads
    def kv(self, hid: Any) -> KV:
        kv = self.handles.get(hid) if isinstance(hid, int) and not isinstance(hid, bool) else None
        if kv is None:
            raise KVError(f"no KV handle {hid!r} in this process (handles are per process)")
        return kv

    def close_handle(self, hid: int) -> None:
        """Closed handles stay nameable for a while, so a use after close gets the engine's own
        'closed handle' error; the oldest are forgotten past a bound."""
        kv = self.handles.get(hid)
        if kv is not None and kv.closed:
            self.closed_order.append(hid)
            while len(self.closed_order) > 1024:
                self.handles.pop(self.closed_order.popleft(), None)

    def add_kv(self, kv: KV) -> dict:
        hid = next(self._hids)
        self.handles[hid] = kv
        return kv_handle_info(kv, hid)

    def new_thread(self) -> int:
        wtid = next(self._wtids)
        self.queues[wtid] = queue.Queue()
        return wtid

    # I/O
    def send(self, header: dict, payload: bytes | memoryview = b"") -> None:
        head = encode_head(header, len(payload))
        with self._wlock:
            try:
                self.sock.sendall(head)
                if payload:  # sent as it is: logits may be many MiB, and not copied into one buffer
                    self.sock.sendall(payload)
            except (OSError, ValueError) as e:
                if not self.eof and not self.dead.is_set():
                    raise SandboxError(f"sandbox worker unreachable: {e}") from None

    def route(self, h: dict, p: bytes) -> str | None:
        """Hand one frame from the worker to whom it is for: its printed output to the job, a thread's
        request to the queue of that thread's twin in the engine. Returns why the frame breaks the
        protocol (the worker is then stopped), or None."""
        op = h.get("op")
        if op == "stdout":
            text = h.get("text")
            if isinstance(text, str) and self.stdout_bytes < MAX_STDOUT:
                self.stdout_bytes += len(text) + 128  # and each frame's entry: one-letter prints add up too
                try:
                    self.job.on_stdout(str(h.get("stream", "stdout"))[:10], text[:MAX_STDOUT])
                except Exception:
                    pass
            return None
        if op == "exit":
            self.exit_frame = h
            self.queues[0].put(("exit", h, p))
            return None
        t = h.get("t")
        q = self.queues.get(t) if isinstance(t, int) and not isinstance(t, bool) else None
        if op == "thread_exit":
            if q is not None and t != 0:
                self.ended.add(cast(int, t))  # a queue was found: `t` is an int
                q.put(("thread_exit", h, p))
            return None
        if t in self.ended:
            # Answered by the program's own main-thread twin: the I/O thread that routes never writes to a
            # worker's socket, which blocks for as long as a worker that floods does not read its answers.
            q, h = self.queues[0], {"id": h.get("id"), "ended": t}
            kind = "ended"
        elif q is None:
            return f"request for unknown thread {t!r}"
        else:
            kind = "call"
        if q.qsize() > MAX_QUEUED:
            return "too many outstanding requests"
        q.put((kind, h, p))
        return None

    def push_all(self, item) -> None:
        for q in list(self.queues.values()):
            q.put(item)

    def death_message(self) -> str:
        if self.violation:
            return f"sandbox worker stopped: protocol violation ({self.violation})"
        self.dead.wait(2.0)  # the zygote's report of how it ended follows the end of its socket
        d = self.death or {}
        cpu, sig, code = d.get("cpu"), d.get("signal"), d.get("code")
        lim = self.job.spec.cpu_seconds
        if code == 152 or (sig in (signal.SIGXCPU, signal.SIGKILL) and cpu is not None and cpu >= lim - 0.5):
            return f"sandbox worker killed: CPU time limit of {lim} s exceeded"
        if sig:
            return f"sandbox worker killed by signal {signal.Signals(sig).name}"
        if code is not None:
            return f"sandbox worker exited with code {code} before the program finished"
        return "sandbox worker ended unexpectedly"


__all__ = ["N_SLOTS", "SandboxError", "Worker", "kv_handle_info"]
