"""Issue 50: a what-if on a thread that works on a fork replays the thread's whole context — the
file it forked (the README example's 173-token system prompt, a beam's history) and then its own
tokens — so the "original" continuation is the recording, token for token."""

from __future__ import annotations

import pytest

from examples.lips.beam_search import beam_search
from examples.lips.prefix_parallel import prefix_parallel
from symphony_lab.debugger import Debugger
from symphony_lab.whatif import thread_context, thread_tokens, what_if

PATH = "/shared/whatif-context-test.kv"


@pytest.fixture(scope="module")
def dbg(engine):
    d = Debugger(engine)
    yield d
    d.detach()


def test_what_if_on_the_readme_example_replays_the_forked_system_prompt(dbg, engine):
    pid = dbg.launch(prefix_parallel, max_tokens=8, path=PATH, record=True)["pid"]
    res = engine.runtime.processes[pid].result(timeout=600)
    rec = dbg.get_recording(pid)
    try:
        for tid in (2, 5):  # the first and the last answer thread
            toks, ctx = thread_tokens(rec, tid), thread_context(rec, tid)
            assert len(ctx) == res["prefix_tokens"] == 173, "the forked file's full prefix, as recorded"
            answer = res["answers"][tid - 2]["tokens"]
            assert toks[-len(answer) :] == answer
            pos = len(toks) - len(answer) + 1  # the answer's second token
            b = dbg.what_if(pid, pos, tid=tid, token=toks[pos], max_tokens=6)
            assert b["original"] == b["recorded"] == answer[1:7] and b["reproduces_recording"]
            assert b["files"]["base"]["len"] == 173 + pos, "the prefix: the system prompt, then the thread's own"
    finally:
        engine.kv_remove(PATH)


def test_what_if_on_a_beam_reproduces_its_pick_from_the_beams_history(dbg, engine):
    prompt = "The best way to learn a language is"
    pid = dbg.launch(beam_search, prompt, beam_width=2, max_tokens=4, record=True)["pid"]
    engine.runtime.processes[pid].result(timeout=600)
    rec = dbg.get_recording(pid)
    n_prompt = len(engine.tokenize(prompt))
    beams = [t for t in sorted({k[0] for k in rec.order}) if t != 1 and rec.preds(t)]
    last = beams[-1]  # a beam thread of the last step: the prompt and three picks behind it
    ctx, toks = thread_context(rec, last), thread_tokens(rec, last)
    assert len(ctx) == n_prompt - 1 + 3 and len(toks) == 2  # its pending token, then its pred's pick
    w = what_if(engine, toks, 1, toks[1], max_tokens=1, context=ctx)
    assert w.original == w.recorded == toks[1:] and w.reproduces_recording()
