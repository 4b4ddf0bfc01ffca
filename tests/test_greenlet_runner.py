"""`Engine(lip_runner="greenlets")`: every program a greenlet on the batch scheduler's thread, resumed
once per batch (symphony_core/sched/hub.py). The same programs must give the same tokens as on OS threads, and
recv, spawn/join, timeouts, cancellation and page accounting must keep their meaning."""

from __future__ import annotations

import threading
import time

import pytest

from symphony_core.errors import SymphonyError
from symphony_core.sched.process import LIPError
from tests.lips_for_tests import greedy


@pytest.fixture(scope="module")
def geng():
    from symphony_core import Engine

    eng = Engine(num_pages=512, lip_runner="greenlets")
    yield eng
    eng.shutdown()


def _branches(sym, prompt: str, n: int) -> list[list[int]]:
    """Two threads decoding from forks of one prefilled file, joined."""
    kv = sym.kv_create()
    first = sym.pred(kv, sym.tokenize(prompt)).argmax()

    def branch(sym, start: int) -> list[int]:
        f = sym.kv_fork(kv)
        toks, tok = [], start
        for _ in range(n):
            tok = sym.pred(f, [tok]).argmax()
            toks.append(tok)
        sym.kv_close(f)
        return toks

    hs = [sym.spawn(branch, first), sym.spawn(branch, (first + 1) % sym.vocab_size)]
    out = [h.join() for h in hs]
    sym.kv_close(kv)
    return out


PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def test_same_tokens_as_on_os_threads_and_all_on_the_hub(engine, geng):
    free = geng.pool.free_pages
    want = [engine.run(greedy, p, 8).result(60) for p in PROMPTS] + [engine.run(_branches, PROMPTS[0], 5).result(60)]
    procs = [geng.run(greedy, p, 8) for p in PROMPTS] + [geng.run(_branches, PROMPTS[0], 5)]
    assert [p.result(60) for p in procs] == want
    hub = geng.runtime.hub
    assert hub is not None
    assert hub.thread is geng.runtime.batch._thread  # the scheduler's own thread runs them
    assert all(p.hub is hub and all(t.os_thread is hub.thread for t in p.threads) for p in procs)
    assert len(procs[-1].threads) == 3  # main + two spawned, all greenlets
    assert geng.pool.free_pages == free


def test_recv_send_and_recv_timeout(geng):
    def echo(sym):
        got = []
        while (m := sym.recv()) != "stop":
            got.append(m)
            sym.send(m * 2)
        try:
            sym.recv(timeout=0.2)
        except TimeoutError as e:
            return got, str(e)
        return got, None

    p = geng.run(echo)
    msgs = p.messages(timeout=30)
    p.send(1)
    assert next(msgs) == 2
    p.send(5)
    assert next(msgs) == 10
    p.send("stop")
    t0 = time.monotonic()
    got, err = p.result(30)
    assert got == [1, 5] and err == "recv: no message within 0.2s"
    assert time.monotonic() - t0 < 10


def test_join_timeout_thread_errors_and_leftover_threads(geng):
    def lip(sym):
        def waits(sym):
            return sym.recv()

        def fails(sym):
            raise ValueError("inner")

        h = sym.spawn(waits)
        try:
            h.join(timeout=0.2)
            timed_out = False
        except TimeoutError:
            timed_out = True
        try:
            sym.spawn(fails).join()
            inner = None
        except ValueError as e:
            inner = str(e)
        return timed_out, inner, h.done  # main returns with `waits` still asleep in recv

    p = geng.run(lip)
    assert p.result(30) == (True, "inner", False)
    waiter = p.threads[1]
    # cancelled when main returned, and waited for before the process counts as ended
    assert waiter.done.is_set() and waiter.state == "failed" and "ended while thread" in str(waiter.error)


def test_cancel_in_pred_and_in_a_tight_loop_leaves_other_programs_whole(geng):
    """A program spinning in its own Python holds the hub; cancelling it must stop it there (the
    exception goes to the hub thread only while it runs) and no other program may see it."""
    free = geng.pool.free_pages
    started = threading.Event()

    def spin(sym):
        kv = sym.kv_create()
        sym.pred(kv, [1, 2, 3])
        started.set()
        while True:
            pass

    def forever(sym):
        kv = sym.kv_create()
        tok = sym.pred(kv, [1]).argmax()
        while True:
            tok = sym.pred(kv, [tok]).argmax()

    bystanders = [geng.run(greedy, p, 12) for p in PROMPTS]
    looping = geng.run(forever)
    spinner = geng.run(spin)
    assert started.wait(30)
    time.sleep(0.2)
    spinner.cancel("stop spinning")
    with pytest.raises(LIPError, match="stop spinning"):
        spinner.result(30)
    looping.cancel("enough")
    with pytest.raises(LIPError, match="enough"):
        looping.result(30)
    assert spinner.status == looping.status == "cancelled"
    results = [p.result(60) for p in bystanders]
    assert all(p.status == "finished" and len(r) == 12 for p, r in zip(bystanders, results))
    assert geng.pool.free_pages == free


class _RecordingHook:
    """A debugger's kernel hook that stops nowhere: it records each syscall's name and passes it on."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def before(self, th, ev):
        self.seen.append(ev.call)

    def after(self, th, ev, result):
        return result


def test_a_debugger_hook_sends_new_programs_to_os_threads(geng):
    rt = geng.runtime
    hook = rt.kernel.hook = _RecordingHook()
    try:
        p = geng.run(greedy, PROMPTS[0], 2)
        assert p.result(30)
        assert p.hub is None and p.threads[0].os_thread is not rt.hub.thread
        assert "pred" in hook.seen
    finally:
        rt.kernel.hook = None
    assert geng.run(greedy, PROMPTS[0], 2).hub is rt.hub


def test_programs_on_os_threads_and_on_the_hub_run_side_by_side(engine, geng):
    """A debugger puts new programs on OS threads while earlier ones stay on the hub: their
    calls share the batch scheduler, and both kinds get the tokens they should."""
    want = engine.run(greedy, PROMPTS[1], 24).result(60)
    rt = geng.runtime
    start = rt.batch.log.total_batches
    on_hub = [geng.run(greedy, PROMPTS[1], 24) for _ in range(2)]
    deadline = time.monotonic() + 30
    while {m.pid for r in rt.batch.log.since(start) for m in r.members} < {p.pid for p in on_hub}:
        assert time.monotonic() < deadline, "the hub's programs never ran"
        time.sleep(0.001)  # until both have run on the hub (a debugger before their first turn moves them)
    rt.kernel.hook = _RecordingHook()
    try:
        on_os = [geng.run(greedy, PROMPTS[1], 24) for _ in range(2)]
        assert [p.result(60) for p in on_hub + on_os] == [want] * 4
    finally:
        rt.kernel.hook = None
    assert all(p.hub is rt.hub for p in on_hub) and all(p.hub is None for p in on_os)


def test_an_unknown_runner_is_refused_before_loading():
    from symphony_core import Engine

    with pytest.raises(SymphonyError, match=r"lip_runner='fibers': choose one of threads, greenlets"):
        Engine(lip_runner="fibers")


def test_cancel_reaches_greenlets_asleep_in_recv_and_join_at_once(geng):
    from symphony_core.sched.process import Cancelled
    from symphony_core.sched.thread_state import KILL_CHECK_S

    def listens(sym):
        other = sym.spawn(lambda s: s.recv())
        third = sym.spawn(lambda s: s.recv())
        sym.recv()
        other.join()
        third.join()

    def joins(sym):
        sym.spawn(lambda s: s.recv()).join()

    procs = [geng.run(listens), geng.run(joins)]
    deadline = time.monotonic() + 30
    calls = lambda: sorted(t.current_call or "" for p in procs for t in p.threads)  # noqa: E731
    while time.monotonic() < deadline and calls() != ["join", "recv", "recv", "recv", "recv"]:
        time.sleep(0.01)
    assert calls() == ["join", "recv", "recv", "recv", "recv"]
    t0 = time.monotonic()
    for p in procs:
        p.cancel()
    for p in procs:
        with pytest.raises(LIPError) as ei:
            p.result(timeout=10)
        assert isinstance(ei.value.__cause__, Cancelled)
        assert all(t.done.is_set() for t in p.threads)
    took = time.monotonic() - t0
    assert took < KILL_CHECK_S / 2, f"cancel took {took:.3f}s to reach greenlets asleep in recv and join"
    assert not procs[0]._recv_waits and not any(t.joiners for p in procs for t in p.threads)


def test_a_wall_time_limit_stops_a_greenlet_spinning_in_its_own_loop(geng):
    from symphony_core.sched.process import Limits

    def spin(sym):
        while True:
            pass

    t0 = time.monotonic()
    p = geng.launch(spin, limits=Limits(max_wall_time=0.5))
    with pytest.raises(LIPError, match="wall-time limit"):
        p.result(30)
    assert time.monotonic() - t0 < 10
    assert geng.run(greedy, PROMPTS[1], 3).result(30)  # the hub goes on


def test_a_debugger_attached_before_the_first_turn_moves_the_program_to_an_os_thread(geng):
    """The runner is chosen at launch; a stop-on-entry callback added before the greenlet first
    runs would hold the hub, so the program starts on an OS thread instead."""
    rt = geng.runtime
    called_on = []

    def blocks_the_hub(sym):
        time.sleep(0.5)  # holds the hub thread: the next program cannot have its first turn yet

    holder = geng.run(blocks_the_hub)
    time.sleep(0.1)
    p = geng.run(greedy, PROMPTS[2], 2)
    assert p.hub is rt.hub
    rt.on_process_start.append(lambda proc: called_on.append(threading.current_thread()))
    try:
        assert p.result(30) and holder.result(30) is None
    finally:
        rt.on_process_start.clear()
    assert p.hub is None and p.threads[0].os_thread is not rt.hub.thread
    assert called_on and rt.hub.thread not in called_on


def test_cancels_racing_the_end_of_programs_always_end_them(geng):
    """A cancel that finds a program running just as it returns must neither hang its end nor
    reach any other program (the exception is taken back when the greenlet's function ends)."""

    def short_spin(sym, n):
        x = 0
        for i in range(n):
            x += i
        return x

    procs = []
    for k in range(40):
        procs.append(geng.run(short_spin, 2000 + 500 * (k % 7)))
        if k % 2:
            procs[-2].cancel("race")
    bystander = geng.run(greedy, PROMPTS[0], 4)
    assert all(p.wait(10) for p in procs), [p.status for p in procs if not p.done]
    assert all(p.status in ("finished", "cancelled") for p in procs)
    assert bystander.result(30) and bystander.status == "finished"


def test_timed_waits_fired_early_do_not_pile_up(geng):
    def echo(sym, n):
        first = sym.recv(timeout=600)  # a long timer at the top of the heap
        for _ in range(n):
            sym.send(sym.recv(timeout=1200))
        return first

    p = geng.run(echo, 300)
    p.send("go")
    msgs = p.messages(timeout=30)
    for i in range(300):
        p.send(i)
        assert next(msgs) == i
    assert p.result(30) == "go"
    assert len(geng.runtime.hub._timers) < 150


def test_the_server_refuses_a_greenlet_engine(geng):
    from symphony_core.server.app import create_app

    with pytest.raises(SymphonyError, match="the server runs programs on OS threads"):
        create_app(geng)


def _decode_steps(sym, n: int) -> int:
    """`n` one-token preds on a file of its own."""
    kv = sym.kv_create()
    for _ in range(n):
        sym.pred(kv, [1])
    sym.kv_close(kv)
    return n


def test_every_waiting_program_is_in_the_batch(geng):
    """The scheduler fires only once no greenlet can run: programs launched together decode together,
    one batch a step, however the launcher's thread and the scheduler's take turns."""

    log = geng.runtime.batch.log
    first = log.total_batches
    procs = [geng.run(_decode_steps, 12) for _ in range(16)]
    assert [p.result(timeout=60) for p in procs] == [12] * 16
    sizes = [len(r.members) for r in log.since(first)]
    assert sum(sizes) == 16 * 12
    assert max(sizes) == 16 and sizes.count(16) >= 10, sizes


def test_a_busy_loop_lets_go_of_the_gil_at_most_once_a_millisecond(geng, monkeypatch):
    """Programs that keep the loop busy never let it block: it lets the process's other threads have the
    GIL (time.sleep(0)) during the run, but not after every batch, and never twice within
    GIL_YIELD_EVERY_S (each costs the loop's thread ~20 µs of CPU)."""
    import torch

    import symphony_core.sched.batch_scheduler as bsm

    loop_thread = geng.runtime.batch._thread
    yields: list[float] = []

    class SeenTime:  # the scheduler module's `time`, its sleeps on the loop's thread recorded
        def __getattr__(self, name: str):
            return getattr(time, name)

        @staticmethod
        def sleep(s: float) -> None:
            if s == 0 and threading.current_thread() is loop_thread:
                yields.append(time.monotonic())
            time.sleep(s)

    zeros = torch.zeros(64, geng.config.vocab_size)  # a stub forward: batches of ~0.1 ms
    monkeypatch.setattr(geng.model, "forward", lambda fb, k, v: zeros[: fb.output_rows.shape[0]])
    monkeypatch.setattr(bsm, "time", SeenTime())

    log = geng.runtime.batch.log
    first = log.total_batches
    procs = [geng.run(_decode_steps, 200) for _ in range(4)]
    assert [p.result(timeout=60) for p in procs] == [200] * 4
    batches = log.total_batches - first
    gaps = [b - a for a, b in zip(yields, yields[1:])]
    assert yields and len(yields) < batches, (len(yields), batches)
    assert min(gaps, default=bsm.GIL_YIELD_EVERY_S) >= bsm.GIL_YIELD_EVERY_S, min(gaps)
