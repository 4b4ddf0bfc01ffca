"""Scale-out's routing rules without a cluster: the pid scheme, placement, and the routing simulation."""

from __future__ import annotations

import pytest

from symphony_core.scaleout.faults import FaultBook, ReplicaDeath, lost_outcome
from symphony_core.scaleout.pids import MAX_REPLICAS, decode_pid, pid_base
from symphony_core.scaleout.placement import Placement


def test_pid_names_replica_and_generation():
    base = pid_base(3, 7)
    rp = decode_pid(base + 42)
    assert (rp.replica, rp.generation, rp.local, rp.pid) == (3, 7, 42, base + 42)
    assert pid_base(1, 1000) == pid_base(1, 0)  # generations wrap
    assert decode_pid(42) is None and decode_pid(base) is None  # the single server's pids, a bare base
    assert pid_base(MAX_REPLICAS, 999) + 10**9 - 1 < 2**53
    with pytest.raises(ValueError, match="replica index"):
        pid_base(0, 0)


def test_new_users_spread_by_load_and_stay_home():
    pl = Placement([1, 2, 3])
    pl.set_running(1, 5)
    homes = [pl.home_of(u, [1, 2, 3]) for u in ("a", "b", "c", "d")]
    assert homes[:2] == [2, 3] and 1 not in homes[:3]  # the busy replica gets no one while others are free
    pl.set_running(2, 50)
    assert pl.home_of("a", [1, 2, 3]) == 2  # affinity outlives load
    assert pl.home_of("e", [1, 3]) in (1, 3)
    with pytest.raises(LookupError):
        Placement([1]).home_of("x", [])


def test_prompts_by_prefix_until_the_target_is_too_busy():
    pl = Placement([1, 2, 3, 4], prefix_slack=2)
    prompt = "You are a helpful assistant. " * 20
    r = pl.for_prompt(prompt + "Q1", [1, 2, 3, 4])
    assert pl.for_prompt(prompt + "Q2", [1, 2, 3, 4]) == r  # the same 256-char prefix, the same replica
    for _ in range(3):
        pl.begin(r)
    assert pl.for_prompt(prompt, [1, 2, 3, 4]) != r
    for _ in range(3):
        pl.end(r)
    assert pl.for_prompt(prompt, [1, 2, 3, 4]) == r


def test_a_dead_replica_reports_its_files_once_until_acknowledged():
    book = FaultBook()
    death = ReplicaDeath(2, 0, 1_700_000_000.0, "its actor was restarted by Ray")
    book.record_death(death, {"alice": ["/users/alice/ctx.kv", "/shared/alice-notes.kv"]})
    lost = {f["path"]: f for f in book.lost_files("alice")}
    assert (
        set(lost) == {"/users/alice/ctx.kv", "/shared/alice-notes.kv"}
        and lost["/users/alice/ctx.kv"]["replica"] == "r2"
    )
    assert book.lost_files("bob") == []
    assert book.acknowledge("alice", "/users/alice/ctx.kv") and not book.acknowledge("alice", "/users/alice/ctx.kv")
    out = lost_outcome(2_000_000_000_005, death)
    assert (
        out["status"] == "failed" and out["error"]["type"] == "ReplicaLost" and "replica r2" in out["error"]["message"]
    )


@pytest.mark.slow  # ~3 s of CPU, longer on a busy machine
def test_routing_simulation_quick():
    from bench import routing_sim
    from bench.common import take_published

    routing_sim.main(["--quick", "--out", ""])
    rows = {(r["replicas"], r["policy"]): r for r in take_published(routing_sim.__name__)["rows"]}
    for R in (8, 16):
        aff, p2c, pre = rows[(R, "affinity")], rows[(R, "p2c")], rows[(R, "prefix")]
        assert aff["named_file_hit_rate"] == 1.0  # every program of a user meets its files
        assert p2c["named_file_hit_rate"] < 0.5 and aff["kv_hit_rate"] > pre["kv_hit_rate"] > p2c["kv_hit_rate"]
        assert p2c["load_max_over_mean"] < aff["load_max_over_mean"]  # and pays for it in balance
