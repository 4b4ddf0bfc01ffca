"""Shared fixtures: one real engine per test session (loading takes ~1.5 s once converted)."""

from __future__ import annotations

import os

import pytest

# symphony_core before torch, as in users' programs: it sets OpenMP's waits (symphony_core/openmp_waits.py)
import symphony_core  # noqa: F401

# isort: split
import torch

torch.set_num_threads(2)
# Without a GPU, Triton kernels (model/triton_attention.py) run in Triton's interpreter. It must be on
# before triton is first imported: its own library functions are made for one mode at import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the tail of every running test server's log (a server's own
    traceback is often the cause of what the client saw) and the session engine's pages and
    processes when the test used it."""
    from tests.server_harness import Server

    report = yield
    if report.failed:
        for s in Server.running:
            report.sections.append((f"server log {s.log_path} (tail)", s.log()[-6000:]))
        eng = item.funcargs.get("engine") if hasattr(item, "funcargs") else None
        runtime = getattr(eng, "_runtime", None)  # never start one to report on it
        if runtime is not None:  # the shared engine: a process queued for pages looks like a hang
            procs = runtime.procs
            report.sections.append(
                (
                    "the session engine",
                    f"{eng.stats()}\nrunning: {[p.summary() for p in list(procs.running.values())][:20]}\n"
                    f"waiting: {len(procs.waiting)}",
                )
            )
    return report


@pytest.fixture(scope="session")
def engine():
    from symphony_core import Engine

    return Engine(num_pages=2048)


@pytest.fixture(scope="session")
def hf_model(engine):
    """transformers' own Llama on the very weights the engine loaded (the parity reference)."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), dtype=torch.float32)
    return m.eval()


@pytest.fixture(scope="module")
def dbg(engine):
    """A debugger on the shared engine for a whole test module (a module may define its own); detached
    at the module's end, with every KV page accounted for."""
    from symphony_lab.debugger import Debugger

    d = Debugger(engine)
    yield d
    d.detach()
    engine.kvfs.check()


@pytest.fixture
def fresh_engine():
    """A small private engine for tests that exhaust or inspect the whole pool."""
    from symphony_core import Engine

    def make(**kw):
        kw.setdefault("num_pages", 64)
        return Engine(**kw)

    return make


OPENAI_TOKEN = "tok-openai"


@pytest.fixture(scope="module")
def openai_server():
    """A real `symphony serve` on loopback for one module of OpenAI-API tests (user alice,
    OPENAI_TOKEN); it must exit cleanly at the end."""
    from tests.server_harness import Server

    s = Server([{"name": "alice", "token": OPENAI_TOKEN}])
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc}\n{s.log()[-3000:]}"


@pytest.fixture(scope="module")
def oc(openai_server):
    """The official `openai` client on `openai_server`, no retries."""
    import openai

    return openai.OpenAI(base_url=openai_server.url + "/v1", api_key=OPENAI_TOKEN, max_retries=0)
