"""LIP threads kept on one CPU (symphony_core/lip/lip_cpus.py): the choice, and that a LIP thread
really runs there while the rest of the engine does not."""

from __future__ import annotations

import os
import threading

import pytest

from symphony_core.lip import lip_cpus
from symphony_core.lip.lip_cpus import choose_lip_cpus

pinnable = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs per-thread CPU affinity and at least 2 CPUs",
)


@pinnable
def test_auto_picks_one_of_the_processes_cpus_and_all_leaves_them(monkeypatch):
    monkeypatch.delenv(lip_cpus.ENV, raising=False)
    allowed = os.sched_getaffinity(0)
    chosen = choose_lip_cpus("auto")
    assert chosen is not None and len(chosen) == 1 and chosen <= allowed
    assert choose_lip_cpus(None) == chosen  # the default is "auto"
    assert choose_lip_cpus("all") is None
    one = min(allowed)
    assert choose_lip_cpus(f" {one} ") == {one}
    monkeypatch.setenv(lip_cpus.ENV, "all")
    assert choose_lip_cpus(None) is None  # the environment is the default's default
    assert choose_lip_cpus(str(one)) == {one}  # an explicit choice wins over it


def test_auto_changes_nothing_where_pinning_cannot_help(monkeypatch):
    monkeypatch.setattr(lip_cpus, "_allowed", lambda: {0})
    assert choose_lip_cpus("auto") is None  # one CPU: nothing to choose
    monkeypatch.setattr(lip_cpus, "_allowed", lambda: None)
    assert choose_lip_cpus("auto") is None  # no per-thread affinity on this OS
    monkeypatch.setattr(lip_cpus, "_allowed", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(lip_cpus, "_gil_enabled", lambda: False)
    assert choose_lip_cpus("auto") is None  # free-threaded: the threads really run in parallel


@pytest.mark.parametrize(
    "bad, says",
    [("fast", "'auto', 'all' or CPU numbers"), ("1,x", "'auto', 'all' or CPU numbers"), ("9999", "9999")],
)
def test_a_bad_setting_names_the_problem(bad, says):
    if bad == "9999" and not hasattr(os, "sched_setaffinity"):
        pytest.skip("no per-thread affinity here")
    with pytest.raises(ValueError, match=says):
        choose_lip_cpus(bad)


@pinnable
def test_a_bad_setting_fails_before_the_model_loads(monkeypatch):
    from symphony_core import Engine

    monkeypatch.setattr("symphony_core.engine.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match="not among this process's CPUs"):
        Engine(lip_cpus="9999")


@pinnable
def test_lip_threads_run_on_the_chosen_cpu_and_nothing_else_does(engine):
    chosen = engine.runtime.lip_cpus
    assert chosen is not None and len(chosen) == 1  # the shared test engine takes the default, "auto"
    outside = os.sched_getaffinity(0)

    def lip(sym):
        seen = {"main": os.sched_getaffinity(0)}

        def child(sym):
            return os.sched_getaffinity(0)

        t = sym.spawn(child)
        seen["thread"] = t.join()
        return seen

    seen = engine.run(lip).result()
    assert seen == {"main": chosen, "thread": chosen}
    assert os.sched_getaffinity(0) == outside  # the caller's thread is untouched
    sched = next(t for t in threading.enumerate() if t.name == "symphony-batch")
    assert sched.native_id is not None
    assert os.sched_getaffinity(sched.native_id) == outside  # the forward pass keeps every CPU
