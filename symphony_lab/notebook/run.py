"""`LabRun`: one LIP launched from a notebook — its process, its live widget, and the debugger's
commands for it (every one goes through the lab's single protocol entry point, `Lab.handle`)."""

from __future__ import annotations

import linecache
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..profiler import Profile, ProfileCollector
from ..whatif import WhatIf, thread_context, thread_tokens, what_if
from .kernel import current_definition

if TYPE_CHECKING:
    from .lab import Lab


class LabRun:
    """One LIP launched from a notebook: its process, its live widget, and debugger shortcuts."""

    def __init__(
        self,
        lab: Lab,
        fn: Callable,
        args: tuple,
        kwargs: dict,
        *,
        stop_on_entry: bool,
        record: bool,
        breakpoints: list,
        name: str | None,
    ) -> None:
        self.lab = lab
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.stop_on_entry = stop_on_entry
        self.record = record
        self.breakpoints = list(breakpoints)
        self.name = name or getattr(fn, "__name__", "lip")
        self.pid: int | None = None
        self.pids: list[int] = []
        self.tokens: list[dict] = []
        self.messages: list[Any] = []
        self.launch_error: str | None = None
        self._replay_overrides: set[tuple[int, int]] = set()  # (tid, k): the k-th pred of tid was overridden
        # held from cancelling the run's process to binding its successor (relaunch, step back),
        # so a cell waiting on `result()` sees the move and follows it
        self._move_lock = threading.Lock()
        self._launched = threading.Event()
        self._widget = None
        self.scope = "process"  # the widget's KV tree and timeline: this run's processes, or "engine"
        self.kv_index: int | None = None  # a kept KV tree to show (scrubbing), None: the newest
        self.profiling = False  # set by `Lab.run(profile=True)`: a collector is attached at launch
        self._collector = None
        self._profile_view: tuple[float, bool, int, dict] | None = None  # (when, final, top, body): a cache
        self.what_if_view: dict | None = None  # the last `what_if` body asked from a widget or the sidebar

    # --- the widget ---------------------------------------------------------------------------
    @property
    def widget(self):
        if self._widget is None:
            from ..widgets import LIPWidget

            self._widget = LIPWidget(self)
            # its first view may predate a stop whose update the pump dropped for want of a widget,
            # and a stopped process sends no further event: rebuild it now the pump can see it
            if self.pid is not None:
                self.lab.mark_dirty(self.pid)
        return self._widget

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        return f"LabRun({self.name!r}, pid={self.pid}, status={self.status!r})"

    # --- launching ------------------------------------------------------------------------------
    def _launch(self, fn: Callable | None = None, stop_on_entry: bool | None = None) -> int:
        dbg = self.lab.debugger
        if fn is not None:
            self.fn = fn
        entry = self.stop_on_entry if stop_on_entry is None else stop_on_entry
        bps = self.breakpoints
        self.tokens, self.messages, self.launch_error = [], [], None
        self._replay_overrides = set()
        if self.profiling:
            self._collector = start_collector(self.lab.engine, self._collector)
            self._profile_view = None
        r = dbg.launch(
            self.fn, *self.args, stop_on_entry=entry or bool(bps), record=self.record, name=self.name, **self.kwargs
        )
        pid = r["pid"]
        if self._collector is not None:
            self._collector.pids = {pid}
            # the protocol's `profile` (the sidebar, a remote client) reads this same collector
            dbg.profiling.adopt(pid, self._collector)
        self.lab.tap.watch.add(pid)
        self.pid = pid
        self.pids.append(pid)
        self.lab.register_run(self, pid)
        if bps:
            for bp in bps:
                spec = {"call": bp} if isinstance(bp, str) else dict(bp)
                dbg.set_breakpoint(**{**spec, "pid": pid})
            if not entry:  # we stopped only to bind the breakpoints before the LIP's first call
                dbg.wait_stopped(pid, 1, timeout=30)
                dbg.continue_(pid)
        self._launched.set()
        self.lab.mark_dirty(pid)
        return pid

    def relaunch(self, fn: Callable | None = None, stop_on_entry: bool | None = None) -> int:
        """Cancel this run's process and launch it again — with the current definition of its function.

        Without `fn`, a function defined in the notebook is looked up again by name in the
        kernel's namespace, so an edited and re-run cell takes effect."""
        if fn is None:
            fn = current_definition(self.fn)
        with self._move_lock:
            proc = self.process
            if proc is not None and not proc.done:
                proc.cancel("relaunched from Symphony Lab")
                proc.wait(10)
            return self._launch(fn, stop_on_entry)

    # --- state --------------------------------------------------------------------------------
    @property
    def process(self):
        if self.pid is None:
            return None
        return self.lab.engine.runtime.processes.get(self.pid)

    @property
    def status(self) -> str:
        if self.launch_error:
            return "failed"
        p = self.process
        if p is None:
            return "starting" if not self.lab.ready else "queued"
        if any(s["pid"] == p.pid for s in self.lab.debugger.stops()["stops"]):
            return "stopped"
        return p.status

    def wait_launched(self, timeout: float | None = 120) -> int:
        if not self._launched.wait(timeout):
            raise TimeoutError(f"{self.name}: not launched after {timeout}s (is the engine still loading?)")
        if self.pid is None:
            raise RuntimeError(f"{self.name}: launch failed: {self.launch_error}")
        return self.pid

    def result(self, timeout: float | None = None) -> Any:
        """The LIP's return value (waits for it). If the run moves to a new process meanwhile (a
        relaunch or a step back from the widget), waits for that one instead."""
        return self._follow(lambda proc, t: proc.result(t), timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self._follow(lambda proc, t: proc.wait(t), timeout)

    def _follow(self, fn: Callable, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.wait_launched(timeout)
        while True:
            proc = self.process
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out = fn(proc, left)
            except Exception:
                with self._move_lock:  # a move under way finishes first
                    pass
                if self.process is not proc:
                    continue
                raise
            with self._move_lock:
                pass
            if self.process is not proc and not (deadline is not None and time.monotonic() >= deadline):
                continue  # `wait` returned because the process was replaced
            return out

    # --- debugger shortcuts (all go through the one protocol) ----------------------------------
    def _cmd(self, command: str, **arguments: Any) -> dict:
        self.wait_launched()
        resp = self.lab.handle(
            {"type": "request", "seq": 0, "command": command, "arguments": {"pid": self.pid, **arguments}}
        )
        if not resp.get("success"):
            from symphony_lab.debugger import DebuggerError

            raise DebuggerError(resp.get("message", f"{command} failed"))
        return resp["body"]

    def wait_stopped(self, timeout: float = 60.0, tid: int | None = None, landing: dict | None = None) -> dict:
        """The oldest stop (of thread `tid`); with `landing` (a step's answer), where that step landed."""
        where = {k: landing[k] for k in ("after", "step") if k in landing} if landing else {}
        return self._cmd("wait_stopped", timeout=timeout, **({"tid": tid} if tid else {}), **where)

    def step(self, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """Step into (the debugger's `step`): run the stopped thread until its next `pred`
        returns, or the first pred of a thread it spawns; with `wait`, return the stop it
        landed on (in whichever thread: docs/architecture.md, "Stepping and threads")."""
        r = self._cmd("step", **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, landing=r) if wait else {}

    def step_over(self, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """The debugger's `step_over`; with `wait`, return the next stop of the run."""
        r = self._cmd("step_over", **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, landing=r) if wait else {}

    def step_out(self, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """The debugger's `step_out`; with `wait`, return the next stop of the run (or its exit)."""
        r = self._cmd("step_out", **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, landing=r) if wait else {}

    def continue_(self, tid: int | None = None) -> dict:
        return self._cmd("continue", **({"tid": tid} if tid else {}))

    def pause(self) -> dict:
        return self._cmd("pause")

    def override(self, token: int | None = None, text: str | None = None, tid: int | None = None) -> dict:
        args: dict = {"token": token} if token is not None else {"text": text}
        return self._cmd("override", **args, **({"tid": tid} if tid else {}))

    def start_recording(self) -> dict:
        """Record this run's syscall results from now on (from its start when it is stopped on
        entry: only such a recording can be replayed)."""
        return self._cmd("record", enabled=True)

    def step_back(self, steps: int = 1, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """Replay the recorded run into a new process stopped right after the pred `steps` before
        this stop; this run (and its widget) then follows the new process. With `wait`, return that stop."""
        body = self._cmd("step_back", steps=steps, **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, body.get("tid")) if wait else body

    def stops(self) -> list[dict]:
        return [s for s in self.lab.debugger.stops()["stops"] if s["pid"] == self.pid]

    def view(self) -> dict:
        return self.lab.run_views.run_view(self)

    # --- profile and what-if ----------------------------------------------------------------------
    def profile(self, timeout: float | None = 600) -> Profile:
        """Where this run's time went, per line and thread (`lab.run(..., profile=True)`); waits
        for the run to end, then stops collecting."""
        if self._collector is None:
            raise RuntimeError("this run was not profiled: launch it with lab.run(..., profile=True)")
        self.wait(timeout)
        if self.pid is not None:
            self._collector.wait_ended(self.pid)
        self._collector.detach()
        return self._collector.profile()

    def profile_view(self, top: int = 40, min_interval: float = 1.0) -> dict | None:
        """The profile so far as the protocol's `profile` body (docs/protocol.md), each line with
        its source text; rebuilt at most every `min_interval` seconds while the run lives."""
        if self._collector is None or self.pid is None:
            return None
        proc = self.process
        done = proc is not None and proc.done
        cached = self._profile_view
        fresh = cached is not None and (cached[1] or (not done and time.monotonic() - cached[0] < min_interval))
        if cached is not None and fresh and cached[2] == top:
            return cached[3]
        body = with_source_texts(dict(self.lab.debugger.profile(self.pid, top)))
        self._profile_view = (time.monotonic(), bool(body.get("done")), top, body)
        return body

    def recorded_threads(self) -> list[dict]:
        """The threads a what-if can start from: each recorded thread's token count (prompt included)."""
        from symphony_lab.debugger import DebuggerError

        if self.pid is None:
            return []
        try:
            rec = self.lab.debugger.get_recording(self.pid)
        except DebuggerError:
            return []
        out = []
        for tid in sorted({tid for tid, _ in rec.order}):
            preds = rec.preds(tid)
            if preds:
                out.append({"tid": tid, "tokens": len(thread_tokens(rec, tid)), "prompt": len(preds[0].tokens or [])})
        return out

    def what_if(
        self, tid: int, position: int, token: int | str, max_tokens: int = 16, sampler=None, source: str | None = None
    ) -> WhatIf:
        """Feed `token` at `position` of thread `tid`'s recorded token stream and decode the
        alternative in a KV fork beside the original (`lab.run(..., record=True)`)."""
        if self.pid is None:
            raise RuntimeError("this run has not launched")
        rec = self.lab.debugger.get_recording(self.pid)
        toks, ctx = thread_tokens(rec, tid), thread_context(rec, tid)
        return what_if(self.lab.engine, toks, position, token, max_tokens, sampler, source, context=ctx)


def with_source_texts(body: dict) -> dict:
    """A `profile` body with each line's source text (`text`), read where the source is (a
    notebook cell's lines are in the kernel's linecache)."""
    body["lines"] = [{**r, "text": linecache.getline(r["file"], r["line"]).strip()} for r in body.get("lines", [])]
    return body


def start_collector(engine: Any, old: ProfileCollector | None) -> ProfileCollector:
    if old is not None:
        old.detach()
    return ProfileCollector().attach(engine.bus)


__all__ = ["LabRun", "with_source_texts"]
