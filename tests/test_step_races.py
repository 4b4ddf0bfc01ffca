"""Steps handed on while another thread is on its way to a stop: a step's plan ended there (it has
decided to stop) but it is not held yet (kernel_hook.py's `_hold`, in front of `_announce`). Forced
here by keeping that thread at that seam until the step is handed on. Each of the first three
failed on the code before 0e5f90d: the step was handed to that thread too, and its stop, held with
its own older step, ended the step's plans: `wait_stopped` waited for ever. The last two keep a
thread back *before* it decides to stop for its own step, until another step is handed on to a
thread that joins it: its stop ended every step handed on in the process, and the other step's
`wait_stopped` waited for ever. A stop that ends two steps carries neither (stepping.py's doc)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest


class Gate:
    """Where a thread is held back: `arrived` once it is there; it waits until `go` (or 60 s)."""

    def __init__(self) -> None:
        self.arrived, self.go = threading.Event(), threading.Event()

    def wait_here(self) -> None:
        self.arrived.set()
        self.go.wait(60)


class Seam(Gate):
    """The kernel hook's announce lock: thread `tid` of `pid`, its stop decided and built but not
    held, waits in front of it; `passed` once it has been held and announced."""

    def __init__(self, lock, pid: int, tid: int) -> None:
        super().__init__()
        self.lock, self.thread, self.passed = lock, (pid, tid), threading.Event()
        self._ours = threading.local()

    def __enter__(self) -> None:
        th = sys._getframe(1).f_locals.get("th")  # `_hold`'s thread (`land` has none)
        self._ours.it = th is not None and (th.proc.pid, th.tid) == self.thread
        if self._ours.it:
            self.wait_here()
        self.lock.acquire()

    def __exit__(self, *exc) -> None:
        self.lock.release()
        if self._ours.it:
            self.passed.set()


class Patches:
    """A test's patches of the debugger's parts, undone (every gate opened first) at its end."""

    def __init__(self) -> None:
        self._gates: list[Gate] = []
        self._undo: list[Callable[[], None]] = []

    def seam(self, hook, pid: int, tid: int) -> Seam:
        s = hook._announce = Seam(hook._announce, pid, tid)
        self._gates.append(s)
        self._undo.append(lambda: setattr(hook, "_announce", s.lock))
        return s

    def on_call(self, obj, name: str, match: Callable[..., bool], gate: Gate | None = None) -> threading.Event:
        """An event set once a call of method `obj.name` whose arguments `match` has returned;
        with `gate`, such a call waits there first."""
        real, returned = getattr(obj, name), threading.Event()

        def wrapped(*args):
            hit = match(*args)
            if hit and gate is not None:
                gate.wait_here()
            out = real(*args)
            if hit:
                returned.set()
            return out

        setattr(obj, name, wrapped)
        self._gates.extend([gate] if gate is not None else [])
        self._undo.append(lambda: delattr(obj, name))
        return returned

    def undo(self) -> None:
        for g in self._gates:
            g.go.set()
        for u in reversed(self._undo):
            u()


@pytest.fixture
def two_workers(dbg, request):
    """`two_workers(n=1)` (n: the test's parameter, if any) stopped after the main thread's pred (its
    next step spawns both workers), and the test's patches; at the end they are undone and the
    process runs to its end."""
    n = getattr(request, "param", 1)
    pid = dbg.launch("tests.step_lips:two_workers", n=n, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    r = dbg.step(pid, 1)
    assert dbg.wait_stopped(pid, timeout=60, after=r["after"], step=r["step"])["call"] == "pred"
    patches = Patches()
    try:
        yield pid, patches
    finally:
        patches.undo()
        dbg.continue_(pid)
    assert dbg.wait_process(pid, timeout=60)["status"] == "finished"


def landed(dbg, pid: int, r: dict, timeout: float = 10) -> tuple:
    """Where step `r` landed: (tid, call, where, the step the stop carries)."""
    s = dbg.wait_stopped(pid, timeout=timeout, after=r["after"], step=r["step"])
    return s["tid"], s["call"], s["where"], s["step"]


def main_calls(pid: int, call: str, joined: int | None = None) -> Callable[..., bool]:
    """`Stepping.before` / `after`'s arguments for the main thread of `pid` at `call` (on `joined`)."""
    return lambda th, c, args, frame: (
        (th.proc.pid, th.tid, c) == (pid, 1, call) and (joined is None or args.get("tid") == joined)
    )


def pred_returns(pid: int, tid: int) -> Callable[..., bool]:
    """`Stepping.after`'s arguments for thread `tid` of `pid` after a pred."""
    return lambda th, c, *_: (th.proc.pid, th.tid, c) == (pid, tid, "pred")


def test_a_step_handed_on_at_a_thread_end_lands_on_the_joined_thread_on_its_way_to_stop(dbg, two_workers):
    """Thread 3 is stepped to its end while the main thread waits in `join` on thread 2, which has
    decided to stop at its first pred (the step into that spawned both) but is not held yet. As
    when thread 2 is held: the step lands on thread 2's stop, which ends both steps and so carries
    neither (`wait_stopped` answers it to either)."""
    pid, patches = two_workers
    seam = patches.seam(dbg.hook, pid, 2)
    main_joins = patches.on_call(dbg.stepping, "before", main_calls(pid, "join", 2))
    exited = patches.on_call(dbg.hook, "thread_exited", lambda p, t: (p, t) == (pid, 3))
    r = dbg.step(pid, 1)  # spawns threads 2 and 3, followed: thread 2 waits at the seam
    assert landed(dbg, pid, r, 60) == (3, "pred", "after", r["step"])
    assert seam.arrived.wait(60) and main_joins.wait(60)
    r = dbg.step(pid, 3)  # thread 3 ends: its step is handed on
    assert exited.wait(60)
    seam.go.set()
    assert landed(dbg, pid, r) == (2, "pred", "after", None)


def test_a_step_into_a_join_on_a_thread_on_its_way_to_stop_lands_on_it(dbg, two_workers):
    """The main thread is stepped into its `join` on thread 3, which has decided to stop at its
    first pred but is not held yet (tests/step_matrix.py's `thread_ends_and_join_blocks` with
    thread 3 slow to be held). As when thread 3 is held: the step lands on thread 3's stop (which
    ends both steps and carries neither)."""
    pid, patches = two_workers
    seam = patches.seam(dbg.hook, pid, 3)
    main_joins = patches.on_call(dbg.stepping, "before", main_calls(pid, "join", 3))
    r = dbg.step(pid, 1)  # spawns threads 2 and 3, followed: thread 3 waits at the seam
    assert landed(dbg, pid, r, 60) == (2, "pred", "after", r["step"])
    assert seam.arrived.wait(60)
    r = dbg.step(pid, 2)  # thread 2 ends: the main thread's join on it returns
    assert landed(dbg, pid, r, 60) == (1, "join", "after", r["step"])
    r = dbg.step(pid, 1)  # into its join on thread 3
    assert main_joins.wait(60)
    seam.go.set()
    assert landed(dbg, pid, r) == (3, "pred", "after", None)


def test_a_step_handed_on_to_a_running_thread_goes_on_past_a_thread_held_on_its_way(dbg, two_workers):
    """Thread 2 is stepped to its end while thread 3 has decided to stop at its first pred but is
    not held yet: the step goes to the main thread, whose join on thread 2 returns. Thread 3 is
    held, with its own older step, before the main thread's join return is looked at: as when
    thread 3 was held first, the step lands on that join's return."""
    pid, patches = two_workers
    seam = patches.seam(dbg.hook, pid, 3)
    r = dbg.step(pid, 1)  # spawns threads 2 and 3, followed: thread 3 waits at the seam
    assert landed(dbg, pid, r, 60) == (2, "pred", "after", r["step"])
    assert seam.arrived.wait(60)
    main_back = Gate()
    patches.on_call(dbg.stepping, "after", main_calls(pid, "join"), main_back)
    exited = patches.on_call(dbg.hook, "thread_exited", lambda p, t: (p, t) == (pid, 2))
    r = dbg.step(pid, 2)  # thread 2 ends: its step is handed on
    assert exited.wait(60) and main_back.arrived.wait(60)
    seam.go.set()
    assert seam.passed.wait(60)  # thread 3 is held, its stop announced
    main_back.go.set()
    assert landed(dbg, pid, r) == (1, "join", "after", r["step"])


def test_a_step_handed_on_goes_on_when_a_thread_stops_for_its_own_step_and_lands_on_it(dbg, two_workers):
    """Thread 3 is stepped to its end while thread 2, followed by the step into that spawned both,
    has not reached its first pred yet, and the main thread waits in `join` on it: the step is
    handed on to the main thread. Then thread 2 stops for its own older step. Before, that ended
    every step handed on in the process, this one too. Now only its own step's: the new step lands
    on thread 2's stop (the thread its carrier joins), which ends both steps and carries neither."""
    pid, patches = two_workers
    seam = patches.seam(dbg.hook, pid, 3)
    main_joins = patches.on_call(dbg.stepping, "before", main_calls(pid, "join", 2))
    second_back = Gate()  # thread 2's first pred has returned; its step is not looked at yet
    patches.on_call(dbg.stepping, "after", pred_returns(pid, 2), second_back)
    exited = patches.on_call(dbg.hook, "thread_exited", lambda p, t: (p, t) == (pid, 3))
    r = dbg.step(pid, 1)  # spawns threads 2 and 3, followed: 3 waits at the seam, 2 after its pred
    assert seam.arrived.wait(60) and main_joins.wait(60) and second_back.arrived.wait(60)
    seam.go.set()
    assert landed(dbg, pid, r, 60) == (3, "pred", "after", r["step"])
    r = dbg.step(pid, 3)  # thread 3 ends: its step is handed on to the main thread (and thread 2)
    assert exited.wait(60)
    second_back.go.set()
    assert landed(dbg, pid, r) == (2, "pred", "after", None)


@pytest.mark.parametrize("two_workers", [2], indirect=True)
def test_two_steps_in_flight_that_end_on_one_stop_both_land_there(dbg, two_workers):
    """Both workers are stepped at once (two preds each): thread 3 twice, to its end, while thread
    2's step has not ended yet and the main thread waits in `join` on it. Thread 3's step is handed
    on to the main thread, then thread 2's own step ends: both land on thread 2's stop, which
    carries neither, and `wait_stopped` answers it to each (a stop carrying one step would leave the
    other's waiter waiting)."""
    pid, patches = two_workers
    main_joins = patches.on_call(dbg.stepping, "before", main_calls(pid, "join", 2))
    r = dbg.step(pid, 1)  # spawns threads 2 and 3, followed: both are held at their first preds
    first = landed(dbg, pid, r, 60)[0]
    other = dbg.wait_stopped(pid, tid=5 - first, timeout=60)
    assert (other["call"], other["step"]) == ("pred", r["step"])
    assert main_joins.wait(60)
    second_back = Gate()  # thread 2's second pred has returned; its step is not looked at yet
    patches.on_call(dbg.stepping, "after", pred_returns(pid, 2), second_back)
    exited = patches.on_call(dbg.hook, "thread_exited", lambda p, t: (p, t) == (pid, 3))
    r2 = dbg.step(pid, 2)
    assert second_back.arrived.wait(60)
    r = dbg.step(pid, 3)
    assert landed(dbg, pid, r, 60) == (3, "pred", "after", r["step"])
    r3 = dbg.step(pid, 3)  # thread 3 ends: its step is handed on to the main thread
    assert exited.wait(60)
    second_back.go.set()
    assert landed(dbg, pid, r3) == landed(dbg, pid, r2) == (2, "pred", "after", None)
