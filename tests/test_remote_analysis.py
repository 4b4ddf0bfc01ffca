"""The profiler and the what-if explorer through the debugger protocol, from a remote client: a
`RemoteDebugger` on a real loopback WebSocket (`DebugServer`) starts profiling a stopped
process, steps over and out, reads the per-line table as typed JSON, and runs a what-if from
the recorded run; bad input gets an error that names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("websockets")

from symphony_lab.debugger import Debugger, DebugServer, RemoteDebugger, RemoteError  # noqa: E402
from symphony_lab.debugger.profiling import profile_from_body  # noqa: E402
from symphony_lab.debugger.scope import UserScope  # noqa: E402

LIPS = Path(__file__).resolve().parent / "lips_for_tests.py"
PROMPT = "Here is a list of countries and their capitals. France: Paris. Germany: Berlin. The capital of Italy is"


def line_of(text: str) -> int:
    return next(i for i, s in enumerate(LIPS.read_text().splitlines(), 1) if text in s)


@pytest.fixture(scope="module")
def remote(engine):
    dbg = Debugger(engine)
    server = DebugServer(dbg, allow_launch=True)
    client = RemoteDebugger(server.url, timeout=120)
    yield dbg, client
    client.close()
    server.close()
    dbg.detach()


@pytest.fixture(scope="module")
def finished(remote):
    """A recorded greedy run, profiled from its entry, stepped over and out remotely, then run to the end."""
    dbg, rd = remote
    pid = rd.launch("tests.lips_for_tests:greedy", PROMPT, max_tokens=6, stop_on_entry=True, record=True)["pid"]
    assert rd.wait_stopped(pid, timeout=120)["reason"] == "entry"
    started = rd.profile_start(pid)
    assert started["pid"] == pid and started["profiling"] is True
    rd.step_over(pid, 1)  # from the entry: over the kv_create/tokenize calls to the first pred's return
    s = rd.wait_stopped(pid, timeout=120)
    assert s["call"] == "pred" and s["line"] == line_of("t = sym.pred(kv, toks).argmax()")
    rd.step_out(pid, 1)  # out of greedy: it returns, so the process ends
    end = rd.wait_stopped(pid, timeout=120)
    assert end.get("exited") is True, end
    result = rd.wait_process(pid, timeout=120)["result"]
    return pid, result


def test_profile_of_a_remote_process_is_typed_json(remote, finished):
    _, rd = remote
    pid, result = finished
    body = rd.profile(pid)
    assert body["done"] is True and body["profiling"] is False  # final: the collector detached itself
    (th,) = body["threads"]
    assert (th["pid"], th["tid"]) == (pid, 1) and th["preds"] == 6 and th["forward"] > 0
    assert abs(th["total"] - th["wall"]) <= 0.05 * th["wall"]  # the buckets add up to the wall time
    pred = line_of("t = sym.pred(kv, toks).argmax()")
    row = next(r for r in body["lines"] if r["file"].endswith("lips_for_tests.py") and r["line"] == pred)
    assert row["preds"] == 6 and row["forward"] > 0
    assert body["lines_total"] >= len(body["lines"]) >= 1 and body["stacks"]
    prof = profile_from_body(body)  # the client renders it with the in-process API's own views
    assert f"lips_for_tests.py:{pred}" in prof.table() and "greedy" in prof.flame()
    assert len(rd.profile(pid, top=1)["lines"]) == 1
    assert rd.profile_start(pid)["profiling"] is False  # its profile is final: starting again changes nothing
    last = rd.profile_stop(pid)
    assert last["threads"] == body["threads"]
    with pytest.raises(RemoteError, match=f"process {pid} is not being profiled: send profile_start"):
        rd.profile(pid)
    with pytest.raises(RemoteError, match=f"process {pid} has ended: profiling covers what runs after"):
        rd.profile_start(pid)
    assert len(result) == 6


def test_profile_bad_input_names_the_problem(remote):
    _, rd = remote
    with pytest.raises(RemoteError, match="no process 987654"):
        rd.profile_start(987654)
    with pytest.raises(RemoteError, match="no process 987654"):
        rd.profile(987654)
    with pytest.raises(RemoteError, match="profile_start: pid: Input should be a valid integer"):  # the schema check
        rd.request("profile_start", pid="one")
    with pytest.raises(RemoteError, match="interval must be between"):
        rd.profile_start(None, interval=0)
    with pytest.raises(RemoteError, match="unknown argument"):
        rd.request("profile", pid=None, bogus=1)


def test_what_if_from_the_recorded_run(remote, finished):
    dbg, rd = remote
    pid, result = finished
    n_prompt = len(dbg.engine.tokenize(PROMPT))
    pos = n_prompt + 1  # the second generated token
    same = rd.what_if(pid, pos, token=result[1], max_tokens=4)
    assert same["original"] == same["alternative"] == result[1:5] and same["diverge_at"] is None
    assert same["reproduces_recording"] and same["recorded"] == result[1:5]
    alt = dbg.engine.tokenize(" Rome")[0]
    alt = alt if alt != result[1] else dbg.engine.tokenize(" Milan")[0]
    w = rd.what_if(pid, pos, token=alt, max_tokens=4)
    assert w["alternative"][0] == alt == w["token"] and w["original"] == result[1:5] and w["diverge_at"] == 0
    assert w["original_token"] == result[1] and w["token_texts"]["alternative"][0] == dbg.tokenizer.token_text(alt)
    assert w["files"]["original"]["parent"] == w["files"]["base"]["fid"] == w["files"]["alternative"]["parent"]
    assert len(w["shared_pages"]) >= pos // dbg.engine.kvfs.pool.page_size >= 1  # both forks held the prefix's pages
    by_text = rd.what_if(pid, pos, text=" Rome", max_tokens=2)
    assert by_text["alternative"][0] == dbg.engine.tokenize(" Rome")[0]
    sampled = rd.what_if(pid, pos, sampler={"temperature": 1.5, "seed": 3}, max_tokens=4)
    assert sampled["alternative"][0] == result[1] and sampled["sampler"] == {"temperature": 1.5, "seed": 3}


def test_what_if_runs_past_a_breakpoint_meant_for_the_users_programs(remote, finished):
    """A `pred` breakpoint everywhere would catch the what-if's own LIP; the command resumes it."""
    _, rd = remote
    pid, result = finished
    bp = rd.set_breakpoint("pred")
    try:
        w = rd.what_if(pid, 12, token=result[0], max_tokens=2, timeout=60)
        assert len(w["original"]) == 2
    finally:
        rd.remove_breakpoint(bp["id"])


def test_what_if_bad_input_names_the_problem(remote, finished):
    dbg, rd = remote
    pid, result = finished
    vocab = dbg.tokenizer.vocab_size
    with pytest.raises(RemoteError, match="no process 987654"):
        rd.what_if(987654, 3, token=1)
    with pytest.raises(RemoteError, match=r"position must be in \[1, \d+\]"):
        rd.what_if(pid, 10_000, token=1)
    with pytest.raises(RemoteError, match=f"token id {vocab + 5} is outside the vocabulary \\[0, {vocab}\\)"):
        rd.what_if(pid, 3, token=vocab + 5)
    with pytest.raises(RemoteError, match="thread 4 of process .* made no pred"):
        rd.what_if(pid, 3, tid=4, token=1)
    with pytest.raises(RemoteError, match="one token"):
        rd.what_if(pid, 3, text=" hello world again")
    with pytest.raises(RemoteError, match="not both"):
        rd.what_if(pid, 3, token=1, text="x")
    with pytest.raises(RemoteError, match="needs a token, a text or a sampler"):
        rd.what_if(pid, 3)
    with pytest.raises(RemoteError, match=r"sampler: unknown field\(s\) \['temp'\]"):
        rd.what_if(pid, 3, sampler={"temp": 1})
    with pytest.raises(RemoteError, match="sampler top_p must be in"):
        rd.what_if(pid, 3, sampler={"top_p": 2.0})
    with pytest.raises(RemoteError, match=r"max_tokens must be in \[1, 256\]"):
        rd.what_if(pid, 3, token=1, max_tokens=0)
    unrecorded = rd.launch("tests.lips_for_tests:greedy", "Hi", max_tokens=1, record=False)["pid"]
    rd.wait_process(unrecorded, timeout=120)
    with pytest.raises(RemoteError, match=f"process {unrecorded} was not recorded"):
        rd.what_if(unrecorded, 1, token=1)


def test_a_scoped_user_must_name_their_own_process(remote, finished):
    dbg, _ = remote
    pid, _ = finished
    scope = UserScope("mallory")
    for command, args in (
        ("profile", {}),
        ("profile_start", {"pid": pid}),
        ("what_if", {"pid": pid, "position": 3, "token": 1}),
    ):
        resp = scope.handle(dbg, {"type": "request", "seq": 1, "command": command, "arguments": args})
        assert not resp["success"] and resp["error"] == "ScopeError", resp
    assert "needs a pid" in scope.handle(dbg, {"command": "profile", "arguments": {}})["message"]
