"""What a step means, decided once for every front-end (Python API, TUI, widgets, DAP, remote).

A step resumes one stopped thread with a plan (the other threads stay as they are: held ones stay
held, running ones keep running, as in a non-stop debugger). The kernel hook asks `Stepping` at
each stop point (before and after every syscall) whether a plan is done:

- **into** (`step`): stop after the next `pred` the thread returns. When it spawns threads on the
  way, every thread it spawns stops after its own first `pred` (the first of them to get there is
  where the step lands; the others are held there too, so no thread's preds run unseen).
- **over** (`step_over`): stop after the next `pred` the thread returns in the function it is
  stopped in or a caller of it; preds in called functions and in spawned threads run through.
- **out** (`step_out`): stop at the thread's first stop point outside the function it is stopped
  in. When a spawned thread ends on the way, the main thread stops at its next stop point.
- **syscall** (`step(granularity="syscall")`): the next stop point of any kind.

The thread rules (docs/architecture.md, "Stepping and threads"):

- **The stepped thread ends**: the step goes on to the next stop point of the *process*: every
  other thread that runs (is not held by the debugger) gets a *next* plan — stop after its next
  `pred`, or when its `join` returns — and the first of them to get there ends the step. A thread
  joining the one that ended stops when that `join` returns. A thread that waits in `join` on a
  thread the debugger holds cannot carry it (that `join` returns only once the held thread is
  resumed): the step lands on that held stop at once, as below. With no thread left to carry it
  the step is *lost*: `wait_stopped(after=...)` then answers the oldest stop still held.
- A thread **on its way to a stop** (a step's plan ended there, it is not held yet) counts as
  held: it carries no step handed on, and a step that lands on it (or was handed on to a thread
  that waits in `join` on it) ends there too. A stop that ends two steps carries neither (`step`
  None): it is newer than both steps' `after`, so `wait_stopped(after=, step=)` answers it to both.
- **The stepped thread blocks in `join`** (step into): it cannot return a pred until the thread
  it joins ends, so the step stops at the next `pred` of any thread of the process (or when the
  `join` returns, whichever comes first). When the debugger holds the joined thread (a spawned
  thread held at its first pred, say), the step lands on that held stop at once: it is the
  process's next stop point, and stepping it goes on where the program's work is.
- **Another thread stops first** (a breakpoint, a pause): that stop is where the step landed; it
  reports its own thread and reason. The stepped thread keeps its plan and stops at its own
  target later (non-stop), but the *next* plans handed out for the step end there. A step's own
  end ends only the hand-offs of the steps it ends: another step handed on goes on.

Depths count the frames of the LIP's own code (`viewdata.lip_depth`); a stop on entry is at
depth 1 (the LIP function itself is about to run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from . import viewdata as ins

# the `continued` event's action -> the plan it starts
PLAN_OF_ACTION = {"step": "into", "step_over": "over", "step_out": "out", "step_syscall": "syscall"}


@dataclass
class StepPlan:
    kind: str  # "into" | "over" | "out" | "syscall" | "next" (a step handed on from another thread)
    depth: int  # the LIP frame depth at the stop the step began from
    step: int = 0  # the step (its id from `new_step`) this plan carries
    follow: bool = False  # a spawned thread's step into, given by a follow


@dataclass
class Follow:
    """A thread stepping into spawned threads: each thread of the process numbered `from_tid` or
    above gets a step into at its first stop point (once)."""

    spawner: tuple[int, int]
    from_tid: int
    step: int
    given: set[int] = field(default_factory=set)


class Stepping:
    """Step plans per (pid, tid), the follows into spawned threads and the lost steps; thread-safe.

    `held(pid, tid)` says whether the debugger holds that thread at a stop (a held thread cannot
    carry a step handed on to it). A thread is in `landing`, with the steps its stop ends, from the
    moment a step's plan ends there until its stop is held (`landed(pid, tid)`): a step handed on
    meanwhile finds it held or on its way, never running."""

    def __init__(self, held: Callable[[int, int], bool]) -> None:
        self._held = held
        self._lock = threading.Lock()
        self._plans: dict[tuple[int, int], StepPlan] = {}
        self._follows: dict[int, Follow] = {}  # pid -> its follow
        self._lost: set[int] = set()  # pids whose last step found no thread to carry it
        self._joining: dict[tuple[int, int], int] = {}  # thread -> the tid its `join` waits for, now
        self._steps = 0
        self.landing: dict[tuple[int, int], set[int]] = {}  # thread -> the steps its stop about to be held ends

    def active(self) -> bool:
        return bool(self._plans or self._follows)

    def lost(self, pid: int) -> bool:
        """Whether the last step in `pid` ended with no thread left to stop (see the module doc)."""
        return pid in self._lost

    def new_step(self) -> int:
        """A new step's id: the stop it lands on carries it (`Stop.step`)."""
        with self._lock:
            self._steps += 1
            return self._steps

    def begin(self, pid: int, tid: int, action: str, depth: int, step: int) -> None:
        """A stop resumed with `action` (step, step_over, step_out, step_syscall) as step `step`."""
        with self._lock:
            self._plans[(pid, tid)] = StepPlan(PLAN_OF_ACTION[action], depth, step)
            self._lost.discard(pid)

    def cancel(self, pid: int, tid: int) -> None:
        """The thread was resumed some other way (continue, a new step): its old plan ends."""
        with self._lock:
            self._plans.pop((pid, tid), None)
            f = self._follows.get(pid)
            if f is not None and f.spawner == (pid, tid):
                del self._follows[pid]

    def joining(self, pid: int, tid: int, joined: object) -> None:
        """Thread (pid, tid) waits in `join` on thread `joined` (told at every join, stepped or not)."""
        if isinstance(joined, int):
            with self._lock:
                self._joining[(pid, tid)] = joined

    def join_returned(self, pid: int, tid: int) -> None:
        with self._lock:
            self._joining.pop((pid, tid), None)

    def clear(self, pid: int | None = None) -> None:
        """End the steps (of `pid`, or all of them: at detach, when the joins seen go too)."""
        with self._lock:
            if pid is None:
                self._plans.clear()
                self._follows.clear()
                self._lost.clear()
                self._joining.clear()
            else:
                self._plans = {k: v for k, v in self._plans.items() if k[0] != pid}
                self._follows.pop(pid, None)
                self._lost.discard(pid)

    def landing_of(self, pid: int, tid: int) -> int | None:
        """The step that the stop about to be held in (pid, tid) carries, if a step's plan ended there."""
        with self._lock:
            return _carried(self.landing.get((pid, tid)))

    def landed(self, pid: int, tid: int | None = None, step: int | None = None) -> int | None:
        """A stop of `pid` is held: the hand-offs of the steps it ends end; those of other steps go
        on. With `tid`, its thread's: the steps in `landing` (its own, and those that landed on it
        on its way); with `step`, a step that landed on a stop already held. A stop that ends no
        step (a breakpoint, a pause) ends every hand-off. Returns the step the stop carries."""
        with self._lock:
            steps = self.landing.pop((pid, tid), None) if step is None else {step}
            self._end_hand_offs(pid, steps)
            return _carried(steps)

    def _end_hand_offs(self, pid: int, steps: set[int] | None) -> None:
        """The *next* plans of `steps` in `pid` end (of every step, with None)."""
        self._plans = {
            k: p
            for k, p in self._plans.items()
            if k[0] != pid or p.kind != "next" or (steps is not None and p.step not in steps)
        }

    def _stopping(self, pid: int, tid: int) -> bool:
        """Held, or on its way to a stop that a step's plan ended (see the class doc)."""
        return (pid, tid) in self.landing or self._held(pid, tid)

    def _land_on(self, pid: int, tid: int, step: int) -> list[tuple[int, int]]:
        """Step `step` lands on thread `tid`, held or on its way: the stop on its way ends it too
        (`landed` answers it); a held one is answered, `[(tid, step)]`, for the hook to land."""
        if (pid, tid) in self.landing:
            self.landing[(pid, tid)].add(step)
            return []
        return [(tid, step)]

    def _plan(self, th) -> StepPlan | None:
        """The thread's plan; a newly spawned thread being followed gets its step into here."""
        pid, tid = key = (th.proc.pid, th.tid)
        f = self._follows.get(pid)
        if f is not None and tid >= f.from_tid and tid not in f.given:
            f.given.add(tid)
            self._plans[key] = StepPlan("into", 0, f.step, follow=True)
        return self._plans.get(key)

    def _running_others(self, proc, but: set[int]) -> list:
        return [
            t
            for t in list(proc.threads)
            if t.tid not in but and not t.done.is_set() and not self._stopping(proc.pid, t.tid)
        ]

    def before(self, th, call: str, args: dict, frame: FrameType | None) -> tuple[list[str], list[tuple[int, int]]]:
        """At the stop point before `call`: the stop reasons (["step"]) if a plan ends here, and the
        held threads a step lands on, each with its step (the thread a stepping thread is about to
        join). The steps a stop ends are `landing[(pid, tid)]` until it is held."""
        key = (th.proc.pid, th.tid)
        with self._lock:
            plan = self._plan(th)
            if plan is None:
                return [], []
            if plan.kind == "syscall" or (plan.kind == "out" and ins.lip_depth(frame) < plan.depth):
                self._done(th.proc, key)
                return ["step"], []
            if call == "spawn" and plan.kind in ("into", "next") and key[0] not in self._follows:
                next_tid = max((t.tid for t in list(th.proc.threads)), default=1) + 1
                self._follows[key[0]] = Follow(key, next_tid, plan.step)
            if call == "join" and plan.kind in ("into", "next"):
                plan.kind = "next"  # stop when the join returns, unless another thread preds first
                for t in self._running_others(th.proc, {th.tid}):
                    self._plans.setdefault((key[0], t.tid), StepPlan("next", 0, plan.step))
                joined = args.get("tid")
                if isinstance(joined, int) and self._stopping(key[0], joined):
                    return [], self._land_on(key[0], joined, plan.step)
            return [], []

    def after(self, th, call: str, args: dict, frame: FrameType | None) -> list[str]:
        """At the stop point after `call` returned: the stop reasons if a step ends here
        (["step", "follow"] for the first pred of a followed spawned thread)."""
        pid, tid = key = (th.proc.pid, th.tid)
        with self._lock:
            plan = self._plan(th)
            if plan is not None:
                k = plan.kind
                if (
                    k == "syscall"
                    or (k in ("into", "next") and call == "pred")
                    or (k == "next" and call == "join")
                    or (k == "over" and call == "pred" and ins.lip_depth(frame) <= plan.depth)
                    or (k == "out" and ins.lip_depth(frame) < plan.depth)
                ):
                    self._done(th.proc, key)
                    return ["step", "follow"] if plan.follow else ["step"]
            joined = args.get("tid") if call == "join" else None
            ended = any(t.tid == joined and t.done.is_set() for t in list(th.proc.threads))
            gone = self._plans.pop((pid, joined), None) if ended else None
            if gone is not None:  # the joined thread ended stepping (its exit not handled yet): land here
                self._plans[key] = gone
                self._done(th.proc, key)
                return ["step"]
        return []

    def _done(self, proc, key: tuple[int, int]) -> None:
        """Thread `key`'s plan ends here: it is on its way to a stop that ends its step, and the
        steps handed on to threads that wait in `join` on it (as on a held thread); the hand-offs
        of those steps end, a different step's go on."""
        pid, tid = key
        steps = self.landing[key] = {self._plans.pop(key).step}
        for t in list(proc.threads):
            p, joins = self._plans.get((pid, t.tid)), self._joining.get((pid, t.tid)) == tid
            if p is not None and p.kind == "next" and joins and t.current_call == "join":
                steps.add(p.step)
        self._end_hand_offs(pid, steps)

    def process_exited(self, pid: int) -> None:
        """Process `pid` ended: its steps end and the joins seen in it are forgotten."""
        self.clear(pid)
        with self._lock:
            self._joining = {k: j for k, j in self._joining.items() if k[0] != pid}

    def _held_joined(self, proc, threads: list) -> int | None:
        """The held thread (or one on its way) that one of `threads` waits for in `join`, if any."""
        for t in threads:
            joined = self._joining.get((proc.pid, t.tid))
            if joined is not None and t.current_call == "join" and self._stopping(proc.pid, joined):
                return joined
        return None

    def thread_exited(self, proc, tid: int) -> list[tuple[int, int]]:
        """A thread ended: a step it carried goes on to the next stop point of the process. When a
        thread that would carry it waits in `join` on a held thread, the step lands on that held
        stop at once: the answer is `[(its tid, the step)]`, for the caller to land it (as
        `before` answers a join on a held thread); else `[]`."""
        with self._lock:
            self._joining.pop((proc.pid, tid), None)
            plan = self._plans.pop((proc.pid, tid), None)
            f = self._follows.get(proc.pid)
            if f is not None and f.spawner == (proc.pid, tid):
                del self._follows[proc.pid]
            self.landing.pop((proc.pid, tid), None)
            if plan is None or tid == 1:
                return []
            others = self._running_others(proc, {tid})
            if plan.kind == "out":  # step out of a spawned thread: the main thread's next stop point
                others = [t for t in others if t.tid == 1]
            held = self._held_joined(proc, others)
            if held is not None:  # e.g. the main thread joins a spawned thread held at its first pred
                return self._land_on(proc.pid, held, plan.step)
            for t in others:
                kind = "syscall" if plan.kind == "out" else "next"
                self._plans.setdefault((proc.pid, t.tid), StepPlan(kind, 0, plan.step))
            if not others:
                self._lost.add(proc.pid)
            return []


def _carried(steps: set[int] | None) -> int | None:
    """The step a stop that ends `steps` carries: the one, or None for none or two (module doc)."""
    return next(iter(steps)) if steps is not None and len(steps) == 1 else None


def lands_on(stop: dict, answer: dict, stepped_tid: int | None = None) -> bool:
    """Whether `stop` (the protocol's view) is where the step that answered `answer` (its `after`
    and `step`) landed: the stop carries that step, or is newer and ended no other step. A front-end
    that steps on past a stop by itself (the TUI past a line breakpoint's other syscalls) passes
    `stepped_tid`: that thread's newer stops count too. `wait_stopped(after=, step=)` in one call."""
    own = stop.get("step")
    if own == answer.get("step"):
        return True
    newer = stop.get("stop_id", 0) > answer.get("after", 0)
    return newer and (own is None or own == answer.get("step") or stop.get("tid") == stepped_tid)


__all__ = ["PLAN_OF_ACTION", "StepPlan", "Stepping", "lands_on"]
