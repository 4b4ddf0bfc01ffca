"""Users isolated from each other (issue 53): one program must never fail, change or stall another's.

Each test is one attack from a hostile program with a benign neighbour beside it; the benign
program's *exact* output (logits or tokens, compared with the same call run alone) is checked
while the attack runs, and the attacker gets a clear error of its own. The tests share one real
`symphony serve` for the module (a few use the session engine); the in-process sampler and
failing-row attacks are in tests/test_hostile_samplers.py.
"""

from __future__ import annotations

import pytest

from symphony_core import SymphonyError
from tests.test_hostile_samplers import PROMPT, _generate

# --- on a real server: the attacker's program runs in the sandbox ------------------------------

SERVER_USERS = [{"name": "alice", "token": "tok-alice"}, {"name": "mallory", "token": "tok-mallory"}]
# The benign user's program, shared with tests/test_user_memory_budget.py.
GENERATE_SOURCE = """
PROMPT = [504, 3458, 282, 4649, 314, 2113, 30, 378, 1345]


def generate(sym, n: int):
    kv = sym.kv_create()
    out, toks = [], PROMPT
    for _ in range(n):
        toks = [int(sym.pred(kv, toks).argmax())]
        out.append(toks[0])
    return out
"""
SERVER_SOURCE = (
    """
from symphony_core import Sampler
from symphony_core.errors import KVError, PredError
"""
    + GENERATE_SOURCE
    + """


def bad_samplers(sym, rounds: int):
    errors = []
    for i in range(rounds):
        for kw in ({"top_k": 2**63}, {"seed": 2**64}, {"temperature": 1e400}, {"temperature": float("nan")}):
            kv = sym.kv_create()
            try:
                sym.pred(kv, PROMPT, sampler=Sampler(**kw))
                errors.append("no error")
            except PredError as e:
                errors.append(str(e))
            errors.append(f"length {len(kv.tokens)}")
            sym.kv_close(kv)
    return errors


def odd_text(sym):
    bad = "x" + chr(0xD800)  # a lone surrogate: no UTF-8 encoder can write it
    sym.send(bad)
    print(bad)
    return bad


def big_detokenize(sym):
    try:
        sym.detokenize([1] * 1_500_000)
        return "no error"
    except Exception as e:
        return type(e).__name__ + ": " + str(e)


def flood_ended_thread(sym, n: int):
    # raw requests for a thread of its own that has ended, never reading an answer
    from symphony_core.sandbox.protocol import send_frame

    h = sym.spawn(lambda s: None)
    h.join()
    for i in range(n):
        send_frame(sym._ch.sock, {"id": 10**9 + i, "t": h._wtid, "op": "tokenize", "a": {"text": "x" * 4000}})
    return "flood sent"


def many_shared_names(sym, n: int):
    made = 0
    try:
        sym.kv_create("/shared/" + "n" * 1_000_000)
        return "a 1 MB name was accepted"
    except KVError as e:
        first = str(e)
    for i in range(n):
        try:
            sym.kv_close(sym.kv_create(f"/shared/mallory-{i:05d}-" + "x" * 400))
            made += 1
        except KVError as e:
            return [first, made, str(e)]
    return [first, made, None]


def remove_shared_names(sym):
    for p in sym.kv_list("/shared/mallory-"):
        sym.kv_remove(p)
    while sym.kv_list("/shared/mallory-"):
        for p in sym.kv_list("/shared/mallory-"):
            sym.kv_remove(p)
    return "removed"


def my_listing(sym):
    sym.kv_close(sym.kv_create("mine.kv"))
    names = sym.kv_list()
    sym.kv_remove("mine.kv")
    return names


def clear_parent_death_signal(sym):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, 0: what would let it outlive its zygote
    err = ctypes.get_errno()
    sig = ctypes.c_int(-1)
    libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
    return [rc, err, sig.value]


def all_logits(sym, n: int):
    kv = sym.kv_create()
    try:
        d = sym.pred(kv, [(7 * i) % 1000 + 100 for i in range(n)], outputs="all")
        return list(d.logits.shape)
    except PredError as e:
        return "refused: " + str(e)


def many_small_items(sym, k: int):
    for i in range(k):
        sym.send([{"a": j} for j in range(40_000)])  # ~0.5 MB of JSON, ~8 MB of Python objects


def one_letter_prints(sym, k: int):
    for _ in range(k):
        print("x")
    return k


def chat_without_content(sym):
    try:
        sym.chat_template([{"role": "user"}])
        return "no error"
    except PredError as e:
        return "caught: " + str(e)
"""
)


@pytest.fixture(scope="module")
def server():
    from tests.server_harness import Server

    s = Server(SERVER_USERS, ["--max-workers", "8", "--keep-finished", "5"])
    yield s
    assert s.stop() == 0, s.log()[-3000:]


def client(server, user: str = "alice"):
    import httpx

    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer tok-{user}"}, timeout=180)


def start(c, entry: str, *args, **kw) -> int:
    r = c.post("/v1/processes", json={"source": SERVER_SOURCE, "entry": entry, "args": list(args), **kw})
    assert r.status_code == 201, r.text
    return r.json()["pid"]


def outcome(c, pid: int) -> dict:
    return c.get(f"/v1/processes/{pid}/result", params={"wait": 170}).json()


def test_benign_generation_exact_during_sampler_attack_on_the_server(server):
    """Sandboxed: mallory's bad samplers fail her own preds (a PredError each, nothing written),
    while alice's greedy generation, run at the same time, is token for token what it is alone."""
    with client(server) as alice, client(server, "mallory") as mallory:
        ref = outcome(alice, start(alice, "generate", 10))["result"]
        attack = [start(mallory, "bad_samplers", 4) for _ in range(2)]
        benign = outcome(alice, start(alice, "generate", 10))
        assert benign.get("result") == ref, benign
        for pid in attack:
            out = outcome(mallory, pid)
            errors = out.get("result")
            assert errors, out
            assert all(e == "length 0" or "sampler" in e for e in errors), errors


# --- every limit checked, every client mistake a 4xx in the JSON error format ------------------


def _error(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == status and err["message"], err
    return err["message"]


def test_limits_must_be_finite(server, engine):
    """`wall_time` NaN (which compared false to every clock: no limit at all), Infinity or <= 0
    is a 422 naming the field; in-process, `Limits` refuses the same values."""
    import json as _json

    from symphony_core.sched.process import Limits

    with client(server) as c:
        for bad in ("NaN", "Infinity", "-1", "0"):
            body = '{"source": "def f(sym):\\n    return 1\\n", "entry": "f", "limits": {"wall_time": ' + bad + "}}"
            r = c.post("/v1/processes", content=body, headers={"Content-Type": "application/json"})
            assert "limits.wall_time" in _error(r, 422), bad
        r = c.post("/v1/processes", content=_json.dumps({"source": "def f(sym):\n    return 1\n", "entry": "f"}))
        assert r.status_code == 201, r.text
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(SymphonyError, match="max_wall_time"):
            Limits(max_wall_time=bad)
    with pytest.raises(SymphonyError, match="max_tokens"):
        Limits(max_tokens=-5)


def test_deep_source_and_lone_surrogates_are_400_and_never_break_a_listing(server):
    """A program nested past the parser's stack is a 400; a lone surrogate in `source`, `name` or
    `entry` is a 400 naming the field; one in a program's result, message or print is returned
    (as JSON's escape) and the user's `GET /v1/processes` stays 200."""
    import json as _json

    with client(server) as c:
        for src in ("def f(sym):\n    return " + "-" * 200_000 + "1\n", "def f(sym):\n    return 1" + "+1" * 200_000):
            r = c.post("/v1/processes", json={"source": src, "entry": "f"})
            assert "nested too deeply" in _error(r, 400)
        ok = {"source": "def f(sym):\n    return 1\n", "entry": "f"}
        for field, value in (("source", ok["source"] + "#" + chr(0xDC80)), ("name", "n" + chr(0xD800))):
            body = _json.dumps({**ok, field: value})  # ensure_ascii: the surrogate travels as \\udXXX
            r = c.post("/v1/processes", content=body, headers={"Content-Type": "application/json"})
            assert "lone surrogate" in _error(r, 400) and field in r.json()["error"]["message"]
        pid = start(c, "odd_text")
        out = outcome(c, pid)
        assert out.get("result") == "x" + chr(0xD800), out
        r = c.get(f"/v1/processes/{pid}/messages")
        assert r.status_code == 200 and r.json()["messages"] == ["x" + chr(0xD800)]
        assert c.get("/v1/processes").status_code == 200
        assert c.get(f"/v1/processes/{pid}").status_code == 200


def test_short_body_times_out_with_a_json_408(server):
    """A body shorter than its Content-Length does not hold the connection for ever: 408, JSON."""
    import socket
    import time

    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        s.sendall(
            b"POST /v1/processes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-alice\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"source":'
        )
        t0 = time.monotonic()
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        waited = time.monotonic() - t0
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data[:300]
    assert b'"code":408' in body and b"did not arrive" in body, body
    assert waited < 30


def test_malformed_content_length_is_a_json_400(server):
    """A request uvicorn cannot parse (here `Content-Length: abc`) never reaches the app; it is
    still answered in the JSON error format (before: plain text)."""
    import json as _json
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/processes HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower(), data
    err = _json.loads(body)["error"]
    assert err["code"] == 400 and "malformed HTTP request" in err["message"], err


def test_oversized_calls_and_bad_chat_messages_raise_in_the_program(server):
    """`detokenize` of 1.5M ids and `chat_template` on a message without content raise inside the
    program, which goes on (before: the worker was ended for a protocol violation, or the
    program failed)."""
    with client(server) as c:
        out = outcome(c, start(c, "big_detokenize"))
        assert "too large" in out.get("result", ""), out
        out = outcome(c, start(c, "chat_without_content"))
        assert out.get("result", "").startswith("caught: chat template"), out


def test_message_loss_past_the_count_cap_is_reported(engine, monkeypatch):
    """Past the kept-message count cap, unread messages are no longer dropped in silence: the
    sender stops with LimitExceeded naming the cap, and a reader asking from a dropped index is
    told how many it lost."""
    from symphony_core.server import records

    monkeypatch.setattr(records, "MAX_KEPT_MESSAGES", 100)

    def chatty(sym):
        for i in range(1000):
            sym.send(i)
        sym.recv(30)  # still running when the record catches up

    proc = engine.run(chatty)
    rec = records.ProcessRecord(proc, "local", "program", False, None)
    rec.start()
    proc.wait(60)
    rec._thread.join(30)
    assert proc.status == "failed" and "at most 100" in str(proc.error), proc.error
    msgs, nxt = rec.messages_since(0)
    assert len(msgs) <= 100 and rec.dropped_before(0) == nxt - len(msgs)
    if rec.dropped_before(0):
        assert msgs[0] == rec.dropped_before(0)


# --- the sandbox's I/O never waits on one program -----------------------------------------------


def test_flooding_an_ended_thread_stalls_no_one(server):
    """A program floods requests for one of its own threads that has ended and never reads the
    answers. Before, the server's one sandbox I/O thread blocked writing those answers, and every
    other program failed ("no answer from the zygote") while /health said ok. Now the answers
    are written by the attacker's own twin, the flood ends its worker (too many outstanding
    requests), and alice's program, started during the flood, gives its exact output at once.
    `/health`, sampled every half second from the flood's start to its end, stays `ok` with the
    I/O thread never stalled (a stall it would report: tests/test_sandbox_io_stall.py)."""
    import threading
    import time

    with client(server) as alice, client(server, "mallory") as mallory:
        ref = outcome(alice, start(alice, "generate", 6))["result"]
        healths: list[dict] = []
        flooding = threading.Event()

        def watch():
            with client(server) as c:
                while not flooding.is_set():
                    healths.append(c.get("/health").json())
                    time.sleep(0.5)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            attacker = start(mallory, "flood_ended_thread", 200_000, limits={"wall_time": 40})
            time.sleep(3)
            t0 = time.monotonic()
            benign = outcome(alice, start(alice, "generate", 6))
            took = time.monotonic() - t0
            out = outcome(mallory, attacker)
        finally:
            flooding.set()
            watcher.join()
        assert benign.get("result") == ref, benign
        assert took < 20, took
        # the attacker is ended: by its bounded queue, or seen first as its worker's closed socket
        ended = ("too many outstanding requests", "sandbox worker unreachable")
        assert "error" in out and any(m in out["error"]["message"] for m in ended), out
        assert len(healths) >= 4, healths
        bad = [h for h in healths if h["status"] != "ok" or h["sandbox"]["io_stalled_s"] >= 5]
        assert not bad, bad
        print(
            f"/health sampled {len(healths)} times during the flood, max io_stalled_s "
            f"{max(h['sandbox']['io_stalled_s'] for h in healths)}"
        )


# --- /shared/ names: bounded in length and count, listings bounded -----------------------------


def test_shared_names_are_bounded_and_listings_stay_small(server):
    """A 1 MB name is refused; a user owns at most 1024 named files; another user's `kv_list`
    (sandboxed) and `GET /v1/kv` stay bounded (1,000 paths, the caller's own first) instead of
    ending the program or answering 10 MB."""
    with client(server) as alice, client(server, "mallory") as mallory:
        made = outcome(mallory, start(mallory, "many_shared_names", 1100))
        try:
            first, n, last = made["result"]
            assert "over the limit of 512 bytes" in first
            assert n == 1024 and "owns 1024 named KV files, the limit" in last, made
            names = outcome(alice, start(alice, "my_listing")).get("result")
            assert names and names[0] == "/users/alice/mine.kv" and len(names) == 1000, str(names)[:300]
            r = alice.get("/v1/kv")
            assert r.status_code == 200 and len(r.json()["files"]) == 1000 and len(r.content) < 1 << 20
        finally:
            assert outcome(mallory, start(mallory, "remove_shared_names")).get("result") == "removed"


# --- workers die with their zygote; their uids are this server's alone -------------------------


def test_a_worker_cannot_clear_its_parent_death_signal(server):
    """The tie that kills a worker with its monitor (and so with the zygote and the server) is a
    parent-death signal; seccomp now refuses to change it, so a program cannot outlive them and
    keep its uid for the next program given it."""
    import errno
    import signal

    with client(server, "mallory") as c:
        out = outcome(c, start(c, "clear_parent_death_signal"))
    rc, err, sig = out["result"]
    assert rc == -1 and err == errno.EPERM, out
    assert sig == signal.SIGKILL, out


def test_worker_uid_blocks_are_unique_per_server():
    """Each sandbox manager on a host (each server, each Ray replica) claims a block of worker uids
    no other live one holds; a released block is free again."""
    import os

    from symphony_core.sandbox.uid_block import BLOCK, UidBlock

    if os.geteuid() != 0:
        pytest.skip("per-worker uids are given only when the server runs as root")
    a, b = UidBlock(32), UidBlock(32)
    try:
        assert a.base != b.base and abs(a.base - b.base) >= BLOCK
        base = a.base
        a.release()
        c = UidBlock(32)
        assert c.base == base  # the lowest free block again
        c.release()
    finally:
        a.release()
        b.release()


# --- memory a user causes is bounded per call ----------------------------------------------------


def test_all_logits_of_a_long_prompt_are_refused_not_held(server):
    """`pred(outputs="all")` over 2,000 tokens asked the server for 393 MB of logits (held, then
    copied whole for the worker); a sandboxed pred may now ask for at most 64 MiB, and is told so
    before anything runs. 300 positions (59 MB) still come back, without the server's RSS
    growing by more than a copy of them."""
    with client(server, "mallory") as c:
        out = outcome(c, start(c, "all_logits", 2000))
        assert "refused: pred: 2000 output positions" in out.get("result", ""), out
        assert "at most 64 MiB" in out["result"]
        before = _rss_mb(server.proc.pid)
        out = outcome(c, start(c, "all_logits", 300))
        assert out.get("result") == [300, 49152], out
        assert _rss_mb(server.proc.pid) - before < 150


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


# --- fair share: a long prompt does not stall another user's decode -----------------------------


def _long_prompt(sym, n: int):
    kv = sym.kv_create()
    sym.pred(kv, [(11 * i) % 2000 + 100 for i in range(n)])
    return n


def test_long_prompt_shares_batches_with_other_users_decodes_in_small_chunks(engine):
    """While one user's 2,000-token prompt runs, every batch that also holds another user's
    decode step carries at most `shared_chunk` (64) tokens of the prompt (before: a whole
    512-token chunk, so each of the victim's steps waited for 512 tokens of someone else's
    prompt); the victim's tokens are exactly its solo run's, and the prompt still completes."""
    from symphony_core.sched.fair_chunks import SHARED_CHUNK

    batch = engine.runtime.batch
    assert batch.shared_chunk == SHARED_CHUNK == 64  # on by default
    ref = engine.launch(_generate, PROMPT, 12, user="victim").result(timeout=300)
    mark = batch.log.records[-1].bid if batch.log.records else 0
    big = engine.launch(_long_prompt, 2000, user="big")
    victim = engine.launch(_generate, PROMPT, 12, user="victim")
    assert victim.result(timeout=300) == ref
    assert big.result(timeout=300) == 2000
    shared = [r for r in batch.log.since(mark) if {m.user for m in r.members} >= {"big", "victim"}]
    assert shared, "the prompt and the decodes never shared a batch"
    for r in shared:
        big_tokens = sum(m.tokens for m in r.members if m.user == "big")
        assert big_tokens <= SHARED_CHUNK, r.to_dict()


# --- the shutdown drain answers everyone ---------------------------------------------------------


@pytest.mark.slow
def test_drain_answers_new_connections_503_and_websockets_with_the_result():
    """During the SIGTERM drain the server still accepts connections: a new program is a JSON 503
    (before: the connection was refused), and a WebSocket session whose program the drain cancels
    gets a `result` message with the error before the close (before: a bare 1012 close)."""
    import json as _json
    import signal
    import time

    import httpx
    from websockets.sync.client import connect

    from tests.server_harness import Server

    s = Server(SERVER_USERS, ["--max-workers", "4", "--drain", "3"], name="drain")
    try:
        ws = connect(s.url.replace("http", "ws") + "/v1/ws", additional_headers={"Authorization": "Bearer tok-alice"})
        ws.send(_json.dumps({"op": "run", "source": "def w(sym):\n    return sym.recv(120)\n", "entry": "w"}))
        assert _json.loads(ws.recv(60))["type"] == "started"
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        r = httpx.post(
            s.url + "/v1/processes",
            json={"source": "def f(sym):\n    return 1\n", "entry": "f"},
            headers={"Authorization": "Bearer tok-alice"},
            timeout=30,
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == 503, r.text
        assert "shutting down" in r.json()["error"]["message"]
        msgs = []
        try:
            while True:
                msgs.append(_json.loads(ws.recv(30)))
        except Exception:
            pass
        results = [m for m in msgs if m.get("type") == "result"]
        assert results and "error" in results[0] and "shutting down" in results[0]["error"]["message"], msgs
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


@pytest.mark.slow
def test_messages_and_prints_cost_the_server_what_the_bounds_say(server):
    """Four programs send unread messages up to the per-user bound (64 MiB of JSON) as lists of
    small dicts, four print one letter at a time: the server keeps messages as their JSON text
    and counts each print's entry, so its RSS grows by about the bounds, not by the Python size
    of what was sent (before: +1 GB); alice's program run meanwhile gives its exact tokens."""
    import threading
    import time

    with client(server) as alice, client(server, "mallory") as mallory:
        ref = outcome(alice, start(alice, "generate", 4))["result"]
        alice.get("/metrics")  # prune what earlier tests left
        time.sleep(6)
        alice.get("/metrics")
        base = _rss_mb(server.proc.pid)
        peak = [base]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak.append(_rss_mb(server.proc.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            pids = [start(mallory, "many_small_items", 40) for _ in range(4)]
            pids += [start(mallory, "one_letter_prints", 60_000) for _ in range(4)]
            assert outcome(alice, start(alice, "generate", 4)).get("result") == ref
            outs = [outcome(mallory, p) for p in pids]
        finally:
            stop.set()
            sampler.join()
        growth = max(peak) - base
    print(f"server RSS {base:.0f} MB, peak growth {growth:.0f} MB")
    assert all(o["status"] in ("failed", "finished") for o in outs), outs
    assert growth < 300, growth


@pytest.fixture
def soak_server():
    """A server of its own: the module's shared one carries the other attacks' records and arenas, whose
    reaping showed up as growth here (+38 MB a round when this ran after them in one CI run)."""
    from tests.server_harness import Server

    s = Server(SERVER_USERS, ["--max-workers", "8", "--keep-finished", "5"], name="soak")
    yield s
    assert s.stop() == 0, s.log()[-3000:]


@pytest.mark.slow
def test_short_soak_rss_is_flat(soak_server):
    """Twelve rounds of hostile programs (unread small-item messages, one-letter prints, bad
    samplers, oversized calls) beside alice's exact generation, each round's records reaped
    (--keep-finished 5): past the first two rounds the server's RSS has a least-squares slope under
    10 MB a round, and it ends within 100 MB of the first round. With glibc's default arenas (eight a
    core) the same server grew ~15 MB a round for 16 rounds, by +17 to +34 MB some rounds, and failed
    this in CI; with the two the server now asks for it grew +22 MB in all over 16 rounds, twice. The
    code before #53 grew +63 MB every round."""
    import time

    from bench.soak import rss_slope

    server = soak_server
    rss = []
    with client(server) as alice, client(server, "mallory") as mallory:
        ref = outcome(alice, start(alice, "generate", 4))["result"]
        for _ in range(12):
            pids = [start(mallory, "many_small_items", 10) for _ in range(2)]
            pids += [start(mallory, "one_letter_prints", 5000), start(mallory, "bad_samplers", 1)]
            pids.append(start(mallory, "big_detokenize"))
            assert outcome(alice, start(alice, "generate", 4)).get("result") == ref
            for p in pids:
                outcome(mallory, p)
            time.sleep(5.5)
            alice.get("/metrics")  # reaps the records past --keep-finished
            rss.append(_rss_mb(server.proc.pid))
    slope = rss_slope(rss[2:])
    print(f"RSS after each round (MB): {[round(x) for x in rss]}; slope {slope:+.1f} MB/round")
    assert slope < 10, rss
    assert rss[-1] - rss[0] < 100, rss
