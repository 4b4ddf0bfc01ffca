"""The debugger: stops LIP threads at system calls, steps `pred`, overrides tokens, records, replays.

`Debugger(engine)` attaches to an in-process engine through the kernel's one dispatch point:
it installs itself as `runtime.kernel.hook` (its `before` may hold a call, its `after` may
hold it again and replace the result), subscribes to the event bus (the trace, the views and
the event stream), registers a `runtime.on_process_start` callback (stop on entry, replay
setup) and — in scheduler step mode only — sets `runtime.batch.gate`. `detach()` undoes all
of it and lets every stopped thread go.

Stops are per thread and the hook runs in the LIP's own thread, so only that thread waits:
other threads and processes keep running and batching (non-stop mode) unless
`stop_scope="process"` asks a stop to pause the rest of its process too.

Every command method returns JSON data (a dict), and `handle_command` (protocol.py) maps the
documented JSON commands onto these methods one to one; see docs/protocol.md.

This file holds attaching, the kernel hook, stops and execution control. Parts composed through
explicit interfaces (each given what it needs, none reading the core's private state):
stepping.py (what step into / over / out mean), event_stream.py (subscribers, event messages),
views.py (KV tree, timeline, trace, watch), scheduler_step.py (one batch per command),
overrides.py (force / ban / bias), stops.py (the `Stop` record and its protocol view),
breakpoints.py (`BreakpointTable`: the breakpoint commands and hit counting), launching.py
(`Launcher`: starting processes registered before their first line). Parts still mixed into the
class (they read its stops and locks): inspection.py (threads, stack, tokens, KV file,
distribution, verify_kv), replaying.py (record, replay, step back).
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from symphony_core.events import Event, now
from symphony_core.kvfs import KV
from symphony_core.model.dist import Dist

from . import viewdata as ins
from .breakpoints import BreakpointTable
from .errors import DebuggerError
from .event_stream import EventStream
from .inspection import Inspection
from .launching import Launcher
from .overrides import Overrides, edit_dist
from .record import entry_from, resolve_fn
from .replaying import RecordReplay
from .scheduler_step import SchedulerStepMode
from .stepping import PLAN_OF_ACTION, Stepping
from .stops import Stop, stop_view
from .views import Views


class Debugger(Inspection, RecordReplay):
    """Attach to `engine` (in-process). See the module docstring and docs/protocol.md.

    Every protocol command is a method of the same name (`continue` is `continue_`) returning
    the same JSON-ready body. Where a command acts on "the stopped thread", `pid` / `tid` may be
    left out when only one thread matches. A command that cannot be carried out raises
    `DebuggerError` naming why: `no stopped thread in process <pid>`, `several threads are
    stopped: say which (pid and tid): 3.1, 3.2`, `no process <pid>`, …

    Args:
        engine: the `Engine` to attach to (or a `ws://` URL: see `__new__`).
        stop_on_entry: stop every newly launched process before its first line.
        record: record every process launched from now on (for replay and step-back).
        stop_scope: `"thread"` (non-stop: a stop blocks only its thread) or `"process"` (a
            stop also pauses the other threads of its process).
        topk: how many candidates a stop's distribution view lists.
        trace_events: events kept for `trace()` (the oldest are dropped).
        max_recordings: recordings kept at once.

    Raises:
        ValueError: `stop_scope must be 'thread' (non-stop) or 'process', got <x>`.
    """

    def __new__(cls, engine=None, **kwargs):
        """`Debugger(engine)` attaches in-process; `Debugger("ws://host:port/v1/debug", token=...)`
        attaches to a debugger served over WebSocket (a `RemoteDebugger`: the same command
        methods, the same JSON bodies, failures raised as `DebuggerError`)."""
        if isinstance(engine, str):
            from .transport import RemoteDebugger

            return RemoteDebugger(engine, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        engine,
        *,
        stop_on_entry: bool = False,
        record: bool = False,
        stop_scope: str = "thread",
        topk: int = 10,
        trace_events: int = 200_000,
        max_recordings: int = 64,
    ) -> None:
        if stop_scope not in ("thread", "process"):
            raise ValueError(f"stop_scope must be 'thread' (non-stop) or 'process', got {stop_scope!r}")
        self.engine = engine
        self.runtime = engine.runtime
        self.tokenizer = engine.tokenizer
        self.stop_on_entry = stop_on_entry
        self.stop_scope = stop_scope
        self.topk = topk
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._stop_ids = itertools.count(1)
        self.bp_table = BreakpointTable()
        self._stops: dict[tuple[int, int], Stop] = {}
        self.stepping = Stepping()
        self._awaiting_fed: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid) -> (stop id, seq) of a pred
        self._pause_req: set = set()  # LIPThreads to stop at their next stop point
        self._after_bp: dict[Any, tuple[int, list[int]]] = {}  # LIPThread -> (seq, breakpoint ids)
        self._init_record_replay(record, max_recordings)
        self.launcher = Launcher(self.runtime)
        self._trace: deque = deque(maxlen=trace_events)
        self._known_files: dict[int, dict] = {}
        self.events = EventStream()
        self.overrides = Overrides(self.tokenizer, self._find_stop, self.stop_info, self._emit)
        self.batch_steps = SchedulerStepMode(self.runtime, self._emit, lambda: self._attached)
        self.views = Views(
            self.runtime, self.tokenizer, self._known_files, self._trace, self._emit, lambda: self._attached
        )
        self._attached = False
        self.attach()

    # ============================================================================ attach / detach
    def attach(self) -> dict:
        """Install the kernel hook and the batch gate (done by the constructor; again after `detach`)."""
        if self._attached:
            return {"attached": True}
        rt = self.runtime
        self._prev_hook = rt.kernel.hook
        rt.kernel.hook = self
        self._unsub = rt.bus.subscribe(self._on_event)
        rt.on_process_start.append(self._on_start)
        self._attached = True
        return {"attached": True}

    def detach(self) -> dict:
        """Restore the kernel hook, the gate and the callbacks; let every stopped thread go."""
        if not self._attached:
            return {"attached": False}
        rt = self.runtime
        self._attached = False
        if rt.kernel.hook is self:
            rt.kernel.hook = self._prev_hook
        self._unsub()
        try:
            rt.on_process_start.remove(self._on_start)
        except ValueError:
            pass
        self.scheduler_step_mode(False)
        with self._cv:
            self.bp_table.clear()
            self.stepping.clear()
            self._awaiting_fed.clear()
            self._pause_req.clear()
            self._after_bp.clear()
            self.overrides.clear()
            self.launcher.forget()
            stops = list(self._stops.values())
            self._stops.clear()
            self._replays.clear()
            self._recording_pids.clear()
            self.views.unwatch()
            self._cv.notify_all()
        for s in stops:
            s.action = "detach"
            s.resumed.set()
        return {"attached": False, "released": [[s.pid, s.tid] for s in stops]}

    def __enter__(self) -> Debugger:
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    # ============================================================================ the kernel hook
    def _busy(self) -> bool:
        return bool(
            self.bp_table
            or self.stepping.active()
            or self._awaiting_fed
            or self._pause_req
            or self._replays
            or self._recording_pids
            or self.overrides.pending
            or self._after_bp
        )

    def before(self, th, ev: Event) -> None:
        prev = self._prev_hook
        if prev is not None:
            prev.before(th, ev)
        if not self._busy():
            return
        pid, tid, call, seq = th.proc.pid, th.tid, ev.call, ev.seq
        tok_cache: list = []

        def tokens() -> list[int] | None:
            if not tok_cache:
                tok_cache.append(self._input_tokens(call, ev))
            return tok_cache[0]

        reasons: list[str] = []
        rs = self._replays.get(pid)
        diverged = rs.check(tid, seq, call, ev.args, tokens) if rs is not None else None
        if diverged is not None:
            self._emit("replay_diverged", {"pid": pid, **diverged})
            reasons.append("diverged")
        if call == "pred" and self._awaiting_fed:
            fed = self._awaiting_fed.pop((pid, tid), None)
            toks = tokens() if fed is not None else None
            if toks:
                self._emit(
                    "taken",
                    {
                        "pid": pid,
                        "tid": tid,
                        "stop_id": fed[0],
                        "seq": fed[1],
                        "token": toks[0],
                        "text": self.tokenizer.token_text(toks[0]),
                        "by": "fed",
                    },
                )
        if self.stepping.active():
            reasons.extend(self.stepping.before(th, call, sys._getframe(1)))
        with self._lock:
            if th in self._pause_req:
                self._pause_req.discard(th)
                reasons.append("pause")
            bp_ids, after_ids = self.bp_table.hit(pid, tid, call, ev.args, tokens, self.tokenizer.detokenize)
            self._after_bp.pop(th, None)
            if after_ids:
                self._after_bp[th] = (seq, after_ids)
        if bp_ids:
            reasons.insert(0, "breakpoint")
        if reasons:
            self._stop(th, ev, "before", reasons, bp_ids, None, tokens() if call == "pred" else None)

    def after(self, th, ev: Event, result: Any) -> Any:
        prev = self._prev_hook
        if prev is not None:
            result = prev.after(th, ev, result)
        if not self._busy():
            return result
        pid, tid, call, seq = th.proc.pid, th.tid, ev.call, ev.seq
        rs = self._replays.get(pid)
        if rs is not None:
            result = rs.substitute(tid, seq, call, result)
        reasons: list[str] = []
        bp_ids: list[int] = []
        with self._lock:
            ed = self.overrides.take_pending(th)
            ab = self._after_bp.pop(th, None)
        if self.stepping.active():
            reasons.extend(self.stepping.after(th, call, sys._getframe(1)))
        with self._lock:
            if th in self._pause_req:
                self._pause_req.discard(th)
                reasons.append("pause")
        overridden = None
        if ed is not None and ed[0] == seq and isinstance(result, Dist):
            result = edit_dist(result, **ed[1])
            overridden = ed[1].get("force")
        if ab is not None and ab[0] == seq:
            reasons.insert(0, "breakpoint")
            bp_ids = ab[1]
        if reasons:
            toks = self._input_tokens(call, ev) if call == "pred" else None
            result = self._stop(th, ev, "after", reasons, bp_ids, result, toks, overridden)
        if pid in self._recording_pids:
            rec = self._recordings.get(pid)
            if rec is not None:
                toks = self._input_tokens(call, ev) if call == "pred" else None
                rec.add(entry_from(tid, seq, call, ev.args, toks, result, self.runtime.kernel.summarize_result))
        return result

    def _input_tokens(self, call: str, ev: Event) -> list[int] | None:
        """A pred's input tokens in full; for a call on a KV file (kv_fork, kv_close, ...) the
        file's tokens; None otherwise."""
        loc = ins.syscall_locals(sys._getframe(), call)
        if call == "pred":
            toks = ins.as_token_list(loc.get("token_ids")) if "token_ids" in loc else None
            return toks if toks is not None else ev.args.get("tokens")
        kv = loc.get("kv")
        return kv.tokens if isinstance(kv, KV) else None

    def _on_start(self, proc) -> None:
        """Runs in a new process's main thread before the LIP: replay setup and stop on entry."""
        self.launcher.registered()  # a launch by this debugger finishes registering the process first
        if not self._attached:
            return
        pid = proc.pid
        if self._record_all and pid not in self._recordings:
            self._new_recording(proc, complete=True)
        if self.launcher.take_entry(pid) or self.stop_on_entry:
            th = proc.threads[0]
            file, line = ins.where_is(getattr(proc, "entry_location", None) or proc.fn)
            ev = Event("process_entry", now(), pid, th.tid, None, {"name": proc.name}, file=file, line=line, seq=0)
            self._stop(th, ev, "entry", ["entry"], [], None, None)

    # ============================================================================ stopping
    def _stop(
        self,
        th,
        ev: Event,
        where: str,
        reasons: list[str],
        bp_ids: list[int],
        result: Any,
        tokens: list[int] | None,
        overridden: int | None = None,
    ) -> Any:
        """Hold the calling LIP thread until a command resumes it; return the (maybe edited) result."""
        proc = th.proc
        frames = ins.capture_frames(sys._getframe(1))
        stop = Stop(
            next(self._stop_ids),
            th,
            reasons[0],
            reasons,
            where,
            ev.call,
            ev.seq,
            dict(ev.args),
            ev.file,
            ev.line,
            bp_ids,
            now(),
            frames,
            tokens,
            max(1, ins.lip_depth(sys._getframe(1))),
            result,
            overridden,
        )
        key = (proc.pid, th.tid)
        with proc.lock:
            prev_state = th.state
            th.state = "stopped"  # not runnable: the batch policy must not wait for it
        with self._cv:
            self._stops[key] = stop
            self._cv.notify_all()
        self.runtime.batch.wake()
        self._trace.append(
            {
                "kind": "dbg_stop",
                "ts": stop.ts,
                "pid": proc.pid,
                "tid": th.tid,
                "reason": stop.reason,
                "call": stop.call,
                "where": where,
                "stop_id": stop.id,
            }
        )
        try:
            self._emit("stopped", self.stop_info(stop))
        except Exception:
            pass
        if self.stop_scope == "process":
            with self._lock:
                for t in proc.threads:
                    if t is not th and not t.done.is_set() and (proc.pid, t.tid) not in self._stops:
                        self._pause_req.add(t)
        try:
            while not stop.resumed.wait(0.05):
                if proc.kill_reason is not None:
                    stop.action = "killed"
                    raise proc.kill_reason
                if not self._attached:
                    stop.action = "detach"
                    break
        finally:
            with self._cv:
                if self._stops.get(key) is stop:
                    del self._stops[key]
                self._cv.notify_all()
            with proc.lock:
                if th.state == "stopped":
                    th.state = prev_state
            t = now()
            self._trace.append(
                {
                    "kind": "dbg_resume",
                    "ts": t,
                    "pid": proc.pid,
                    "tid": th.tid,
                    "reason": stop.reason,
                    "action": stop.action,
                }
            )
            self._emit(
                "continued",
                {
                    "pid": proc.pid,
                    "tid": th.tid,
                    "stop_id": stop.id,
                    "action": stop.action,
                    "stopped_for": round(t - stop.ts, 6),
                },
            )
        if stop.action in PLAN_OF_ACTION:
            self.stepping.begin(proc.pid, th.tid, stop.action, stop.depth)
        if where == "after" and ev.call == "pred" and isinstance(stop.result, Dist) and stop.action != "detach":
            info = self.stop_info(stop)
            if (info.get("result") or {}).get("taken") is None:  # known once the program feeds its pick
                with self._lock:
                    self._awaiting_fed[(proc.pid, th.tid)] = (stop.id, stop.seq)
        return stop.result

    def stop_info(self, stop: Stop) -> dict:
        return stop_view(stop, self.tokenizer, self.topk, self.runtime.kernel.summarize_result)

    def _find_stop(self, pid: int | None, tid: int | None) -> Stop:
        with self._lock:
            cands = [s for s in self._stops.values() if (pid is None or s.pid == pid) and (tid is None or s.tid == tid)]
        if not cands:
            where = "" if pid is None else f" in process {pid}" + ("" if tid is None else f" thread {tid}")
            raise DebuggerError(f"no stopped thread{where}")
        if len(cands) > 1:
            raise DebuggerError(
                "several threads are stopped: say which (pid and tid): " + ", ".join(f"{s.pid}.{s.tid}" for s in cands)
            )
        return cands[0]

    def _resume(self, stops: list[Stop], action: str) -> list[list[int]]:
        with self._cv:
            for s in stops:
                if self._stops.get((s.pid, s.tid)) is s:
                    del self._stops[(s.pid, s.tid)]
                self.stepping.cancel(s.pid, s.tid)
                self._pause_req.discard(s.thread)
                s.action = action
                s.resumed.set()
            self._cv.notify_all()
        return [[s.pid, s.tid] for s in stops]

    # ============================================================================ execution control
    def continue_(self, pid: int | None = None, tid: int | None = None) -> dict:
        """Resume the stopped thread(s): one thread, every stopped thread of a process, or all."""
        with self._lock:
            stops = [s for s in self._stops.values() if (pid is None or s.pid == pid) and (tid is None or s.tid == tid)]
            if pid is None and tid is None:
                self._pause_req.clear()
            elif tid is None:
                self._pause_req = {t for t in self._pause_req if t.proc.pid != pid}
        return {"resumed": self._resume(stops, "continue")}

    def step(self, pid: int | None = None, tid: int | None = None, granularity: str = "pred") -> dict:
        """Step into: run the stopped thread until its next `pred` returns — or, when it spawns
        threads first, until the first pred one of them returns (granularity "pred"); or to its
        next stop point of any kind ("syscall"). See stepping.py.

        Raises:
            DebuggerError: `step granularity must be 'pred' or 'syscall', got <x>`; `no stopped
                thread in process <pid>`; `several threads are stopped: say which (pid and
                tid): …`.
        """
        if granularity not in ("pred", "syscall"):
            raise DebuggerError(f"step granularity must be 'pred' or 'syscall', got {granularity!r}")
        s = self._find_stop(pid, tid)
        return {
            "resumed": self._resume([s], "step" if granularity == "pred" else "step_syscall"),
            "granularity": granularity,
        }

    def step_over(self, pid: int | None = None, tid: int | None = None) -> dict:
        """Run the stopped thread until its next `pred` returns in this function or a caller
        (preds in called functions and spawned threads run through)."""
        return {"resumed": self._resume([self._find_stop(pid, tid)], "step_over")}

    def step_out(self, pid: int | None = None, tid: int | None = None) -> dict:
        """Run the stopped thread until its first stop point outside the function it is stopped
        in (a spawned thread that ends: its process's main thread at its next stop point)."""
        return {"resumed": self._resume([self._find_stop(pid, tid)], "step_out")}

    def pause(self, pid: int | None = None) -> dict:
        """Stop every running thread of process `pid` (or of every process) at its next syscall
        (or, if it is inside one now, when that call returns).

        Raises:
            DebuggerError: `no process <pid>`.
        """
        asked = []
        with self._lock:
            for proc in list(self.runtime.processes.values()):
                if proc.done or (pid is not None and proc.pid != pid):
                    continue
                for t in list(proc.threads):
                    if not t.done.is_set() and (proc.pid, t.tid) not in self._stops:
                        self._pause_req.add(t)
                        asked.append([proc.pid, t.tid])
        if pid is not None and pid not in self.runtime.processes:
            raise DebuggerError(f"no process {pid}")
        return {"pausing": asked}

    def restart(self, pid: int, stop_on_entry: bool | None = None) -> dict:
        """Cancel process `pid` (if still running) and launch it again with the same function and
        arguments; breakpoints bound to `pid` move to the new process (hit counts reset)."""
        proc = self.process(pid)
        if not proc.done:
            proc.cancel("restarted by the debugger")
            proc.wait(10)

        def setup(new) -> None:
            self.bp_table.rebind(pid, new.pid)
            if pid in self._recording_pids or self._record_all:
                self._new_recording(new, complete=True)

        new = self._launch(
            proc.fn,
            proc.args,
            proc.kwargs,
            user=proc.user,
            name=proc.name,
            priority=proc.priority,
            limits=proc.limits,
            stop_on_entry=stop_on_entry,
            setup=setup,
        )
        return {"pid": new.pid, "restarted": pid}

    def launch(
        self,
        fn: Callable | str,
        *args: Any,
        stop_on_entry: bool | None = None,
        record: bool | None = None,
        user: str = "local",
        name: str | None = None,
        priority: int = 0,
        limits=None,
        **kwargs: Any,
    ) -> dict:
        """Launch `fn(sym, *args, **kwargs)` (a callable, or "module:function") under the debugger.

        With `stop_on_entry`, the main thread stops before the LIP's first line, so breakpoints
        can be bound to the new pid first.

        The LIP's own arguments are given as they are to `Engine.run`: positionally and as
        extra keywords. (The JSON `launch` command carries them as `"args": [...]` and
        `"kwargs": {...}` instead, names `fn` as "module:function", and takes no `limits`.)

        Args:
            fn: the LIP function, or "module:function" to import.
            *args: the LIP's positional arguments.
            stop_on_entry: stop before the first line (default: the debugger's setting).
            record: record this process (default: the debugger's setting).
            user: the user it runs as.
            name: the process's name.
            priority: its scheduling priority.
            limits: its `Limits`.
            **kwargs: the LIP's keyword arguments.

        Returns:
            `{"pid": <new pid>, "name": <name>}`.

        Raises:
            SymphonyError: `run expects a LIP function, got <type>`.
            ImportError: "module:function" names no importable module.
            AttributeError: the module has no such function.
        """
        fn = resolve_fn(fn) if isinstance(fn, str) else fn

        def setup(proc) -> None:
            if record:
                self._new_recording(proc, complete=True)

        proc = self._launch(
            fn,
            tuple(args),
            kwargs,
            user=user,
            name=name,
            priority=priority,
            limits=limits,
            stop_on_entry=stop_on_entry,
            setup=setup,
        )
        return {"pid": proc.pid, "name": proc.name}

    def _launch(self, fn, args, kwargs, *, user, name, priority, limits, stop_on_entry, setup=None):
        return self.launcher.launch(
            fn,
            args,
            kwargs,
            user=user,
            name=name,
            priority=priority,
            limits=limits,
            stop_on_entry=stop_on_entry,
            setup=setup,
        )

    def launch_with(self, start: Callable[[], Any], *, stop_on_entry: bool = False, record: bool = False) -> Any:
        """Start a process some other way (e.g. a server's own launch path, with its quotas and
        sandbox) under the debugger: `start()` launches it and returns an object whose `.proc`
        (or itself) is the Process. The debugger registers it before its first line runs."""

        def setup(proc) -> None:
            if record:
                self._new_recording(proc, complete=True)

        return self.launcher.launch_with(start, stop_on_entry=stop_on_entry, setup=setup)

    def set_stop_on_entry(self, enabled: bool = True) -> dict:
        """Make every newly launched process stop before its first line (or not); `{"stop_on_entry"}`."""
        self.stop_on_entry = bool(enabled)
        return {"stop_on_entry": self.stop_on_entry}

    # ============================================================================ breakpoints
    def set_breakpoint(self, call: str = "pred", **conditions: Any) -> dict:
        """Add a breakpoint; conditions: pid, tid, hit_count, hit_mode, file, tokens_contain,
        text_contains, where (a Python predicate, in-process only), when ("before"/"after").

        Returns:
            The breakpoint as a dict: `{id, call, …conditions, enabled, hits}`.

        Raises:
            ValueError: `breakpoint call must be a syscall name (or '*'), got <x>`; `breakpoint
                hit_mode must be one of …`; `breakpoint 'when' must be one of …`; `breakpoint
                hit_count must be an int >= 1, got <x>`; `breakpoint 'where' must be a callable
                taking the input token ids`.
        """
        return self.bp_table.add(call, **conditions)

    def remove_breakpoint(self, id: int) -> dict:
        """Remove breakpoint `id`; `{"removed": id}`.

        Raises:
            DebuggerError: `no breakpoint <id>`.
        """
        return self.bp_table.remove(id)

    def enable_breakpoint(self, id: int, enabled: bool = True) -> dict:
        """Enable or disable breakpoint `id`; returns the breakpoint.

        Raises:
            DebuggerError: `no breakpoint <id>`.
        """
        return self.bp_table.enable(id, enabled)

    def clear_breakpoints(self) -> dict:
        """Remove every breakpoint; `{"removed": n}`."""
        return self.bp_table.clear()

    def breakpoints(self) -> dict:
        """`{"breakpoints": [...]}`: every breakpoint with its hit count."""
        return self.bp_table.listing()

    # ============================================================================ waiting helpers
    def wait_stopped(self, pid: int | None = None, tid: int | None = None, timeout: float = 30.0) -> dict:
        """Block until a thread (matching pid/tid) is stopped; returns its stop, or
        `{"exited": ...}` when the process ends without stopping. Raises TimeoutError.

        Raises:
            TimeoutError: `no stop of process <pid> within <timeout>s`.
        """
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for s in sorted(self._stops.values(), key=lambda s: s.id):
                    if (pid is None or s.pid == pid) and (tid is None or s.tid == tid):
                        return self.stop_info(s)
                if pid is not None:
                    proc = self.runtime.processes.get(pid)
                    if proc is not None and proc.done:
                        return {"exited": True, "pid": pid, "status": proc.status}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no stop{'' if pid is None else f' of process {pid}'} within {timeout}s")
                self._cv.wait(min(left, 0.1))

    def wait_process(self, pid: int, timeout: float = 60.0) -> dict:
        """Wait for process `pid` to end; its status, result (as JSON) and error.

        Returns:
            `{"pid", "status", "result", "error"}` (`error` is the `LIPError`'s text, or None).

        Raises:
            DebuggerError: `no process <pid>`.
            TimeoutError: `process <pid> still running after <timeout>s`.
        """
        proc = self.process(pid)
        if not proc.wait(timeout):
            raise TimeoutError(f"process {pid} still running after {timeout}s")
        try:
            result, error = proc.result(timeout=0), None
        except Exception as e:
            result, error = None, str(e)
        return {"pid": pid, "status": proc.status, "result": ins.jsonable(result), "error": error}

    # ============================================================================ events
    def subscribe(self, fn: Callable[[dict], None], kinds: list[str] | None = None) -> Callable[[], None]:
        """Call `fn(message)` for every event message (optionally only these event names)."""
        return self.events.subscribe(fn, kinds)

    def event_queue(
        self, kinds: list[str] | None = None, maxsize: int = 100_000
    ) -> tuple[queue.Queue, Callable[[], None]]:
        """`subscribe` into a queue: returns `(queue, unsubscribe)`; events past `maxsize` are dropped."""
        return self.events.event_queue(kinds, maxsize)

    def _emit(self, name: str, body: dict | Callable[[], dict]) -> None:
        self.events.emit(name, body)

    def _on_event(self, ev: Event) -> None:
        """Bus subscriber: keep the trace, track files and process ends, forward to the stream."""
        kind = ev.kind
        self.views.keep(ev)
        if kind == "syscall_exit":
            if self.views.watching and (ev.call == "pred" or (ev.call or "").startswith("kv_")):
                self.views.changed("kv_tree")
        elif kind == "batch":
            self.batch_steps.batch_fired(ev.args)
            if self.views.watching:
                self.views.changed("timeline", "kv_tree")
        elif kind == "thread_exit" or kind == "process_exit":
            proc = self.runtime.processes.get(ev.pid)
            if proc is not None:
                self.stepping.thread_exited(proc, ev.tid)
            self._awaiting_fed.pop((ev.pid, ev.tid), None)
        if kind == "process_exit":
            self.stepping.clear(ev.pid)
            with self._cv:
                self._recording_pids.discard(ev.pid)
                self.launcher.forget(ev.pid)
                rs = self._replays.pop(ev.pid, None)
                if rs is not None:
                    rs.done = True
                    self._replays_done[ev.pid] = rs.status()
                    for old in list(self._replays_done)[: -self.max_recordings]:
                        del self._replays_done[old]
                self.bp_table.drop_temporary(ev.pid)
                self._cv.notify_all()
        if self.events.active:
            self.events.emit(kind, ev.to_dict)

    # ============================================================================ overrides (overrides.py)
    def override(
        self,
        pid: int | None = None,
        tid: int | None = None,
        token: int | None = None,
        text: str | None = None,
        token_only: bool = False,
        position: int = -1,
    ) -> dict:
        """Make the stopped thread's `pred` result choose `token` (or the one token of `text`)."""
        return self.overrides.override(pid, tid, token, text, token_only, position)

    def edit_dist(
        self,
        pid: int | None = None,
        tid: int | None = None,
        ban: list[int] | None = None,
        force: int | None = None,
        bias: dict | None = None,
        position: int = -1,
    ) -> dict:
        """Edit the distribution before the LIP sees it: ban tokens, force one, or add biases."""
        return self.overrides.edit_dist(pid, tid, ban, force, bias, position)

    # ============================================================================ scheduler step mode (scheduler_step.py)
    def scheduler_step_mode(self, enabled: bool = True) -> dict:
        """In step mode the batch scheduler fires one batch per `step_batch`; before each, the
        batch it is about to fire is shown (`pending_batch`, event "batch_pending")."""
        return self.batch_steps.scheduler_step_mode(enabled)

    def pending_batch(self) -> dict:
        return self.batch_steps.pending_batch()

    def wait_batch_pending(self, timeout: float = 30.0) -> dict:
        return self.batch_steps.wait_batch_pending(timeout)

    def step_batch(self, wait: bool = True, timeout: float = 30.0) -> dict:
        """Fire the batch that is waiting at the gate (waits up to `timeout` for one to arrive);
        with `wait`, return its record once it has run."""
        return self.batch_steps.step_batch(wait, timeout)

    # ============================================================================ views (views.py)
    def kv_tree(self, with_text: bool = True) -> dict:
        return self.views.kv_tree(with_text)

    def timeline(self, since: int = 0, limit: int = 500) -> dict:
        return self.views.timeline(since, limit)

    def trace(self, path: str | None = None) -> dict:
        """The run since attach as a Chrome trace (dict); also written to `path` if given."""
        return self.views.trace(path)

    def watch(self, view: str, interval: float = 0.25) -> dict:
        """Stream a view ("kv_tree" or "timeline") as "view" events, at most every `interval` s."""
        return self.views.watch(view, interval)

    def unwatch(self, view: str | None = None) -> dict:
        return self.views.unwatch(view)

    # ============================================================================ protocol
    def handle_command(self, msg: dict) -> dict:
        """One JSON command in, one JSON response out (see docs/protocol.md)."""
        from .protocol import handle_command

        return handle_command(self, msg)


__all__ = ["Debugger", "DebuggerError", "Stop", "edit_dist"]
