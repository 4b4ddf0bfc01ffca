"""`symphony serve` end to end: a real server process on loopback, real clients.

One server for the module (users alice, bob, carol with a process quota, dave with page and
token-rate quotas). What each test shows is in its docstring.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.server_harness import LIPS, ROOT, Server, symphony_cmd

USERS = [
    {"name": "alice", "token": "tok-alice"},
    {"name": "bob", "token": "tok-bob"},
    {"name": "carol", "token": "tok-carol", "max_processes": 1},
    {"name": "dave", "token": "tok-dave", "tokens_per_s": 4, "max_pages": 4},
    {"name": "erin", "token": "tok-erin", "trusted": True},
]
TOKENS = {u["name"]: u["token"] for u in USERS}
SOURCE = open(LIPS).read()
PREFIX_EXAMPLE = os.path.join(ROOT, "examples", "lips", "prefix_parallel.py")


@pytest.fixture(scope="module")
def server():
    s = Server(USERS, ["--max-workers", "16", "--cpu-seconds", "30", "--memory-mb", "512"])
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc}\n{s.log()[-3000:]}"


def client(server, user="alice"):
    from symphony_core.client import Client

    return Client(server.url, token=TOKENS[user])


def http(server, user: str | None = "alice") -> httpx.Client:
    headers = {"Authorization": f"Bearer {TOKENS[user]}"} if user else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=120)


def run_lip(server, entry, *args, user="alice", limits=None, **kwargs):
    return client(server, user).launch(None, *args, source=SOURCE, entry=entry, kwargs=kwargs, limits=limits)


def enforced(server, word: str) -> bool:
    return any(word in line for line in (server.health.get("sandbox") or {}).get("enforced", []))


# --- basics ---------------------------------------------------------------------------------------


def test_health_metrics_and_auth(server):
    """/health says what the sandbox enforces; /metrics is Prometheus text; tokens are required."""
    h = server.health
    assert h["status"] == "ok" and h["auth"] is True
    assert h["sandbox"]["enforced"], h
    assert run_lip(server, "greedy", "Hello", 2).result(120)
    text = httpx.get(server.url + "/metrics").text
    for name in (
        "symphony_batches_total",
        "symphony_batch_size_bucket",
        "symphony_queue_depth",
        "symphony_kv_pages_used",
        "symphony_tokens_per_second",
        "symphony_sandbox_workers",
    ):
        assert f"\n{name}" in text or text.startswith(name), name
    batches = [line for line in text.splitlines() if line.startswith("symphony_batches_total ")]
    assert float(batches[0].split()[1]) > 0
    with http(server, None) as c:
        r = c.get("/v1/processes")
        assert r.status_code == 401 and "token" in r.json()["error"]["message"]
    r = httpx.get(server.url + "/v1/processes", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    with http(server, "bob") as c:
        assert c.get("/v1/whoami").json()["user"] == "bob"


def test_openai_client_streams_chat_and_completions(server):
    """The official `openai` package: chat and text completions, streaming and not, agree."""
    import openai

    oc = openai.OpenAI(base_url=server.url + "/v1", api_key=TOKENS["alice"])
    model = oc.models.list().data[0].id
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    full = oc.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0)
    text = full.choices[0].message.content
    assert text and full.usage.completion_tokens > 0 and full.choices[0].finish_reason in ("stop", "length")
    stream = oc.chat.completions.create(
        model=model, messages=msgs, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                pieces.append(ch.delta.content)
            finish = ch.finish_reason or finish
    assert len(pieces) > 1, "a stream comes in pieces"
    assert "".join(pieces) == text and finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens
    comp = oc.completions.create(model=model, prompt="The capital of France is", max_tokens=6, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in oc.completions.create(
            model=model, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
        )
    )
    assert comp.choices[0].text and streamed == comp.choices[0].text
    with pytest.raises(openai.NotFoundError):
        oc.chat.completions.create(model="gpt-17", messages=msgs, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="n must be"):
        oc.chat.completions.create(model=model, messages=msgs, max_tokens=2, n=99)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope").models.list()


def test_prefix_example_remote_matches_embedded(server):
    """`symphony run` embedded, `symphony run --server` and `Client.run` give the same output."""
    assert os.path.exists(PREFIX_EXAMPLE)
    questions = ["When is the library open on Saturday?", "How much are late fees?"]
    argv = [f"{PREFIX_EXAMPLE}:prefix_parallel", "--kw", "max_tokens=6", "--kw", f"questions={json.dumps(questions)}"]
    env = {**os.environ, "PYTHONPATH": ROOT}
    emb = subprocess.run(
        symphony_cmd() + ["run", *argv], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert emb.returncode == 0, emb.stderr
    remote = subprocess.run(
        symphony_cmd() + ["run", *argv, "--server", server.url, "--token", TOKENS["alice"]],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert remote.returncode == 0, remote.stderr + server.log()[-2000:]
    assert remote.stdout == emb.stdout
    expected = json.loads(emb.stdout.strip().splitlines()[-1])
    assert expected["cached"] is False and len(expected["answers"]) == 2
    c = client(server, "alice")
    assert any(f["path"] == expected["path"] for f in c.kv_list())
    c.kv_remove(expected["path"])  # so the next run prefills again, like the embedded one
    got = c.run(f"{PREFIX_EXAMPLE}:prefix_parallel", max_tokens=6, questions=questions).result(300)
    assert got == expected
    again = c.run(f"{PREFIX_EXAMPLE}:prefix_parallel", max_tokens=6, questions=questions).result(300)
    assert again["cached"] is True and again["answers"] == expected["answers"]
    c.kv_remove(expected["path"])


def test_messages_both_ways_http_and_websocket(server):
    """WebSocket: send/recv both ways; HTTP: launch, poll messages, send, result, list."""
    p = run_lip(server, "echo", 2)
    p.send("hi")
    p.send({"n": 2})
    assert list(p.messages(timeout=120)) == [{"echo": "hi"}, {"echo": {"n": 2}}]
    assert p.result(60) == "done" and p.status == "finished"
    with http(server) as c:
        r = c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "args": ["The sky is", 3]})
        assert r.status_code == 201, r.text
        pid = r.json()["pid"]
        out = c.get(f"/v1/processes/{pid}/result", params={"wait": 120}).json()
        assert out["status"] == "finished", out
        msgs = c.get(f"/v1/processes/{pid}/messages", params={"after": 0}).json()
        assert "".join(msgs["messages"]) == out["result"] and msgs["done"]
        prog = c.post("/v1/programs", json={"source": SOURCE, "entry": "echo"}).json()["program"]
        pid = c.post("/v1/processes", json={"program": prog, "args": [1]}).json()["pid"]
        assert c.post(f"/v1/processes/{pid}/messages", json={"data": [1, 2]}).status_code == 200
        got = c.get(f"/v1/processes/{pid}/messages", params={"after": 0, "wait": 60}).json()
        assert got["messages"] == [{"echo": [1, 2]}]
        assert c.get(f"/v1/processes/{pid}/result", params={"wait": 60}).json()["result"] == "done"
        assert any(s["pid"] == pid for s in c.get("/v1/processes").json()["processes"])
    with http(server, "bob") as c:  # another user's process does not exist for bob
        assert c.get(f"/v1/processes/{pid}").status_code == 404


def test_trusted_user_may_run_in_process(server):
    """A trusted user may ask for no sandbox: the same program, the same answer, in the engine."""
    inproc = run_lip(server, "greedy", "The sky is", 3, user="erin")
    c = client(server, "erin")
    p = c.launch(None, "The sky is", 3, source=SOURCE, entry="greedy", sandbox=False)
    assert p.sandboxed is False and inproc.sandboxed is True
    assert p.result(120) == inproc.result(120)


def test_cancel(server):
    """Cancelling a running program ends it (and its worker) with status 'cancelled'."""
    from symphony_core.client import RemoteLIPError

    p = run_lip(server, "waits")
    time.sleep(0.5)
    p.cancel()
    with pytest.raises(RemoteLIPError, match="cancelled") as e:
        p.result(60)
    assert e.value.status == "cancelled"


# --- users ------------------------------------------------------------------------------------------


def test_users_are_isolated_and_share_through_shared(server):
    """B cannot open, fork, list or remove A's private file (403-style errors); both use /shared/."""
    a, b = client(server, "alice"), client(server, "bob")
    private, shared = "/users/alice/secret.kv", "/shared/common-notes.kv"
    listed = a.launch(None, private, shared, "Alice's private notes", source=SOURCE, entry="make_files").result(120)
    assert private in listed and shared in listed
    out = b.launch(None, private, "/users/alice/", shared, source=SOURCE, entry="trespass").result(120)
    for op in ("open_r", "open_w", "create_in_their_dir", "list", "remove"):
        assert out[op].startswith("KVPermissionError: permission denied"), (op, out[op])
        assert "alice" in out[op]
    assert out["listing_shows_it"] is False
    assert out["fork_forged"].startswith("KVError: no KV handle") and out["pred_forged"].startswith("KVError")
    assert out["shared_len"] > 0 and out["shared_pred_on_fork"].startswith("ok")
    assert "read-only" in out["shared_pred_readonly"]
    assert out["shared_remove"].startswith("KVPermissionError") and out["shared_listed"] is True
    with http(server, "bob") as c:
        r = c.get("/v1/kv", params={"prefix": "/users/alice/"})
        assert r.status_code == 403 and "private to user 'alice'" in r.json()["error"]["message"]
        r = c.delete("/v1/kv/users/alice/secret.kv")
        assert r.status_code == 403 and r.json()["error"]["type"] == "KVPermissionError"
        paths = [f["path"] for f in c.get("/v1/kv").json()["files"]]
        assert shared in paths and private not in paths
    from symphony_core.errors import KVPermissionError

    with pytest.raises(KVPermissionError):
        b.kv_remove(private)
    assert {f["path"] for f in a.kv_list()} >= {private, shared}
    a.kv_remove("secret.kv")  # relative to alice's own directory
    a.kv_remove(shared)
    assert not {f["path"] for f in a.kv_list()} & {private, shared}
    with http(server, "alice") as c:
        assert c.delete("/v1/kv/users/alice/secret.kv").status_code == 404


def test_quotas(server):
    """Per-user quotas: live processes (429), KV pages (the program's error), tokens/s (throttled)."""
    from symphony_core.client import RemoteLIPError, ServerError

    c = client(server, "carol")
    first = c.launch(None, source=SOURCE, entry="waits")
    with pytest.raises(ServerError, match="process quota of 1") as e:
        c.launch(None, source=SOURCE, entry="waits")
    assert e.value.status == 429
    first.send("go")
    assert first.result(60) == "released"
    d = client(server, "dave")
    with pytest.raises(RemoteLIPError, match="page quota of 4"):
        d.launch(None, "word " * 80, 1, source=SOURCE, entry="greedy").result(120)
    t = time.monotonic()
    d.launch(None, "Hi", 12, source=SOURCE, entry="greedy").result(120)
    assert time.monotonic() - t >= 1.9, "12 tokens at 4 tokens/s (burst 4) take 2 s at least"


# --- hostile programs ---------------------------------------------------------------------------------


def test_hostile_programs_fail_clearly_while_a_benign_one_finishes(server):
    """Infinite loop, memory hog, thread bombs, sockets, reading files, engine internals, garbage
    on its connection: each ends
    with a clear error; a benign program running alongside gives the right output; the server lives."""
    from symphony_core.client import RemoteLIPError

    reference = run_lip(server, "greedy", "Once upon a time", 6).result(120)
    victim = "/users/alice/victim.kv"
    run_lip(server, "make_files", victim, "/shared/victim-shared.kv", "alice's pages").result(120)
    benign = run_lip(server, "greedy", "Once upon a time", 6)
    hostile = {
        "spin": (run_lip(server, "spin", user="bob", limits={"cpu_seconds": 2}), ["CPU time limit of 2 s"]),
        "hog": (run_lip(server, "hog", user="bob", limits={"memory_mb": 256}), ["MemoryError", "256 MiB"]),
        "thread_bomb": (run_lip(server, "thread_bomb", user="bob"), ["can't start new thread", "threads"]),
        "spawn_bomb": (run_lip(server, "spawn_bomb", user="bob"), ["thread limit"]),
        "sockets": (run_lip(server, "sockets", server.port, user="bob"), ["network access is not allowed"]),
        "read_files": (run_lip(server, "read_files", server.users_file, user="bob"), ["cannot open", "scratch"]),
        "internals": (run_lip(server, "internals", victim, user="bob"), ["not available inside a sandboxed LIP"]),
        "garbage": (run_lip(server, "garbage", user="bob"), ["protocol violation"]),
    }
    for name, (p, words) in hostile.items():
        with pytest.raises(RemoteLIPError) as e:
            p.result(120)
        for w in words:
            assert w in str(e.value), (name, str(e.value))
    assert benign.result(120) == reference
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    # The same attacks with the Python-level guards out of the way: the kernel still says no.
    probe = run_lip(server, "bypass_probe", server.port, server.users_file, victim, user="bob").result(120)
    assert probe["open_victim"].startswith("KVPermissionError")
    if probe["kvfs_imported"] is True:  # the module may load, but no engine lives in the worker
        assert probe["kvfs_instances"] == 0 and probe["frozen_objects"] == 0, probe
    else:
        assert "not available inside a sandboxed LIP" in probe["kvfs_imported"], probe
    if sys.platform == "linux" and os.geteuid() == 0:  # what CI runs as: every layer must be on
        for layer in ("seccomp", "filesystem: private root", "uid:"):
            assert enforced(server, layer), (layer, server.health.get("sandbox"))
    if enforced(server, "seccomp"):
        assert "Operation not permitted" in probe["ctypes_socket"], probe
        assert "Operation not permitted" in probe["ctypes_fork"], probe
    if enforced(server, "filesystem: private root"):
        assert "errno" in probe["ctypes_open_users_file"] and "errno" in probe["ctypes_open_etc_passwd"], probe
        assert "etc" not in probe["root_listing"] and "root" not in probe["root_listing"] or probe["uid"] != 0
        assert probe["write_outside_scratch"].startswith(("PermissionError", "OSError")), probe
        assert probe["write_scratch"].startswith("ok")
        assert probe["procs"] == ["1"], probe  # its own pid namespace
    if enforced(server, "uid:"):
        assert probe["uid"] != 0
    assert run_lip(server, "greedy", "Once upon a time", 6).result(120) == reference
    client(server, "alice").kv_remove(victim)
    client(server, "alice").kv_remove("/shared/victim-shared.kv")


# --- malformed requests ------------------------------------------------------------------------------


def test_malformed_requests_get_clear_4xx(server):
    """Bad JSON, unknown fields, wrong types, huge payloads, bad ids: 4xx naming what was wrong."""
    with http(server) as c:

        def err(r, status, *words):
            assert r.status_code == status, (r.status_code, r.text)
            msg = r.json()["error"]["message"]
            for w in words:
                assert w in msg, (w, msg)

        err(
            c.post("/v1/processes", content=b"{not json", headers={"content-type": "application/json"}),
            400,
            "not valid JSON",
        )
        err(c.post("/v1/processes", content=b""), 400, "empty")
        err(c.post("/v1/processes", json=[1, 2]), 422, "must be a JSON object")
        err(
            c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "bogus": 1}),
            422,
            "unknown field",
            "bogus",
        )
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "args": "x"}), 422, "'args'", "an array")
        err(c.post("/v1/processes", json={"source": 5, "entry": "greedy"}), 422, "'source'", "a string")
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "priority": True}), 422, "'priority'")
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "not an identifier"}), 422, "entry")
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "limits": {"cpu": 1}}), 422, "cpu")
        err(
            c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "limits": {"wall_time": -1}}),
            422,
            "wall_time",
        )
        err(c.post("/v1/processes", json={"entry": "greedy"}), 422, "source")
        err(c.post("/v1/processes", json={"program": "nope"}), 404, "no program")
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "sandbox": False}), 403, "sandbox")
        err(
            c.post("/v1/processes", content=b"x" * (2 << 20), headers={"content-type": "application/json"}),
            413,
            "over the limit",
        )
        err(c.post("/v1/programs", json={"source": "#" * (600 << 10)}), 413, "program source")
        err(c.post("/v1/processes", content=b"{}", headers={"content-type": "image/png"}), 415, "application/json")
        err(c.post("/v1/processes", content=b"{}", headers={"content-type": "text/plain"}), 415, "application/json")
        err(c.get("/v1/processes/abc"), 422, "integer")
        err(c.get("/v1/processes/999999"), 404, "no process")
        pid = c.post("/v1/processes", json={"source": SOURCE, "entry": "greedy", "args": ["Hi", 1]}).json()["pid"]
        err(c.get(f"/v1/processes/{pid}/messages", params={"after": "x"}), 422, "after")
        err(c.get(f"/v1/processes/{pid}/result", params={"wait": "forever"}), 422, "wait")
        err(c.get(f"/v1/processes/{pid}/result", params={"wait": 1e9}), 422, "wait")
        err(c.post(f"/v1/processes/{pid}/messages", json={"date": 1}), 422, "date")
        err(c.get("/v1/nope"), 404, "no route")
        err(c.post("/v1/chat/completions", json={"model": "smollm2", "messages": "hi"}), 422, "'messages'")
        err(
            c.post("/v1/chat/completions", json={"model": "smollm2", "messages": [{"role": "x", "content": "a"}]}),
            400,
            "role",
        )
        err(
            c.post("/v1/chat/completions", json={"model": "smollm2", "messages": [], "temperature": "hot"}),
            422,
            "temperature",
        )
        err(c.post("/v1/completions", json={"model": "smollm2", "prompt": "a", "max_tokens": 0}), 400, "max_tokens")
        err(c.post("/v1/completions", json={"model": "smollm2", "prompt": "a", "best_of": 3}), 400, "best_of")
    # a program that cannot run is refused at submission (400), over HTTP and the WebSocket alike
    from symphony_core.client import ServerError

    with http(server) as c:
        err(c.post("/v1/processes", json={"source": "def f(sym:\n", "entry": "f"}), 400, "syntax error at line 1")
        err(c.post("/v1/processes", json={"source": SOURCE, "entry": "nope"}), 400, "no top-level function 'nope'")
        err(c.post("/v1/programs", json={"source": "def f(sym:\n"}), 400, "syntax error")
    with pytest.raises(ServerError, match="syntax error") as e:
        client(server).launch(None, source="def f(sym:\n", entry="f").result(60)
    assert e.value.status == 400
    with pytest.raises(ServerError, match="defines no top-level function 'nope'"):
        client(server).launch(None, source=SOURCE, entry="nope").result(60)


def test_websocket_protocol_errors(server):
    """The WebSocket API refuses bad tokens and bad messages with an error message and a 44xx close."""
    ws_url = server.url.replace("http", "ws") + "/v1/ws"
    hdr = {"Authorization": f"Bearer {TOKENS['alice']}"}

    def first_reply(payload, headers=hdr):
        with connect(ws_url, additional_headers=headers) as ws:
            try:
                ws.send(payload)
                reply = json.loads(ws.recv(timeout=30))
            except ConnectionClosed as e:  # the server may close (with its reason) before we read the error
                assert e.rcvd is not None, e
                return {"type": "error", "error": {"code": e.rcvd.code - 4000, "message": e.rcvd.reason}}, e.rcvd.code
            try:
                ws.recv(timeout=5)
            except Exception:
                pass
            return reply, ws.close_code

    reply, code = first_reply("{nope")
    assert reply["type"] == "error" and "not valid JSON" in reply["error"]["message"] and code == 4400
    reply, code = first_reply(json.dumps({"op": "fly"}))
    assert "op must be 'run' or 'attach'" in reply["error"]["message"]
    reply, _ = first_reply(json.dumps({"op": "run", "source": SOURCE, "entry": "greedy", "color": "red"}))
    assert "unknown field" in reply["error"]["message"] and "color" in reply["error"]["message"]
    reply, _ = first_reply(json.dumps({"op": "run", "source": SOURCE, "entry": "greedy", "args": {}}))
    assert "'args' must be an array" in reply["error"]["message"]
    reply, code = first_reply(json.dumps({"op": "run"}), headers={"Authorization": "Bearer bad"})
    assert reply["error"]["code"] == 401 and code == 4401
    reply, _ = first_reply("x" * (3 << 19))  # 1.5 MiB: over --max-body (1 MiB)
    assert reply["error"]["code"] == 413 and "over the limit" in reply["error"]["message"]
    with connect(ws_url, additional_headers=hdr, max_size=None) as ws:  # 3 MiB: refused by the server outright
        ws.send("x" * (3 << 20))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
        assert ws.close_code == 1009
    # a bad message mid-run is answered, and the run goes on
    with connect(ws_url, additional_headers=hdr) as ws:
        ws.send(json.dumps({"op": "run", "source": SOURCE, "entry": "echo", "args": [1]}))
        assert json.loads(ws.recv(timeout=60))["type"] == "started"
        ws.send(json.dumps({"op": "jump"}))
        assert "op must be 'send' or 'cancel'" in json.loads(ws.recv(timeout=30))["error"]["message"]
        ws.send(json.dumps({"op": "send", "data": "ok"}))
        kinds = []
        while True:
            m = json.loads(ws.recv(timeout=60))
            kinds.append(m["type"])
            if m["type"] == "result":
                assert m["result"] == "done"
                break
        assert kinds == ["message", "result"]
