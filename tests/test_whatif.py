"""The what-if explorer on the real model: the alternative runs in a KV fork of the recorded
prefix (pages shared, the fork visible in the KV tree) and the original token reproduces the
recorded greedy continuation exactly."""

from __future__ import annotations

import re

import pytest

from symphony_lab.debugger import Debugger
from symphony_lab.whatif import thread_tokens, what_if
from tests.tui_pilot import drive_greedy_session, screen_text, wait_until

SOURCE = "/shared/whatif-test.kv"
PROMPT = (
    "Here is a list of European countries and their capital cities, one per line. France: Paris. "
    "Germany: Berlin. Spain: Madrid. Portugal: Lisbon. Austria: Vienna. The capital of Italy is"
)


def greedy(sym, prompt: str, n: int, path: str) -> list[int]:
    kv = sym.kv_create(path)  # named: it outlives the run, so a what-if can fork it
    d = sym.pred(kv, sym.tokenize(prompt))
    for _ in range(n - 1):
        d = sym.pred(kv, [d.argmax()])
    return kv.tokens + [d.argmax()]


@pytest.fixture(scope="module")
def recorded(engine):
    dbg = Debugger(engine)
    try:
        pid = dbg.launch(greedy, PROMPT, 10, SOURCE, record=True)["pid"]
        stream = engine.runtime.processes[pid].result(timeout=300)
        rec = dbg.get_recording(pid)
    finally:
        dbg.detach()
    yield stream, rec
    engine.kv_remove(SOURCE)


def test_original_token_reproduces_the_recorded_continuation(engine, recorded):
    stream, rec = recorded
    tokens = thread_tokens(rec, 1)
    assert tokens == stream  # the recording's pred inputs + the last pick are the run's tokens
    pos = len(engine.tokenize(PROMPT)) + 2
    w = what_if(engine, tokens, pos, tokens[pos], max_tokens=6, source=SOURCE)
    assert w.original == tokens[pos : pos + 6] == w.alternative and w.diverge_at is None
    assert w.reproduces_recording() and not w.recomputed_prefix
    # from the recorded tokens alone (no live file): the prefix is computed once, still shared
    w2 = what_if(engine, tokens, pos, tokens[pos], max_tokens=6)
    assert w2.recomputed_prefix and w2.original == tokens[pos : pos + 6]


def test_alternative_token_diverges_in_a_fork_sharing_the_prefix(engine, recorded):
    _, rec = recorded
    tokens = thread_tokens(rec, 1)
    pos = len(engine.tokenize(PROMPT))
    free = engine.kvfs.pool.free_pages
    alt = engine.tokenize(" Rome")[0]
    alt = alt if alt != tokens[pos] else engine.tokenize(" Milan")[0]
    w = what_if(engine, tokens, pos, alt, max_tokens=5, source=SOURCE)
    assert w.alternative[0] == alt and w.original[0] == tokens[pos] and w.diverge_at == 0
    assert w.original == tokens[pos : pos + 5]
    ps = engine.kvfs.pool.page_size
    assert len(w.shared_pages) >= pos // ps >= 1  # every full page of the prefix is held by both forks
    base, o, a = w.files["base"], w.files["original"], w.files["alternative"]
    assert o["parent"] == base["fid"] == a["parent"]  # the KV tree: two forks of one prefix file
    assert (
        "diverge at +0" in w._repr_html_()
        and "original" in w.side_by_side()
        and w.texts["alternative"].startswith(engine.detokenize([alt]))
    )
    assert engine.kvfs.pool.free_pages == free  # the forks were closed: nothing leaked
    engine.kvfs.check()


def test_bad_position_is_a_clear_error(engine, recorded):
    _, rec = recorded
    tokens = thread_tokens(rec, 1)
    with pytest.raises(ValueError, match="position must be in"):
        what_if(engine, tokens, len(tokens), 0)
    with pytest.raises(ValueError, match="one token"):
        what_if(engine, tokens, 3, "hello world again")


def test_lab_run_profile_and_what_if(engine):
    """Both from a notebook run: `run.profile()` and `run.what_if()` (the lab section's API)."""
    from symphony_lab.notebook.lab import Lab

    lab = Lab(engine=engine)
    lab.wait(300)
    try:
        path = "/shared/whatif-lab.kv"
        run = lab.run(greedy, PROMPT, 6, path, record=True, profile=True, display=False)
        stream = run.result(timeout=300)
        prof = run.profile()
        th = prof.thread(1)
        assert th.times.preds == 6 and th.times.forward > 0
        assert abs(th.times.total - th.wall) <= 0.05 * th.wall
        pos = len(engine.tokenize(PROMPT)) + 1
        w = run.what_if(1, pos, stream[pos], max_tokens=4, source=path)
        assert w.original == stream[pos : pos + 4] == w.alternative
        engine.kv_remove(path)
    finally:
        lab.shutdown()


@pytest.mark.slow
def test_tui_what_if_screen(engine):
    """F4 in the TUI: type a position and a token, see both continuations of the focused thread."""
    from symphony_lab.tui.whatif_screen import WhatIfScreen, parse_request

    assert parse_request("5 dragon 3") == (5, " dragon", 3) and parse_request("7 #42") == (7, 42, 12)
    with pytest.raises(ValueError, match="POSITION TOKEN"):
        parse_request("dragon")

    async def script(pilot, app, session) -> str:
        await pilot.press("c")
        pid = session.pids[-1]
        await wait_until(pilot, lambda: engine.runtime.processes[pid].done, "the program's end", 120)
        await pilot.press("f4")
        await wait_until(pilot, lambda: isinstance(app.screen, WhatIfScreen), "the what-if screen", 120)
        await pilot.press(*"5 dragon 3", "enter")
        await wait_until(
            pilot, lambda: "alternative:" in screen_text(app) or "Error" in screen_text(app), "the continuations", 120
        )
        return screen_text(app)

    text, _ = drive_greedy_session(engine, script)
    assert (
        re.search(r"alternative: [\"'] dragon", text) and "diverge at +0" in text and "prefix pages shared" in text
    ), text
