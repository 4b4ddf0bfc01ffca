"""The sandbox's worker pool: starts the zygote, hands out workers, carries their messages.

A program received over the network runs in a confined worker process (see `zygote.py`,
`confine.py`, `worker.py`). Inside the engine it is an ordinary LIP process, `sandboxed_lip`
(twin.py), whose threads execute on their real `sym` the syscalls the worker's threads
send. This file starts, tracks and stops the workers (worker_link.py is the server's end of
one, which routes each of its frames) and carries their messages.

One I/O thread serves every worker socket and the zygote's control socket; requests are
routed to the in-engine thread of the worker thread that sent them.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import mmap
import os
import queue
import selectors
import socket
import subprocess
import sys
import threading
import time

from ..sched.process import LIPError
from .confine import SandboxSpec, runtime_paths
from .job import SandboxJob
from .protocol import ProtocolError
from .uid_block import UidBlock
from .worker_link import N_SLOTS, SandboxError, Worker

log = logging.getLogger("symphony.sandbox")

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
MAX_RESTARTS_PER_MINUTE = 5
IO_STALL_S = 5.0  # the I/O thread not round its loop for this long: /health says the sandbox is degraded


class SandboxManager:
    """Starts the zygote, hands out workers (at most `max_workers` at once), routes their I/O."""

    def __init__(
        self, engine, *, max_workers: int = 32, uid_base: int | None = None, defaults: SandboxSpec | None = None
    ) -> None:
        self.engine = engine
        self.max_workers = max_workers
        # Worker uids: a block this server alone holds (uid_block.py), unless the caller names one.
        self._uids = UidBlock(max_workers) if uid_base is None and os.geteuid() == 0 else None
        self.uid_base = uid_base if uid_base is not None else self._uids.base if self._uids else 2_000_000
        self.defaults = defaults or SandboxSpec()
        pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.defaults.ro_paths = runtime_paths(pkg_dir)
        # `sym.tokenizer_file` in the sandbox: the model's tokenizer.json, bound read-only at its
        # real path (a symlink's target, as in a Hugging Face cache). It tells a LIP nothing that
        # `sym.detokenize` does not already.
        model_dir = getattr(engine, "model_dir", None)  # none: sym.tokenizer_file says the sandbox lacks it
        tok = os.path.realpath(os.path.join(model_dir, "tokenizer.json")) if model_dir is not None else ""
        self.tokenizer_file = tok if tok and os.path.isfile(tok) else None
        if self.tokenizer_file and not any(tok.startswith(p.rstrip("/") + "/") for p in self.defaults.ro_paths):
            self.defaults.ro_paths.append(tok)
        self.vocab = engine.config.vocab_size
        self.confinement: dict | None = None
        self.started_total = 0
        self._free_slots = list(range(max_workers))
        self._slot_cv = threading.Condition()
        self._by_id: dict[int, Worker] = {}
        self._by_pid: dict[int, Worker] = {}
        self._ids = itertools.count(1)
        self._ctl_lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._pending: list[tuple[str, Worker]] = []
        self._plock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop = False
        self.zygote: subprocess.Popen | None = None
        self.zygote_pid: int | None = None
        self.restarts = 0
        self.failed: str | None = None  # why the sandbox was given up on
        self._restart_times: list[float] = []
        self._ready = threading.Event()
        self.io_beat = time.monotonic()
        self._io = threading.Thread(target=self._io_loop, name="symphony-sandbox-io", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the zygote (call from the main thread: it dies with the thread that forked it).
        If it dies later, the I/O thread starts another (see `_on_ctl`)."""
        self._launch_zygote()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._io.start()
        if not self._ready.wait(60):
            raise SandboxError("the sandbox zygote did not start within 60 s")

    def _launch_zygote(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": "/scratch",
            "TMPDIR": "/scratch",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MALLOC_ARENA_MAX": "2",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            **({"SYMPHONY_SANDBOX_DEBUG": "1"} if os.environ.get("SYMPHONY_SANDBOX_DEBUG") else {}),
        }
        self._ready.clear()
        self.zygote = subprocess.Popen(
            [sys.executable, "-I", ZYGOTE, str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()],
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        with self._ctl_lock:
            self._ctl = ours
        self._sel.register(ours, selectors.EVENT_READ, "ctl")

    def _restart_zygote(self) -> None:
        """The zygote died under a running server: start another, unless it keeps dying."""
        now = time.monotonic()
        self._restart_times = [t for t in self._restart_times if now - t < 60] + [now]
        zygote = self.zygote
        assert zygote is not None  # only a started zygote can die
        try:
            zygote.wait(5)
        except subprocess.TimeoutExpired:
            zygote.kill()
        if len(self._restart_times) > MAX_RESTARTS_PER_MINUTE:
            self.failed = f"its zygote died {len(self._restart_times)} times within a minute"
            log.error("sandbox: not restarting the zygote again (%s)", self.failed)
            return
        self.restarts += 1
        log.warning("sandbox: restarting the zygote (restart %d)", self.restarts)
        self._launch_zygote()

    def healthy(self) -> bool:
        """The zygote is up and answering (False while it restarts, or if it was given up on), and
        the I/O thread is not stuck (`io_stalled_s`)."""
        z = self.zygote
        up = self.failed is None and self._ready.is_set() and z is not None and z.poll() is None
        return up and self.io_stalled_s() < IO_STALL_S

    def io_stalled_s(self) -> float:
        """Seconds since the I/O thread last came round its loop (it comes round at least every second)."""
        return max(0.0, time.monotonic() - self.io_beat)

    def probe(self) -> dict:
        """Run an empty worker once and learn what this machine enforces."""
        job = SandboxJob("", "", [], {}, "probe", self.spec_for({}))
        w = self.spawn(job, None)
        try:
            w.send({"op": "probe"})
            kind, h, _ = w.queues[0].get(timeout=30)
            if kind == "exit" and isinstance(h.get("ok"), dict):
                self.confinement = h["ok"]
        except queue.Empty:
            self.confinement = {"enforced": [], "missing": ["probe worker did not answer"]}
        finally:
            self.release(w)
        return self.confinement or {}

    def shutdown(self, timeout: float = 10.0) -> None:
        if self.zygote is None:
            if self._uids is not None:
                self._uids.release()
            return
        self._stop = True
        with self._ctl_lock:
            try:
                self._ctl.send(json.dumps({"op": "shutdown"}).encode())
            except OSError:
                pass
        try:
            self.zygote.wait(timeout)
        except subprocess.TimeoutExpired:
            self.zygote.kill()
            self.zygote.wait(5)
        self._wake()
        self._io.join(2)
        if self._uids is not None:  # the zygote is gone, and its workers with it
            self._uids.release()

    def spec_for(self, over: dict) -> SandboxSpec:
        d = SandboxSpec(**{**self.defaults.__dict__})
        for k, v in over.items():
            if hasattr(d, k) and k not in ("uid", "root_dir", "ro_paths"):
                setattr(d, k, min(v, getattr(d, k)))  # a request may only tighten the limits
        return d

    def live_workers(self) -> int:
        return len(self._by_id)

    # --- workers -------------------------------------------------------------------------------
    def spawn(self, job: SandboxJob, proc) -> Worker:
        with self._slot_cv:
            while not self._free_slots:
                if proc is not None and proc.kill_reason is not None:
                    raise proc.kill_reason
                self._slot_cv.wait(0.1)
            slot = self._free_slots.pop(0)
        try:
            return self._spawn(job, slot)
        except BaseException:
            self._free_slot(slot)
            raise

    def _wait_healthy(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while not self.healthy():
            if self._stop:
                raise SandboxError("the sandbox is shutting down")
            if self.failed is not None:
                raise SandboxError(f"the sandbox is not running: {self.failed}")
            if time.monotonic() > end:
                raise SandboxError(f"the sandbox zygote did not come back within {timeout:g} s")
            self._ready.wait(0.1)

    def _spawn(self, job: SandboxJob, slot: int) -> Worker:
        self._wait_healthy()
        wid = next(self._ids)
        spec = job.spec
        if os.geteuid() == 0:
            spec.uid = self.uid_base + slot
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        size = N_SLOTS * self.vocab * 4
        fd = os.memfd_create(f"symphony-logits-{wid}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            # the worker cannot shrink it under the server (which would SIGBUS the server's writes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            shm = mmap.mmap(fd, size)
            w = Worker(wid, job, ours, shm, self.vocab, slot)
            self._by_id[wid] = w
            msg = {
                "op": "spawn",
                "id": wid,
                "spec": spec.__dict__,
                "shm_size": size,
                "slot_bytes": self.vocab * 4,
                "n_slots": N_SLOTS,
            }
            with self._ctl_lock:
                socket.send_fds(self._ctl, [json.dumps(msg).encode()], [theirs.fileno(), fd])
        finally:
            theirs.close()
            os.close(fd)
        with self._plock:
            self._pending.append(("add", w))
        self._wake()
        if not w.spawned.wait(30) or w.spawn_error:
            self._by_id.pop(wid, None)
            self.release(w)
            raise SandboxError(f"could not start a sandbox worker: {w.spawn_error or 'no answer from the zygote'}")
        self.started_total += 1
        return w

    def release(self, w: Worker) -> None:
        """End the worker (if it still runs) and free its resources."""
        if w.released:
            return
        w.released = True
        if not w.dead.is_set() and w.pid is not None:
            self._kill(w.pid)
        with self._plock:
            self._pending.append(("remove", w))
        self._wake()

    def _kill(self, pid: int) -> None:
        with self._ctl_lock:
            try:
                self._ctl.send(json.dumps({"op": "kill", "pid": pid}).encode())
            except OSError:
                pass

    def _free_slot(self, slot: int) -> None:
        with self._slot_cv:
            if slot not in self._free_slots:
                self._free_slots.append(slot)
            self._slot_cv.notify()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    # --- the I/O thread ---------------------------------------------------------------------------
    def _io_loop(self) -> None:
        while not (self._stop and (self.zygote is None or self.zygote.poll() is not None)):
            try:
                events = self._sel.select(timeout=1.0)
            except OSError:
                continue
            self.io_beat = time.monotonic()
            for key, _ in events:
                try:
                    if key.data == "wake":
                        os.read(self._wake_r, 4096)
                    elif key.data == "ctl":
                        self._on_ctl()
                    else:
                        self._on_worker(key.data)
                except Exception:  # the I/O thread must outlive any one worker's trouble
                    log.exception("sandbox I/O")
            self._apply_pending()

    def _apply_pending(self) -> None:
        with self._plock:
            pending, self._pending = self._pending, []
        for what, w in pending:
            if what == "add":
                if not w.released:
                    try:
                        self._sel.register(w.sock, selectors.EVENT_READ, w)
                    except (KeyError, ValueError):
                        pass
            else:
                try:
                    self._sel.unregister(w.sock)
                except (KeyError, ValueError):
                    pass
                w.sock.close()
                if w.dead.is_set() or w.pid is None:
                    self._forget(w)

    def _forget(self, w: Worker) -> None:
        self._by_id.pop(w.wid, None)
        if w.pid is not None:
            self._by_pid.pop(w.pid, None)
        try:
            w.slot_views = []
            w.shm.close()
        except (BufferError, ValueError):
            pass  # a view is still held by a late thread; the mapping goes with the last reference
        self._free_slot(w.slot)

    def _on_ctl(self) -> None:
        try:
            data = self._ctl.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            if not self._stop:
                log.error("sandbox zygote exited")
            self._sel.unregister(self._ctl)
            self._ready.clear()
            for gone in list(self._by_id.values()):
                gone.death = {"note": "zygote gone"}
                gone.dead.set()
                gone.spawned.set()
                gone.push_all(("dead", {}, b""))
                if gone.released:
                    self._forget(gone)
            self._ctl.close()
            if not self._stop:
                self._restart_zygote()
            return
        msg = json.loads(data)
        op = msg.get("op")
        if op == "ready":
            self.zygote_pid = msg.get("pid")
            self._ready.set()
        elif op == "spawned":
            w = self._by_id.get(msg.get("id"))
            if w is not None:
                w.pid = msg["pid"]
                self._by_pid[w.pid] = w
                w.spawned.set()
        elif op == "error":
            w = self._by_id.get(msg.get("id"))
            if w is not None:
                w.spawn_error = msg.get("msg", "error")
                w.spawned.set()
        elif op == "exited":
            w = self._by_pid.get(msg.get("pid"))
            if w is not None:
                # What the worker sent before it exited (its exit frame above all) waits in its socket
                # past its exit, and the zygote's report on another socket may be read first: read it now.
                while not w.eof and w.violation is None and self._on_worker(w):
                    pass
                w.death = msg
                w.dead.set()
                w.push_all(("dead", {}, b""))
                proc = w.proc
                if w.exit_frame is None and not w.released and proc is not None and not proc.done:
                    # threads blocked in a long syscall (recv, join) learn it now, not when it returns
                    e = LIPError(f"process {proc.pid} ({proc.name}) failed: {w.death_message()}")
                    e.error_type = "SandboxError"
                    proc.kill(e)
                if w.released:
                    self._forget(w)

    def _on_worker(self, w: Worker) -> bool:
        """Read and route what the worker's socket holds now; False if nothing was waiting."""
        try:
            data = w.sock.recv(1 << 18, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            try:
                self._sel.unregister(w.sock)
            except (KeyError, ValueError):
                pass
            w.eof = True
            w.push_all(("dead", {}, b""))
            return True
        try:
            frames = w.reader.feed(data)
        except ProtocolError as e:
            self._violation(w, str(e))
            return True
        for h, p in frames:
            why = w.route(h, p)
            if why is not None:
                self._violation(w, why)
        return True

    def _violation(self, w: Worker, why: str) -> None:
        if w.violation is None:
            w.violation = why
            log.warning("sandbox worker %s (%s): %s", w.wid, w.job.name, why)
            if w.pid is not None:
                self._kill(w.pid)
            w.push_all(("dead", {}, b""))


__all__ = ["SandboxError", "SandboxManager", "Worker"]
