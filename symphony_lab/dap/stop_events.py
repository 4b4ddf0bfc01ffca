"""The debugger's events as DAP events, for one DAP session (session.py).

A `stopped` event becomes the editor's stop, or is resumed at once: a breakpoint its condition,
hit count or line rules out (with `keep_step`: a step the thread carries goes on), an entry not
asked for. A shown stop is the step's landing (no `preserveFocusHint`) or a thread held meanwhile
(with the hint); a stop re-announced as a join's landing that the editor shows already is not sent
again. Thread starts and ends, the program's `send`s (as output) and its exit (with a post-mortem
stop when an exception filter asks for one) follow.

The session's requests (session.py) and these events share the session's state — the stops shown,
the step in flight, the threads the editor resumed itself, the process a step back replaces —
through its public attributes; the landings shown and the breakpoints each stop hit are kept here.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..debugger.stepping import lands_on
from .backend import BackendError
from .inspect_views import sent_text
from .postmortem import failure_of

if TYPE_CHECKING:
    from .session import DapSession

log = logging.getLogger(__name__)
STOP_REASON = {"entry": "entry", "step": "step", "follow": "step", "pause": "pause", "diverged": "exception"}


class StopEvents:
    """Turns one session's debugger events into DAP events (`on_event`, on the session's thread)."""

    def __init__(self, session: DapSession) -> None:
        self.s = session
        self._landed_steps: set[int] = set()  # steps whose landing was shown
        self._hits: dict[int, list[int]] = {}  # tid -> the breakpoints its stop hit

    def on_event(self, msg: dict) -> None:
        name, b = msg.get("event"), msg.get("body") or {}
        pid, tid = b.get("pid"), b.get("tid")
        if name == "stopped" and pid is not None and pid == self.s.replay_pid:
            self._replay_arrived(b)
            self._on_stop(b, back=True)
            return
        if name == "replay_diverged" and pid in (self.s.pid, self.s.replay_pid):
            self.s.output(
                f"the replay of thread {tid} diverged from the recording ({b.get('why')}): it runs live from here\n"
            )
        if pid != self.s.pid or self.s.pid is None or pid in self.s.backing_from:
            return  # another process, or the one a step back replaces (its threads' ends are not news)
        if name == "stopped":
            self._on_stop(b)
        elif name == "continued":
            if tid in self.s.requested:
                self.s.requested.discard(tid)
            elif self.s.stops.pop(tid, None) is not None:
                self.s.handles.reset()
                self.s.channel.event("continued", {"threadId": tid, "allThreadsContinued": False})
        elif name in ("thread_start", "thread_exit") and isinstance(tid, int):
            self.s.channel.event(
                "thread", {"reason": "started" if name == "thread_start" else "exited", "threadId": tid}
            )
        elif name == "syscall_enter" and b.get("call") == "send":
            self.s.output(sent_text((b.get("args") or {}).get("value")) + "\n", "stdout")
        elif name == "process_exit":
            self.on_exit(b)

    def _replay_arrived(self, b: dict) -> None:
        """The step back's replay stopped where it was sent: it is the program from now on."""
        self.s.pid, self.s.replay_pid = b["pid"], None
        self.s.stops.clear()
        self.s.bps.bind(self.s.pid)

    def _on_stop(self, b: dict, back: bool = False) -> None:
        """Show the editor stop `b`, or resume it here (a breakpoint ruled out, an entry not asked
        for). `back`: the stop a step back was heading for (the replay's temporary breakpoint)."""
        tid = b["tid"]
        reasons = ["step"] if back else b.get("reasons") or [b.get("reason")]
        known = (self.s.stops.get(tid) or {}).get("stop_id") == b.get("stop_id")  # re-announced: a join landed on it
        if known and self.s.stepping is None:
            self.s.stops[tid] = b  # shown already, and no step in flight to land on it: the focus is there
            return
        if "entry" in reasons and self.s.entry_pending:
            self.s.entry_pending = False
            if self.s.cfg is not None and not self.s.cfg.stop_on_entry:
                self.s.quietly("continue", pid=self.s.pid, tid=tid)
                return
        hit: list[int] = self._hits.get(tid, []) if known else []
        if "breakpoint" in reasons and not known:
            path = self.s.backend.local_path(b.get("file")) if self.s.backend else None
            hit, errors = self.s.bps.decide(b, path, lambda: self.s.stop_requests.condition_namespace(b))
            for e in errors:
                self.s.output(e + "\n", "stderr")
            if not hit and reasons == ["breakpoint"]:  # ruled out: as if it had not stopped (a step goes on)
                self.s.quietly("continue", pid=self.s.pid, tid=tid, keep_step=True)
                return
        self.s.stops[tid], self._hits[tid] = b, hit
        res = b.get("result")
        if isinstance(res, dict) and res.get("kind") == "dist":  # a join's result is the thread's value
            self.s.last_dist[tid] = (res, int(b.get("preds") or 0))
        # Another thread's stop resumes nothing: the handles given out for the threads already stopped stay
        # valid (DAP's references live while execution is suspended); only this thread's stack is new.
        self.s.stop_requests.forget(tid)
        functions = {bp.id for bp in self.s.bps.functions}
        if hit:
            reason = "function breakpoint" if set(hit) <= functions else "breakpoint"
        else:
            reason = next((STOP_REASON[r] for r in reasons if r in STOP_REASON), "pause")
        body: dict[str, Any] = {
            "reason": reason,
            "threadId": tid,
            "allThreadsStopped": False,
            "description": "on entry" if b.get("where") == "entry" else f"{b.get('where')} {b.get('call')}",
        }
        if hit:
            body["hitBreakpointIds"] = hit
        step, own = self.s.stepping, b.get("step")
        if step is not None and not lands_on(b, step[1], step[0]):
            body["preserveFocusHint"] = True  # another thread held meanwhile, not where the step landed
        elif step is not None:
            self.s.stepping = None
            if own is not None:
                self._landed_steps.add(own)
        elif own is not None and own in self._landed_steps and not self.s.step_asked:
            # A step into spawned threads stops each at its first pred: the first to stop was the
            # landing; its siblings stop later under the same step and must not take the focus.
            body["preserveFocusHint"] = True
        if "diverged" in reasons:
            body["text"] = "the replay diverged from the recording: the thread runs live from here"
        self.s.channel.event("stopped", body)

    def on_exit(self, b: dict) -> None:
        assert self.s.backend is not None and self.s.pid is not None
        self.s.ended = True
        self.s.stops.clear()
        try:
            res = self.s.request("wait_process", pid=self.s.pid, timeout=10)
        except (BackendError, TimeoutError) as e:  # said from the exit event alone
            log.warning("no result for process %s: %s", self.s.pid, e)
            res = {"status": b.get("status"), "result": None, "error": b.get("error")}
        if res.get("status") == "finished":
            self.s.output(
                f"{self.s.cfg.program if self.s.cfg else 'program'} returned {json.dumps(res.get('result'))}\n"
            )
        elif res.get("error"):
            self.s.output(f"{res['error']}\n", "stderr")
        self.s.status = res.get("status")
        failure = failure_of(res, self.s.request, self.s.pid)
        if failure is not None and failure.filter in self.s.bps.exception_filters:
            self.s.postmortem = failure
            self.s.channel.event(
                "stopped",
                {"reason": "exception", "threadId": failure.tid, "allThreadsStopped": True, "text": failure.message},
            )
            return
        self.finish()

    def finish(self) -> None:
        self.s.channel.event("exited", {"exitCode": 0 if self.s.status == "finished" else 1})
        self.s.channel.event("terminated")


__all__ = ["STOP_REASON", "StopEvents"]
