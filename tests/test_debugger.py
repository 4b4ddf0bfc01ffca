"""Symphony Lab debugger (issue 6): stepping, overrides, breakpoints, non-stop, scheduler step
mode, record/replay, traces and the protocol — on the real model, through the kernel hook."""

from __future__ import annotations

import json
import time

import pytest

from examples.lips.streaming_completion import complete
from symphony_lab.debugger import (
    Debugger,
    DebuggerError,
    DebugServer,
    RemoteDebugger,
    connect,
    handle_command,
    validate_trace,
)
from tests.lips_for_tests import greedy, greedy_reference

COMPLETE = "examples.lips.streaming_completion:complete"


# --- LIPs used here ---------------------------------------------------------------------------------


def fanout(sym, prompts: list[str], n: int) -> list[list[int]]:
    """One worker thread per prompt (tids 2, 3, ...), each a greedy decode of n tokens."""
    hs = [sym.spawn(greedy, p, n) for p in prompts]
    return [h.join() for h in hs]


def forky(sym, prompt: str) -> list[int]:
    """Feed a prompt, fork the file, continue both branches one token."""
    kv = sym.kv_create()
    d = sym.pred(kv, sym.tokenize(prompt))
    kv2 = sym.kv_fork(kv)
    a = sym.pred(kv, [d.argmax()]).argmax()
    b = sym.pred(kv2, [d.topk(2)[1][0]]).argmax()
    sym.kv_close(kv2)
    sym.kv_close(kv)
    return [a, b]


def echo(sym):
    """Wait for a message, feed it, answer with its length in tokens."""
    m = sym.recv(timeout=60)
    kv = sym.kv_create()
    toks = sym.tokenize(m)
    sym.pred(kv, toks)
    sym.kv_close(kv)
    return [len(toks), m]


@pytest.fixture
def dbg(engine):
    d = Debugger(engine)
    yield d
    d.detach()
    assert engine.runtime.kernel.hook is None and engine.runtime.batch.gate is None
    assert d._on_start not in engine.runtime.on_process_start
    engine.kvfs.check()  # overrides, forks for verify_kv, cancelled processes: every page accounted for


class _Target:
    """How a stepping test reaches the debugger and launches the streaming completion example."""

    def __init__(self, client, launch, lip_file: str) -> None:
        self.client, self.launch, self.lip_file = client, launch, lip_file


@pytest.fixture(params=["inprocess", "websocket", "server"])
def target(request, dbg, engine):
    """The same debugger used directly; over the protocol's WebSocket server; and attached to a
    real `symphony serve --plugin debugger` process, the program started through the server's
    own launch path."""
    if request.param == "inprocess":
        yield _Target(
            dbg,
            lambda prompt, n: dbg.launch(COMPLETE, prompt, max_tokens=n, stop_on_entry=True)["pid"],
            "streaming_completion.py",
        )
        return
    if request.param == "websocket":
        server = DebugServer(dbg, allow_launch=True)
        remote = RemoteDebugger(server.url)
        yield _Target(
            remote,
            lambda prompt, n: remote.launch(COMPLETE, prompt, max_tokens=n, stop_on_entry=True)["pid"],
            "streaming_completion.py",
        )
        remote.close()
        server.close()
        return
    # a real `symphony serve --plugin debugger` process (no tokens: loopback, full access; programs
    # in-process so the stack's locals are there to inspect), the program sent as source
    from tests.server_harness import Server

    server = Server([], extra=["--plugin", "debugger", "--no-sandbox"])
    remote = connect(server.url.replace("http://", "ws://") + "/v1/debug", timeout=120)  # attach by URL
    assert isinstance(remote, RemoteDebugger)
    with open(complete.__code__.co_filename) as f:
        source = f.read()

    def launch(prompt: str, n: int) -> int:
        return remote.run_program(source, "complete", prompt, kwargs={"max_tokens": n}, stop_on_entry=True)["pid"]

    yield _Target(remote, launch, "<lip complete>")
    remote.close()
    assert server.stop() == 0, server.log()


def _drain(q) -> list[dict]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


# --- must show: step 5 preds, override at step 3, continue; KV == recompute ---------------------------


def test_step_override_continue_kv_consistent(target, dbg, engine):
    client = target.client
    word = " London"
    (wid,) = engine.tokenize(word)
    prompt = "The capital of France is"
    ptoks = engine.tokenize(prompt)
    q, unsub = client.event_queue(["stopped"])
    pid = target.launch(prompt, 12)
    s = client.wait_stopped(pid, timeout=60)
    assert s["reason"] == "entry" and s["where"] == "entry"

    steps = []
    for i in range(1, 6):
        client.step(pid, 1)
        s = client.wait_stopped(pid, timeout=60)
        assert (s["reason"], s["where"], s["call"], s["preds"]) == ("step", "after", "pred", i)
        assert s["file"].endswith(target.lip_file) and s["line"] is not None
        top = s["result"]["topk"]
        assert len(top) == 10 and all(a["p"] >= b["p"] for a, b in zip(top, top[1:]))
        assert s["result"]["chosen"]["token"] == top[0]["token"]  # greedy: the argmax
        assert s["input"]["ids"] == (ptoks if i == 1 else [steps[-1]["result"]["chosen"]["token"]])
        if i == 3:
            assert top[0]["token"] != wid
            r = client.override(pid, 1, text=word)
            chosen = r["stop"]["result"]["chosen"]
            assert r["applied"] and {k: chosen[k] for k in ("token", "text", "by", "p_edited")} == {
                "token": wid,
                "text": word,
                "by": "override",
                "p_edited": 1.0,  # the LIP's Dist
            }
            assert 0 < chosen["p"] < top[0]["p"]  # the model's probability of the forced token
            s = r["stop"]
        steps.append(s)
    # the inspector at the 5th stop: stack with locals, input tokens, the KV file
    st = client.stack(pid, 1)
    gen = next(f for f in st["frames"] if f["function"] == "generate")
    assert gen["library"] and gen["locals"]["kv"]["type"] == "KV" and "out" in gen["locals"]
    assert any(f["function"] == "complete" and not f["library"] for f in st["frames"])
    kvv = client.kv(pid=pid, tid=1)
    assert kvv["length"] == len(ptoks) + 4 and kvv["pages"][0]["tokens"][len(ptoks) + 2] == wid

    client.set_breakpoint("kv_close", pid=pid)
    client.continue_(pid)
    s = client.wait_stopped(pid, timeout=60)
    assert s["call"] == "kv_close" and s["reason"] == "breakpoint"
    fid = s["kv_file"]
    v = client.verify_kv(fid)
    assert v["consistent"], v
    kv_tokens = [t for p in client.kv(fid=fid)["pages"] for t in p["tokens"]]
    if client is dbg:  # an independent recompute: a fork of the LIP's file vs a fresh file, via engine.pred
        proc = dbg.process(pid)
        h = next(h for h in proc.handles if h.file.fid == fid)
        toks = h.tokens
        fork, fresh = engine.kv_fork(h), engine.kv_create()
        try:
            a = engine.pred(fork, [toks[-1]]).logits
            b = engine.pred(fresh, toks + [toks[-1]]).logits
        finally:
            engine.kv_close(fork)
            engine.kv_close(fresh)
        assert (a - b).abs().max().item() < 1e-2 and a.argmax() == b.argmax()
    client.continue_(pid)
    res = client.wait_process(pid, timeout=60)
    assert res["status"] == "finished"
    out = res["result"]
    assert out["tokens"][2] == wid and word in out["text"]
    assert len(out["tokens"]) >= 5 and out["text"].split(word, 1)[1].strip()  # it went on from the override
    fed = out["tokens"][:-1] if out["stop_reason"] == "max_tokens" else out["tokens"]
    assert kv_tokens == ptoks + fed  # the KV (checked against a recompute above) holds the final tokens
    unsub()
    stops = [m for m in _drain(q) if m["body"]["pid"] == pid]
    assert [m["body"]["reason"] for m in stops] == ["entry"] + ["step"] * 5 + ["breakpoint"]
    json.dumps(stops)


# --- must show: conditional breakpoint --------------------------------------------------------------


def test_conditional_breakpoint_thread2_hit4(dbg, engine):
    prompts = ["Water boils at", "The sun is a", "Cats are"]
    q, unsub = dbg.event_queue(["stopped"])
    pid = dbg.launch(fanout, prompts, 6, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    bp = dbg.set_breakpoint("pred", pid=pid, tid=2, hit_count=4)
    other = dbg.launch(fanout, prompts, 6)["pid"]  # the same program: its thread 2 must not stop
    dbg.continue_(pid)
    s = dbg.wait_stopped(pid, timeout=60)
    assert (s["pid"], s["tid"], s["call"], s["where"], s["reason"]) == (pid, 2, "pred", "before", "breakpoint")
    assert s["breakpoints"] == [bp["id"]] and s["preds"] == 3  # three preds done: this is the fourth
    ref = greedy_reference(engine, prompts[0], 4)
    assert s["input"]["ids"] == [ref[2]]
    assert dbg.breakpoints()["breakpoints"][0]["hits"] == 4
    dbg.continue_(pid)
    res = dbg.wait_process(pid, timeout=60)
    assert res["status"] == "finished" and res["result"][0][:4] == ref
    assert dbg.wait_process(other, timeout=60)["status"] == "finished"
    unsub()
    stops = [(m["body"]["pid"], m["body"]["tid"], m["body"]["reason"]) for m in _drain(q)]
    assert stops == [(pid, 1, "entry"), (pid, 2, "breakpoint")]
    assert dbg.breakpoints()["breakpoints"][0]["hits"] == 6  # counted on, never stopped again


# --- must show: non-stop ----------------------------------------------------------------------------


def test_non_stop_others_finish_while_one_is_stopped(dbg, engine):
    pid = dbg.launch(greedy, "Once upon a time", 5, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    dbg.set_breakpoint("pred", pid=pid, hit_count=2)
    dbg.continue_(pid)
    s = dbg.wait_stopped(pid, timeout=60)
    assert s["reason"] == "breakpoint"
    log = engine.runtime.batch.log
    since = log.total_batches
    others = [dbg.launch(greedy, f"Fact {i}: the sky is", 4)["pid"] for i in range(8)]
    for o in others:
        assert dbg.wait_process(o, timeout=90)["status"] == "finished"
    assert [(x["pid"], x["tid"]) for x in dbg.stops()["stops"]] == [(pid, 1)]
    th = dbg.process(pid).threads[0]
    assert th.state == "stopped" and th.preds == 1
    batches = dbg.timeline(since=since)["batches"]
    assert batches, "others ran no batch"
    assert all(m["pid"] != pid for b in batches for m in b["members"])
    assert {m["pid"] for b in batches for m in b["members"]} == set(others)
    assert max(b["size"] for b in batches) > 1  # and they were batched together
    dbg.continue_(pid)
    res = dbg.wait_process(pid, timeout=60)
    assert res["result"] == greedy_reference(engine, "Once upon a time", 5)


# --- must show: scheduler step mode ------------------------------------------------------------------


def test_scheduler_step_mode_one_batch_per_command(dbg, engine):
    log = engine.runtime.batch.log
    q, unsub = dbg.event_queue(["batch_pending", "batch"])
    dbg.scheduler_step_mode(True)
    pids = [dbg.launch(greedy, p, 3)["pid"] for p in ["Red", "Green and", "Blue is a", "Yellow"]]
    fired, deadline = [], time.monotonic() + 120
    try:
        while not all(dbg.process(p).done for p in pids):
            assert time.monotonic() < deadline
            pend = dbg.wait_batch_pending(timeout=1.0)["pending"]
            if pend is None:
                continue
            n = log.total_batches
            assert pend["batches_so_far"] == n
            time.sleep(0.05)
            assert log.total_batches == n  # held at the gate until the command
            r = dbg.step_batch(timeout=30)
            rec = r["fired"]
            assert rec is not None and log.total_batches == n + 1 and rec["bid"] == n + 1
            key = lambda m: (m["pid"], m["tid"], m["file"], m["tokens"])  # noqa: E731
            assert sorted(map(key, r["shown"]["members"])) == sorted(map(key, rec["members"]))
            fired.append(rec)
    finally:
        dbg.scheduler_step_mode(False)
    unsub()
    assert engine.runtime.batch.gate is None
    done_preds = sum(1 for b in fired for m in b["members"] if m["chunk"][1] == m["chunk"][2])
    assert done_preds == 4 * 3
    assert any(b["size"] > 1 for b in fired)
    evs = _drain(q)
    shown = [m["body"]["gate_id"] for m in evs if m["event"] == "batch_pending"]
    assert len(shown) == len(fired)
    for p in pids:
        assert dbg.wait_process(p)["status"] == "finished"


# --- must show: record and replay a temperature-1 run; replay to step k; step back -----------------


def test_record_replay_temperature_1(dbg, engine):
    k = 4
    prompt = "Once upon a time"
    dbg.record()  # every process launched from now on
    pid = dbg.launch(complete, prompt, max_tokens=10, temperature=1.0, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    dbg.set_breakpoint("pred", pid=pid, hit_count=k, when="after")
    dbg.continue_(pid)
    s = dbg.wait_stopped(pid, timeout=60)
    original_k = s["result"]
    assert s["preds"] == k and original_k["chosen"]["by"] == "engine"  # sampled in the batch
    dbg.continue_(pid)
    text = dbg.wait_process(pid, timeout=60)["result"]["text"]
    rec = dbg.recording(pid, entries=True)
    assert rec["complete"] and rec["preds"] == 10

    pid2 = dbg.replay(pid)["pid"]
    assert dbg.wait_process(pid2, timeout=60)["result"]["text"] == text
    st = dbg.replay_status(pid2)
    assert st["substituted"] == 10 and st["diverged"] == [] and st["max_logit_diff"] < 1e-3

    pid3 = dbg.replay(pid, stop_at=k)["pid"]
    s3 = dbg.wait_stopped(pid3, timeout=60)
    assert s3["preds"] == k and s3["where"] == "after"
    assert [t["token"] for t in s3["result"]["topk"]] == [t["token"] for t in original_k["topk"]]
    assert [t["p"] for t in s3["result"]["topk"]] == pytest.approx([t["p"] for t in original_k["topk"]], abs=1e-6)
    assert s3["result"]["chosen"]["token"] == original_k["chosen"]["token"]

    # step back one pred: a new replay stops after pred k-1, showing what the original showed there
    back = dbg.step_back(pid3, 1)
    s4 = dbg.wait_stopped(back["pid"], timeout=60)
    assert s4["preds"] == k - 1 and dbg.process(pid3).status == "cancelled"
    preds = [e for e in rec["entries"] if e["call"] == "pred"]
    assert [t["token"] for t in s4["result"]["topk"][:5]] == [t for t, _ in preds[k - 2]["top5"]]
    dbg.continue_(back["pid"])
    assert dbg.wait_process(back["pid"], timeout=60)["result"]["text"] == text


# --- must show: the trace ------------------------------------------------------------------------------


def test_trace_valid_and_complete(dbg, engine, tmp_path):
    log = engine.runtime.batch.log
    since = log.total_batches
    q, unsub = dbg.event_queue(["syscall_exit", "stopped"])
    dbg.set_breakpoint("kv_fork")  # a debugger stop nested inside a syscall slice
    p1 = dbg.launch(fanout, ["One", "Two two"], 3)["pid"]
    p2 = dbg.launch(forky, "A fork in the road")["pid"]
    s = dbg.wait_stopped(p2, timeout=60)
    assert s["call"] == "kv_fork"
    dbg.continue_(p2)
    for p in (p1, p2):
        assert dbg.wait_process(p, timeout=60)["status"] == "finished"
    time.sleep(0.05)
    unsub()
    tr = dbg.trace(str(tmp_path / "run.json"))
    assert validate_trace(tr) == []
    assert validate_trace(json.loads((tmp_path / "run.json").read_text())) == []
    evs = tr["traceEvents"]
    exits = [m["body"] for m in _drain(q) if m["event"] == "syscall_exit" and m["body"]["pid"] in (p1, p2)]
    for pid in (p1, p2):
        want = sorted((e["tid"], e["call"]) for e in exits if e["pid"] == pid)
        got = sorted(
            (e["tid"], e["name"]) for e in evs if e.get("cat") == "syscall" and e["ph"] == "B" and e["pid"] == pid
        )
        assert got == want and got
    threads = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(p1, 1), (p1, 2), (p1, 3), (p2, 1)} <= threads
    bids = {e["args"]["bid"] for e in evs if e.get("cat") == "batch"}
    assert {r.bid for r in log.since(since)} <= bids
    assert all("members" in e["args"] for e in evs if e.get("cat") == "batch")
    counters = {e["name"] for e in evs if e["ph"] == "C"}
    assert {"queue_depth", "pages_used"} <= counters
    stop_b = [e for e in evs if e.get("cat") == "debugger" and e["ph"] == "B" and e["pid"] == p2]
    assert stop_b and stop_b[0]["name"] == "stopped: breakpoint"
    # the validator catches what Perfetto would misdraw
    bad = {
        "traceEvents": [
            {"name": "a", "ph": "B", "pid": 1, "tid": 1, "ts": 0},
            {"name": "b", "ph": "B", "pid": 1, "tid": 1, "ts": 1},
            {"name": "a", "ph": "E", "pid": 1, "tid": 1, "ts": 2},
            {"ph": "E", "pid": 1, "tid": 2, "ts": 3},
            {"name": "c", "ph": "X", "pid": 1, "tid": 3, "ts": 0},
            {"name": "q", "ph": "C", "pid": 1, "ts": 0, "args": {"x": "y"}},
        ]
    }
    errs = validate_trace(bad)
    assert any("bad nesting" in e for e in errs) and any("without a matching B" in e for e in errs)
    assert any("dur" in e for e in errs) and any("(C)" in e for e in errs) and any("never closed" in e for e in errs)


# --- views, pause / restart, protocol -------------------------------------------------------------------


def test_kv_tree_pause_restart_and_protocol(dbg, engine):
    h = lambda cmd, **a: handle_command(dbg, {"type": "request", "seq": 1, "command": cmd, "arguments": a})  # noqa: E731
    assert h("initialize")["body"]["protocol_version"] == 1
    bad = h("set_breakpoint", call="pred", colour="red")
    assert not bad["success"] and "colour" in bad["message"]
    assert not h("step", pid=10**6)["success"]
    assert not h("nonsense")["success"]
    ids = engine.tokenize(" Paris")
    assert h("token_texts", ids=ids)["body"]["texts"] == {str(i): engine.tokenizer.token_text(i) for i in ids}
    for bad_ids, why in (
        ([-1], "not token ids"),
        ([10**9], "not token ids"),
        (["3"], "ids[0]: Input should be a valid integer"),
        ("3", "ids: Input should be a valid list"),
    ):
        r = h("token_texts", ids=bad_ids)
        assert not r["success"] and why in r["message"], r
    q, unsub = dbg.event_queue()
    assert (
        h("watch", view="timeline", interval=0.05)["success"] and h("watch", view="kv_tree", interval=0.05)["success"]
    )
    bp = h("set_breakpoint", call="kv_fork", when="after", text_contains="road")["body"]
    pid = h("launch", fn="tests.test_debugger:forky", args=["A fork in the road, and a long one: " * 2])["body"]["pid"]
    s = h("wait_stopped", pid=pid, timeout=60)["body"]
    assert s["call"] == "kv_fork" and s["where"] == "after"
    tree = h("kv_tree")["body"]
    parent = s["args"]["file"]
    child = s["result"]["file"]
    files = {f["file"]: f for f in tree["files"]}
    assert files[child]["parent"] == parent and [parent, child] in tree["edges"]
    shared = [p for p in files[child]["pages"] if parent in p["shared_with"]]
    assert len(shared) == files[parent]["n_pages"] >= 2 and all(p["refcount"] == 2 for p in shared)
    assert "road" in "".join(p["text"] for p in files[child]["pages"])
    assert h("kv", fid=child)["body"]["ancestry"] == [parent]
    h("remove_breakpoint", id=bp["id"])
    h("continue", pid=pid)
    assert h("wait_process", pid=pid, timeout=60)["body"]["status"] == "finished"
    # pause: a thread waiting in recv stops as soon as the call returns
    pid = h("launch", fn="tests.test_debugger:echo")["body"]["pid"]
    deadline = time.monotonic() + 30
    while dbg.process(pid).threads[0].current_call != "recv":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert h("pause", pid=pid)["body"]["pausing"] == [[pid, 1]]
    dbg.process(pid).send("hello")
    s2 = h("wait_stopped", pid=pid, timeout=60)["body"]
    assert (s2["reason"], s2["call"], s2["where"], s2["result"]) == ("pause", "recv", "after", "hello")
    # restart: the same program again, under a new pid
    r = h("restart", pid=pid, stop_on_entry=True)["body"]
    s3 = h("wait_stopped", pid=r["pid"], timeout=60)["body"]
    assert s3["reason"] == "entry" and dbg.process(pid).status == "cancelled"
    h("continue", pid=r["pid"])
    dbg.process(r["pid"]).send("again")
    done = h("wait_process", pid=r["pid"], timeout=60)["body"]
    assert done["status"] == "finished" and done["result"] == [len(engine.tokenize("again")), "again"]
    tl = h("timeline", since=0, limit=5)["body"]
    assert len(tl["batches"]) <= 5 and {"queue", "pages_used", "pages_total"} <= set(tl)
    h("unwatch")
    unsub()
    msgs = _drain(q)
    json.dumps(msgs, allow_nan=False)
    assert {
        "stopped",
        "continued",
        "syscall_enter",
        "syscall_exit",
        "batch",
        "process_start",
        "process_exit",
        "view",
    } <= {m["event"] for m in msgs}
    views = {m["body"]["view"]: m["body"]["data"] for m in msgs if m["event"] == "view"}
    assert views["timeline"]["batches"] and "files" in views["kv_tree"]  # live streams of the two views


def test_edit_distribution_ban_and_errors(dbg, engine):
    pid = dbg.launch(greedy, "The capital of France is", 2, stop_on_entry=True)["pid"]
    dbg.wait_stopped(pid, timeout=60)
    with pytest.raises(DebuggerError):
        dbg.override(pid, 1, text=" Paris Texas")  # several tokens
    dbg.step(pid, 1)
    s = dbg.wait_stopped(pid, timeout=60)
    top = [t["token"] for t in s["result"]["topk"]]
    r = dbg.edit_dist(pid, 1, ban=top[:2])
    assert r["stop"]["result"]["chosen"]["token"] == top[2]
    dbg.continue_(pid)
    assert dbg.wait_process(pid, timeout=60)["result"][0] == top[2]
    with pytest.raises(DebuggerError):
        dbg.step(pid, 1)  # nothing is stopped any more


def test_starlette_route_speaks_the_protocol(dbg, engine):
    """The route `symphony serve` can mount: auth, a command, and events on the same socket."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from symphony_lab.debugger import starlette_route

    app = Starlette(
        routes=[starlette_route(dbg, "/v1/debug", authenticate=lambda ws: ws.query_params.get("token") == "t")]
    )
    with TestClient(app) as tc:
        with pytest.raises(WebSocketDisconnect):
            with tc.websocket_connect("/v1/debug?token=wrong") as ws:
                ws.receive_json()
        with tc.websocket_connect("/v1/debug?token=t") as ws:
            ws.send_json({"type": "request", "seq": 1, "command": "initialize"})
            r = ws.receive_json()
            assert r["success"] and r["request_seq"] == 1 and "step" in r["body"]["commands"]
            ws.send_json({"type": "request", "seq": 2, "command": "launch", "arguments": {"fn": "os:getcwd"}})
            r = ws.receive_json()
            assert not r["success"] and "not allowed" in r["message"]  # remote launch is off by default
            pid = dbg.launch(greedy, "Hi", 1, stop_on_entry=True)["pid"]
            ev = ws.receive_json()
            while ev.get("event") != "stopped":
                ev = ws.receive_json()
            assert ev["body"]["pid"] == pid and ev["body"]["reason"] == "entry"
            ws.send_json({"type": "request", "seq": 3, "command": "continue", "arguments": {"pid": pid}})
            while True:
                r = ws.receive_json()
                if r["type"] == "response":
                    break
            assert r["success"] and r["body"]["resumed"] == [[pid, 1]]
    assert dbg.wait_process(pid, timeout=60)["status"] == "finished"


def lip_side_sampler(sym, prompt: str, n: int, seed: int | None) -> list[int]:
    """Samples in the LIP (not in the engine), hot, with or without a seed."""
    from symphony_core.lib.samplers import SamplingParams

    s = SamplingParams(temperature=5.0, seed=seed)
    kv = sym.kv_create()
    toks, out = sym.tokenize(prompt), []
    for _ in range(n):
        t = s.pick(sym.pred(kv, toks))
        out.append(t)
        toks = [t]
    sym.kv_close(kv)
    return out


def test_replay_detects_lip_side_randomness(dbg):
    """Seeded LIP-side sampling replays exactly; unseeded sampling cannot be substituted — the
    replay stops where the LIP's input first differs from the recording, then runs live."""
    dbg.record()
    seeded = dbg.launch(lip_side_sampler, "Hello", 5, 7)["pid"]
    unseeded = dbg.launch(lip_side_sampler, "Hello", 5, None)["pid"]
    a = dbg.wait_process(seeded, timeout=60)["result"]
    dbg.wait_process(unseeded, timeout=60)
    r = dbg.replay(seeded)["pid"]
    assert dbg.wait_process(r, timeout=60)["result"] == a and dbg.replay_status(r)["diverged"] == []
    r2 = dbg.replay(unseeded)["pid"]
    s = dbg.wait_stopped(r2, timeout=60)
    assert s["reason"] == "diverged" and s["call"] == "pred" and s["preds"] >= 1
    st = dbg.replay_status(r2)
    assert st["diverged"][0]["seq"] == s["seq"] and "input tokens differ" in st["diverged"][0]["why"]
    dbg.continue_(r2)
    assert dbg.wait_process(r2, timeout=60)["status"] == "finished"


def test_a_url_is_connects_not_the_in_process_debuggers():
    with pytest.raises(TypeError, match=r"connect\(url"):
        Debugger("ws://127.0.0.1:1/v1/debug")
