"""The debugger protocol's schema (symphony_lab/debugger/protocol_schema.py, issue 50): the
generated TypeScript is current, every command and event has a type, real traffic conforms to
it, and a request that does not is refused naming the field."""

from __future__ import annotations

import inspect
import shutil
import subprocess

import pytest
from pydantic import ValidationError

from symphony_lab.debugger import Debugger, handle_command
from symphony_lab.debugger.protocol import COMMANDS, EVENTS
from symphony_lab.debugger.protocol_args import ARGUMENTS
from symphony_lab.debugger.protocol_events import EVENT_BODIES
from symphony_lab.debugger.protocol_responses import RESPONSES
from symphony_lab.debugger.protocol_schema import check_body, check_event
from symphony_lab.debugger.schema_ts import COMMAND, OUTPUT, generate

PROMPT = ["The river runs"]  # a replay with another prompt diverges from its recording


def child(sym, prompt: str) -> list[int]:
    kv = sym.kv_create()
    d = sym.pred(kv, sym.tokenize(prompt))
    t = d.argmax()
    d = sym.pred(kv, [t])
    sym.kv_close(kv)
    return [t, d.argmax()]


def family(sym) -> list[int]:
    """A pred, a fork fed one token, a spawned thread of two preds joined."""
    kv = sym.kv_create()
    d = sym.pred(kv, sym.tokenize(PROMPT[0]))
    fork = sym.kv_fork(kv)
    sym.pred(fork, [d.argmax()])
    out = sym.spawn(child, " and then").join()
    sym.kv_close(fork)
    sym.kv_close(kv)
    return out


# --- the schema and the TypeScript --------------------------------------------------------------------


def test_generated_typescript_is_current():
    """The CI drift check: the checked-in TypeScript is what the Python schema gives now."""
    assert OUTPUT.exists(), f"{OUTPUT} is missing; run `{COMMAND}`"
    assert OUTPUT.read_text() == generate(), f"{OUTPUT} is out of date with the Python schema; run `{COMMAND}`"


def test_the_front_end_compiles_against_the_generated_types():
    """tsc over the extension (sidebar, session model, widgets, their tests): a type the schema
    changed that the TypeScript still reads the old way fails here."""
    ext = OUTPUT.parents[2]
    tsc = ext / "node_modules" / ".bin" / "tsc"
    if not tsc.exists() or shutil.which("node") is None:
        pytest.skip("extension/node_modules is not installed (make setup)")
    out = subprocess.run(
        [str(tsc), "--noEmit", "-p", "tsconfig.test.json"], cwd=ext, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_command_and_event_has_a_type():
    assert set(ARGUMENTS) == set(COMMANDS), set(ARGUMENTS) ^ set(COMMANDS)
    assert set(RESPONSES) == set(COMMANDS), set(RESPONSES) ^ set(COMMANDS)
    assert set(EVENT_BODIES) == set(EVENTS), set(EVENT_BODIES) ^ set(EVENTS)
    ts = OUTPUT.read_text()
    for name in list(COMMANDS) + EVENTS:
        assert f"\n  {name}: " in ts, f"{name} is not in the generated TypeScript"


def test_arguments_are_the_methods_parameters():
    """Every argument the schema allows is a parameter of the Debugger method the command calls
    (so a renamed parameter fails here, not at a user's request)."""
    for command, method in COMMANDS.items():
        fields = set(ARGUMENTS[command].__annotations__)
        if not method or command == "launch":
            continue
        params = inspect.signature(getattr(Debugger, method)).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):  # set_breakpoint(**conditions)
            from symphony_lab.debugger.breakpoints import Breakpoint

            params = {**params, **inspect.signature(Breakpoint).parameters}
        assert fields <= set(params) - {"self"}, f"{command}: {fields - set(params)} are not parameters"


# --- real traffic -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traffic(engine, tmp_path_factory):
    """One session through `handle_command`: every response and every event it produced."""
    dbg = Debugger(engine)
    events: list[dict] = []
    unsub = dbg.subscribe(events.append)
    responses: list[dict] = []

    def h(command: str, **arguments):
        r = handle_command(
            dbg, {"type": "request", "seq": len(responses) + 1, "command": command, "arguments": arguments}
        )
        responses.append(r)
        assert r["success"], r
        return r["body"]

    def finish(pid: int) -> None:
        """Let process `pid` run to its end, resuming whatever of it stops on the way."""
        for _ in range(30):
            h("continue", pid=pid)
            r = handle_command(dbg, {"command": "wait_process", "arguments": {"pid": pid, "timeout": 2}})
            if r["success"]:
                responses.append(r)
                return
        raise AssertionError(f"process {pid} did not end")

    try:
        h("initialize")
        h("watch", view="kv_tree", interval=0.05)
        h("watch", view="timeline", interval=0.05)
        h("record", enabled=True)
        h("profile_start")
        fork_bp = h("set_breakpoint", call="kv_fork", when="after")
        spare = h("set_breakpoint", call="kv_close", text_contains="zzz")
        h("enable_breakpoint", id=spare["id"], enabled=False)
        h("remove_breakpoint", id=spare["id"])
        pid = h("launch", fn=f"{__name__}:family", stop_on_entry=True)["pid"]
        s = h("wait_stopped", pid=pid)
        h("threads")
        h("stops")
        h("stack", pid=pid)
        st = h("step", pid=pid)
        s = h("wait_stopped", pid=pid, after=st["after"], step=st["step"])
        assert s["call"] == "pred" and s["result"]["kind"] == "dist"
        h("tokens", pid=pid)
        h("dist", pid=pid, k=5)
        h("token_texts", ids=s["input"]["ids"])
        h("kv", pid=pid)
        h("verify_kv", fid=s["kv_file"])
        alt = s["result"]["topk"][2]["token"]
        h("override", pid=pid, token=s["result"]["topk"][1]["token"])
        h("continue", pid=pid)
        s = h("wait_stopped", pid=pid)
        assert s["call"] == "kv_fork" and s["breakpoints"] == [fork_bp["id"]]
        h("breakpoints")
        h("kv_tree")
        h("timeline")
        h("scheduler_step_mode", enabled=True)
        h("pending_batch")
        h("continue", pid=pid)
        h("wait_batch_pending")
        h("step_batch")
        h("scheduler_step_mode", enabled=False)
        h("wait_process", pid=pid)
        h("recording", pid=pid, entries=True)
        h("save_recording", pid=pid, path=str(tmp_path_factory.mktemp("rec") / "family.pt"))
        h("profile", pid=pid)
        h("what_if", pid=pid, position=2, token=alt, max_tokens=2)
        h("trace")
        h("clear_breakpoints")
        PROMPT[0] = "Once upon a time"
        try:
            r = h("replay", source=pid)
            s = h("wait_stopped", pid=r["pid"])
            assert s["reason"] == "diverged", s
            h("replay_status", pid=r["pid"])
            finish(r["pid"])
        finally:
            PROMPT[0] = "The river runs"
        one = h("launch", fn=f"{__name__}:child", args=["Yes"], stop_on_entry=True)["pid"]
        s = h("wait_stopped", pid=one)
        for how in ("step", "step_over"):
            st = h(how, pid=one)
            s = h("wait_stopped", pid=one, after=st["after"], step=st["step"])
        b = h("step_back", pid=one, steps=1)
        s = h("wait_stopped", pid=b["pid"])
        h("edit_dist", pid=b["pid"], ban=[s["result"]["preferred"]["token"]])
        h("pause", pid=b["pid"])
        h("step_out", pid=b["pid"])
        finish(b["pid"])
        h("set_stop_on_entry", enabled=False)
        finish(h("restart", pid=one)["pid"])
        h("profile_stop")
        h("unwatch")
        h("detach")
    finally:
        unsub()
        dbg.detach()
    return responses, events


@pytest.mark.slow  # the session: ~15 s here, ~25 s with the engine's load
def test_real_responses_conform(traffic):
    """Every body a real session answered — one of every command — validates against its
    command's type (closed: a renamed or unknown field fails)."""
    responses, _ = traffic
    for r in responses:
        check_body(r["command"], r["body"])
    asked = {r["command"] for r in responses}
    assert set(COMMANDS) == asked, set(COMMANDS) - asked


@pytest.mark.slow  # the session: ~15 s here, ~25 s with the engine's load
def test_real_events_conform(traffic):
    _, events = traffic
    for ev in events:
        assert ev["type"] == "event" and ev["event"] in EVENT_BODIES
        check_event(ev["event"], ev["body"])
    assert set(EVENTS) <= {ev["event"] for ev in events}, set(EVENTS) - {ev["event"] for ev in events}


@pytest.mark.slow  # the session: ~15 s here, ~25 s with the engine's load
def test_a_renamed_field_fails(traffic):
    """The check is not vacuous: the same real stop with one field renamed (deep in its
    distribution) or dropped is refused, naming the field."""
    _, events = traffic
    stop = next(e["body"] for e in events if e["event"] == "stopped" and e["body"]["result"])
    check_event("stopped", stop)
    renamed = {**stop, "result": {**stop["result"], "preferred": dict(stop["result"]["preferred"])}}
    renamed["result"]["preferred"]["tok"] = renamed["result"]["preferred"].pop("token")
    with pytest.raises(ValidationError, match="preferred.tok"):
        check_event("stopped", renamed)
    dropped = {k: v for k, v in stop.items() if k != "stop_id"}
    with pytest.raises(ValidationError, match="stop_id"):
        check_event("stopped", dropped)


# --- bad requests --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, arguments, says",
    [
        ("step", {"pid": "3"}, "step: pid: Input should be a valid integer"),
        ("step", {"pid": True}, "step: pid: Input should be a valid integer"),
        ("step", {"granularity": "line"}, "step: granularity: Input should be 'pred' or 'syscall'"),
        ("wait_stopped", {"timeout": "5"}, "wait_stopped: timeout: Input should be a valid number"),
        ("token_texts", {"ids": [1, "2"]}, "token_texts: ids[1]: Input should be a valid integer"),
        ("set_breakpoint", {"call": "pred", "colour": "red"}, "set_breakpoint: unknown argument(s) ['colour']"),
        ("what_if", {"pid": 1, "position": 2, "sampler": {"top_k": "8"}}, "what_if: sampler.top_k"),
        ("restart", {}, "restart: pid: Field required"),
        ("launch", {"fn": "m:f", "args": {"a": 1}}, "launch: args: Input should be a valid list"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(command, arguments, says):
    """Checked before the Debugger runs anything: a debugger with no engine behind it answers."""
    dbg = Debugger.__new__(Debugger)  # never reached: the schema refuses first
    r = handle_command(dbg, {"type": "request", "seq": 9, "command": command, "arguments": arguments})
    assert r["success"] is False and r["error"] == "ProtocolError" and r["request_seq"] == 9, r
    assert says in r["message"], r["message"]


def test_where_is_still_refused_as_in_process_only():
    r = handle_command(Debugger.__new__(Debugger), {"command": "set_breakpoint", "arguments": {"where": "x"}})
    assert not r["success"] and "in-process only" in r["message"]
