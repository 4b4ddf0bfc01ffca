"""Server memory charged per user as one budget (issue 53): a user's kept messages, prints, held
logits and KV names count together against `--user-memory-mb`; the allocation that would pass it
is refused with a LimitExceeded naming the budget, and another user's program is unaffected."""

from __future__ import annotations

import time

import pytest

from symphony_core.sched.process import LimitExceeded
from symphony_core.server.user_budget import NAME_ENTRY_COST, UserBudget
from tests.test_hostile_neighbours import GENERATE_SOURCE

USERS = [{"name": "alice", "token": "tok-alice"}, {"name": "mallory", "token": "tok-mallory"}]
SOURCE = (
    GENERATE_SOURCE
    + """

def keep_messages(sym, k: int):
    for i in range(k):
        sym.send(str(i) * 900_000)  # ~0.86 MiB of JSON each, kept until a client reads them
    sym.recv(300)


def keep_prints(sym, k: int):
    for _ in range(k):
        print("p" * 1000)
    sym.send("printed")
    sym.recv(300)


def all_logits(sym, n: int):
    kv = sym.kv_create()
    try:
        return list(sym.pred(kv, PROMPT * (n // len(PROMPT) + 1), outputs="all").logits.shape)
    except Exception as e:
        return f"refused ({type(e).__name__}): {e}"
"""
)


@pytest.fixture(scope="module")
def server():
    from tests.server_harness import Server

    s = Server(USERS, ["--max-workers", "8", "--keep-finished", "5", "--user-memory-mb", "8"], name="budget")
    yield s
    assert s.stop() == 0, s.log()[-3000:]


def _client(server, user):
    import httpx

    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer tok-{user}"}, timeout=180)


def _start(c, entry, *args) -> int:
    r = c.post("/v1/processes", json={"source": SOURCE, "entry": entry, "args": list(args)})
    assert r.status_code == 201, r.text
    return r.json()["pid"]


def _outcome(c, pid) -> dict:
    return c.get(f"/v1/processes/{pid}/result", params={"wait": 170}).json()


def _sent(c, pid, n) -> None:
    """Wait until the record keeps `n` messages of `pid`."""
    end = time.monotonic() + 120
    while c.get(f"/v1/processes/{pid}").json()["messages"] < n:
        assert time.monotonic() < end, c.get(f"/v1/processes/{pid}").json()
        time.sleep(0.3)


def test_many_programs_of_one_user_cannot_add_up_past_the_budget(server):
    """With an 8 MiB budget: two live programs keep 2 x 2.6 MiB of messages and one ~1 MiB of
    prints, each under its own bounds (16 MiB a process, 64 MiB of messages a user, 1 MiB of
    prints); then a pred's 27 rows of logits (5.1 MiB) is refused in the program, and a further
    program's messages stop it, both with a LimitExceeded naming the per-user budget. Alice's
    generation, run while mallory is at the budget, is token for token what it is alone."""
    with _client(server, "alice") as alice, _client(server, "mallory") as mallory:
        ref = _outcome(alice, _start(alice, "generate", 6))["result"]
        live = []
        try:
            for _ in range(2):
                live.append(_start(mallory, "keep_messages", 3))
                _sent(mallory, live[-1], 3)
            live.append(_start(mallory, "keep_prints", 900))
            _sent(mallory, live[-1], 1)
            out = _outcome(mallory, _start(mallory, "all_logits", 20))
            assert str(out.get("result", "")).startswith("refused (LimitExceeded): user 'mallory' holds"), out
            assert "per-user server memory budget" in out["result"] and "at most 8.0 MiB" in out["result"], out
            assert "27 rows of logits would add 5.1 MiB" in out["result"], out
            out = _outcome(mallory, _start(mallory, "keep_messages", 5))
            assert out["status"] == "failed" and out["error"]["type"] == "LimitExceeded", out
            assert "per-user server memory budget" in out["error"]["message"], out
            benign = _outcome(alice, _start(alice, "generate", 6))
            assert benign.get("result") == ref, benign
            assert _outcome(alice, _start(alice, "all_logits", 20)).get("result") == [27, 49152]
        finally:
            for pid in live:
                mallory.post(f"/v1/processes/{pid}/cancel")
        # cancelled, reaped past --keep-finished: the budget is free again
        time.sleep(5.5)
        mallory.get("/metrics")
        assert _outcome(mallory, _start(mallory, "all_logits", 20)).get("result") == [27, 49152]


def test_budget_counts_names_prints_and_logits_together(engine):
    """In-process: the KV names a user owns, their prints and held logits share one bound; the
    charge that would pass it raises LimitExceeded naming each part, and releasing makes room."""
    paths = [f"/shared/budget-{i}-" + "n" * 400 for i in range(4)]
    budget = UserBudget(8 << 10, names=lambda user: engine.kvfs.name_bytes(user, NAME_ENTRY_COST))
    kvs = [engine.kvfs.create("eve", p) for p in paths]
    try:
        names = budget.used("eve")["names"]
        assert names == sum(len(p) + NAME_ENTRY_COST for p in paths) and budget.used("bob")["names"] == 0
        budget.charge("eve", "prints", 4000, "a print")
        with pytest.raises(LimitExceeded, match=r"names .*per-user server memory budget"):
            budget.charge("eve", "logits", 8192 - 4000 - names + 1, "a pred's logits")
        release = budget.hold("eve", "logits", 8192 - 4000 - names, "a pred's logits")
        budget.charge("bob", "logits", 8000, "another user's logits")  # bob's budget is his own
        release()
        release()  # once only
        assert budget.total("eve") == 4000 + names
    finally:
        for kv, p in zip(kvs, paths):
            engine.kvfs.close(kv)
            engine.kvfs.remove("eve", p)
