"""The LIP profiler on the real model: a tool's sleep lands on the tool call's line, and each
thread's buckets add up to its wall time."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from symphony_lab.debugger.trace import validate_trace
from symphony_lab.profiler import ProfileCollector, profile_run
from tests.tui_pilot import LIPS_FOR_TESTS, drive_greedy_session, screen_text, wait_until

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "lips"
TOOL_SLEEP = 0.4


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"profiled_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def line_of(path: Path, text: str) -> int:
    lines = path.read_text().splitlines()
    hits = [i + 1 for i, ln in enumerate(lines) if text in ln]
    assert len(hits) == 1, (text, hits)
    return hits[0]


@pytest.mark.slow
def test_react_tool_line_carries_the_tools_time(engine):
    ex = load_example("react_agent")  # a private copy: its tools get a configured latency
    for name, tool in list(ex.TOOLS.items()):

        def slow(arg, _tool=tool):
            time.sleep(TOOL_SLEEP)  # the tool's network latency
            return _tool(arg)

        ex.TOOLS[name] = slow
    res, prof = profile_run(engine, ex.react, "What is 17 * 23?", engine.model_dir / "tokenizer.json", 2)
    calls = sum(1 for s in res["steps"] if s["tool"] != "finish")
    assert calls >= 1
    row = prof.line("react_agent.py", line_of(EXAMPLES / "react_agent.py", 'entry["observation"] = run_tool('))
    slept = calls * TOOL_SLEEP
    assert abs(row.inclusive - slept) <= 0.1 * slept, (row, slept, prof.table())
    sleep_row = prof.line("test_profiler.py", line_of(Path(__file__), "network " + "latency"))
    assert sleep_row.times.blocking >= 0.9 * slept  # off the CPU: blocking, not own Python
    assert sleep_row.times.own < 0.1 * slept
    pred_rows = [r for r in prof.lines if r.times.preds]
    assert pred_rows and all(r.times.forward > 0 for r in pred_rows)


def test_prefix_parallel_buckets_add_up_to_wall(engine):
    ex = load_example("prefix_parallel")
    questions = ex.QUESTIONS[:3]
    t0 = time.perf_counter()
    res, prof = profile_run(engine, ex.prefix_parallel, ex.SYSTEM_PROMPT, questions, 6, "/shared/profiler-test.kv")
    measured = time.perf_counter() - t0
    assert len(res["answers"]) == 3
    assert len(prof.threads) == 4  # main + one per question
    for th in prof.threads:
        t = th.times
        assert abs(t.queue + t.forward + t.own + t.blocking + t.kernel - th.wall) <= 0.05 * th.wall, th
        assert 0 < t.own <= th.wall
    main = prof.thread(1)
    assert 0.9 * measured <= main.wall <= measured  # the profile's wall is the program's real wall time
    workers = [th for th in prof.threads if th.tid != 1]
    for th in workers:
        assert th.times.preds >= 1 and th.times.forward > 0 and th.times.tokens >= 6
    # every batch's time is divided among its members: the threads' forward shares sum to it
    batch_time = sum(b[1] - b[0] for b in prof.batches)
    forward = sum(th.times.forward for th in prof.threads)
    assert abs(forward - batch_time) <= 0.05 * batch_time, (forward, batch_time)
    # the text views and the trace
    table = prof.table()
    assert "prefix_parallel.py" in table and f"thread {main.pid}.2 answer" in table
    assert "answer" in prof.flame()
    assert "prefix_parallel.py" in prof._repr_html_() and "symphony-profile" in prof._repr_html_()
    ev = prof.trace_events()
    assert any(e["ph"] == "X" and e["name"].startswith("pred @ prefix_parallel.py") for e in ev)
    assert any(e["ph"] == "C" and e["name"] == "kv pages held" for e in ev)
    assert validate_trace({"traceEvents": ev}) == []


def test_no_subscriber_when_off(engine):
    before = engine.bus.active
    col = ProfileCollector().attach(engine.bus)
    assert engine.bus.active and col._sampler.is_alive()
    col.detach()
    assert engine.bus.active == before and col._sampler is None and not col.threads


@pytest.mark.slow
def test_tui_profile_screen(engine):
    """F3 in the TUI starts profiling the embedded session; after the program runs it shows the
    line table with the program's pred line."""
    from symphony_lab.tui.profile_screen import ProfileScreen

    async def script(pilot, app, session) -> tuple[str, int]:
        await pilot.press("f3")
        await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen), "the profile screen")
        await wait_until(pilot, lambda: "Profiling from now on" in screen_text(app), "profiling to start")
        await pilot.press("escape")
        await pilot.press("c")
        pid = session.pids[-1]
        await wait_until(pilot, lambda: engine.runtime.processes[pid].done, "the program's end")
        t0 = time.monotonic()
        while not session.request("profile", pid=pid)["done"]:  # the end of every thread seen
            assert time.monotonic() - t0 < 30
            await pilot.pause(0.1)
        await pilot.press("f3")
        await wait_until(pilot, lambda: isinstance(app.screen, ProfileScreen), "the profile screen again")
        await wait_until(pilot, lambda: "flame" in screen_text(app), "the line table")
        return screen_text(app), pid

    (text, pid), session = drive_greedy_session(engine, script)
    pred_line = line_of(LIPS_FOR_TESTS, "t = sym.pred(kv, toks).argmax()")
    assert f"lips_for_tests.py:{pred_line}" in text and "thread" in text and "flame" in text
    assert not session.profiled_pids and pid not in session.dbg.profiling.entries  # closing stopped it
