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

This file holds attaching, the kernel hook, stops, execution control, breakpoints and the
event stream. The other commands are parts of the same class, one concept a file:
inspection.py (threads, stack, tokens, KV file, distribution, verify_kv), overrides.py
(force / ban / bias), replaying.py (record, replay, step back), scheduler_step.py (one batch
per command) and views.py (KV tree, timeline, trace, watch).
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from symphony_core.kvfs import KV
from symphony_core.events import Event, now
from symphony_core.model.dist import Dist

from . import inspect as ins
from .breakpoints import Breakpoint
from .errors import DebuggerError
from .inspection import Inspection
from .overrides import Overrides, edit_dist
from .record import SUBSTITUTED, entry_from, resolve_fn, same_inputs
from .replaying import RecordReplay
from .scheduler_step import SchedulerStepMode
from .views import Views


@dataclass(eq=False)
class Stop:
    """One LIP thread held by the debugger."""

    id: int
    thread: Any  # LIPThread
    reason: str
    reasons: list[str]
    where: str  # "entry" | "before" | "after"
    call: str | None
    seq: int
    args: dict
    file: str | None
    line: int | None
    breakpoints: list[int]
    ts: float
    frames: list[dict]
    tokens: list[int] | None
    result: Any = None
    overridden: int | None = None  # the token forced by an override
    edits: list[dict] = field(default_factory=list)
    action: str | None = None
    resumed: threading.Event = field(default_factory=threading.Event)
    _info: dict | None = None

    @property
    def pid(self) -> int:
        return self.thread.proc.pid

    @property
    def tid(self) -> int:
        return self.thread.tid

    @property
    def kv_file(self) -> int | None:
        f = self.args.get("file")
        return f if isinstance(f, int) else None


class Debugger(Inspection, Overrides, RecordReplay, SchedulerStepMode, Views):
    """Attach to `engine` (in-process). See the module docstring and docs/protocol.md."""

    def __new__(cls, engine=None, **kwargs):
        """`Debugger(engine)` attaches in-process; `Debugger("ws://host:port/v1/debug", token=...)`
        attaches to a debugger served over WebSocket (a `RemoteDebugger`: the same command
        methods, the same JSON bodies, failures raised as `DebuggerError`)."""
        if isinstance(engine, str):
            from .transport import RemoteDebugger

            return RemoteDebugger(engine, **kwargs)
        return super().__new__(cls)

    def __init__(self, engine, *, stop_on_entry: bool = False, record: bool = False, stop_scope: str = "thread",
                 topk: int = 10, trace_events: int = 200_000, max_recordings: int = 64) -> None:
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
        self._bps: dict[int, Breakpoint] = {}
        self._stops: dict[tuple[int, int], Stop] = {}
        self._stepping: dict[Any, str] = {}  # LIPThread -> "pred" | "syscall"
        self._pause_req: set = set()  # LIPThreads to stop at their next stop point
        self._after_bp: dict[Any, tuple[int, list[int]]] = {}  # LIPThread -> (seq, breakpoint ids)
        self._edits: dict[Any, tuple[int, dict]] = {}  # LIPThread -> (seq, edit) from a before-stop
        self._entry_pids: set[int] = set()
        self._init_record_replay(record, max_recordings)
        self._launch_lock = threading.Lock()
        self._trace: deque = deque(maxlen=trace_events)
        self._known_files: dict[int, dict] = {}
        self._subs: list[tuple[Callable[[dict], None], frozenset | None]] = []
        self._evseq = itertools.count(1)
        self._init_step_mode()
        self._init_views()
        self._attached = False
        self.attach()

    # ============================================================================ attach / detach
    def attach(self) -> dict:
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
            self._bps.clear()
            self._stepping.clear()
            self._pause_req.clear()
            self._after_bp.clear()
            self._edits.clear()
            self._entry_pids.clear()
            stops = list(self._stops.values())
            self._stops.clear()
            self._replays.clear()
            self._recording_pids.clear()
            self._watch.clear()
            self._cv.notify_all()
        for s in stops:
            s.action = "detach"
            s.resumed.set()
        return {"attached": False, "released": [[s.pid, s.tid] for s in stops]}

    def __enter__(self) -> "Debugger":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    # ============================================================================ the kernel hook
    def _busy(self) -> bool:
        return bool(self._bps or self._stepping or self._pause_req or self._replays or self._recording_pids
                    or self._edits or self._after_bp)

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
        if rs is not None and tid not in rs.live_threads:
            e = rs.rec.get(tid, seq)
            if e is None:
                rs.live_threads.add(tid)  # the recording ends here: this thread goes on live
            else:
                diff = same_inputs(e, call, ev.args, tokens() if call == "pred" else None)
                if diff is not None:
                    rs.live_threads.add(tid)
                    rs.diverged.append({"tid": tid, "seq": seq, "call": call, "why": diff})
                    self._emit("replay_diverged", {"pid": pid, "tid": tid, "seq": seq, "call": call, "why": diff})
                    reasons.append("diverged")
        bp_ids: list[int] = []
        with self._lock:
            if self._stepping.get(th) == "syscall":
                del self._stepping[th]
                reasons.append("step")
            if th in self._pause_req:
                self._pause_req.discard(th)
                reasons.append("pause")
            after_ids: list[int] = []
            for bp in list(self._bps.values()):
                if bp.matches(pid, tid, call, ev.args, tokens, self.tokenizer.detokenize):
                    bp.hits += 1
                    if bp.hit_ok():
                        (bp_ids if bp.when == "before" else after_ids).append(bp.id)
                        if bp.temporary:
                            self._bps.pop(bp.id, None)
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
        if rs is not None and tid not in rs.live_threads and call in SUBSTITUTED:
            e = rs.rec.get(tid, seq)
            if e is not None and e.call == call and e.kind in ("dist", "value"):
                if e.kind == "dist" and isinstance(result, Dist) and rs.verify and e.logits is not None:
                    live = result.logits.detach().float().cpu()
                    if live.shape == e.logits.shape:
                        diff = (live - e.logits.float()).abs()
                        diff = diff[torch.isfinite(diff)]
                        if diff.numel():
                            rs.max_logit_diff = max(rs.max_logit_diff, float(diff.max()))
                result = e.result(like=result)
                rs.substituted += 1
        reasons: list[str] = []
        bp_ids: list[int] = []
        with self._lock:
            ed = self._edits.pop(th, None)
            ab = self._after_bp.pop(th, None)
            mode = self._stepping.get(th)
            if mode == "syscall" or (mode == "pred" and call == "pred"):
                del self._stepping[th]
                reasons.append("step")
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
        with self._launch_lock:
            pass  # a launch by this debugger finishes registering the process first
        if not self._attached:
            return
        pid = proc.pid
        if self._record_all and pid not in self._recordings:
            self._new_recording(proc, complete=True)
        if self.stop_on_entry or pid in self._entry_pids:
            self._entry_pids.discard(pid)
            th = proc.threads[0]
            file, line = ins.where_is(getattr(proc, "entry_location", None) or proc.fn)
            ev = Event("process_entry", now(), pid, th.tid, None, {"name": proc.name}, file=file, line=line, seq=0)
            self._stop(th, ev, "entry", ["entry"], [], None, None)

    # ============================================================================ stopping
    def _stop(self, th, ev: Event, where: str, reasons: list[str], bp_ids: list[int], result: Any,
              tokens: list[int] | None, overridden: int | None = None) -> Any:
        """Hold the calling LIP thread until a command resumes it; return the (maybe edited) result."""
        proc = th.proc
        frames = ins.capture_frames(sys._getframe(1))
        stop = Stop(next(self._stop_ids), th, reasons[0], reasons, where, ev.call, ev.seq, dict(ev.args), ev.file,
                    ev.line, bp_ids, now(), frames, tokens, result, overridden)
        key = (proc.pid, th.tid)
        with proc.lock:
            prev_state = th.state
            th.state = "stopped"  # not runnable: the batch policy must not wait for it
        with self._cv:
            self._stops[key] = stop
            self._cv.notify_all()
        self.runtime.batch.wake()
        self._trace.append({"kind": "dbg_stop", "ts": stop.ts, "pid": proc.pid, "tid": th.tid,
                            "reason": stop.reason, "call": stop.call, "where": where, "stop_id": stop.id})
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
            self._trace.append({"kind": "dbg_resume", "ts": t, "pid": proc.pid, "tid": th.tid, "reason": stop.reason,
                                "action": stop.action})
            self._emit("continued", {"pid": proc.pid, "tid": th.tid, "stop_id": stop.id, "action": stop.action,
                                     "stopped_for": round(t - stop.ts, 6)})
        if stop.action in ("step", "step_syscall"):
            with self._lock:
                self._stepping[th] = "pred" if stop.action == "step" else "syscall"
        return stop.result

    def stop_info(self, stop: Stop) -> dict:
        if stop._info is not None:
            return stop._info
        proc = stop.thread.proc
        d = {
            "stop_id": stop.id, "pid": stop.pid, "tid": stop.tid, "process": proc.name, "reason": stop.reason,
            "reasons": stop.reasons, "where": stop.where, "call": stop.call, "seq": stop.seq,
            "file": stop.file, "line": stop.line, "args": ins.jsonable(stop.args), "breakpoints": stop.breakpoints,
            "ts": stop.ts, "preds": stop.thread.preds, "kv_file": stop.kv_file, "input": None, "result": None,
        }
        if stop.tokens is not None:
            d["input"] = ins.tokens_view(stop.tokens[-256:], self.tokenizer)
            d["input"]["n_tokens"] = len(stop.tokens)
        if isinstance(stop.result, Dist):
            d["result"] = {"kind": "dist", **ins.dist_view(stop.result, self.tokenizer, self.topk,
                                                           chosen=stop.overridden)}
        elif stop.where == "after":
            d["result"] = ins.jsonable(self.runtime.kernel.summarize_result(stop.call or "", stop.result))
        if stop.edits:
            d["edits"] = stop.edits
        stop._info = ins.jsonable(d)
        return stop._info

    def _find_stop(self, pid: int | None, tid: int | None) -> Stop:
        with self._lock:
            cands = [s for s in self._stops.values() if (pid is None or s.pid == pid) and (tid is None or s.tid == tid)]
        if not cands:
            where = "" if pid is None else f" in process {pid}" + ("" if tid is None else f" thread {tid}")
            raise DebuggerError(f"no stopped thread{where}")
        if len(cands) > 1:
            raise DebuggerError("several threads are stopped: say which (pid and tid): "
                                + ", ".join(f"{s.pid}.{s.tid}" for s in cands))
        return cands[0]

    def _resume(self, stops: list[Stop], action: str) -> list[list[int]]:
        with self._cv:
            for s in stops:
                if self._stops.get((s.pid, s.tid)) is s:
                    del self._stops[(s.pid, s.tid)]
                self._stepping.pop(s.thread, None)
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
        """Run the stopped thread until its next `pred` returns (granularity "pred"), or to its next
        stop point of any kind ("syscall": the after of this call, or the before of the next)."""
        if granularity not in ("pred", "syscall"):
            raise DebuggerError(f"step granularity must be 'pred' or 'syscall', got {granularity!r}")
        s = self._find_stop(pid, tid)
        return {"resumed": self._resume([s], "step" if granularity == "pred" else "step_syscall"),
                "granularity": granularity}

    def pause(self, pid: int | None = None) -> dict:
        """Stop every running thread of process `pid` (or of every process) at its next syscall
        (or, if it is inside one now, when that call returns)."""
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
            with self._lock:
                for bp in self._bps.values():
                    if bp.pid == pid:
                        bp.pid, bp.hits = new.pid, 0
            if pid in self._recording_pids or self._record_all:
                self._new_recording(new, complete=True)

        new = self._launch(proc.fn, proc.args, proc.kwargs, user=proc.user, name=proc.name, priority=proc.priority,
                           limits=proc.limits, stop_on_entry=stop_on_entry, setup=setup)
        return {"pid": new.pid, "restarted": pid}

    def launch(self, fn: Callable | str, *args: Any, stop_on_entry: bool | None = None, record: bool | None = None,
               user: str = "local", name: str | None = None, priority: int = 0, limits=None, **kwargs: Any) -> dict:
        """Launch `fn(sym, *args, **kwargs)` (a callable, or "module:function") under the debugger.

        With `stop_on_entry`, the main thread stops before the LIP's first line, so breakpoints
        can be bound to the new pid first.
        """
        fn = resolve_fn(fn) if isinstance(fn, str) else fn

        def setup(proc) -> None:
            if record:
                self._new_recording(proc, complete=True)

        proc = self._launch(fn, tuple(args), kwargs, user=user, name=name, priority=priority, limits=limits,
                            stop_on_entry=stop_on_entry, setup=setup)
        return {"pid": proc.pid, "name": proc.name}

    def _launch(self, fn, args, kwargs, *, user, name, priority, limits, stop_on_entry, setup=None):
        with self._launch_lock:
            proc = self.runtime.launch(fn, args, kwargs, user=user, name=name, priority=priority, limits=limits)
            if stop_on_entry:
                self._entry_pids.add(proc.pid)
            if setup is not None:
                setup(proc)
        return proc

    def launch_with(self, start: Callable[[], Any], *, stop_on_entry: bool = False, record: bool = False) -> Any:
        """Start a process some other way (e.g. a server's own launch path, with its quotas and
        sandbox) under the debugger: `start()` launches it and returns an object whose `.proc`
        (or itself) is the Process. The debugger registers it before its first line runs."""
        with self._launch_lock:
            out = start()
            proc = getattr(out, "proc", out)
            if stop_on_entry:
                self._entry_pids.add(proc.pid)
            if record:
                self._new_recording(proc, complete=True)
        return out

    def set_stop_on_entry(self, enabled: bool = True) -> dict:
        self.stop_on_entry = bool(enabled)
        return {"stop_on_entry": self.stop_on_entry}

    # ============================================================================ breakpoints
    def set_breakpoint(self, call: str = "pred", **conditions: Any) -> dict:
        """Add a breakpoint; conditions: pid, tid, hit_count, hit_mode, file, tokens_contain,
        text_contains, where (a Python predicate, in-process only), when ("before"/"after")."""
        bp = Breakpoint(call=call, **conditions)
        with self._lock:
            self._bps[bp.id] = bp
        return bp.to_dict()

    def remove_breakpoint(self, id: int) -> dict:
        with self._lock:
            bp = self._bps.pop(id, None)
        if bp is None:
            raise DebuggerError(f"no breakpoint {id}")
        return {"removed": id}

    def enable_breakpoint(self, id: int, enabled: bool = True) -> dict:
        with self._lock:
            bp = self._bps.get(id)
            if bp is None:
                raise DebuggerError(f"no breakpoint {id}")
            bp.enabled = bool(enabled)
            return bp.to_dict()

    def clear_breakpoints(self) -> dict:
        with self._lock:
            n = len(self._bps)
            self._bps.clear()
        return {"removed": n}

    def breakpoints(self) -> dict:
        with self._lock:
            return {"breakpoints": [b.to_dict() for b in self._bps.values()]}

    # ============================================================================ waiting helpers
    def wait_stopped(self, pid: int | None = None, tid: int | None = None, timeout: float = 30.0) -> dict:
        """Block until a thread (matching pid/tid) is stopped; returns its stop, or
        `{"exited": ...}` when the process ends without stopping. Raises TimeoutError."""
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
        """Wait for process `pid` to end; its status, result (as JSON) and error."""
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
        entry = (fn, None if kinds is None else frozenset(kinds))
        with self._lock:
            self._subs = self._subs + [entry]

        def unsubscribe() -> None:
            with self._lock:
                self._subs = [s for s in self._subs if s is not entry]

        return unsubscribe

    def event_queue(self, kinds: list[str] | None = None, maxsize: int = 100_000) -> tuple[queue.Queue, Callable[[], None]]:
        q: queue.Queue = queue.Queue(maxsize)

        def put(m: dict) -> None:
            try:
                q.put_nowait(m)
            except queue.Full:
                pass

        return q, self.subscribe(put, kinds)

    def _emit(self, name: str, body: dict | Callable[[], dict]) -> None:
        """Send an event message to the subscribers that want `name` (`body` may be a function,
        called only if someone does)."""
        subs = self._subs
        if not subs:
            return
        msg = None
        for fn, kinds in subs:
            if kinds is not None and name not in kinds:
                continue
            if msg is None:
                b = body() if callable(body) else body
                msg = {"type": "event", "event": name, "seq": next(self._evseq), "ts": now(), "body": ins.jsonable(b)}
            try:
                fn(msg)
            except Exception:  # a broken front-end must never take a LIP down
                pass

    def _on_event(self, ev: Event) -> None:
        """Bus subscriber: keep the trace, track files and process ends, forward to the stream."""
        kind = ev.kind
        # Syscall events are kept as flat tuples of atoms (args as their repr): holding the Event
        # objects themselves costs ~10 us each in garbage-collector work at this volume.
        if kind == "syscall_enter":
            self._trace.append((kind, ev.ts, ev.pid, ev.tid, ev.call, ev.seq, ev.file, ev.line, repr(ev.args)))
        elif kind == "syscall_exit":
            self._trace.append((kind, ev.ts, ev.pid, ev.tid, ev.call, ev.seq, repr(ev.result), ev.error))
        else:
            self._trace.append(ev)
        if kind == "syscall_exit":
            if ev.call in ("kv_create", "kv_fork", "kv_open") and isinstance(ev.result, dict) and "file" in ev.result:
                self._known_files[ev.result["file"]] = {"parent": ev.args.get("file") if ev.call == "kv_fork" else None,
                                                        "path": ev.args.get("path")}
            if self._watch and (ev.call == "pred" or (ev.call or "").startswith("kv_")):
                self._dirty.add("kv_tree")
        elif kind == "batch":
            with self._gate_cv:
                self._last_batch = ev.args
                self._gate_cv.notify_all()
            if self._watch:
                self._dirty.update(("timeline", "kv_tree"))
        elif kind == "process_exit":
            with self._cv:
                self._recording_pids.discard(ev.pid)
                self._entry_pids.discard(ev.pid)
                rs = self._replays.pop(ev.pid, None)
                if rs is not None:
                    rs.done = True
                    self._replays_done[ev.pid] = rs.status()
                    for old in list(self._replays_done)[:-self.max_recordings]:
                        del self._replays_done[old]
                for bp in [b for b in self._bps.values() if b.temporary and b.pid == ev.pid]:
                    del self._bps[bp.id]
                self._cv.notify_all()
        if self._subs:
            self._emit(kind, ev.to_dict)

    # ============================================================================ protocol
    def handle_command(self, msg: dict) -> dict:
        """One JSON command in, one JSON response out (see docs/protocol.md)."""
        from .protocol import handle_command

        return handle_command(self, msg)


__all__ = ["Debugger", "DebuggerError", "Stop", "edit_dist"]
