"""The debugger: stops LIP threads at system calls, steps `pred`, overrides tokens, records, replays.

`Debugger(engine)` attaches to an in-process engine through the kernel's one dispatch point:
it installs its kernel hook as `runtime.kernel.hook` (its `before` may hold a call, its `after`
may hold it again and replace the result), subscribes to the event bus (the trace, the views and
the event stream), registers a `runtime.on_process_start` callback (stop on entry, recording)
and — in scheduler step mode only — sets `runtime.batch.gate`. `detach()` undoes all of it and
lets every stopped thread go.

Every command method returns JSON data (a dict), and `handle_command` (protocol.py) maps the
documented JSON commands onto these methods one to one; see docs/protocol.md.

This file holds attaching, execution control (continue, step, pause, launch) and how the parts
are put together. Each part is given what it needs in its constructor and none reads another's
private state: stop_table.py (`StopTable`: the stopped threads, pause requests, waiting),
kernel_hook.py (`KernelHook`: whether a thread stops at a stop point, and holding it there),
stepping.py (what step into / over / out mean), inspection.py (`Inspector`: threads, stack,
tokens, KV file, distribution, verify_kv, waiting), replaying.py (`Replayer`: record, replay, step back),
breakpoints.py (`BreakpointTable`), overrides.py (force / ban / bias), launching.py (`Launcher`),
event_stream.py (subscribers), views.py (KV tree, timeline, trace, watch) and scheduler_step.py
(one batch per command). A part's commands are the Debugger's own methods through `Delegated`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from symphony_core.events import Event

from .breakpoints import BreakpointTable
from .delegation import Delegated
from .errors import DebuggerError
from .event_stream import EventStream
from .inspection import Inspector
from .kernel_hook import KernelHook
from .launching import Launcher
from .overrides import Overrides, edit_dist
from .profiling import Profiling
from .record import resolve_fn
from .replaying import Replayer
from .scheduler_step import SchedulerStepMode
from .stepping import Stepping
from .stop_table import StopTable
from .stops import Stop
from .views import Views
from .whatif_command import WhatIfExplorer


class Debugger:
    """Attach to `engine` (in-process). See the module docstring and docs/protocol.md.

    Every protocol command is a method of the same name (`continue` is `continue_`) returning
    the same JSON-ready body. Where a command acts on "the stopped thread", `pid` / `tid` may be
    left out when only one thread matches. A command that cannot be carried out raises
    `DebuggerError` naming why: `no stopped thread in process <pid>`, `several threads are
    stopped: say which (pid and tid): 3.1, 3.2`, `no process <pid>`, …

    Args:
        engine: the `Engine` to attach to (for a debugger served over WebSocket, use
            `connect(url, token=...)`, which returns a `RemoteDebugger`).
        stop_on_entry: stop every newly launched process before its first line.
        record: record every process launched from now on (for replay and step-back).
        stop_scope: `"thread"` (non-stop: a stop blocks only its thread) or `"process"` (a
            stop also pauses the other threads of its process).
        topk: how many candidates a stop's distribution view lists.
        trace_events: events kept for `trace()` (the oldest are dropped).
        max_recordings: recordings kept at once.

    Raises:
        ValueError: `stop_scope must be 'thread' (non-stop) or 'process', got <x>`.
        TypeError: `Debugger attaches to an Engine in this process, got the string <url>; …`
            (use `connect(url, token=...)` for a remote one).
    """

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
        if isinstance(engine, str):
            raise TypeError(
                f"Debugger attaches to an Engine in this process, got the string {engine!r}; "
                "to attach to a debugger served over WebSocket use connect(url, token=...)"
            )
        self.engine = engine
        self.runtime = rt = engine.runtime
        self.tokenizer = engine.tokenizer
        self.stop_on_entry = stop_on_entry
        self.stop_scope = stop_scope
        self._attached = False

        def attached() -> bool:
            return self._attached

        summarize = rt.kernel.summarize_result
        self.bp_table = BreakpointTable()
        self.stop_table = StopTable(self.tokenizer, topk, summarize)
        self.stepping = Stepping(self.stop_table.is_stopped)
        self.launcher = Launcher(rt)
        trace: deque = deque(maxlen=trace_events)  # the bus events and stops since attach, for `trace()`
        known_files: dict[int, dict] = {}
        self.events = EventStream()
        emit = self.events.emit
        self.overrides = Overrides(self.stop_table, emit)
        self.batch_steps = SchedulerStepMode(rt, emit, attached)
        self.views = Views(rt, self.tokenizer, known_files, trace, emit, attached)
        self.inspector = Inspector(engine, self.stop_table, known_files, self.stepping.lost)
        self.profiling = Profiling(self)
        self.whatif = WhatIfExplorer(self)
        self.replayer = Replayer(
            self.launcher, self.bp_table, self.stop_table, self.inspector.process, summarize, record, max_recordings
        )
        self.hook = KernelHook(
            rt,
            self.stop_table,
            self.stepping,
            self.bp_table,
            self.replayer,
            self.overrides,
            emit=emit,
            trace=trace.append,
            attached=attached,
            stop_scope=stop_scope,
        )
        self.attach()

    @property
    def topk(self) -> int:
        """How many candidates a stop's distribution view lists."""
        return self.stop_table.topk

    @topk.setter
    def topk(self, k: int) -> None:
        self.stop_table.topk = k

    # ============================================================================ attach / detach
    def attach(self) -> dict:
        """Install the kernel hook and the batch gate (done by the constructor; again after `detach`)."""
        if self._attached:
            return {"attached": True}
        rt = self.runtime
        self.hook.prev = rt.kernel.hook
        rt.kernel.hook = self.hook
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
        if rt.kernel.hook is self.hook:
            rt.kernel.hook = self.hook.prev
        self._unsub()
        try:
            rt.on_process_start.remove(self._on_start)
        except ValueError:
            pass
        self.scheduler_step_mode(False)
        self.bp_table.clear_breakpoints()
        self.stepping.clear()
        self.hook.clear()
        self.overrides.clear()
        self.launcher.forget()
        self.replayer.clear()
        self.views.unwatch()
        return {"attached": False, "released": self.stop_table.resume_all("detach")}

    def __enter__(self) -> Debugger:
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    def _on_start(self, proc) -> None:
        """Runs in a new process's main thread before the LIP: recording and stop on entry."""
        self.launcher.registered()  # a launch by this debugger finishes registering the process first
        if not self._attached:
            return
        self.replayer.process_started(proc)
        if self.launcher.take_entry(proc.pid) or self.stop_on_entry:
            self.hook.stop_at_entry(proc)

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
            if proc is not None:  # a step it carried goes on, or lands on a held thread that another joins
                self.hook.land(proc.pid, self.stepping.thread_exited(proc, ev.tid))
            self.hook.thread_exited(ev.pid, ev.tid)
        if kind == "process_exit":
            self.stepping.process_exited(ev.pid)
            self.launcher.forget(ev.pid)
            self.replayer.process_exited(ev.pid)
            self.bp_table.drop_temporary(ev.pid)
            self.stop_table.changed()
        if self.events.active:
            self.events.emit(kind, ev.to_dict)

    def stop_info(self, stop: Stop) -> dict:
        return self.stop_table.info(stop)

    # ============================================================================ execution control
    def _resume(self, stops: list[Stop], action: str) -> list[list[int]]:
        for s in stops:
            self.stepping.cancel(s.pid, s.tid)  # before the thread runs and begins its new plan
        return self.stop_table.resume(stops, action)

    def _step(self, pid: int | None, tid: int | None, action: str) -> dict:
        """Resume the stopped thread as a new step; `after` and `step` tell `wait_stopped` which
        stop the step lands on."""
        s = self.stop_table.find(pid, tid)
        after, s.next_step = self.stop_table.last_id, self.stepping.new_step()
        return {"resumed": self._resume([s], action), "after": after, "step": s.next_step}

    def continue_(self, pid: int | None = None, tid: int | None = None, keep_step: bool = False) -> dict:
        """Resume the stopped thread(s): one thread, every stopped thread of a process, or all (a
        whole process: the steps still on their way in it end too). `keep_step`: one thread goes on
        as if it had not stopped — a step it carries goes on (a front-end passing over a stop that
        its own breakpoint condition rules out)."""
        stops = self.stop_table.matching(pid, tid)
        if keep_step:
            if tid is None:
                raise DebuggerError("continue with keep_step resumes one thread: say which (tid)")
            return {"resumed": self.stop_table.resume(stops, "continue")}
        if tid is None:
            self.stop_table.forget_pauses(pid)
            self.stepping.clear(pid)  # steps still on their way (spawned threads followed) end too
        return {"resumed": self._resume(stops, "continue")}

    def step(self, pid: int | None = None, tid: int | None = None, granularity: str = "pred") -> dict:
        """Step into: run the stopped thread until its next `pred` returns — or, when it spawns
        threads first, until the first pred one of them returns (granularity "pred"); or to its
        next stop point of any kind ("syscall"). When the thread ends or blocks in `join` first,
        the step lands at the process's next stop point. See stepping.py for the thread rules.

        Returns `{"resumed", "granularity", "after", "step"}`: `wait_stopped(pid, after=after,
        step=step)` answers the stop the step landed on (the stepped thread's, or another thread's
        that stopped first for another reason, such as a breakpoint).

        Raises:
            DebuggerError: `step granularity must be 'pred' or 'syscall', got <x>`; `no stopped
                thread in process <pid>`; `several threads are stopped: say which (pid and
                tid): …`.
        """
        if granularity not in ("pred", "syscall"):
            raise DebuggerError(f"step granularity must be 'pred' or 'syscall', got {granularity!r}")
        return {**self._step(pid, tid, "step" if granularity == "pred" else "step_syscall"), "granularity": granularity}

    def step_over(self, pid: int | None = None, tid: int | None = None) -> dict:
        """Run the stopped thread until its next `pred` returns in this function or a caller
        (preds in called functions and spawned threads run through)."""
        return self._step(pid, tid, "step_over")

    def step_out(self, pid: int | None = None, tid: int | None = None) -> dict:
        """Run the stopped thread until its first stop point outside the function it is stopped
        in (a spawned thread that ends: its process's main thread at its next stop point)."""
        return self._step(pid, tid, "step_out")

    def pause(self, pid: int | None = None) -> dict:
        """Stop every running thread of process `pid` (or of every process) at its next syscall
        (or, if it is inside one now, when that call returns).

        Raises:
            DebuggerError: `no process <pid>`.
        """
        procs = [p for p in list(self.runtime.processes.values()) if not p.done and pid in (None, p.pid)]
        asked = self.stop_table.ask_pause([t for p in procs for t in list(p.threads)])
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
            self.replayer.restarted(pid, new)

        new = self.launcher.launch_again(proc, stop_on_entry=stop_on_entry, setup=setup)
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
            self.replayer.process_started(proc, record=bool(record))

        proc = self.launcher.launch(
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

    def launch_with(self, start: Callable[[], Any], *, stop_on_entry: bool = False, record: bool = False) -> Any:
        """Start a process some other way (e.g. a server's own launch path, with its quotas and
        sandbox) under the debugger: `start()` launches it and returns an object whose `.proc`
        (or itself) is the Process. The debugger registers it before its first line runs."""

        def setup(proc) -> None:
            self.replayer.process_started(proc, record=record)

        return self.launcher.launch_with(start, stop_on_entry=stop_on_entry, setup=setup)

    def set_stop_on_entry(self, enabled: bool = True) -> dict:
        """Make every newly launched process stop before its first line (or not); `{"stop_on_entry"}`."""
        self.stop_on_entry = bool(enabled)
        return {"stop_on_entry": self.stop_on_entry}

    # ============================================================================ the parts' commands
    # the inspector (inspection.py), waiting included
    process = Delegated("inspector", Inspector.process)
    threads = Delegated("inspector", Inspector.threads)
    stops = Delegated("inspector", Inspector.stops)
    stack = Delegated("inspector", Inspector.stack)
    token_texts = Delegated("inspector", Inspector.token_texts)
    tokens = Delegated("inspector", Inspector.tokens)
    kv = Delegated("inspector", Inspector.kv)
    dist = Delegated("inspector", Inspector.dist)
    verify_kv = Delegated("inspector", Inspector.verify_kv)
    wait_stopped = Delegated("inspector", Inspector.wait_stopped)
    wait_process = Delegated("inspector", Inspector.wait_process)
    # record, replay, step back (replaying.py)
    record = Delegated("replayer", Replayer.record)
    recording = Delegated("replayer", Replayer.recording)
    get_recording = Delegated("replayer", Replayer.get_recording)
    save_recording = Delegated("replayer", Replayer.save_recording)
    replay = Delegated("replayer", Replayer.replay)
    replay_status = Delegated("replayer", Replayer.replay_status)
    step_back = Delegated("replayer", Replayer.step_back)
    # breakpoints (breakpoints.py)
    set_breakpoint = Delegated("bp_table", BreakpointTable.set_breakpoint)
    remove_breakpoint = Delegated("bp_table", BreakpointTable.remove_breakpoint)
    enable_breakpoint = Delegated("bp_table", BreakpointTable.enable_breakpoint)
    clear_breakpoints = Delegated("bp_table", BreakpointTable.clear_breakpoints)
    breakpoints = Delegated("bp_table", BreakpointTable.breakpoints)
    # overrides (overrides.py)
    override = Delegated("overrides", Overrides.override)
    edit_dist = Delegated("overrides", Overrides.edit_dist)
    # scheduler step mode (scheduler_step.py)
    scheduler_step_mode = Delegated("batch_steps", SchedulerStepMode.scheduler_step_mode)
    pending_batch = Delegated("batch_steps", SchedulerStepMode.pending_batch)
    wait_batch_pending = Delegated("batch_steps", SchedulerStepMode.wait_batch_pending)
    step_batch = Delegated("batch_steps", SchedulerStepMode.step_batch)
    # views (views.py)
    kv_tree = Delegated("views", Views.kv_tree)
    timeline = Delegated("views", Views.timeline)
    trace = Delegated("views", Views.trace)
    watch = Delegated("views", Views.watch)
    unwatch = Delegated("views", Views.unwatch)
    # the LIP profiler and the what-if explorer (profiling.py, whatif_command.py)
    profile_start = Delegated("profiling", Profiling.profile_start)
    profile = Delegated("profiling", Profiling.profile)
    profile_stop = Delegated("profiling", Profiling.profile_stop)
    what_if = Delegated("whatif", WhatIfExplorer.what_if)
    # events (event_stream.py)
    subscribe = Delegated("events", EventStream.subscribe)
    event_queue = Delegated("events", EventStream.event_queue)

    def handle_command(self, msg: dict) -> dict:
        """One JSON command in, one JSON response out (see docs/protocol.md)."""
        from .protocol import handle_command

        return handle_command(self, msg)


__all__ = ["Debugger", "DebuggerError", "Stop", "edit_dist"]
