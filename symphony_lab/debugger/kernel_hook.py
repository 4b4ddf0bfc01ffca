"""The debugger's kernel hook: at every stop point of a LIP thread (before and after each system
call, and on a process's entry) it decides whether the thread stops — a breakpoint, a step's end
(stepping.py), a pause, a replay's divergence — and holds it there until a command resumes it.

The hook runs in the LIP's own thread, so only that thread waits: other threads and processes
keep running and batching (non-stop mode) unless `stop_scope="process"` asks a stop to pause the
rest of its process too. It is composed through an explicit interface: the debugger core gives
it the stop table, the stepping plans, the breakpoints, the replayer, the overrides and where to
emit events and trace records; the core installs it as `runtime.kernel.hook`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from symphony_core.events import Event, now
from symphony_core.kvfs import KV
from symphony_core.model.dist import Dist

from . import viewdata as ins
from .breakpoints import BreakpointTable
from .overrides import Overrides, edit_dist
from .replaying import Replayer
from .stepping import PLAN_OF_ACTION, Stepping
from .stop_table import StopTable
from .stops import Stop

log = logging.getLogger(__name__)


class KernelHook:
    def __init__(
        self,
        runtime,
        stop_table: StopTable,
        stepping: Stepping,
        breakpoints: BreakpointTable,
        replayer: Replayer,
        overrides: Overrides,
        emit: Callable[[str, dict], None],
        trace: Callable[[dict], None],
        attached: Callable[[], bool],
        stop_scope: str,
    ) -> None:
        self.runtime = runtime
        self.tokenizer = stop_table.tokenizer
        self.stop_table = stop_table
        self.stepping = stepping
        self.breakpoints = breakpoints
        self.replayer = replayer
        self.overrides = overrides
        self._emit = emit
        self._trace = trace
        self._attached = attached
        self.stop_scope = stop_scope
        self.prev: Any = None  # the hook this one chains to (set when installed)
        self._lock = threading.Lock()
        # A stop's id, its place in the stop table and its `stopped` event, given under one lock: the
        # stops of two threads that get there at once (two followed threads' first preds) are held
        # and announced in the order of their ids, so a front-end that takes the first `stopped`
        # event of a step as its landing (DAP, TUI) sees the stop `wait_stopped` answers (the oldest).
        self._announce = threading.Lock()
        self._awaiting_fed: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid) -> (stop id, seq) of a pred
        self._after_bp: dict[Any, tuple[int, list[int], str]] = {}  # LIPThread -> (seq, breakpoint ids, reason)

    def clear(self) -> None:
        with self._lock:
            self._awaiting_fed.clear()
            self._after_bp.clear()

    def thread_exited(self, pid: int, tid: int) -> None:
        with self._lock:
            self._awaiting_fed.pop((pid, tid), None)

    def _busy(self) -> bool:
        return bool(
            self.breakpoints
            or self.stepping.active()
            or self._awaiting_fed
            or self.stop_table.pausing
            or self.replayer.active
            or self.overrides.pending
            or self._after_bp
        )

    def before(self, th, ev: Event) -> None:
        if self.prev is not None:
            self.prev.before(th, ev)
        if ev.call == "join":  # told at every join: a step handed on later may find the thread waiting in it
            self.stepping.joining(th.proc.pid, th.tid, ev.args.get("tid"))
        if not self._busy():
            return
        pid, tid, call, seq = th.proc.pid, th.tid, ev.call, ev.seq
        tok_cache: list = []

        def tokens() -> list[int] | None:
            if not tok_cache:
                tok_cache.append(self._input_tokens(call, ev))
            return tok_cache[0]

        reasons: list[str] = []
        diverged = self.replayer.check(pid, tid, seq, call, ev.args, tokens)
        if diverged is not None:
            self._emit("replay_diverged", {"pid": pid, **diverged})
            reasons.append("diverged")
        if call == "pred" and self._awaiting_fed:
            with self._lock:
                fed = self._awaiting_fed.pop((pid, tid), None)
            toks = tokens() if fed is not None else None
            if fed is not None and toks:
                t = toks[0]
                body = {"pid": pid, "tid": tid, "stop_id": fed[0], "seq": fed[1], "token": t}
                self._emit("taken", {**body, "text": self.tokenizer.token_text(t), "by": "fed"})
        if self.stepping.active():
            step_reasons, wakes = self.stepping.before(th, call, ev.args, sys._getframe(1))
            reasons.extend(step_reasons)
            self.land(pid, wakes)
        if self.stop_table.take_pause(th):
            reasons.append("pause")
        bp_ids, after_ids, why = self.breakpoints.hit(pid, tid, call, ev.args, tokens, self.tokenizer.detokenize)
        with self._lock:
            self._after_bp.pop(th, None)
            if after_ids:
                self._after_bp[th] = (seq, after_ids, why)
        if bp_ids:
            reasons.insert(0, why)
        if reasons:
            self._hold(th, ev, "before", reasons, bp_ids, None, tokens() if call == "pred" else None)

    def land(self, pid: int, wakes: list[tuple[int, int]]) -> None:
        """Steps that land on threads already held (`wakes`: (tid, step), from `Stepping.before` or
        `thread_exited`: the thread a stepping thread joins): each stop carries its step from now
        on and is announced again."""
        for joined, step in wakes:
            for s in self.stop_table.matching(pid, joined):
                with self._announce:
                    self.stop_table.retag(s, step)
                    self.stepping.landed(pid, step=step)
                    try:
                        self._emit("stopped", self.stop_table.info(s))
                    except Exception:  # the step landed all the same (`wait_stopped` answers it)
                        log.warning("the stopped event of %s.%s could not be built", pid, joined, exc_info=True)

    def after(self, th, ev: Event, result: Any) -> Any:
        if self.prev is not None:
            result = self.prev.after(th, ev, result)
        if ev.call == "join":
            self.stepping.join_returned(th.proc.pid, th.tid)
        if not self._busy():
            return result
        pid, tid, call, seq = th.proc.pid, th.tid, ev.call, ev.seq
        reasons: list[str] = []
        diverged = self.replayer.outcome(pid, tid, seq, call)
        if diverged is not None:  # said, not stopped at: the call's inputs matched, the thread goes on live
            self._emit("replay_diverged", {"pid": pid, **diverged})
        result = self.replayer.substitute(pid, tid, seq, call, result)
        bp_ids: list[int] = []
        ed = self.overrides.take_pending(th)
        with self._lock:
            ab = self._after_bp.pop(th, None)
        if self.stepping.active():
            reasons.extend(self.stepping.after(th, call, ev.args, sys._getframe(1)))
        if self.stop_table.take_pause(th):
            reasons.append("pause")
        overridden = original = None
        if ed is not None and ed[0] == seq and isinstance(result, Dist):
            original, result = result, edit_dist(result, **ed[1])
            overridden = ed[1].get("force")
        if ab is not None and ab[0] == seq:
            reasons.insert(0, ab[2])
            bp_ids = ab[1]
        if reasons:
            toks = self._input_tokens(call, ev) if call == "pred" else None
            result = self._hold(th, ev, "after", reasons, bp_ids, result, toks, overridden, original)
        if self.replayer.is_recording(pid):
            toks = self._input_tokens(call, ev) if call == "pred" else None
            kv = ins.syscall_locals(sys._getframe(), call).get("kv") if call == "pred" else None

            def context() -> list[int] | None:  # the file before this pred: its tokens less the ones fed
                return kv.tokens[: kv.len - len(toks or [])] if isinstance(kv, KV) else None

            self.replayer.keep(pid, tid, seq, call, ev.args, toks, result, context)
        return result

    def after_error(self, th, ev: Event, error: BaseException) -> None:
        """A call raised: recorded as such; in a replay, a divergence if the recorded one returned."""
        on_error = getattr(self.prev, "after_error", None)
        if on_error is not None:
            on_error(th, ev, error)
        pid = th.proc.pid
        if ev.call == "join":
            self.stepping.join_returned(pid, th.tid)
        if th.proc.kill_reason is not None:  # cancelled (a step back, a restart): no outcome of the call's own
            return
        if self.replayer.is_recording(pid):
            self.replayer.keep_error(pid, th.tid, ev.seq, ev.call or "", ev.args, error)
        diverged = self.replayer.outcome(pid, th.tid, ev.seq, ev.call or "", error)
        if diverged is not None:
            self._emit("replay_diverged", {"pid": pid, **diverged})

    def _input_tokens(self, call: str, ev: Event) -> list[int] | None:
        """A pred's input tokens in full; for a call on a KV file (kv_fork, kv_close, ...) the
        file's tokens; None otherwise."""
        loc = ins.syscall_locals(sys._getframe(), call)
        if call == "pred":
            toks = ins.as_token_list(loc.get("token_ids")) if "token_ids" in loc else None
            return toks if toks is not None else ev.args.get("tokens")
        kv = loc.get("kv")
        return kv.tokens if isinstance(kv, KV) else None

    def stop_at_entry(self, proc) -> None:
        """Hold a new process's main thread before the LIP's first line."""
        th = proc.threads[0]
        file, line = ins.where_is(getattr(proc, "entry_location", None) or proc.fn)
        ev = Event("process_entry", now(), proc.pid, th.tid, None, {"name": proc.name}, file=file, line=line, seq=0)
        self._hold(th, ev, "entry", ["entry"], [], None, None)

    def _hold(
        self,
        th,
        ev: Event,
        where: str,
        reasons: list[str],
        bp_ids: list[int],
        result: Any,
        tokens: list[int] | None,
        overridden: int | None = None,
        original: Any = None,
    ) -> Any:
        """Hold the calling LIP thread until a command resumes it; return the (maybe edited) result."""
        proc = th.proc
        frames = ins.capture_frames(sys._getframe(1))
        depth = max(1, ins.lip_depth(sys._getframe(1)))
        stop = Stop(
            id=0,  # given when it is announced
            thread=th,
            reason=reasons[0],
            reasons=reasons,
            where=where,
            call=ev.call,
            seq=ev.seq,
            args=dict(ev.args),
            file=ev.file,
            line=ev.line,
            breakpoints=bp_ids,
            ts=now(),
            frames=frames,
            tokens=tokens,
            depth=depth,
            result=result,
            overridden=overridden,
            original=original,
            step=self.stepping.landing_of(proc.pid, th.tid) if "step" in reasons else None,
        )
        prev_state = th.hold_stopped()  # not runnable: the batch policy must not wait for it
        self.runtime.batch.wake()
        ids = {"pid": proc.pid, "tid": th.tid}
        with self._announce:
            stop.id = self.stop_table.next_id()
            self.stop_table.hold(stop)
            step = self.stepping.landed(proc.pid, th.tid)
            if step != stop.step:  # a step handed on while it was on its way landed here too (None: two steps)
                self.stop_table.retag(stop, step)
            why = {"reason": stop.reason, "call": stop.call, "where": where, "stop_id": stop.id}
            self._trace({"kind": "dbg_stop", "ts": stop.ts, **ids, **why})
            try:
                self._emit("stopped", self.stop_table.info(stop))
            except Exception:  # the thread stops all the same (`stops` lists it); only the event is lost
                log.warning("the stopped event of %s.%s could not be built", stop.pid, stop.tid, exc_info=True)
        if self.stop_scope == "process":
            self.stop_table.ask_pause([t for t in proc.threads if t is not th])
        try:
            while not stop.resumed.wait(0.05):
                if proc.kill_reason is not None:
                    stop.action = "killed"
                    raise proc.kill_reason
                if not self._attached():
                    stop.action = "detach"
                    break
        finally:
            self.stop_table.let_go(stop)
            th.release_stopped(prev_state)
            t = now()
            self._trace({"kind": "dbg_resume", "ts": t, **ids, "reason": stop.reason, "action": stop.action})
            waited = round(t - stop.ts, 6)
            self._emit("continued", {**ids, "stop_id": stop.id, "action": stop.action, "stopped_for": waited})
        if stop.action in PLAN_OF_ACTION:
            self.stepping.begin(proc.pid, th.tid, stop.action, stop.depth, stop.next_step)
        if where == "after" and ev.call == "pred" and isinstance(stop.result, Dist) and stop.action != "detach":
            info = self.stop_table.info(stop)
            if (info.get("result") or {}).get("taken") is None:  # known once the program feeds its pick
                with self._lock:
                    self._awaiting_fed[(proc.pid, th.tid)] = (stop.id, stop.seq)
        return stop.result


__all__ = ["KernelHook"]
