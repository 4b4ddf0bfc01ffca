"""The debugger attached to a real `symphony serve --plugin debugger` process: authentication,
stepping a sandboxed program started through the server's own launch path, per-user scoping
(one user can neither see nor drive another's processes, files or engine-wide controls), and the
TUI driving a session on that server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import httpx
import pytest

from tests.server_harness import ROOT, Server, symphony_cmd

pytest.importorskip("websockets")

from symphony_lab.debugger import RemoteDebugger, RemoteError  # noqa: E402

LIP_FILE = os.path.join(ROOT, "tests", "lips_for_tests.py")
USERS = [
    {"name": "alice", "token": "tok-alice"},
    {"name": "bob", "token": "tok-bob"},
    {"name": "root", "token": "tok-root", "trusted": True},
]


@pytest.fixture(scope="module")
def server():
    s = Server(USERS, extra=["--plugin", "debugger"])
    yield s
    assert s.stop() == 0, s.log()


def ws(server, token: str | None) -> RemoteDebugger:
    url = server.url.replace("http://", "ws://") + "/v1/debug"
    return RemoteDebugger(url, token=token, timeout=120)


def source() -> str:
    with open(LIP_FILE) as f:
        return f.read()


def test_unknown_plugin_is_a_clear_error_before_the_model_loads():
    r = subprocess.run(
        symphony_cmd() + ["serve", "--plugin", "no-such-plugin", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 2
    assert "no server plugin 'no-such-plugin'" in r.stderr and "debugger" in r.stderr  # lists what is installed


def test_the_banner_names_the_plugin_and_tokens_are_required(server):
    assert "plugin debugger at /v1/debug" in server.log()
    for token in (None, "wrong"):
        with pytest.raises(Exception) as e:
            ws(server, token)
        assert "4401" in str(e.value) or "rejected" in str(e.value).lower() or "closed" in str(e.value).lower()


def test_step_a_sandboxed_program_and_keep_users_apart(server):
    alice, bob, root = ws(server, "tok-alice"), ws(server, "tok-bob"), ws(server, "tok-root")
    try:
        q, _ = bob.event_queue(["stopped", "continued", "process_start", "process_exit"])
        r = alice.run_program(
            source(), "greedy", "The capital of France is", kwargs={"max_tokens": 6}, stop_on_entry=True, record=True
        )
        pid = r["pid"]
        assert r["sandboxed"] is True
        s = alice.wait_stopped(pid, timeout=120)
        assert s["reason"] == "entry" and (s["file"], s["line"]) == (
            "<lip greedy>",
            8,
        )  # the def line, not the server's
        chosen = []
        for i in range(1, 4):
            alice.step(pid, 1)
            s = alice.wait_stopped(pid, timeout=120)
            assert (s["where"], s["call"], s["preds"]) == ("after", "pred", i)
            top = s["result"]["topk"]
            assert all(a["p"] >= b["p"] for a, b in zip(top, top[1:]))
            chosen.append(s["result"]["chosen"]["token"])
        assert s["file"] == "<lip greedy>" and s["line"] is not None  # the program's own line, from the sandbox
        alt = s["result"]["topk"][1]["token"]
        assert alice.override(pid, 1, token=alt)["applied"]

        # bob sees none of it and can touch none of it
        assert pid not in [p["pid"] for p in bob.threads()["processes"]]
        assert bob.stops()["stops"] == []
        for call in (
            lambda: bob.step(pid, 1),
            lambda: bob.continue_(pid),
            lambda: bob.stack(pid, 1),
            lambda: bob.dist(pid, 1),
            lambda: bob.override(pid, 1, token=alt),
            lambda: bob.restart(pid),
            lambda: bob.wait_stopped(pid, timeout=1),
        ):
            with pytest.raises(RemoteError) as e:
                call()
            assert e.value.error == "ScopeError" and f"process {pid} is not one of 'bob'" in str(e.value)
        alice_file = alice.kv(pid=pid, tid=1)["file"]
        with pytest.raises(RemoteError, match="not open in any of 'bob'"):
            bob.kv(fid=alice_file)
        assert alice_file not in [f["file"] for f in bob.kv_tree()["files"]]
        assert alice_file in [f["file"] for f in alice.kv_tree()["files"]]
        for call, msg in (
            (lambda: bob.scheduler_step_mode(True), "whole engine"),
            (lambda: bob.set_stop_on_entry(True), "whole engine"),
            (lambda: bob.set_breakpoint("pred"), "give pid"),
            (lambda: bob.continue_(), "needs a pid"),
            (lambda: bob.pause(), "needs a pid"),
            (lambda: bob.trace(), "whole engine"),
            (lambda: bob.launch("os:system", "true"), "whole engine"),
        ):
            with pytest.raises(RemoteError, match=msg):
                call()
        # the timeline keeps every batch's size but names only bob's own processes
        tl = bob.timeline()
        members = [m for b in tl["batches"] for m in b["members"]]
        assert members and all(m["pid"] is None and m["user"] is None for m in members)
        assert any(m["pid"] == pid for b in alice.timeline()["batches"] for m in b["members"])

        # the trusted user sees every process
        assert pid in [p["pid"] for p in root.threads()["processes"]]

        alice.continue_(pid)
        res = alice.wait_process(pid, timeout=120)
        assert res["status"] == "finished"
        assert res["result"][:3] == chosen[:2] + [alt]  # the override reached the sandboxed program
        r = httpx.get(f"{server.url}/v1/processes/{pid}", headers={"Authorization": "Bearer tok-alice"}, timeout=30)
        assert r.status_code == 200 and r.json()["status"] == "finished"  # the server's own API knows it

        time.sleep(0.5)
        seen = []
        while not q.empty():
            seen.append(q.get_nowait())
        assert not [m for m in seen if (m["body"].get("pid") == pid)], seen  # no events about alice's process
    finally:
        for c in (alice, bob, root):
            c.close()


def test_run_program_goes_through_the_servers_checks(server):
    bob = ws(server, "tok-bob")
    try:
        with pytest.raises(RemoteError, match="may not run programs outside the sandbox"):
            bob.run_program(source(), "greedy", "hi", sandbox=False)
        with pytest.raises(RemoteError, match="entry"):
            bob.run_program(source(), "not an identifier")
        with pytest.raises(RemoteError, match="unknown argument"):
            bob.request("run_program", source="x", entry="f", bogus=1)
    finally:
        bob.close()


def test_tui_session_against_symphony_serve(server):
    """The TUI, started as `symphony-lab tui --server URL --token T FILE:FUNC`, on the real server:
    stop on entry, step three preds, override a token, continue to the end."""
    pytest.importorskip("textual")
    from symphony_lab.cli import build_parser, make_session
    from symphony_lab.tui import SymphonyLab
    from tests.test_tui import remote_session_step_override_continue

    ns = build_parser().parse_args(
        [
            "tui",
            "--server",
            server.url,
            "--token",
            "tok-alice",
            f"{LIP_FILE}:greedy",
            "The capital of France is",
            "max_tokens=6",
        ]
    )
    session = make_session(ns)
    try:
        screen = asyncio.run(remote_session_step_override_continue(SymphonyLab(session), session, timeout=120))
        assert "def greedy" in screen  # the program pane shows the uploaded source
    finally:
        session.close()


def test_a_failing_program_brings_its_traceback_over_the_protocol(server):
    alice = ws(server, "tok-alice")
    try:
        pid = alice.run_program(source(), "raises")["pid"]
        res = alice.wait_process(pid, timeout=120)
        assert res["status"] == "failed"
        view = next(p for p in alice.threads(include_done=True)["processes"] if p["pid"] == pid)
        assert "Traceback" in view["traceback"] and "<lip raises>" in view["traceback"], view["traceback"]
        assert "ValueError" in view["traceback"]
    finally:
        alice.close()


def test_profile_and_what_if_of_a_sandboxed_program(server):
    """The analysis commands on the server, as a scoped user: profile a sandboxed program from its
    entry, then a what-if from its recorded run; another user may touch neither."""
    alice, bob = ws(server, "tok-alice"), ws(server, "tok-bob")
    try:
        pid = alice.run_program(
            source(), "greedy", "The capital of France is", kwargs={"max_tokens": 5}, stop_on_entry=True, record=True
        )["pid"]
        alice.wait_stopped(pid, timeout=120)
        assert alice.profile_start(pid)["profiling"] is True
        with pytest.raises(RemoteError, match="not one of 'bob'"):
            bob.profile(pid)
        with pytest.raises(RemoteError, match="needs a pid"):
            alice.profile_start()
        alice.continue_(pid)
        result = alice.wait_process(pid, timeout=120)["result"]
        deadline = time.monotonic() + 30
        while not (body := alice.profile(pid))["done"]:
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
        (th,) = body["threads"]
        assert th["preds"] == 5 and abs(th["total"] - th["wall"]) <= 0.05 * th["wall"]
        assert any(r["preds"] == 5 and r["file"] == "<lip greedy>" for r in body["lines"]), body["lines"]
        pos = th["tokens"] - 4 + 1  # the prompt and four fed tokens: the second generated token
        with pytest.raises(RemoteError, match="not one of 'bob'"):
            bob.what_if(pid, pos, token=result[1])
        with pytest.raises(RemoteError, match="source .* needs an admin connection"):
            alice.what_if(pid, pos, token=1, source="/shared/x.kv")
        w = alice.what_if(pid, pos, token=result[1], max_tokens=3)
        assert w["original"] == result[1:4] == w["alternative"] and w["reproduces_recording"]
    finally:
        alice.close()
        bob.close()
