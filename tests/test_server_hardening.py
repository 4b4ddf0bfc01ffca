"""The server's answers to floods and client mistakes (issue 19): message memory bounded per
process and per user and given back when processes are reaped, the OpenAI endpoints' 400/429,
bad token ids caught inside a program, the runtime forgetting reaped processes; a fault of the
server's own while it starts a program, reported rather than dropped; and a waiter on a process
the shutdown drain cancelled answered 503 however late it wakes.

One real server on loopback for the module, keeping finished processes only 2 s (the last three
tests use the engine in-process instead).
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.server_harness import Server

USERS = [
    {"name": "alice", "token": "tok-alice"},
    {"name": "quota", "token": "tok-quota", "max_pages": 1},
    {"name": "erin", "token": "tok-erin", "trusted": True},
]
SOURCE = """
def flood(sym, n: int, size: int):
    for i in range(n):
        sym.send("x" * size)
    return n


def deaf(sym):
    sym.recv(60)  # reads one message, then never again
    import time
    time.sleep(60)


def bad_ids(sym):
    from symphony_core.errors import PredError
    try:
        sym.detokenize([-5, 10**9])
    except PredError as e:
        return "caught: " + str(e)
    return "no error"
"""
MIB = 1 << 20


@pytest.fixture(scope="module")
def server():
    s = Server(USERS, ["--max-workers", "8", "--keep-finished", "2"])
    yield s
    assert s.stop() == 0, s.log()[-3000:]


def http(server, user="alice") -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer tok-{user}"}, timeout=120)


def run(c: httpx.Client, entry: str, **kw) -> int:
    r = c.post("/v1/processes", json={"source": SOURCE, "entry": entry, **kw})
    assert r.status_code == 201, r.text
    return r.json()["pid"]


def result(c: httpx.Client, pid: int) -> dict:
    return c.get(f"/v1/processes/{pid}/result", params={"wait": 120}).json()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_message_memory_is_bounded_and_given_back(server):
    """Programs flooding messages no one reads stop at the per-process / per-user bound with a
    clear error; posting to a program that never recv()s is refused (429) past its bound; the
    server's RSS stays bounded and comes back once the finished processes are reaped."""
    with http(server) as c:
        run(c, "flood", args=[2, 1000])  # warm up the paths measured below
        time.sleep(3)
        c.get("/metrics")
        base = rss_mb(server.proc.pid)
        # one message over 1 MiB: a clear limit error
        out = result(c, run(c, "flood", args=[1, 2 * MIB]))
        assert out.get("error", {}).get("type") == "LimitExceeded" and "at most 1.0 MiB" in out["error"]["message"], out
        # 6 programs x 40 x 512 KiB = 120 MiB sent, never read
        pids = [run(c, "flood", args=[40, MIB // 2]) for _ in range(6)]
        outs = [result(c, p) for p in pids]
        msgs = [o["error"]["message"] for o in outs if "error" in o]
        assert msgs and all("at most 16.0 MiB" in m or "at most 64.0 MiB" in m for m in msgs), outs
        peak = rss_mb(server.proc.pid)
        # posting to a program that never recv()s: refused past 16 MiB unread
        deaf = run(c, "deaf")
        codes = [
            c.post(f"/v1/processes/{deaf}/messages", json={"data": "y" * (MIB // 2)}).status_code for _ in range(40)
        ]
        assert codes.count(200) < 40 and codes[-1] == 429, codes
        r = c.post(f"/v1/processes/{deaf}/messages", json={"data": "y" * (MIB // 2)})
        assert r.status_code == 429 and "has not recv'd" in r.json()["error"]["message"]
        c.delete(f"/v1/processes/{deaf}")
        result(c, deaf)
        time.sleep(2.5)
        c.get("/metrics")  # prunes the records past --keep-finished
        time.sleep(0.5)
        after = rss_mb(server.proc.pid)
    print(f"server RSS: base {base:.0f} MB, after the flood {peak:.0f} MB, after reaping {after:.0f} MB")
    assert peak - base < 200, (base, peak)
    assert after - base < 60, (base, peak, after)


def test_openai_context_overflow_is_400_and_quota_429(server):
    """A prompt past the model's context is a 400 (context_length_exceeded), a page quota a 429 —
    with the OpenAI error body, and before any 200 when streaming."""
    long_prompt = "hello " * 9000
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="tok-alice", max_retries=0)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            r = c.completions.create(model="smollm2", prompt=long_prompt, max_tokens=2, stream=stream)
            list(r) if stream else None
        assert e.value.status_code == 400 and e.value.code == "context_length_exceeded", e.value
        assert "context" in e.value.message
    q = openai.OpenAI(base_url=server.url + "/v1", api_key="tok-quota", max_retries=0)
    for stream in (False, True):
        with pytest.raises(openai.RateLimitError) as e:
            r = q.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": "hi " * 40}], max_tokens=2, stream=stream
            )
            list(r) if stream else None
        assert e.value.status_code == 429 and "page quota" in e.value.message, e.value
    assert c.completions.create(model="smollm2", prompt="Hello", max_tokens=2).choices[0].text


def test_bad_token_ids_are_a_catchable_error_naming_them(server):
    """`sym.detokenize([-5, 10**9])` raises PredError naming the ids, sandboxed and in-process."""
    with http(server) as c:
        assert (
            result(c, run(c, "bad_ids")).get("result", "").startswith("caught: detokenize: token ids [-5, 1000000000]")
        )
    with http(server, "erin") as c:
        out = result(c, run(c, "bad_ids", sandbox=False))
        assert out.get("result", "").startswith("caught: detokenize: token ids [-5, 1000000000]"), out


def test_reaped_processes_leave_the_runtime_and_metrics(server):
    """Once a finished process's record is dropped (--keep-finished), the runtime's table and
    /metrics no longer count it."""
    with http(server) as c:
        pids = [run(c, "flood", args=[1, 10]) for _ in range(3)]
        for p in pids:
            assert result(c, p)["result"] == 1
        time.sleep(2.5)
        text = c.get("/metrics").text
        assert c.get(f"/v1/processes/{pids[0]}").status_code == 404
    finished = [line for line in text.splitlines() if line.startswith('symphony_processes{status="finished"}')]
    assert not finished or float(finished[0].split()[1]) == 0, finished


def test_runtime_table_drops_reaped_and_bounds_finished(engine, monkeypatch):
    """Runtime.reap forgets a finished process; past KEEP_FINISHED the oldest finished go."""
    from symphony_core.lip import runtime as rt_mod

    rt = engine.runtime
    p = engine.launch(lambda sym: 1)
    assert p.result(30) == 1 and p.pid in rt.processes
    rt.reap(p.pid)
    assert p.pid not in rt.processes
    monkeypatch.setattr(rt_mod, "KEEP_FINISHED", 2)
    ps = []
    for _ in range(4):
        ps.append(engine.launch(lambda sym: 2))
        ps[-1].result(30)
        time.sleep(0.05)  # the table is updated just after the result is set
    assert [q.pid in rt.processes for q in ps] == [False, False, True, True]


def test_a_server_fault_starting_a_program_is_a_typed_500_not_a_dropped_socket(engine, monkeypatch):
    """An unexpected exception while the WebSocket session starts a program (the server's own fault,
    as CPython 3.11's spurious AST SystemError once was) reaches the client as an error message with
    code 500 naming it, then a close frame (1011), rather than a connection cut without either."""
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from symphony_core.server import create_app, websocket
    from symphony_core.server.state import ServerConfig

    def broken(*args, **kwargs):
        raise RuntimeError("the launcher broke")

    monkeypatch.setattr(websocket, "launch_program", broken)
    app = create_app(engine, config=ServerConfig(sandbox=False))
    with TestClient(app) as tc, tc.websocket_connect("/v1/ws") as ws:
        ws.send_json({"op": "run", "source": SOURCE, "entry": "bad_ids"})
        msg = ws.receive_json()
        assert msg["type"] == "error", msg
        assert msg["error"] == {
            "type": "internal_error",
            "message": "internal error: RuntimeError: the launcher broke",
            "code": 500,
        }
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1011


def test_a_waiter_on_a_process_the_drain_cancelled_gets_503_even_once_it_has_ended(engine):
    """The drain's cancel wakes waiters; a waiter that runs only after the cancelled process has
    ended must still answer 503 'shutting down', as one that woke first does (a race CI once lost)."""
    import asyncio

    from starlette.testclient import TestClient

    from symphony_core.server import create_app
    from symphony_core.server.drain import drain
    from symphony_core.server.state import ServerConfig

    app = create_app(engine, config=ServerConfig(sandbox=False, drain_s=0.2))
    state = app.state.symphony
    with TestClient(app) as tc:
        r = tc.post("/v1/processes", json={"source": SOURCE, "entry": "deaf"})
        assert r.status_code == 201, r.text
        pid = r.json()["pid"]
        asyncio.run_coroutine_threadsafe(drain(state), state.loop).result(30)
        rec = state.registry.get(pid, "local")
        t0 = time.monotonic()
        while not rec.done and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        assert rec.done and rec.proc.status == "cancelled", rec.proc.status
        r = tc.get(f"/v1/processes/{pid}/result", params={"wait": 5})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert "shutting down" in r.json()["error"]["message"] and "did not finish" in r.json()["error"]["message"]


def test_a_page_quota_refusal_counts_the_pages_held_now(engine):
    """The page count a pred is checked against may be up to 50 ms old (every pred asks); a refusal counts again, so
    a program started just after another of the same user closed its files is not refused for the other's pages."""
    from symphony_core.sched.process import LimitExceeded
    from symphony_core.server.users import QuotaKeeper, User, Users

    keeper = QuotaKeeper(engine, Users({"alice": User("alice", token="t", max_pages=4)}))
    assert keeper.pages_held("alice") == 0
    keeper._pages_cache["alice"] = (time.monotonic(), 3)  # counted a moment ago, while a program held 3 pages
    keeper.before_pred("alice", 40)  # 3 pages + 1 fit the quota of 4 with none held now
    keeper._pages_cache["alice"] = (time.monotonic(), 3)
    with pytest.raises(LimitExceeded, match=r"page quota of 4 reached \(0 pages held, pred needs up to 6 more\)"):
        keeper.before_pred("alice", 80)
