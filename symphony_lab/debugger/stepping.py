"""What a step means, decided once for every front-end (Python API, TUI, widgets, sidebar, remote).

A step resumes one stopped thread with a plan; the kernel hook asks `Stepping` at each stop
point (before and after every syscall) whether that plan is done:

- **into** (`step`, the default): stop after the next `pred` the thread returns — or, if the
  thread spawns threads first (and then typically waits for them in `join`), after the first
  `pred` any of those threads returns. A program that decodes in parallel is stepped into,
  never run to its end.
- **over** (`step_over`): stop after the next `pred` the thread returns in the function it is
  stopped in or a caller of it; preds inside called functions (e.g. `lib.generate`) and in
  spawned threads run through.
- **out** (`step_out`): stop at the thread's first stop point outside the function it is
  stopped in. When a spawned thread ends on the way, its process's main thread stops at its
  next stop point (typically when its `join` returns).

A spawned thread that ends during a step into or over hands the step on to its process's main
thread (which usually waits for it in `join`): stepping on from a thread's last `pred` goes on
to the program's next `pred`, or into the next threads it spawns, instead of running to the end.
- **syscall** (`step(granularity="syscall")`): the next stop point of any kind.

Depths count the frames of the LIP's own code (`viewdata.lip_depth`); a stop on entry is at
depth 1 (the LIP function itself is about to run).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import FrameType

from . import viewdata as ins

# the `continued` event's action -> the plan it starts
PLAN_OF_ACTION = {"step": "into", "step_over": "over", "step_out": "out", "step_syscall": "syscall"}


@dataclass
class StepPlan:
    kind: str  # "into" | "over" | "out" | "syscall"
    depth: int  # the LIP frame depth at the stop the step began from


@dataclass
class Follow:
    """A stepping-into thread spawned threads: the first pred of any thread of the process
    numbered `from_tid` or above ends the step."""

    spawner: tuple[int, int]
    from_tid: int


class Stepping:
    """Step plans per (pid, tid) and the follows into spawned threads; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[tuple[int, int], StepPlan] = {}
        self._follows: dict[int, Follow] = {}  # pid -> its follow

    def active(self) -> bool:
        return bool(self._plans or self._follows)

    def begin(self, pid: int, tid: int, action: str, depth: int) -> None:
        """A stop resumed with `action` (step, step_over, step_out, step_syscall)."""
        with self._lock:
            self._plans[(pid, tid)] = StepPlan(PLAN_OF_ACTION[action], depth)

    def cancel(self, pid: int, tid: int) -> None:
        """The thread was resumed some other way (continue, a new step): its old plan ends."""
        with self._lock:
            self._plans.pop((pid, tid), None)
            f = self._follows.get(pid)
            if f is not None and f.spawner == (pid, tid):
                del self._follows[pid]

    def clear(self, pid: int | None = None) -> None:
        with self._lock:
            if pid is None:
                self._plans.clear()
                self._follows.clear()
            else:
                self._plans = {k: v for k, v in self._plans.items() if k[0] != pid}
                self._follows.pop(pid, None)

    def _done(self, key: tuple[int, int]) -> None:
        self._plans.pop(key, None)
        f = self._follows.get(key[0])
        if f is not None and f.spawner == key:
            del self._follows[key[0]]

    def before(self, th, call: str, frame: FrameType | None) -> list[str]:
        """At the stop point before `call`: the stop reasons (["step"]) if a plan ends here."""
        key = (th.proc.pid, th.tid)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                return []
            if plan.kind == "syscall" or (plan.kind == "out" and ins.lip_depth(frame) < plan.depth):
                self._done(key)
                return ["step"]
            if call == "spawn" and plan.kind == "into" and key[0] not in self._follows:
                next_tid = max((t.tid for t in list(th.proc.threads)), default=1) + 1
                self._follows[key[0]] = Follow(key, next_tid)
            return []

    def after(self, th, call: str, frame: FrameType | None) -> list[str]:
        """At the stop point after `call` returned: the stop reasons if a step ends here
        (["step", "follow"] for the first pred of a followed spawned thread)."""
        pid, tid = key = (th.proc.pid, th.tid)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                k = plan.kind
                if (
                    k == "syscall"
                    or (k == "into" and call == "pred")
                    or (k == "over" and call == "pred" and ins.lip_depth(frame) <= plan.depth)
                    or (k == "out" and ins.lip_depth(frame) < plan.depth)
                ):
                    self._done(key)
                    return ["step"]
            f = self._follows.get(pid)
            if f is not None and call == "pred" and tid >= f.from_tid:
                del self._follows[pid]
                self._plans.pop(f.spawner, None)  # the step that spawned has landed here
                return ["step", "follow"]
        return []

    def thread_exited(self, proc, tid: int) -> None:
        """A thread ended: its plan goes; a step out of a spawned thread lands in the main thread."""
        with self._lock:
            plan = self._plans.pop((proc.pid, tid), None)
            f = self._follows.get(proc.pid)
            if f is not None and f.spawner == (proc.pid, tid):
                del self._follows[proc.pid]
            if plan is not None and tid != 1:
                main = proc.threads[0] if proc.threads else None
                if main is not None and not main.done.is_set() and (proc.pid, main.tid) not in self._plans:
                    self._plans[(proc.pid, main.tid)] = StepPlan("syscall" if plan.kind == "out" else "into", 0)


__all__ = ["PLAN_OF_ACTION", "StepPlan", "Stepping"]
