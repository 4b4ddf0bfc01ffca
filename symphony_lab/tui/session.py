"""What the TUI drives: a debugger session, embedded or remote, behind one small interface.

The TUI only needs verbs (step, continue, override …) and one state snapshot (processes,
stops, KV tree, scheduler timeline, generated tokens per thread). `Session` is that
interface; `DebuggerSession` (debug_session.py) implements it over `symphony_lab.debugger`'s
command protocol, and `StaticSession` serves a fixed snapshot — a recorded session, for
deterministic screenshots and for looking at a saved state.

The state (`state()`): the debugger's snapshot (debugger/snapshot.py, the one builder every
front-end uses: processes, stops, breakpoints, kv_tree, timeline, step_mode, next_batch, ts),
with the stops the TUI passes over left out and what the TUI adds beside it:

    stops       [stop]                as the snapshot's, plus `original`: the dist before an override
    line_breakpoints [{id, call, source, line, hits}]   the breakpoints as the source view marks them
    history     {"pid.tid": {"prompt": str, "tokens": [{token, text, p, overridden}]}}
    locations   {"pid.tid": {file, line, function}}   the last line each thread was seen at
    tracebacks  {pid: str}            of failed processes
    results     {pid: {status, result, error}}  the return value of finished processes
    program_file str | None           the launched program's file
    sources     {file: text}          optional: source text to show instead of reading the file
    diverged    [replay divergence]   the newest few
"""

from __future__ import annotations

import copy
import json
from typing import Any


class SessionError(Exception):
    """A command the session cannot do (not stopped, no such thread, not supported here)."""


class Session:
    """The verbs the TUI uses. Every method may block; the TUI calls them on a worker thread."""

    title: str = ""

    def start(self) -> None:
        """Launch the program (stopped on entry) or attach."""

    def state(self) -> dict:
        raise NotImplementedError

    def step(self, pid: int, tid: int, command: str = "step") -> dict:
        """Step into (`command` "step"), over ("step_over") or out ("step_out") of the thread's function."""
        raise NotImplementedError

    def cont(self, pid: int | None) -> dict:
        raise NotImplementedError

    def pause(self, pid: int | None) -> dict:
        raise NotImplementedError

    def toggle_breakpoint(self, source: str | None, line: int | None) -> dict:
        raise NotImplementedError

    def override(self, pid: int, tid: int, token: int | None, text: str | None) -> dict:
        raise NotImplementedError

    def set_step_mode(self, on: bool) -> dict:
        raise NotImplementedError

    def step_batch(self) -> dict:
        raise NotImplementedError

    def step_back(self, pid: int, tid: int) -> dict:
        raise NotImplementedError

    def relaunch(self, pid: int | None = None) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass


class StaticSession(Session):
    """A fixed snapshot: every verb answers that this is a recording (the screen stays as it is)."""

    def __init__(self, state: dict, title: str = "recorded session") -> None:
        self._state = state
        self.title = title

    @classmethod
    def load(cls, path: str) -> StaticSession:
        with open(path) as f:
            d = json.load(f)
        return cls(d["state"], d.get("title", path))

    def state(self) -> dict:
        return copy.deepcopy(self._state)

    def _no(self, *_: Any) -> dict:
        return {"error": "this is a recorded session: nothing runs"}

    step = cont = pause = toggle_breakpoint = override = set_step_mode = step_back = relaunch = _no

    def step_batch(self) -> dict:
        return self._no()
