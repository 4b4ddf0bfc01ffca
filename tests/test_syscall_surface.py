"""One `sym` (issue 50): the syscall reference, the surface declared in symphony_core/syscall_surface.py,
and each implementation agree, and a program using every documented member gives the same
results in-process, under the debugger and sandboxed on a real `symphony serve`."""

from __future__ import annotations

import importlib
import os
import re
import time

import pytest

from symphony_core.lip.syscalls import Sym, ThreadHandle
from symphony_core.sandbox.remote_handles import RemoteThreadHandle
from symphony_core.sandbox.worker import RemoteSym
from symphony_core.syscall_surface import SymSurface, ThreadHandleSurface, members, mismatches
from tests.server_harness import ROOT
from tests.syscall_walk import walk

REFERENCE = os.path.join(ROOT, "docs", "reference", "syscalls.md")
WALK_FILE = os.path.join(ROOT, "tests", "syscall_walk.py")
SURFACES = {"Sym": SymSurface, "ThreadHandle": ThreadHandleSurface}


def documented_names() -> set[str]:
    """`Class.member` for every member the reference documents: the call table's links, and the
    public members of each class it renders whole (`::: module.Class`, as mkdocstrings does)."""
    text = open(REFERENCE).read()
    names = {f"{c}.{m}" for c, m in re.findall(r"\]\[symphony_core\.lip\.syscalls\.(\w+)\.(\w+)\]", text)}
    for mod, cls in re.findall(r"^::: ([\w.]+)\.(\w+)$", text, re.M):
        klass = getattr(importlib.import_module(mod), cls)
        names |= {f"{cls}.{n}" for n in dir(klass) if not n.startswith("_")}
    return names


def declared_names() -> set[str]:
    return {f"{c}.{n}" for c, s in SURFACES.items() for n in members(s)}


def test_the_reference_documents_exactly_the_declared_surface():
    documented = documented_names()
    assert {"Sym.pred", "Sym.page_size", "Sym.tokenizer_file", "ThreadHandle.join"} <= documented
    assert documented == declared_names()


@pytest.mark.parametrize(
    "impl, surface",
    [
        (Sym, SymSurface),
        (RemoteSym, SymSurface),
        (ThreadHandle, ThreadHandleSurface),
        (RemoteThreadHandle, ThreadHandleSurface),
    ],
    ids=lambda x: x.__name__,
)
def test_each_implementation_offers_exactly_the_surface(impl, surface):
    assert mismatches(impl, surface) == []


def test_the_check_sees_a_drift():
    class Drifted:
        pid = property(lambda self: 1)

        def pred(self, kv, token_ids, positions=None, *, outputs="all", sampler=None, mask=None): ...
        def kv_fork(self, kv, extra): ...
        def scratch(self): ...

    found = "\n".join(mismatches(Drifted, SymSurface))
    assert "Drifted lacks tokenizer_file" in found and "Drifted.scratch is not in the syscall surface" in found
    assert "pred(" in found and "kv_fork(" in found  # a changed default, an added parameter


def dispatched() -> set[str]:
    """The documented members that are system calls (a stop point for the debugger): all but the
    read-only facts (a ThreadHandle's tid and done read the thread; its join is a syscall)."""
    names = {n.split(".")[1] for n in documented_names()}
    return names - {n for n, v in members(SymSurface).items() if isinstance(v, property)} - {"done"}


def _check_walk(out: dict, user: str, engine, message="ping") -> None:
    assert set(out["covered"]) == documented_names()  # a new documented name must be walked here
    assert out["Sym.pid"] is True and out["Sym.tid"] == 1 and out["Sym.user"] == user
    assert out["Sym.vocab_size"] == engine.config.vocab_size and out["Sym.page_size"] == engine.kvfs.pool.page_size
    assert out["Sym.tokenizer_file"] == ["tokenizer.json", (engine.model_dir / "tokenizer.json").stat().st_size]
    assert out["Sym.pred"][0] == [len(out["Sym.tokenize"]), engine.config.vocab_size]
    assert out["Sym.pred"][2] == out["Sym.tokenize"][0]  # the mask allowed only that token
    assert out["Sym.kv_open"] == [len(out["Sym.tokenize"]) + 1, True] and out["Sym.kv_truncate"] == 2
    assert (
        out["Sym.kv_list"] is True
        and out["Sym.kv_remove"] == []
        and out["Sym.recv"] == message
        and out["ThreadHandle.join"][1] == 42
    )
    assert out["unknown"].startswith("sym has no 'no_such_call': its members are pid, tid")
    assert "Sym" not in out["unknown"].split(":")[0] and "Remote" not in out["unknown"]


def _in_process(engine) -> dict:
    p = engine.launch(walk, "walk-inproc.kv", user="tester", name="walk")
    p.send("ping")
    out = p.result(120)
    assert list(p.messages()) == [{"walked": out["covered"].index("Sym.send")}]
    return out


@pytest.fixture(scope="module")
def in_process(engine):
    return _in_process(engine)


def test_every_documented_name_in_process(engine, in_process):
    _check_walk(in_process, "tester", engine)


def test_every_documented_name_under_the_debugger(engine, in_process):
    """With a breakpoint before and after every syscall, each one stops, shows its stop view and
    resumes; the program's results are the in-process ones."""
    from symphony_lab.debugger import Debugger

    dbg = Debugger(engine)
    try:
        dbg.set_breakpoint("*", when="before")
        dbg.set_breakpoint("*", when="after")
        p = dbg.launch(walk, "walk-dbg.kv", user="tester", name="walk", stop_on_entry=False)
        proc = engine.runtime.processes[p["pid"]]
        proc.send("ping")
        stopped: list[tuple[str, str]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            s = dbg.wait_stopped(p["pid"], timeout=60)
            if s.get("exited"):
                break
            stopped.append((s["where"], s["call"]))
            dbg.continue_(s["pid"], s["tid"])
        out = proc.result(60)
    finally:
        dbg.detach()
    _check_walk(out, "tester", engine)
    assert {k: v for k, v in out.items()} == in_process
    assert {c for w, c in stopped if w == "before"} == dispatched()
    assert {c for w, c in stopped if w == "after"} == dispatched()


USERS = [{"name": "alice", "token": "tok-alice"}]


@pytest.fixture(scope="module")
def server():
    from tests.server_harness import Server

    s = Server(USERS, ["--max-workers", "4", "--plugin", "debugger"])  # the default sandbox limits
    yield s
    assert s.stop() == 0, s.log()[-3000:]


@pytest.mark.slow
def test_every_documented_name_sandboxed_on_a_server(engine, server, in_process):
    from symphony_core.client import Client

    with Client(server.url, token="tok-alice") as c:
        p = c.launch(None, "walk-boxed.kv", source=open(WALK_FILE).read(), entry="walk")
        p.send("ping")
        out = p.result(300)
        assert list(p.messages()) == [{"walked": out["covered"].index("Sym.send")}]
    _check_walk(out, "alice", engine)
    assert {k: v for k, v in out.items() if k != "Sym.user"} == {k: v for k, v in in_process.items() if k != "Sym.user"}


@pytest.mark.slow
def test_every_documented_name_sandboxed_under_the_servers_debugger(engine, server, in_process):
    """The sandboxed program with the server's debugger stopping before and after each syscall."""
    from symphony_lab.debugger import RemoteDebugger

    dbg = RemoteDebugger(server.url.replace("http://", "ws://") + "/v1/debug", token="tok-alice", timeout=120)
    try:
        args = ["walk-remote-dbg.kv", False]
        pid = dbg.run_program(open(WALK_FILE).read(), "walk", *args, stop_on_entry=True)["pid"]
        assert dbg.wait_stopped(pid, timeout=120)["where"] == "entry"
        dbg.set_breakpoint("*", pid=pid, when="before")
        dbg.set_breakpoint("*", pid=pid, when="after")
        dbg.continue_(pid)
        stopped = []
        while True:
            s = dbg.wait_stopped(pid, timeout=120)
            if s.get("exited"):
                break
            stopped.append((s["where"], s["call"]))
            dbg.continue_(s["pid"], s["tid"])
        done = dbg.wait_process(pid, timeout=120)
    finally:
        dbg.close()
    assert done["status"] == "finished", done
    out = done["result"]
    _check_walk(out, "alice", engine, message="recv: no message within 0.05s")
    same = {k: v for k, v in in_process.items() if k not in ("Sym.user", "Sym.recv")}
    assert {k: v for k, v in out.items() if k not in ("Sym.user", "Sym.recv")} == same
    assert {c for w, c in stopped if w == "before"} == dispatched()
    assert {c for w, c in stopped if w == "after"} == dispatched() - {"recv"}  # it raised: no result to stop at


def lib_grammar_example() -> tuple[str, dict, str]:
    """docs/lib.md's JSON-grammar example: the program (its imports and LIP), its schema and prompt."""
    text = open(os.path.join(ROOT, "docs", "lib.md")).read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "tokenizer_for(sym)" in b)
    program, _, tail = block.partition("\n\nschema = ")
    ns: dict = {}
    exec("schema = " + tail.split("\nprint(")[0], ns)
    prompt = re.search(r'eng\.run\(extract, "([^"]*)"', tail)
    assert prompt is not None, tail
    return program, ns["schema"], prompt.group(1)


@pytest.mark.slow
def test_lib_grammar_example_runs_sandboxed_on_a_server(server):
    """The documented example, unchanged, on the server: its output is JSON valid under the schema."""
    import jsonschema

    from symphony_core.client import Client

    program, schema, prompt = lib_grammar_example()
    assert "tokenizer_for(sym)" in program and "def extract" in program
    with Client(server.url, token="tok-alice") as c:
        out = c.launch(None, prompt, schema, source=program, entry="extract").result(300)
    jsonschema.validate(out, schema)  # the LIP's json.loads parsed it; the grammar kept it in the schema
    assert set(out) == {"city"} and len(out["city"]) <= 20


def test_a_sandbox_without_the_tokenizer_says_so():
    """Where the server could share no tokenizer file, the error names the member and what the
    sandbox lacks, not the proxy's class."""
    from symphony_core.errors import SymphonyError

    sym = RemoteSym(None, 0, {"eos_token_ids": [2], "vocab_size": 10, "page_size": 16}, 1)  # type: ignore[arg-type]
    assert sym.page_size == 16
    with pytest.raises(SymphonyError, match=r"^sym\.tokenizer_file: this sandbox was given no tokenizer file") as e:
        _ = sym.tokenizer_file
    assert "RemoteSym" not in str(e.value)
