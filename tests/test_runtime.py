"""LIP runtime: processes, threads, messages, failures, limits (issue 4)."""

from __future__ import annotations

import threading
import time

import pytest

from symphony_core.lip import Cancelled, LimitExceeded, Limits, LIPError
from tests.lips_for_tests import greedy, greedy_reference, page_hog, raises, spins, thread_bomb

PROMPTS = [f"Fact {i}: the most common colour of the sky is" for i in range(8)]


@pytest.fixture(scope="module")
def references(engine):
    return {p: greedy_reference(engine, p, 8) for p in PROMPTS}


def test_streaming_messages_and_result(engine):
    def lip(sym, prompt):
        kv = sym.kv_create()
        toks = sym.tokenize(prompt)
        out = []
        for _ in range(6):
            t = sym.pred(kv, toks).argmax()
            out.append(t)
            sym.send(sym.detokenize([t]))
            toks = [t]
        return sym.detokenize(out)

    proc = engine.run(lip, "The capital of France is")
    streamed = "".join(proc.messages(timeout=60))
    assert proc.result(timeout=60) == streamed
    assert "Paris" in streamed
    assert proc.status == "finished"


def test_recv_and_threads(engine):
    def worker(sym, prompt):
        return greedy(sym, prompt, 4)

    def lip(sym):
        prompt = sym.recv(timeout=30)
        hs = [sym.spawn(worker, prompt) for _ in range(3)]
        return [h.join() for h in hs]

    proc = engine.run(lip)
    proc.send("Water boils at")
    outs = proc.result(timeout=60)
    assert outs[0] == outs[1] == outs[2] == greedy_reference(engine, "Water boils at", 4)


def test_failures_and_limits_do_not_disturb_others(engine, references):
    free_before = engine.pool.free_pages
    good = [engine.run(greedy, p, 8) for p in PROMPTS]
    bad = {
        "raises": engine.run(raises),
        "spins": engine.launch(spins, limits=Limits(max_wall_time=1.0)),
        "bomb": engine.launch(thread_bomb, limits=Limits(max_threads=16)),
        "hog": engine.launch(page_hog, limits=Limits(max_pages=20)),
    }
    for p, prompt in zip(good, PROMPTS):
        assert p.result(timeout=120) == references[prompt]
    errors = {}
    for name, p in bad.items():
        with pytest.raises(LIPError) as ei:
            p.result(timeout=60)
        errors[name] = ei.value
    assert "ValueError: the LIP's own bug" in str(errors["raises"])
    assert "raise ValueError" in errors["raises"].traceback_text
    assert isinstance(errors["spins"].__cause__, LimitExceeded) and "wall-time limit" in str(errors["spins"])
    assert isinstance(errors["bomb"].__cause__, LimitExceeded) and "thread limit of 16" in str(errors["bomb"])
    assert isinstance(errors["hog"].__cause__, LimitExceeded) and "page quota of 20" in str(errors["hog"])
    time.sleep(0.2)
    engine.kvfs.check()
    assert engine.pool.free_pages == free_before


def test_cancel(engine):
    def forever(sym):
        kv = sym.kv_create()
        toks = sym.tokenize("Count:")
        while True:
            toks = [sym.pred(kv, toks).argmax()]

    free_before = engine.pool.free_pages
    proc = engine.run(forever)
    time.sleep(1.0)
    proc.cancel()
    with pytest.raises(LIPError) as ei:
        proc.result(timeout=30)
    assert isinstance(ei.value.__cause__, Cancelled)
    assert proc.status == "cancelled"
    time.sleep(0.2)
    assert engine.pool.free_pages == free_before


def test_cancel_wakes_a_thread_asleep_in_pred_at_once(engine):
    """A kill interrupts the sleep of a thread waiting for its batch; it does not wait for the
    thread's own look at the kill flag (KILL_CHECK_S). The batch scheduler is held at its gate,
    so the pred can never finish by itself."""
    from symphony_core.sched.thread_state import KILL_CHECK_S

    held, release = threading.Event(), threading.Event()

    def gate(chosen):
        held.set()
        release.wait(30)

    batch = engine.runtime.batch
    batch.gate = gate
    try:
        proc = engine.run(greedy, "Hello", 2)
        assert held.wait(30), "the pred never reached the scheduler"
        t0 = time.monotonic()
        proc.cancel()
        with pytest.raises(LIPError) as ei:
            proc.result(timeout=10)
        took = time.monotonic() - t0
    finally:
        batch.gate = None
        release.set()
    assert isinstance(ei.value.__cause__, Cancelled)
    assert took < KILL_CHECK_S / 2, f"cancel took {took:.3f}s to reach a thread asleep in pred"


def test_cancel_wakes_threads_asleep_in_recv_at_once(engine):
    """Both threads of a process asleep in recv see a kill at once, not at their own next look."""
    from symphony_core.sched.thread_state import KILL_CHECK_S

    def listens(sym):
        other = sym.spawn(lambda s: s.recv())
        sym.recv()
        other.join()

    proc = engine.run(listens)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(t.current_call == "recv" for t in proc.threads) < 2:
        time.sleep(0.01)
    assert sum(t.current_call == "recv" for t in proc.threads) == 2, "both threads should sit in recv"
    t0 = time.monotonic()
    proc.cancel()
    with pytest.raises(LIPError) as ei:
        proc.result(timeout=10)
    took = time.monotonic() - t0
    assert isinstance(ei.value.__cause__, Cancelled)
    assert all(t.done.is_set() for t in proc.threads)
    assert took < KILL_CHECK_S / 2, f"cancel took {took:.3f}s to reach the threads asleep in recv"


def test_join_timeout_is_kept_to_and_past_it_raises_timeout_error():
    """join(timeout) waits about that long (its kill-flag looks never overshoot the deadline)."""
    from symphony_core.sched.process import Process

    proc = Process(lambda s: None, (), {}, "u", "j", 0, Limits())
    th = proc.new_thread("never-ends")
    for timeout in (0.0, 0.05):
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="did not finish in"):
            th.join(timeout)
        assert time.monotonic() - t0 < timeout + 0.5


def test_events_carry_lip_source_location(engine):
    q, unsubscribe = engine.bus.queue()
    try:
        proc = engine.run(greedy, "Hello", 2)
        proc.result(timeout=60)
    finally:
        unsubscribe()
    events = []
    while not q.empty():
        events.append(q.get())
    mine = [e for e in events if e.pid == proc.pid and e.kind == "syscall_enter"]
    calls = [e.call for e in mine]
    assert calls == ["kv_create", "tokenize", "pred", "pred", "kv_close"]
    assert all(e.file.endswith("lips_for_tests.py") and e.line > 0 for e in mine)
    exits = [e for e in events if e.pid == proc.pid and e.kind == "syscall_exit" and e.call == "pred"]
    assert exits[0].result["argmax"] == greedy_reference(engine, "Hello", 1)[0]
    assert any(e.kind == "process_exit" and e.pid == proc.pid for e in events)


def test_bad_arguments_raise_inside_the_lip(engine):
    def lip(sym):
        kv = sym.kv_create()
        try:
            sym.pred(kv, [])
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    assert proc_result(engine.run(lip)).startswith("PredError: pred on")


def proc_result(p):
    return p.result(timeout=60)


def test_engine_run_is_thread_safe_from_many_launchers(engine):
    results = []

    def launcher(i):
        results.append(engine.run(greedy, "One, two,", 3).result(timeout=120))

    ts = [threading.Thread(target=launcher, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len(results) == 8 and all(r == results[0] for r in results)


@pytest.mark.slow  # ~25 s: three fresh interpreters load the model
def test_a_script_that_exits_while_its_programs_decode_exits_cleanly(tmp_path):
    """Returning from a script while LIPs still decode (no `shutdown()`) must not abort the interpreter:
    the engine is shut down at exit, before the threads that let go of the GIL in C++ could be ended
    mid-frame (that aborted the process with 'terminate called without an active exception')."""
    import subprocess
    import sys

    script = tmp_path / "leave_early.py"
    script.write_text(
        "import time\n"
        "from symphony_core import Engine\n"
        "eng = Engine(num_pages=128)\n"
        "def lip(sym, n):\n"
        "    kv = sym.kv_create()\n"
        "    tok = sym.pred(kv, [1, 2, 3]).argmax()\n"
        "    for _ in range(n):\n"
        "        tok = sym.pred(kv, [tok]).argmax()\n"
        "procs = [eng.run(lip, 10_000) for _ in range(2)]\n"
        "while eng.runtime.batch.log.total_batches < 20:\n"
        "    time.sleep(0.05)\n"
        "print('leaving', flush=True)\n"
    )
    for _ in range(3):  # the abort needed the exit to meet a thread in C++: ~2 runs in 3 before the fix
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "leaving" in out.stdout, out.stderr[-2000:]
        assert "terminate called" not in out.stderr
