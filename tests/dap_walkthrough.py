"""The README's walkthrough as an editor runs it over DAP: launch the prefix-caching example (one
thread per question) stopped on entry, step into three times (the shared prefill, then into an
answer thread's first pred, then its next token), read the top-k, override with the runner-up,
step back, continue. Every message is checked against the DAP schema by `DapClient`.

A step back replays the recording up to the pred before the stop and undoes the rest, the
override of the stop it leaves included; so the walkthrough steps once past the override (the
next pred is fed the runner-up) and steps back onto the overridden pred, which the replay
hands the program again: the end result carries the override."""

from __future__ import annotations

import json
import os
import uuid

from tests.dap_client import DapClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM_FILE = os.path.join(ROOT, "examples", "lips", "prefix_parallel.py")
PROGRAM = f"{PROGRAM_FILE}:prefix_parallel"
QUESTIONS = ["When is the library open on Saturday?", "How much are late fees?"]


def _line_of(text: str) -> int:
    with open(PROGRAM_FILE) as f:
        return next(i for i, ln in enumerate(f.read().splitlines(), 1) if text in ln)


def _model(c: DapClient, frame_id: int) -> dict[str, dict]:
    scopes = c.request("scopes", {"frameId": frame_id})["body"]["scopes"]
    names = [s["name"] for s in scopes]
    assert names[1:] == ["Model", "KV"] and names[0] in ("Locals", "Call"), names
    ref = next(s["variablesReference"] for s in scopes if s["name"] == "Model")
    return {
        v["name"]: {**v, "ref": ref} for v in c.request("variables", {"variablesReference": ref})["body"]["variables"]
    }


def _token_id(value: str) -> int:
    return int(value.split("  id ")[1].split()[0])


def _prob(value: str) -> float:
    return float(value.rsplit("p=", 1)[1])


def run_walkthrough(c: DapClient, launch: dict, *, override_by: str) -> dict:
    """Drive the walkthrough; returns what it saw (for the caller's own checks)."""
    caps = c.request("initialize", {"adapterID": "symphony-lip", "linesStartAt1": True, "columnsStartAt1": True})
    assert caps["body"]["supportsStepBack"] and caps["body"]["supportsSetVariable"]
    path = f"/shared/dap-test-{uuid.uuid4().hex[:10]}.kv"  # a fresh name: the first step is its prefill
    args = {
        "program": PROGRAM,
        "kwargs": {"questions": QUESTIONS, "max_tokens": 6, "path": path},
        "stopOnEntry": True,
        **launch,
    }
    c.request("launch", args)
    c.event("initialized")
    c.request("setExceptionBreakpoints", {"filters": []})
    c.request("configurationDone")

    # stopped on entry, at the LIP function's def line in the real file
    c.event("stopped", reason="entry", threadId=1)
    st = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
    assert st[0]["source"]["path"] == PROGRAM_FILE and st[0]["line"] == _line_of("def prefix_parallel(")

    # three steps into: prefill on the main thread, then into an answer thread, then one more token
    tid, seen = 1, []
    for i in range(3):
        c.request("stepIn", {"threadId": tid})
        ev = c.event("stopped", reason="step", preserveFocusHint=None)  # the landing, not another thread held
        tid = ev["body"]["threadId"]
        frames = c.request("stackTrace", {"threadId": tid})["body"]["stackFrames"]
        seen.append((tid, frames))
        if i == 1:
            step2 = _model(c, frames[0]["id"])
    assert seen[0][0] == 1 and seen[1][0] >= 2 and seen[2][0] == seen[1][0]  # followed into a spawned thread
    threads = {t["id"] for t in c.request("threads")["body"]["threads"]}
    assert {1, tid} <= threads and len(threads) >= 2

    top = frames[0]
    assert top["name"].startswith("pred(kv=") and "1 token" in top["name"], top["name"]  # one decode token
    answer_line = _line_of("g = generate(sym, kv, tokens, max_tokens)")
    assert any(f.get("source", {}).get("path") == PROGRAM_FILE and f["line"] == answer_line for f in frames), frames

    # the Model scope: the top-k with probabilities, the token taken (greedy: the most likely)
    model = _model(c, top["id"])
    tops = [model[f"top {i}"]["value"] for i in range(1, 11)]
    probs = [_prob(v) for v in tops]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    assert _token_id(model["taken"]["value"]) == _token_id(tops[0])
    assert model["pred"]["value"].startswith("#2 ")
    first, runner_up = _token_id(tops[0]), _token_id(tops[1])
    console = c.request("evaluate", {"expression": "topk 3", "frameId": top["id"], "context": "repl"})["body"]["result"]
    assert console.splitlines()[1].startswith("  2. ") and f"id {runner_up} " in console.splitlines()[1]

    # override with the runner-up: through the Model scope's `taken`, or the debug console
    if override_by == "setVariable":
        r = c.request("setVariable", {"variablesReference": model["taken"]["ref"], "name": "taken", "value": "#2"})
        assert _token_id(r["body"]["value"]) == runner_up
    else:
        r = c.request("evaluate", {"expression": "override #2", "frameId": top["id"], "context": "repl"})
        assert _token_id(r["body"]["result"]) == runner_up
    frames = c.request("stackTrace", {"threadId": tid})["body"]["stackFrames"]
    after = _model(c, frames[0]["id"])
    assert _token_id(after["taken"]["value"]) == runner_up and after["taken"]["type"] == "token (override)"
    assert _prob(after["top 1"]["value"]) == 1.0  # what the program receives now
    before = after["before the override"]  # the model's own distribution, kept
    orig = c.request("variables", {"variablesReference": before["variablesReference"]})["body"]["variables"]
    assert [v["value"] for v in orig] == tops and f"id {first} " in before["value"]

    # one more step: the program feeds the runner-up to its next pred
    c.request("stepIn", {"threadId": tid})
    c.event("stopped", reason="step", threadId=tid)
    frames = c.request("stackTrace", {"threadId": tid})["body"]["stackFrames"]
    call = c.request("scopes", {"frameId": frames[0]["id"]})["body"]["scopes"][0]
    assert call["name"] == "Call"
    args = {
        v["name"]: v["value"]
        for v in c.request("variables", {"variablesReference": call["variablesReference"]})["body"]["variables"]
    }
    assert json.loads(args["tokens"]) == [runner_up]
    assert _model(c, frames[0]["id"])["pred"]["value"].startswith("#3 ")

    # step back: a replay of the recording, stopped right after the thread's previous pred (the overridden one)
    c.request("stepBack", {"threadId": tid})
    c.event("stopped", reason="step", threadId=tid)
    back = c.request("stackTrace", {"threadId": tid})["body"]["stackFrames"]
    model_back = _model(c, back[0]["id"])
    assert model_back["pred"]["value"].startswith("#2 ")  # the earlier pred, in the replay
    assert _token_id(model_back["taken"]["value"]) == runner_up  # the replay hands it the overridden distribution
    assert _token_id(model_back["top 1"]["value"]) == runner_up and _prob(model_back["top 1"]["value"]) == 1.0
    assert back[0]["name"].startswith("pred(kv=") and back[1:] and back[1]["name"] == frames[1]["name"]
    assert step2["pred"]["value"].startswith("#1 ")

    # continue: the program ends; its result carries the overridden token
    c.request("continue", {"threadId": tid})
    exited = c.event("exited")
    c.event("terminated")
    assert exited["body"]["exitCode"] == 0
    line = next(o for o in c.outputs("console") if " returned " in o)
    result = json.loads(line.split(" returned ", 1)[1])
    answer = result["answers"][tid - 2]  # thread k answers question k - 2
    assert answer["tokens"][1] == runner_up != first, (answer, runner_up, first, result)  # the override, not the pick
    c.request("disconnect", {"terminateDebuggee": True})
    return {"tid": tid, "runner_up": runner_up, "first": first, "answer": answer, "checked": c.check_all()}
