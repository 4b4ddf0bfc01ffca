"""`DebuggerSession`: the TUI's `Session` over the debugger's JSON protocol.

It speaks only the protocol of `symphony_lab.debugger` (docs/protocol.md): commands through
`handle_command` in-process, or `RemoteDebugger.request` over WebSocket, and the event
stream through `subscribe`, folded into the shared client-side model
(`symphony_lab.session_state.SessionState`, the same one the notebook widgets use): per
thread, the tokens it fed and the probability each generated one had, where each thread was
last seen, the overrides, the stops in order.

Stepping is the debugger's own (`step` follows into spawned threads, see
debugger/stepping.py). Two things the TUI adds on top, through the same commands:

- **line breakpoints**: a breakpoint on a source line is a `pred` (or the syscall named on
  that line) breakpoint whose stops at other lines are continued at once;
- **step lands after a pred**: a line breakpoint's stop *before* the `pred` being stepped to
  is passed over, so one step is one token.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..debugger.errors import DebuggerError
from ..debugger.snapshot import DebuggerSnapshot, build_snapshot
from ..session_state import EVENTS, SessionState
from .line_breakpoints import LineBreakpoints
from .lip_files import load_file, resolve_target  # noqa: F401 (cli, embedded and tests import them from here)
from .reactions import Notices, Reactor
from .recorded_tops import RecordedTops
from .session import Session, SessionError
from .session_profile import stop_session_profiles

log = logging.getLogger(__name__)


class DebuggerSession(Session):
    """Drive a `Debugger` (or a `RemoteDebugger`) for the TUI.

    `dbg`: the debugger object; `target`: "module:function" to launch (None: attach to what
    runs); `token_text(id) -> str` and `traceback_of(pid) -> str | None` are optional helpers
    for what the protocol does not carry (token text outside a stop, a failed LIP's traceback).
    """

    def __init__(
        self,
        dbg,
        target: str | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        title: str | None = None,
        program_file: str | None = None,
        stop_on_entry: bool = True,
        token_text: Callable[[int], str] | None = None,
        traceback_of: Callable[[int], str | None] | None = None,
        on_close: Callable[[], None] | None = None,
        sync_events: bool | None = None,
        program: dict | None = None,
    ) -> None:
        self.dbg = dbg
        # `program`: {"source": ..., "entry": ..., "sandbox": ...} to start through a `symphony serve`
        # server's own launch path (`run_program`, the server's debugger plugin) instead of `launch`
        self.program = program
        self.target, self.args, self.kwargs = target, tuple(args), dict(kwargs or {})
        self.title = title or (target or "attached")
        self.program_file = program_file
        self.stop_on_entry = stop_on_entry
        self._token_text = token_text
        self._traceback_of = traceback_of
        self._on_close = on_close
        self._remote = hasattr(dbg, "request")
        # In-process, events arrive on the LIP's own thread before it goes on: react right there.
        self._sync = (not self._remote) if sync_events is None else sync_events
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self.pid: int | None = None
        self.pids: list[int] = []
        self.profiled_pids: set[int] = set()  # processes the Profile screen started profiling
        self.model = SessionState()
        self._stepping: dict[tuple[int, int], str] = {}  # thread -> the step command in flight
        self._line_bps = LineBreakpoints()
        self._unnamed: set[int] = set()  # token ids seen in events whose text is not known yet
        self._recorded = RecordedTops(self.request)
        self._tracebacks: dict[int, str] = {}
        self._results: dict[int, dict] = {}
        self._replaying: set[int] = set()  # step-back replays on their way to the target pred
        self._backing = 0
        self._unsub: Callable[[], None] | None = None
        self.notices = Notices()  # what failed out of sight, shown with the next state
        self._reactor = Reactor(self._sync, self.notices)
        self._closed = False

    # --- the protocol ---------------------------------------------------------------------------
    def request(self, command: str, **arguments: Any) -> Any:
        """One protocol command; its body, or SessionError with the debugger's message."""
        if self._remote:
            try:
                return self.dbg.request(command, **arguments)
            except TimeoutError:
                raise
            except Exception as e:
                raise SessionError(str(e)) from None
        resp = self.dbg.handle_command(
            {"type": "request", "seq": next(self._seq), "command": command, "arguments": arguments}
        )
        if not resp.get("success"):
            if resp.get("error") == "TimeoutError":
                raise TimeoutError(resp.get("message"))
            raise SessionError(resp.get("message") or "command failed")
        return resp.get("body")

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._remote:
            try:
                self.dbg.set_event_filter(EVENTS)
            except (DebuggerError, TimeoutError, OSError) as e:  # an older server, or a slow one: every event comes
                log.warning("could not narrow the debugger's event stream: %s: %s", type(e).__name__, e)
        self._unsub = self.dbg.subscribe(self._on_event, EVENTS)
        self._reactor.start()
        self.request("initialize")
        try:
            self.request("record", enabled=True)  # every launch recorded: step back needs it
        except SessionError:
            pass
        if self.target is not None or self.program is not None:
            self._adopt(self._launch()["pid"])

    def _launch(self) -> dict:
        if self.program is not None:
            return self.request(
                "run_program",
                **self.program,
                args=list(self.args),
                kwargs=self.kwargs,
                stop_on_entry=self.stop_on_entry,
                record=True,
            )
        return self.request(
            "launch",
            fn=self.target,
            args=list(self.args),
            kwargs=self.kwargs,
            stop_on_entry=self.stop_on_entry,
            record=True,
        )

    def _adopt(self, pid: int) -> None:
        with self._lock:
            self.pid = pid
            if pid not in self.pids:
                self.pids.append(pid)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reactor.close()
        if self._unsub is not None:
            self._unsub()
        stop_session_profiles(self)
        if self._on_close is not None:
            self._on_close()

    # --- events ---------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.model.version

    def _on_event(self, msg: dict) -> None:
        self.model.apply(msg)
        name, b = msg.get("event"), msg.get("body") or {}
        pid = b.get("pid")
        if name == "syscall_enter" and b.get("call") == "pred":
            with self._lock:
                self._unnamed.update((b.get("args") or {}).get("tokens") or ())
        elif name == "syscall_exit" and b.get("call") == "pred" and isinstance(b.get("result"), dict):
            r = b["result"]
            with self._lock:
                self._unnamed.update(x for x in (r.get("argmax"), r.get("token")) if isinstance(x, int))
        elif name == "stopped":
            self._on_stopped(b)
        elif name == "process_start":
            if self._backing:
                self._replaying.add(pid)
        elif name == "process_exit":
            if b.get("error"):
                self._fetch_traceback(pid)

    def _result_of(self, pid: int) -> dict | None:
        """A finished process's return value (asked once, kept)."""
        if pid not in self._results:
            try:
                self._results[pid] = self.request("wait_process", pid=pid, timeout=0.5)
            except (SessionError, TimeoutError):
                return None
        return self._results[pid]

    def _fetch_traceback(self, pid: int) -> str | None:
        """A failed process's traceback from the `traceback_of` helper, kept once found."""
        if self._traceback_of is None:
            return None
        try:
            tb = self._traceback_of(pid)
        except Exception as e:  # a helper the caller gave: whatever it raises, the traceback is not to be had
            log.warning("no traceback for process %s: %s: %s", pid, type(e).__name__, e)
            return None
        if tb:
            self._tracebacks[pid] = tb
        return tb

    def _pass_over(self, b: dict) -> str | None:
        """What the session does at once with stop `b` rather than show it (None: show it). Asked of
        each `stopped` event and of each snapshot's stops, so a stop to pass never shows."""
        reasons = b.get("reasons") or [b.get("reason")]
        ids = b.get("breakpoints") or []
        if reasons != ["breakpoint"] or not ids or not all(i in self._line_bps for i in ids):
            return None
        if b.get("pid") in self._replaying and b.get("where") != "after":
            return "continue"  # a line breakpoint on a step back's way
        if not self._line_bps.hit(ids, b.get("file"), b.get("line")):
            return "continue"  # a line breakpoint's syscall at another line
        command = self._stepping.get((b.get("pid"), b.get("tid")))
        if command is not None and b.get("where") == "before" and b.get("call") == "pred":
            return command  # stepping to this very pred: go on to its result (one step = one token)
        return None

    def _on_stopped(self, b: dict) -> None:
        pid, tid = b.get("pid"), b.get("tid")
        reasons = b.get("reasons") or [b.get("reason")]
        if pid in self._replaying and (b.get("where") == "after" or "diverged" in reasons or "entry" in reasons):
            self._replaying.discard(pid)  # the step-back target (or where the replay went live)
        action = self._pass_over(b)
        if action is not None:  # "continue", or the step in flight
            self._reactor.submit(
                f"{action} past stop {b.get('stop_id')}", lambda: self._resume_quietly(pid, tid, action)
            )
            return
        if b.get("where") == "after" or "entry" in reasons or "pause" in reasons or "follow" in reasons:
            self._stepping = {k: c for k, c in self._stepping.items() if k[0] != pid}
        self._adopt_if_new(pid)

    def _adopt_if_new(self, pid: int | None) -> None:
        if pid is not None and pid not in self.pids:
            with self._lock:
                self.pids.append(pid)

    def _resume_quietly(self, pid: int, tid: int, command: str) -> None:
        """Resume a passed-over stop ("continue": as if it had not stopped, so a step the thread
        carries goes on; or a step command); a stop gone meanwhile is fine."""
        try:
            self.request(command, pid=pid, tid=tid, **({"keep_step": True} if command == "continue" else {}))
        except SessionError as e:
            log.debug("passing over a stop of %s.%s: %s", pid, tid, e)

    # --- the snapshot ---------------------------------------------------------------------------
    def _fetch_texts(self) -> None:
        """Over the protocol (no local tokenizer), ask once per snapshot for the text of the
        tokens that events named since the last snapshot and no stop has named yet."""
        if self._token_text is not None or not self._remote or not self._unnamed:
            return
        with self._lock:  # events add to the set on the connection's reader thread
            ids, self._unnamed = self._unnamed, set()
        missing = sorted(i for i in ids if isinstance(i, int) and i not in self.model.texts)
        for start in range(0, len(missing), 4096):
            try:
                texts = self.request("token_texts", ids=missing[start : start + 4096])["texts"]
            except SessionError:  # an older debugger without the command: ids stay shown as ⟨id⟩
                return
            self.model.texts.update((int(k), v) for k, v in texts.items())

    def text_of(self, tok: int) -> str:
        t = self.model.texts.get(tok)
        if t is None and self._token_text is not None:
            try:
                t = self._token_text(tok)
            except Exception as e:  # a helper the caller gave (a tokenizer): the id is shown instead
                log.warning("no text for token %s: %s: %s", tok, type(e).__name__, e)
                t = None
            if t is not None:
                self.model.texts[tok] = t
        return t if t is not None else f"⟨{tok}⟩"

    def _preds_of(self, pid: int) -> int:
        return sum(len(v) for k, v in list(self.model.preds.items()) if k[0] == pid)

    def history(self, pid: int, tid: int, live: bool) -> dict:
        """What thread `tid` fed and generated (the shared model's lane), with the top-5 of the
        process's recording for the tokens no stop showed."""
        if not self.model.preds.get((pid, tid)):
            return {"prompt": "", "tokens": []}
        for (t, seq), top in self._recorded.tops(pid, self._preds_of(pid), live).items():
            if t == tid:
                self.model.note_topk(pid, tid, seq, top)
        return self.model.lane(pid, tid, self.text_of)

    def snapshot(self) -> DebuggerSnapshot:
        """The debugger's state, from the one builder every front-end uses (debugger/snapshot.py)."""
        return build_snapshot(self.request)

    def _shown_stop(self, s: dict) -> dict:
        """A stop as the TUI shows it: with the dist its pred gave before any override (`original`)."""
        self.model.remember_texts(s)
        rec = self.model.preds.get((s["pid"], s["tid"]), {}).get(s.get("seq"))
        res = s.get("result") if isinstance(s.get("result"), dict) else {}
        if (
            rec is not None
            and rec.dist is None
            and s.get("where") == "after"
            and s.get("call") == "pred"
            and res.get("kind") == "dist"
            and (res.get("chosen") or {}).get("by") != "override"
        ):
            rec.dist = {**res, "stop_id": s.get("stop_id")}
        first = rec.dist if rec is not None else None
        if first is not None and first.get("stop_id") == s.get("stop_id") and s.get("where") == "after":
            return {**s, "original": {k: v for k, v in first.items() if k != "stop_id"}}
        return s

    def state(self) -> dict:
        """The snapshot, with what the TUI adds beside it (see session.py)."""
        snap = self.snapshot()
        procs = snap["processes"]
        stops = [self._shown_stop(s) for s in snap["stops"] if self._pass_over(s) is None]
        line_bps = []
        for b in snap["breakpoints"]:
            if b.get("temporary"):
                continue
            f, ln, call = self._line_bps.get(b["id"], (None, None, b["call"]))
            line_bps.append({"id": b["id"], "call": b["call"], "source": f, "line": ln, "hits": b.get("hits", 0)})
        self._fetch_texts()
        history, locations, tracebacks, results = {}, {}, {}, {}
        for p in procs:
            pid = p["pid"]
            for t in p.get("threads", []):
                key = f"{pid}.{t['tid']}"
                history[key] = self.history(pid, t["tid"], live=not p.get("done"))
                loc = self.model.locations.get((pid, t["tid"]))
                if loc:
                    locations[key] = loc
            if p.get("status") == "finished":
                results[pid] = self._result_of(pid)
            if p.get("status") in ("failed", "cancelled"):
                tb = self._tracebacks.get(pid) or p.get("traceback") or self._fetch_traceback(pid)
                tracebacks[pid] = tb or p.get("error") or ""
        return {
            **snap,
            "notices": self.notices.take(),
            "stops": stops,
            "line_breakpoints": line_bps,
            "history": history,
            "locations": locations,
            "tracebacks": tracebacks,
            "results": {k: v for k, v in results.items() if v is not None},
            "program_file": self.program_file,
            # a program run by a server carries its source under the server's file name for it
            "sources": (
                {f"<lip {self.program.get('name') or self.program['entry']}>": self.program["source"]}
                if self.program
                else {}
            ),
            "diverged": list(self.model.diverged[-5:]),
            "version": self.version,
        }

    # --- verbs ----------------------------------------------------------------------------------
    def step(self, pid: int, tid: int, command: str = "step") -> dict:
        self._stepping[(pid, tid)] = command
        try:
            return self.request(command, pid=pid, tid=tid)
        except Exception:
            self._stepping.pop((pid, tid), None)
            raise

    def cont(self, pid: int | None) -> dict:
        return self.request("continue", pid=pid)

    def pause(self, pid: int | None) -> dict:
        return self.request("pause", pid=pid)

    def toggle_breakpoint(self, source: str | None, line: int | None) -> dict:
        """On a source line: add or remove a line breakpoint. With no line: toggle a `pred`
        breakpoint everywhere."""
        return self._line_bps.toggle(self.request, source, line)

    def override(self, pid: int, tid: int, token: int | None, text: str | None) -> dict:
        """Force the token the stopped thread's pred gives it: now (a stop after the pred) or when
        the pred returns (a stop before it)."""
        if token is None and not text:
            raise SessionError("override needs a token id or a one-token word")
        args = {"token": int(token)} if token is not None else {"text": text}
        r = self.request("override", pid=pid, tid=tid, **args)
        if r.get("pending"):  # no event comes for it: remember it for the token pane
            stop = next((s for s in self.request("stops")["stops"] if s["pid"] == pid and s["tid"] == tid), None)
            force = (r.get("edit") or {}).get("force")
            if stop is not None and force is not None:
                self.model.note_forced(pid, tid, stop["seq"], force)
        return r

    def set_step_mode(self, on: bool) -> dict:
        return self.request("scheduler_step_mode", enabled=bool(on))

    def step_batch(self) -> dict:
        return self.request("step_batch", wait=True, timeout=10.0)

    def step_back(self, pid: int, tid: int) -> dict:
        self._backing += 1  # a process that starts meanwhile is the replay (its first stops come early)
        try:
            r = self.request("step_back", pid=pid, tid=tid)
        finally:
            self._backing -= 1
        self._replaying.add(r["pid"])
        self._adopt(r["pid"])
        return {**r, "focus": [r["pid"], tid]}

    def relaunch(self, pid: int | None = None) -> dict:
        """Run the program again (the focused process, or the one this session launched)."""
        pid = pid if pid is not None else self.pid
        if pid is None:
            if self.target is None and self.program is None:
                raise SessionError("nothing to relaunch: focus a process first")
            r = self._launch()
        else:
            r = self.request("restart", pid=pid, stop_on_entry=self.stop_on_entry)
        self._adopt(r["pid"])
        return {**r, "focus": [r["pid"], 1]}
