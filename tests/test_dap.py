"""`symphony-lab dap` features beyond the walkthrough, in-process on the test session's engine,
every message checked against the DAP schema: source breakpoints with a condition and a hit count,
an override set before the pred returns, the program's `send`s as output; a function breakpoint
on a syscall with the KV scope and a what-if from the console; exception breakpoints post-mortem;
and clear errors for bad requests."""

from __future__ import annotations

import json
import os
import socket
import threading
from contextlib import contextmanager

import pytest

from symphony_lab.dap import DapSession
from symphony_lab.dap.framing import Channel
from tests.dap_client import DapClient

HERE = os.path.dirname(os.path.abspath(__file__))
LIPS = os.path.join(HERE, "dap_lips.py")


def line_of(marker: str) -> int:
    with open(LIPS) as f:
        return next(i for i, ln in enumerate(f.read().splitlines(), 1) if marker in ln)


@contextmanager
def dap(engine):
    a, b = socket.socketpair()
    ra, wa = a.makefile("rb"), a.makefile("wb")
    t = threading.Thread(target=lambda: DapSession(Channel(ra, wa), engine=engine).run(), daemon=True)
    t.start()
    c = DapClient(b.makefile("rb"), b.makefile("wb"))
    try:
        c.request("initialize", {"adapterID": "symphony-lip"})
        yield c
        c.check_all()
    finally:
        b.shutdown(socket.SHUT_RDWR)
        t.join(30)
        assert not t.is_alive()


def launch(c: DapClient, fn: str, setup=None, **kwargs) -> None:
    c.request("launch", {"program": f"{LIPS}:{fn}", "kwargs": kwargs})
    c.event("initialized")
    if setup is not None:
        setup()
    c.request("configurationDone")


def scope(c: DapClient, frame_id: int, name: str) -> dict[str, dict]:
    scopes = c.request("scopes", {"frameId": frame_id})["body"]["scopes"]
    ref = next(s["variablesReference"] for s in scopes if s["name"] == name)
    return {
        v["name"]: {**v, "ref": ref} for v in c.request("variables", {"variablesReference": ref})["body"]["variables"]
    }


def result_of(c: DapClient) -> object:
    c.event("terminated")
    line = next(o for o in c.outputs("console") if " returned " in o)
    return json.loads(line.split(" returned ", 1)[1])


def test_source_breakpoint_condition_hit_count_override_and_send_output(engine):
    pred_line = line_of("# PRED_LINE")
    with dap(engine) as c:

        def setup():
            r = c.request(
                "setBreakpoints",
                {
                    "source": {"path": LIPS},
                    "breakpoints": [
                        {"line": pred_line, "condition": "i >= 1", "hitCondition": "2"},
                        {"line": pred_line - 2, "hitCondition": "two"},
                        {"line": 9999},
                    ],
                },
            )["body"]["breakpoints"]
            assert r[0]["verified"] and r[0]["line"] == pred_line
            assert not r[1]["verified"] and "hit condition" in r[1]["message"]
            assert not r[2]["verified"] and "past the end" in r[2]["message"]
            box.append(r[0]["id"])

        box: list[int] = []
        launch(c, "chat", setup, n=4)
        ev = c.event("stopped", reason="breakpoint", threadId=1)  # i == 1 is the 1st hit, i == 2 the 2nd
        assert ev["body"]["hitBreakpointIds"] == box
        frames = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert frames[0]["name"].startswith("pred(kv=") and frames[0]["name"].endswith("1 token)")
        assert (frames[1]["name"], frames[1]["line"], frames[1]["source"]["path"]) == ("chat", pred_line, LIPS)
        assert scope(c, frames[1]["id"], "Locals")["i"]["value"] == "2"
        assert sorted(o.split(":")[0] for o in c.outputs("stdout")) == ["token 0", "token 1"]  # the sends so far
        # before the pred: the Model scope shows the thread's last pred (from the recording) ...
        model = scope(c, frames[0]["id"], "Model")
        assert model["pred"]["value"].startswith("#2 ") and model["taken"]["type"] == "token (recorded)"
        alt = int(model["top 2"]["value"].split("  id ")[1].split()[0])
        # ... and setting `taken` overrides the token the pred about to run returns
        r = c.request("setVariable", {"variablesReference": model["taken"]["ref"], "name": "taken", "value": str(alt)})
        assert r["body"]["value"].endswith("(when the pred returns)")
        bad = c.request(
            "setVariable", {"variablesReference": model["taken"]["ref"], "name": "entropy", "value": "1"}, ok=False
        )
        assert "only the Model scope's `taken`" in bad["message"]
        c.request("setBreakpoints", {"source": {"path": LIPS}, "breakpoints": []})
        c.request("continue", {"threadId": 1})
        out = result_of(c)
        assert out[2] == alt  # the third token is the override
        assert [o.split(": ")[1].strip() for o in c.outputs("stdout")] == [str(t) for t in out]
        assert c.event("exited")["body"]["exitCode"] == 0


def test_function_breakpoint_kv_scope_and_what_if(engine):
    with dap(engine) as c:

        def setup():
            r = c.request(
                "setFunctionBreakpoints", {"breakpoints": [{"name": "kv_close"}, {"name": "no such call!"}]}, ok=False
            )
            assert "names a syscall" in r["message"]
            c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "kv_close"}]})

        launch(c, "chat", setup, n=3)
        c.event("stopped", reason="function breakpoint", threadId=1)
        frames = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert frames[0]["name"].startswith("kv_close(kv=")
        kv = scope(c, frames[0]["id"], "KV")
        mine = next(v for k, v in kv.items() if k.endswith("(this call's)"))
        detail = {
            v["name"]: v["value"]
            for v in c.request("variables", {"variablesReference": mine["variablesReference"]})["body"]["variables"]
        }
        assert detail["text"].startswith("The capital of France is")  # the prompt, then the tokens fed
        n_tokens = int(detail["tokens"])
        assert mine["value"].startswith(f"{n_tokens} tokens")
        # what-if: the recorded run with another token at the first generated position
        prompt_len = n_tokens - 2  # 3 preds: the prompt's, then 2 single tokens fed (the 3rd is never fed)
        w = c.request("evaluate", {"expression": f'what-if {prompt_len} " London" 4', "context": "repl"})["body"][
            "result"
        ]
        assert "original" in w and "alternative" in w and '" London' in w.splitlines()[2]
        help_text = c.request("evaluate", {"expression": "help", "context": "repl"})["body"]["result"]
        assert "override" in help_text and "what-if" in help_text
        bad = c.request("evaluate", {"expression": "frobnicate", "context": "repl"}, ok=False)
        assert "unknown command 'frobnicate'" in bad["message"]
        c.request("continue", {"threadId": 1})
        assert len(result_of(c)) == 3


@pytest.mark.parametrize("filters", [["error"], []])
def test_exception_breakpoint_stops_post_mortem(engine, filters):
    with dap(engine) as c:
        launch(c, "fails", lambda: c.request("setExceptionBreakpoints", {"filters": filters}))
        if filters:
            ev = c.event("stopped", reason="exception")
            info = c.request("exceptionInfo", {"threadId": ev["body"]["threadId"]})["body"]
            assert info["exceptionId"] == "ValueError" and "the LIP's own bug" in info["description"]
            frames = c.request("stackTrace", {"threadId": ev["body"]["threadId"]})["body"]["stackFrames"]
            assert (frames[0]["name"], frames[0]["line"], frames[0]["source"]["path"]) == (
                "fails",
                line_of("# RAISE_LINE"),
                LIPS,
            )
            c.request("continue", {"threadId": ev["body"]["threadId"]})
        assert c.event("exited")["body"]["exitCode"] == 1
        c.event("terminated")
        assert any("the LIP's own bug" in o for o in c.outputs("stderr"))
        if not filters:
            assert not any(m.get("event") == "stopped" for m in c.messages)  # no filter, no stop


def test_bad_requests_get_clear_errors(engine):
    with dap(engine) as c:
        for args, msg in (
            ({"program": "nofile.py"}, "FILE.py:FUNC"),
            ({"program": f"{LIPS}:chat", "bogus": 1}, "unknown field(s) ['bogus']"),
            ({"program": f"{LIPS}:chat", "engine": {"gpus": 2}}, "engine: unknown option 'gpus'"),
            ({"program": f"{LIPS}:chat", "stopScope": "all"}, "stopScope must be"),
            ({"program": f"{LIPS}:nothere"}, "has no function 'nothere'"),
        ):
            assert msg in c.request("launch", args, ok=False)["message"]
        assert "not stopped" in c.request("stepIn", {"threadId": 1}, ok=False)["message"]
        assert "does not support the 'restartFrame'" in c.request("restartFrame", {"frameId": 1}, ok=False)["message"]
        assert "attach needs pid" in c.request("attach", {"server": "http://127.0.0.1:1"}, ok=False)["message"]


def test_next_reverse_continue_and_step_out(engine):
    with dap(engine) as c:
        c.request("launch", {"program": f"{LIPS}:chat", "kwargs": {"n": 3}, "stopOnEntry": True})
        c.event("initialized")
        c.request("configurationDone")
        c.event("stopped", reason="entry", threadId=1)
        for n in (1, 2):  # step over: one pred of this function each
            c.request("next", {"threadId": 1})
            c.event("stopped", reason="step", threadId=1)
            frames = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
            assert scope(c, frames[0]["id"], "Model")["pred"]["value"].startswith(f"#{n} ")
            assert frames[1]["line"] == line_of("# PRED_LINE")
        c.request("reverseContinue", {"threadId": 1})  # back to the start: a replay stopped on entry
        c.event("stopped", reason="step", threadId=1)
        frames = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert [f["name"] for f in frames] == ["chat (entry)"] and frames[0]["line"] == line_of("def chat(")
        assert "already at the start" in c.request("reverseContinue", {"threadId": 1}, ok=False)["message"]
        c.request("stepOut", {"threadId": 1})  # out of the LIP's own function: it runs to its end
        assert c.event("exited")["body"]["exitCode"] == 0
        assert len(result_of(c)) == 3
