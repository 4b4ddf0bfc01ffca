"""Keys that arrive while the TUI is busy — the model loading, connecting to a server, a step on
its way to its stop — wait here and run in order once it is free; none is dropped.

`CommandQueue` holds the pending actions and the step in flight (the stops its process held
when it began: the step is over when a new one shows, or the process ends). The app asks it
`next_ready(state, focus)` after every state snapshot.
"""

from __future__ import annotations

from ..debugger.stepping import lands_on

# actions that queue (the app has a `_do_<action>` method for each)
QUEUED_ACTIONS = ("step", "step_over", "step_out", "continue", "pause", "step_back", "step_batch", "relaunch")
NEEDS_STOP = (
    "step",
    "step_over",
    "step_out",
    "step_back",
)  # they act on a stopped thread: wait for one (entry, a breakpoint)


class CommandQueue:
    def __init__(self) -> None:
        self.pending: list[str] = []
        self.started = False  # the session's start (loading the model, connecting) is over
        self._landing: tuple[int | None, set] | None = None  # a step in flight: (pid, stop ids then held)
        self._answer: tuple[int, dict] | None = None  # the step's answer (its `after` and `step`), stepped tid
        self.landed_on: tuple[int, int] | None = None  # the thread the last step landed on, for the focus

    @property
    def landing(self) -> bool:
        return self._landing is not None

    def busy(self, running: str | None) -> bool:
        """Busy: starting, a command running (`running`: its label), or a step not landed yet."""
        return not self.started or running is not None or self._landing is not None

    def push(self, action: str, running: str | None) -> bool:
        """True if `action` must wait (queued); False if it may run now."""
        if not self.busy(running) and not self.pending:
            return False
        self.pending.append(action)
        return True

    def step_began(self, pid: int | None, state: dict) -> None:
        self._landing = (pid, {s["stop_id"] for s in state.get("stops", [])})
        self._answer = self.landed_on = None

    def step_answered(self, tid: int, answer: dict) -> None:
        """The step command's answer: which stop it lands on is then known exactly."""
        self._answer = (tid, answer)

    def step_failed(self) -> None:
        self._landing = self._answer = None

    def check_landed(self, state: dict) -> bool:
        """After a snapshot: True if the step in flight has just landed (a new stop, or its
        process ended)."""
        if self._landing is None:
            return False
        pid, before = self._landing
        stops = [s for s in state.get("stops", []) if pid is None or s["pid"] == pid]
        proc = next((p for p in state.get("processes", []) if p["pid"] == pid), None)
        if self._answer is None and not (proc is None or proc.get("done")):
            return False  # the step's answer (where it will land) is not back yet
        if self._answer is not None and "step" in self._answer[1]:
            tid, answer = self._answer
            landed = sorted((s for s in stops if lands_on(s, answer, tid)), key=lambda s: s["stop_id"])
        else:  # a debugger that does not say which step a stop ends: any new stop
            landed = [s for s in stops if s["stop_id"] not in before]
        if landed or proc is None or proc.get("done"):
            self.landed_on = (landed[0]["pid"], landed[0]["tid"]) if landed else None
            self._landing = self._answer = None
            return True
        return False

    def next_ready(self, state: dict, focus: tuple, running: str | None) -> tuple[str | None, str | None]:
        """(the action to run now, or None; a notice when queued keys were dropped because the
        process they were for has ended)."""
        if not self.pending or self.busy(running):
            return None, None
        if self.pending[0] in NEEDS_STOP:
            pid = focus[0]
            if not any(s["pid"] == pid for s in state.get("stops", [])):
                proc = next((p for p in state.get("processes", []) if p["pid"] == pid), None)
                if proc is not None and proc.get("done"):
                    n = len(self.pending)
                    self.pending.clear()
                    return None, f"{n} queued key(s) dropped: pid {pid} has ended"
                return None, None
        return self.pending.pop(0), None


__all__ = ["NEEDS_STOP", "QUEUED_ACTIONS", "CommandQueue"]
