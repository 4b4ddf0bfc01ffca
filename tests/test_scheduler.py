"""Two-level scheduling: batching, chunked prefill, admission, parking (issue 4)."""

from __future__ import annotations

import time

import pytest

from symphony_core.errors import SymphonyError
from symphony_core.sched.policy import AdaptiveWatermark, Decision, FireWhenIdle, ask
from tests.lips_for_tests import greedy, greedy_reference, timestamps


def test_64_concurrent_completions_batch_well(engine):
    start = engine.runtime.batch.log.total_batches
    procs = [engine.run(greedy, f"Story {i}: once upon a time there was", 16) for i in range(64)]
    outs = [p.result(timeout=300) for p in procs]
    assert all(len(o) == 16 for o in outs)
    recs = engine.runtime.batch.log.since(start)
    mean = sum(r.size for r in recs) / len(recs)  # every recorded batch, prefills included
    assert mean >= 40, [r.size for r in recs]
    # Every decode step of every LIP is in exactly one batch.
    assert sum(1 for r in recs for m in r.members if m.kind == "decode") == 64 * 15


@pytest.mark.slow
def test_1000_short_lips_finish_and_pool_is_full_again(fresh_engine):
    eng = fresh_engine(num_pages=2400)
    procs = [eng.run(greedy, f"Item {i}:", 2) for i in range(1000)]
    outs = [p.result(timeout=600) for p in procs]
    assert all(len(o) == 2 for o in outs)
    assert all(p.status == "finished" for p in procs)
    time.sleep(0.1)
    eng.kvfs.check()
    assert eng.pool.free_pages == eng.pool.n_pages
    eng.shutdown()


def test_long_prefill_does_not_stall_decoders(engine):
    start = engine.runtime.batch.log.total_batches
    decoders = [engine.run(timestamps, f"List {i}: apples, pears,", 40) for i in range(16)]
    time.sleep(1.0)  # let them reach steady decoding
    long_prompt = list(range(1000, 3000))  # 2,000 tokens

    def prefill(sym):
        kv = sym.kv_create()
        t0 = time.perf_counter()
        d = sym.pred(kv, long_prompt)
        return t0, time.perf_counter(), d.argmax()

    p = engine.run(prefill)
    t0, t1, _ = p.result(timeout=300)
    stamps = [d.result(timeout=300) for d in decoders]
    recs = engine.runtime.batch.log.since(start)
    chunked = [r for r in recs if any(m.kind == "prefill" and m.chunk[2] == 2000 for m in r.members)]
    assert len(chunked) >= 2, "the 2,000-token prompt was not split into chunks"
    assert all(m.chunk[1] - m.chunk[0] < 2000 for r in chunked for m in r.members if m.kind == "prefill")
    mixed = [r for r in chunked if any(m.kind == "decode" for m in r.members)]
    assert mixed, "no batch carried decodes next to a prefill chunk"
    during = sum(1 for s in stamps for t in s if t0 < t < t1)
    assert during >= 16, f"decoders produced only {during} tokens while the long prompt was prefilled"


@pytest.mark.parametrize("runner", ["threads", "greenlets"])
def test_parking_under_memory_pressure(fresh_engine, engine, runner):
    prompt_a = "The history of the Roman Empire begins with"
    prompt_b = "A recipe for bread needs flour, water and"
    n = 60
    ref_a = greedy_reference(engine, prompt_a, n)
    ref_b = greedy_reference(engine, prompt_b, n)
    # 7 pages x 16 slots: one ~70-token sequence (5 pages) fits, two do not.
    eng = fresh_engine(num_pages=7, lip_runner=runner)  # greenlets: the hub fires the batches and parks
    statuses = set()
    # What each call's thread shows while it waits for pages: the scheduler's gate sees every
    # batch's members just before it runs them.
    seen: list[tuple[bool, str]] = []
    eng.runtime.batch.gate = lambda chosen: seen.extend((p.waiting_pages, p.thread.state) for p in chosen)
    pa = eng.launch(greedy, prompt_a, n, priority=1)
    pb = eng.launch(greedy, prompt_b, n, priority=0)
    while not (pa.done and pb.done):
        statuses.add(pb.status)
        statuses.add(pa.status)
        time.sleep(0.005)
    assert pa.result() == ref_a
    assert pb.result() == ref_b
    assert "parked" in statuses
    assert eng.runtime.procs.parks <= 3, "parking thrashed"
    waited = [state for waiting, state in seen if waiting]
    assert waited and set(waited) == {"waiting_pages"}, "a call waiting for pages shows it on its thread"
    assert {state for waiting, state in seen if not waiting} == {"in_syscall"}
    eng.kvfs.check()
    assert eng.pool.free_pages == eng.pool.n_pages
    eng.shutdown()


@pytest.mark.parametrize("runner", ["threads", "greenlets"])
def test_a_call_that_can_never_fit_fails_cleanly(fresh_engine, runner):
    eng = fresh_engine(num_pages=4, lip_runner=runner)

    def big(sym):
        kv = sym.kv_create()
        sym.pred(kv, list(range(100, 200)))  # 100 tokens > 4 pages x 16

    with pytest.raises(Exception) as ei:
        eng.run(big).result(timeout=60)
    assert "out of KV pages" in str(ei.value)
    # The engine still serves.
    assert len(eng.run(greedy, "Hi", 2).result(timeout=60)) == 2
    eng.kvfs.check()
    eng.shutdown()


def test_priority_and_fair_share_order(engine):
    procs = engine.runtime.procs
    from symphony_core.executor import PredCall
    from symphony_core.sched.pending import PendingPred

    kv = engine.kv_create()
    mk = lambda user, prio: PendingPred(PredCall(kv, [1]), 1, 1, user, prio, 0)  # noqa: E731
    procs.served.clear()
    procs.charge("heavy", 10_000)
    a, b, c = mk("heavy", 0), mk("light", 0), mk("heavy", 5)
    assert sorted([a, b, c], key=procs.rank) == [c, b, a]
    procs.charge("light", 100)  # each charge decays the earlier ones
    # approx for both: the totals are kept scaled (`_served_scale`, grown by every charge the session's engine
    # made before this test), so dividing back can be off in the last bit (100.00000000000001 once)
    assert procs.served_tokens("heavy") == pytest.approx(10_000 * 0.98)
    assert procs.served_tokens("light") == pytest.approx(100)
    assert sorted([a, b], key=procs.rank) == [b, a]
    engine.kv_close(kv)


def test_policies():
    w = AdaptiveWatermark()
    assert w.decide(queued=64, runnable=64, oldest_wait=0.0, last_forward=0.3).fire
    wait = w.decide(queued=10, runnable=64, oldest_wait=0.0, last_forward=0.3)
    assert not wait.fire and 0 < wait.wait <= w.max_wait
    assert w.decide(queued=10, runnable=64, oldest_wait=1.0, last_forward=0.3).fire
    # all of a batch's members are waited for while they keep coming; once they stop, it fires
    assert not w.decide(queued=63, runnable=64, oldest_wait=0.001, last_forward=0.3, newest_wait=0.0001).fire
    assert w.decide(queued=64, runnable=64, oldest_wait=0.001, last_forward=0.3, newest_wait=0.0001).fire
    quiet = w.decide(queued=40, runnable=64, oldest_wait=0.003, last_forward=0.3, newest_wait=0.0015)
    assert not quiet.fire and quiet.wait == pytest.approx(w.quiet - 0.0015)
    assert w.decide(queued=40, runnable=64, oldest_wait=0.003, last_forward=0.3, newest_wait=w.quiet).fire
    assert FireWhenIdle().decide(1, 64, 0.0, 0.3).fire

    class FourArguments:  # a policy written before `newest_wait` (the course's lab 05 writes one)
        def decide(self, queued, runnable, oldest_wait, last_forward):
            return Decision(queued >= runnable)

    assert ask(FourArguments(), 4, 4, 0.0, 0.1, 0.0).fire and not ask(FourArguments(), 3, 4, 0.0, 0.1, 0.0).fire
    assert not ask(w, 40, 64, 0.003, 0.3, 0.0015).fire and ask(w, 40, 64, 0.003, 0.3, w.quiet).fire


def test_a_prompt_failing_in_a_later_chunk_leaves_its_file_as_it_was(engine, monkeypatch):
    """A prompt longer than the token budget runs in chunks; when a later chunk's forward pass fails,
    the chunks already written are undone (KVFS.cut_back): the file is as it was before the pred."""
    poison = 7
    prompt = list(range(1000, 1600))
    prompt[550] = poison  # in the second chunk: the first 512 tokens run and are written first
    forward = engine.model.forward

    def faulty(fb, k, v):
        if poison in fb.token_ids.tolist():
            raise RuntimeError("injected fault")
        return forward(fb, k, v)

    def lip(sym):
        kv = sym.kv_create()
        sym.pred(kv, [1, 2, 3])
        try:
            sym.pred(kv, prompt)
        except SymphonyError as e:
            return str(e), kv.len, kv.tokens
        return "no error", kv.len, kv.tokens

    start = engine.runtime.batch.log.total_batches
    monkeypatch.setattr(engine.model, "forward", faulty)
    try:
        error, length, tokens = engine.run(lip).result(timeout=300)
    finally:
        monkeypatch.setattr(engine.model, "forward", forward)
    chunks = [m.chunk for r in engine.runtime.batch.log.since(start) for m in r.members if m.kind == "prefill"]
    assert (0, 512, 600) in chunks, chunks  # the first chunk ran and was written
    assert "injected fault" in error
    assert length == 3 and tokens == [1, 2, 3]
    engine.kvfs.check()


def _scanned(proc) -> int:
    return sum(t.may_pred_soon for t in proc.threads)


def test_the_count_of_threads_that_may_pred_follows_every_state_change():
    """`Process.threads_may_pred` (what the batch policy reads instead of scanning threads) equals the
    scan after each of LIPThread's state changes, for a `pred` and for other calls, waits for pages,
    debugger stops and both ends."""
    from symphony_core.sched.limits import Limits
    from symphony_core.sched.process import Process

    proc = Process(lambda sym: None, (), {}, "u", "p", 0, Limits())
    a, b = proc.new_thread("a"), proc.new_thread("b")
    seen = []

    def check():
        seen.append(proc.threads_may_pred)
        assert proc.threads_may_pred == _scanned(proc), [(t.state, t.current_call) for t in proc.threads]

    check()
    for th in (a, b):
        th.start_running()
        check()
    a.enter_syscall("pred")
    check()
    a.set_waiting_pages(True)
    check()
    prev = a.hold_stopped()
    check()
    a.release_stopped(prev)
    check()
    a.set_waiting_pages(False)
    check()
    a.leave_syscall()
    check()
    b.enter_syscall("recv")
    check()
    prev = b.hold_stopped()
    check()
    b.release_stopped(prev)
    check()
    b.leave_syscall()
    check()
    b.enter_syscall("join")
    check()
    a.finish(1, None)
    check()
    b.finish(None, RuntimeError("x"))
    check()
    assert seen == [0, 1, 2, 2, 2, 1, 2, 2, 2, 1, 1, 1, 2, 1, 0, 0]


def _threads_and_waits(sym, n: int) -> list:
    kv = sym.kv_create()
    sym.pred(kv, [1])
    helper = sym.spawn(lambda s: s.recv())  # asleep in recv until the launcher sends
    sym.send("ready")
    got = [sym.recv(), helper.join()]  # the two messages, whichever thread took which
    for _ in range(n):
        sym.pred(kv, [1])
    sym.kv_close(kv)
    return sorted(got)


def test_a_programs_threads_asleep_in_recv_do_not_count_as_runnable(engine):
    """On a live engine: with a program's two threads asleep in `recv`, its count of threads that may
    pred (what `ProcessScheduler.runnable` sums) leaves them out, and it ends at 0. (Not `runnable()`
    itself: the session engine may still be ending another test's programs.)"""
    p = engine.run(_threads_and_waits, 3)
    assert p.messages(timeout=60).__next__() == "ready"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        calls = [t.current_call for t in p.threads]
        if len(calls) == 2 and all(c == "recv" for c in calls):
            break
        time.sleep(0.01)
    assert [t.current_call for t in p.threads] == ["recv", "recv"]
    assert p.threads_may_pred == _scanned(p) == 0
    p.send("one")
    p.send("two")
    assert p.result(timeout=60) == ["one", "two"]
    assert p.threads_may_pred == _scanned(p) == 0


def _forward_threads(monkeypatch, eng) -> list[tuple[int, int]]:
    """(thread ident, rows) of every forward pass `eng`'s executor runs from now on."""
    import threading

    seen: list[tuple[int, int]] = []
    orig = eng.executor._forward

    def spy(calls, idx, results, argmax):
        seen.append((threading.get_ident(), len(calls)))
        return orig(calls, idx, results, argmax)

    monkeypatch.setattr(eng.executor, "_forward", spy)
    return seen


def _greedy_on(sym, prompt: str, n: int) -> tuple[int, list[int]]:
    import threading

    return threading.get_ident(), greedy(sym, prompt, n)


def test_a_lone_program_runs_its_batches_on_its_own_thread_and_programs_together_share_the_loops(
    fresh_engine, monkeypatch
):
    engine = fresh_engine()  # no other test's program left running: this one must be the only runnable thread
    prompts = ["The capital of France is", "Water boils at"]
    refs = [greedy_reference(engine, p, 8) for p in prompts]
    log = engine.runtime.batch.log
    seen = _forward_threads(monkeypatch, engine)
    start, host0 = log.total_batches, log.host_s
    me, out = engine.run(_greedy_on, prompts[0], 8).result(timeout=60)
    assert out == refs[0]
    # Alone, each pred's batch ran on the program's own thread (no hand-off to the loop and back),
    # and was recorded and charged like any other batch.
    assert seen == [(me, 1)] * 8
    recs = log.since(start)
    assert [r.size for r in recs] == [1] * 8
    assert log.host_s > host0 and all(r.host_s > 0 for r in recs)
    seen.clear()
    procs = [engine.launch(_greedy_on, p, 8) for p in prompts]
    results = [p.result(timeout=60) for p in procs]
    assert [r[1] for r in results] == refs
    mine = {r[0] for r in results}
    pairs = [ident for ident, rows in seen if rows == 2]
    assert pairs, f"two programs decoding together never shared a batch: {seen}"
    assert not mine & set(pairs), "a batch of two ran on one of its programs' threads, not the loop's"
    engine.shutdown()


def test_a_lone_call_waits_for_the_policy_and_a_prompt_over_the_budget_goes_through_the_loop(fresh_engine, monkeypatch):
    """The lone path is only a shortcut: a policy that does not fire on one call, and a prompt cut into
    chunks, keep the loop's behaviour."""
    import threading

    engine = fresh_engine()

    ref = greedy_reference(engine, "Once upon a time", 4)
    batch = engine.runtime.batch

    class TwoOrLater:
        name = "two-or-later"

        def __init__(self) -> None:
            self.asked: list[int] = []

        def decide(self, queued, runnable, oldest_wait, last_forward):  # the four-argument interface of a lab's policy
            self.asked.append(queued)
            return Decision(queued >= 2 or oldest_wait >= 0.003, 0.003)

    seen = _forward_threads(monkeypatch, engine)
    policy = TwoOrLater()
    monkeypatch.setattr(batch, "policy", policy)
    me, out = engine.run(_greedy_on, "Once upon a time", 4).result(timeout=60)
    assert out == ref
    assert 1 in policy.asked
    assert seen and all(ident != me for ident, _ in seen), "a lone call fired where its policy said wait"
    monkeypatch.undo()
    seen = _forward_threads(monkeypatch, engine)
    monkeypatch.setattr(batch, "token_budget", 2)  # the 4-token prompt runs as chunks of 2, through the loop
    me, out = engine.run(_greedy_on, "Once upon a time", 4).result(timeout=60)
    assert out == ref
    chunks = -(-len(engine.tokenize("Once upon a time")) // 2)
    assert chunks >= 2
    prompt_passes = [ident for ident, _ in seen[:chunks]]
    assert me not in prompt_passes and threading.get_ident() not in prompt_passes
    assert [ident for ident, _ in seen[chunks:]] == [me] * 3, "the decodes after it ran alone on the program's thread"
    engine.shutdown()


def test_a_program_cancelled_while_its_lone_batch_runs_stops_there(fresh_engine, monkeypatch):
    """Its thread runs the forward itself, so no wake-up tells it of the cancel: `pred` must still raise
    it (through the loop, the cancel woke the waiting thread), and the process end as cancelled."""
    import threading

    engine = fresh_engine()
    running, after = threading.Event(), []
    orig = engine.executor._forward

    def slow(calls, idx, results, argmax):
        running.set()
        time.sleep(0.3)
        return orig(calls, idx, results, argmax)

    monkeypatch.setattr(engine.executor, "_forward", slow)

    def prog(sym):
        kv = sym.kv_create()
        sym.pred(kv, [1, 2, 3])
        after.append("pred returned")  # pure Python: nothing would interrupt it had pred returned
        return "finished"

    proc = engine.run(prog)
    assert running.wait(30)
    proc.cancel()
    with pytest.raises(Exception, match="cancelled"):
        proc.result(timeout=30)
    assert proc.status == "cancelled" and after == []
    engine.kvfs.check()
    engine.shutdown()


def test_on_cuda_a_lone_program_still_goes_through_the_loop(fresh_engine, monkeypatch):
    """On a GPU each thread that runs forwards would keep a cuBLAS handle and workspace: the scheduler
    reads the model's device once, when the runtime starts, and keeps the lone path to the CPU."""
    import torch

    engine = fresh_engine()
    real = engine.executor.model.device
    engine.executor.model.device = torch.device("cuda")  # only while the runtime is built: it runs on the CPU
    try:
        assert engine.runtime is not None  # built here
    finally:
        engine.executor.model.device = real
    seen = _forward_threads(monkeypatch, engine)
    me, out = engine.run(_greedy_on, "Hello", 3).result(timeout=60)
    assert len(out) == 3 and seen and all(ident != me for ident, _ in seen)
    engine.shutdown()


def test_only_a_few_live_threads_run_batches_of_their_own(fresh_engine, monkeypatch):
    """Each thread that runs a forward keeps an OpenMP team until it ends (sched/lone_threads.py): past the
    limit, a lone program's call takes the loop, and the slot of a thread that ended is free again."""
    import threading

    engine = fresh_engine()
    monkeypatch.setattr(engine.runtime.batch._lone, "limit", 2)
    seen = _forward_threads(monkeypatch, engine)

    def chat(sym):  # one pred, then waits between turns as a chat session does; a pred per message
        kv = sym.kv_create()
        sym.pred(kv, [1, 2, 3])
        sym.send(threading.get_ident())
        while sym.recv() != "bye":
            sym.pred(kv, [4])
        return "done"

    def start():
        n = len(seen)
        proc = engine.run(chat)
        ident = next(proc.messages(timeout=60))  # its first pred has run; the program waits in recv
        return proc, ident, [t for t, _ in seen[n:]]

    (a, ta, ran_a), (b, tb, ran_b), (c, tc, ran_c) = start(), start(), start()
    assert ran_a == [ta] and ran_b == [tb], "the first two lone programs ran their batch on their own threads"
    assert ran_c and tc not in ran_c, "a third live thread ran a batch of its own past the limit of 2"
    n = len(seen)
    a.send("again")  # a's thread has its team already: it runs alone again
    a.send("bye")
    assert a.result(timeout=60) == "done"
    assert [t for t, _ in seen[n:]] == [ta]
    d, td, ran_d = start()
    assert ran_d == [td], "the slot of a program that ended was not given to the next one"
    for p in (b, c, d):
        p.send("bye")
        assert p.result(timeout=60) == "done"
    engine.kvfs.check()
    engine.shutdown()
