"""`symphony serve --ray ADDRESS --replicas 2` on a local Ray cluster of two simulated nodes.

One cluster and one front (a real `symphony serve --ray` process on loopback) for the module; each
replica loads the real model. The client scenarios of the single-server tests run through the
front, then a replica is killed (last: it restarts a replica).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import pytest

ray = pytest.importorskip("ray")

from symphony_core.client import Client, RemoteLIPError, ServerError  # noqa: E402 (after the importorskip / sys.path setup above)
from symphony_core.scaleout.pids import decode_pid  # noqa: E402 (after the importorskip / sys.path setup above)
from symphony_core.scaleout.serve import NAMESPACE, ray_env  # noqa: E402 (after the importorskip / sys.path setup above)

sys.path.insert(0, os.path.dirname(__file__))
import server_lips  # noqa: E402 (after the importorskip / sys.path setup above)
from server_harness import ROOT, Server  # noqa: E402 (after the importorskip / sys.path setup above)

pytestmark = pytest.mark.slow

USERS = [
    {"name": "alice", "token": "tok-alice"},
    {"name": "bob", "token": "tok-bob"},
    {"name": "carol", "token": "tok-carol"},
]


def start_front(address: str) -> Server:
    """`symphony serve --ray ADDRESS --replicas 2` on loopback, each replica with one thread."""
    extra = ["--ray", address, "--replicas", "2", "--replica-host", "127.0.0.1", "--max-workers", "4"]
    return Server(USERS, [*extra, "--plugin", "debugger"], 400, num_pages=1024, threads=1, env=ray_env(), name="front")


@pytest.fixture(scope="module")
def front():
    from symphony_core.scaleout.local_cluster import start_local_cluster

    saved = dict(os.environ)
    cluster = fr = None
    try:
        os.environ.update(
            ray_env(
                {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}
            )
        )
        cluster = start_local_cluster(nodes=2, num_cpus=1, object_store_mb=100)
        fr = start_front(cluster.address)
        ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="WARNING")
        yield fr
    finally:
        if fr is not None:
            fr.stop(60)
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def client(front, user: str) -> Client:
    return Client(front.url, token=f"tok-{user}", timeout=120)


def replica_of(pid: int) -> int:
    rp = decode_pid(pid)
    assert rp is not None, f"pid {pid} names no replica"
    return rp.replica


def test_two_replicas_on_two_nodes(front):
    h = httpx.get(front.url + "/health").json()
    assert h["status"] == "ok" and h["model"]
    reps = h["replicas"]
    assert [r["replica"] for r in reps] == ["r1", "r2"] and all(r["up"] for r in reps), reps
    assert len({r["node"] for r in reps}) == 2, f"both replicas on one node: {reps}"
    metrics = httpx.get(front.url + "/metrics").text
    assert 'symphony_kv_pages_total{replica="r1"}' in metrics and 'symphony_kv_pages_total{replica="r2"}' in metrics


def test_run_streams_and_pid_names_the_home_replica(front):
    c = client(front, "alice")
    p = c.run(server_lips.greedy, "The capital of France is", n=4)
    pieces = list(p.messages(timeout=120))
    out = p.result(timeout=120)
    assert len(pieces) == 4 and "".join(pieces) == out
    # the same pid answers over HTTP through the front
    r = httpx.get(f"{front.url}/v1/processes/{p.pid}/result", headers={"Authorization": "Bearer tok-alice"}).json()
    assert r["status"] == "finished" and r["result"] == out
    assert p.pid in [q["pid"] for q in c.processes()]
    # another user cannot reach it
    assert (
        httpx.get(f"{front.url}/v1/processes/{p.pid}", headers={"Authorization": "Bearer tok-bob"}).status_code == 404
    )
    # bad token: the server's own 401
    assert httpx.get(f"{front.url}/v1/processes", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_named_kv_files_follow_their_user(front):
    alice, bob = client(front, "alice"), client(front, "bob")
    pa = alice.run(server_lips.remember, "ctx.kv", "Paris is the capital of France.")
    n = pa.result(timeout=120)
    pb = alice.run(server_lips.recall, "ctx.kv")
    assert pb.result(timeout=120) == n > 0
    assert replica_of(pa.pid) == replica_of(pb.pid)
    files = {f["path"]: f for f in alice.kv_list()}
    assert files["/users/alice/ctx.kv"]["replica"] == f"r{replica_of(pa.pid)}"
    # bob, placed by load, lands on the other replica; his programs stay there too
    q1 = bob.run(server_lips.remember, "notes.kv", "Bob's notes.")
    q1.result(timeout=120)
    q2 = bob.run(server_lips.recall, "notes.kv")
    assert q2.result(timeout=120) > 0
    assert replica_of(q1.pid) == replica_of(q2.pid) != replica_of(pa.pid)
    # a /shared/ file lives on its owner's home replica; another user's program reads it there
    alice.run(server_lips.remember, "/shared/alice-notes.kv", "Shared notes.").result(timeout=120)
    run = {"source": Path(server_lips.__file__).read_text(), "entry": "recall", "args": ["/shared/alice-notes.kv"]}

    def bob_run(headers: dict) -> dict:
        h = {"Authorization": "Bearer tok-bob", **headers}
        pid = httpx.post(f"{front.url}/v1/processes", headers=h, json=run).json()["pid"]
        return httpx.get(f"{front.url}/v1/processes/{pid}/result?wait=120", headers=h, timeout=130).json()

    there = bob_run({"X-Symphony-Replica": f"r{replica_of(pa.pid)}"})
    assert there["status"] == "finished" and there["result"] > 0, there
    home = bob_run({})
    assert home["status"] == "failed" and home["error"]["type"] == "KVNotFound", home


def test_messages_and_cancel(front):
    c = client(front, "carol")
    p = c.run(server_lips.waits_for_message)
    h = {"Authorization": "Bearer tok-carol"}
    assert httpx.get(f"{front.url}/v1/processes/{p.pid}", headers=h).json()["status"] == "running"
    p.cancel()
    with pytest.raises(RemoteLIPError) as e:
        p.result(timeout=60)
    assert "Cancelled" in str(e.value) or e.value.error_type == "Cancelled"
    p2 = c.run(server_lips.waits_for_message)
    httpx.post(f"{front.url}/v1/processes/{p2.pid}/messages", headers=h, json={"data": "go"}).raise_for_status()
    assert p2.result(timeout=60) == "released by 'go'"


def test_openai_client(front):
    openai = pytest.importorskip("openai")
    oc = openai.OpenAI(base_url=front.url + "/v1", api_key="tok-alice")
    r = oc.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4, temperature=0
    )
    assert r.choices[0].message.content and r.usage.completion_tokens == 4
    # the same prompt prefix lands on the same replica (the response id carries the pid)
    again = oc.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi!"}], max_tokens=2)
    assert replica_of(int(r.id.split("-")[1])) == replica_of(int(again.id.split("-")[1]))
    text = "".join(
        ch.choices[0].text
        for ch in oc.completions.create(
            model="smollm2", prompt="The capital of France is", max_tokens=4, temperature=0, stream=True
        )
        if ch.choices
    )
    assert text


def test_debugger_plugin_through_the_front(front):
    debugger = pytest.importorskip("symphony_lab.debugger")
    alice = client(front, "alice")
    home = replica_of(alice.run(server_lips.greedy, "Hi", n=1).pid)
    dbg = debugger.RemoteDebugger(front.url.replace("http://", "ws://") + "/v1/debug", token="tok-alice", timeout=120)
    try:
        with open(server_lips.__file__) as f:
            src = f.read()
        r = dbg.run_program(src, "greedy", "The capital of France is", kwargs={"n": 3})
        assert replica_of(r["pid"]) == home  # the session runs on the user's home replica, with global pids
        assert dbg.wait_process(r["pid"], timeout=120)["status"] == "finished"
        assert any(p["pid"] == r["pid"] for p in alice.processes())
    finally:
        dbg.close()


def test_killing_a_replica(front):
    alice, bob = client(front, "alice"), client(front, "bob")
    pa = alice.run(server_lips.waits_for_message)
    pb = bob.run(server_lips.waits_for_message)
    ra, rb = replica_of(pa.pid), replica_of(pb.pid)
    assert ra != rb
    # the front learns a replica's named files by polling it (pool.py): alice's two must have been seen
    # before the kill, else no front could list them as lost (on a fast machine the kill came first)
    owned = 0  # named files on r{ra} by owner, as the replicas list them now
    for user in ("alice", "bob"):
        listed = httpx.get(f"{front.url}/v1/kv", headers={"Authorization": f"Bearer tok-{user}"}).json()["files"]
        owned += sum(f["replica"] == f"r{ra}" and f["owner"] == user for f in listed)
    assert owned >= 2, owned
    deadline = time.time() + 60
    while httpx.get(front.url + "/health", timeout=10).json()["replicas"][ra - 1]["named_files"] < owned:
        assert time.time() < deadline, "the front never polled alice's named files"
        time.sleep(0.5)
    ray.kill(ray.get_actor(f"symphony-r{ra}", namespace=NAMESPACE), no_restart=False)
    with pytest.raises(RemoteLIPError) as e:
        pa.result(timeout=60)
    assert e.value.error_type == "ReplicaLost" and f"replica r{ra}" in str(e.value), str(e.value)
    h = {"Authorization": "Bearer tok-alice"}
    res = httpx.get(f"{front.url}/v1/processes/{pa.pid}/result", headers=h).json()
    assert res["status"] == "failed" and res["error"]["type"] == "ReplicaLost"
    # the other replica's program goes on
    pb.send("still here")
    assert pb.result(timeout=60) == "released by 'still here'"
    # Ray restarts the replica; alice's named file is reported lost, not silently recreated
    deadline = time.time() + 300
    while True:
        health = httpx.get(front.url + "/health", timeout=10).json()
        assert health["status"] == "ok", health  # the other replica answers all along
        reps = {r["replica"]: r for r in health["replicas"]}
        if reps[f"r{ra}"]["up"] and reps[f"r{ra}"]["generation"] == 1:
            break
        assert time.time() < deadline, f"replica r{ra} did not come back: {reps}\n{front.log()[-3000:]}"
        time.sleep(1)
    body = httpx.get(f"{front.url}/v1/kv", headers=h).json()
    lost = {f["path"]: f for f in body["lost"]}
    assert {"/users/alice/ctx.kv", "/shared/alice-notes.kv"} <= set(lost), lost
    assert lost["/users/alice/ctx.kv"]["replica"] == f"r{ra}"
    assert "/users/alice/ctx.kv" not in {f["path"] for f in body["files"]}
    with pytest.raises(ServerError) as e:
        alice.run(server_lips.recall, "ctx.kv")
    assert e.value.status == 409 and "ctx.kv" in str(e.value)
    alice.kv_remove("ctx.kv")  # acknowledges the loss, one file at a time
    with pytest.raises(ServerError, match="alice-notes.kv"):
        alice.run(server_lips.recall, "ctx.kv")
    alice.kv_remove("/shared/alice-notes.kv")
    assert httpx.get(f"{front.url}/v1/kv", headers=h).json()["lost"] == []
    p = alice.run(server_lips.greedy, "Hello", n=2)
    p.result(timeout=120)
    rp = decode_pid(p.pid)
    assert (rp.replica, rp.generation) == (ra, 1)
