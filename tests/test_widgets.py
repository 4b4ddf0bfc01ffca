"""Notebook widgets and the lab layer, in process with the real model.

The widget's comm path (what a page without the server route uses), its live `view` updates
from background threads, malformed messages, relaunching an edited LIP, and the bridge
answering commands while the "kernel" thread is blocked waiting on a stopped LIP.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from symphony_lab.lab import Lab  # importing starts nothing: this module makes its own small Lab

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "symphony_lab" / "widgets" / "static"


def complete(sym, prompt: str, max_tokens: int = 6) -> str:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for _ in range(max_tokens):
        t = sym.pred(kv, toks).argmax()
        if t in sym.eos_token_ids:
            break
        out.append(t)
        sym.send(sym.detokenize([t]))
        toks = [t]
    sym.kv_close(kv)
    return sym.detokenize(out)


def shout(sym, prompt: str, max_tokens: int = 6) -> str:
    return complete(sym, prompt, max_tokens).upper()


@pytest.fixture(scope="module")
def lab(engine):
    """A Lab on the session's engine (no second model load); detached from it afterwards."""
    lab = Lab(engine=engine)
    lab.wait(300)
    yield lab
    for run in list(lab._runs.values()):
        p = run.process
        if p is not None and not p.done:
            p.cancel("test over")
            p.wait(10)
    lab.shutdown()
    rt = engine.runtime
    assert rt.kernel.hook is not lab.tap and rt.kernel.hook is not lab.debugger, "the shared engine's hook restored"
    assert lab._on_process_start not in rt.on_process_start


def wait_for(fn, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class CommSpy:
    """Stands in for the browser end of the widget's comm."""

    def __init__(self, widget) -> None:
        self.widget = widget
        self.sent: list = []
        widget.send = lambda content, buffers=None: self.sent.append(content)
        self.seq = 0

    def request(self, command: str, **arguments) -> dict:
        self.seq += 1
        self.widget._on_custom(
            self.widget, {"type": "request", "seq": self.seq, "command": command, "arguments": arguments}, []
        )
        resp = self.sent[-1]
        assert resp["request_seq"] == self.seq
        return resp


def test_bundle_is_built_into_the_package_without_cdn():
    js = (STATIC / "widget.js").read_text()
    assert "render" in js and "export" in js
    for bad in ("https://", "http://", "cdn.jsdelivr", "unpkg.com", "esm.sh"):
        assert f'from"{bad}' not in js.replace(" ", "") and f"import('{bad}" not in js
    assert (STATIC / "widget.css").exists()
    ext = json.loads((ROOT / "symphony_lab" / "jupyter" / "labextension" / "package.json").read_text())
    assert ext["name"] == "symphony-lab" and ext["jupyterlab"]["_build"]["load"]


def test_widget_steps_overrides_and_updates_live(lab):
    run = lab.run(complete, "The capital of France is", 6, stop_on_entry=True, display=False)
    w = run.widget
    spy = CommSpy(w)
    pid = run.wait_launched()
    wait_for(lambda: w.view.get("status") == "stopped", what="the widget to show the entry stop")
    assert w.view["stops"][0]["where"] == "entry"
    assert w.view["stops"][0]["source"]["lines"], "the LIP's source around the stop"
    for _ in range(2):
        before = w.view["stops"][0]["stop_id"]
        assert spy.request("step", pid=pid, tid=1)["success"]
        wait_for(
            lambda before=before: (
                w.view.get("stops")
                and w.view["stops"][0]["stop_id"] != before
                and w.view["stops"][0]["where"] == "after"
            ),
            what="the step's stop in the widget",
        )
    stop = w.view["stops"][0]
    assert stop["result"]["kind"] == "dist" and len(stop["result"]["topk"]) >= 3
    assert [t["text"] for t in w.view["tokens"]] == [" Paris"], "one token per pred so far"
    resp = spy.request("override", pid=pid, tid=1, text=" Lyon")
    assert resp["success"], resp
    wait_for(
        lambda: w.view["stops"] and w.view["stops"][0]["result"]["chosen"]["by"] == "override",
        what="the override in the widget",
    )
    assert spy.request("continue", pid=pid)["success"]
    wait_for(lambda: w.view.get("status") == "finished", what="the run to finish")
    v = w.view
    assert v["result"].startswith(" Paris Lyon"), v["result"]
    assert "".join(v["messages"]) == v["result"]
    over = [t for t in v["tokens"] if t["overridden"]]
    assert len(over) == 1 and over[0]["text"] == " Lyon"
    first = v["tokens"][0]
    assert 0.5 < first["p"] <= 1 and first["topk"][0]["text"] == " Paris"
    assert over[0]["p"] < first["p"], "an override shows how unlikely the model found it"
    assert v["timeline"]["batches"] and json.dumps(v)


def _two_preds(sym, kv, toks):
    d = sym.pred(kv, toks)
    return sym.pred(kv, [d.argmax()]).argmax()


def nested(sym, prompt: str) -> str:
    kv = sym.kv_create()
    t = sym.pred(kv, sym.tokenize(prompt)).argmax()
    t = _two_preds(sym, kv, [t])  # step over runs through both of its preds
    t = sym.pred(kv, [t]).argmax()
    sym.kv_close(kv)
    return sym.detokenize([t])


def test_widget_step_over_and_step_out(lab):
    """The widget's Step over / Step out buttons send the debugger's step_over / step_out."""
    run = lab.run(nested, "The capital of France is", breakpoints=[{"call": "pred", "hit_count": 2}], display=False)
    w = run.widget
    spy = CommSpy(w)
    pid = run.wait_launched()
    wait_for(lambda: w.view.get("status") == "stopped", what="the breakpoint in _two_preds")
    stop = w.view["stops"][0]
    assert stop["where"] == "before" and stop["call"] == "pred"
    assert any("sym.pred(kv, toks)" in ln["text"] for ln in stop["source"]["lines"] if ln["current"])
    spy.request("remove_breakpoint", id=lab.debugger.breakpoints()["breakpoints"][0]["id"])

    def current(st: dict) -> str:
        return next(ln["text"].strip() for ln in st["source"]["lines"] if ln["current"])

    assert spy.request("step_out", pid=pid, tid=1)["success"]
    wait_for(
        lambda: w.view.get("stops") and w.view["stops"][0]["stop_id"] != stop["stop_id"], what="the step_out's stop"
    )
    out = w.view["stops"][0]
    assert (out["where"], current(out)) == ("before", "t = sym.pred(kv, [t]).argmax()"), "back in nested()"
    assert spy.request("step_over", pid=pid, tid=1)["success"]
    wait_for(lambda: w.view.get("stops") and w.view["stops"][0]["stop_id"] != out["stop_id"], what="step_over")
    over = w.view["stops"][0]
    assert (over["where"], over["line"]) == ("after", out["line"]), "the same line's pred returned"
    assert spy.request("continue", pid=pid)["success"]
    wait_for(lambda: w.view.get("status") == "finished", what="the run to finish")
    js = (STATIC / "widget.js").read_text()
    assert "sl-step-over" in js and "sl-step-out" in js, "the bundle has the buttons"


def test_widget_profile_and_what_if_tabs(lab):
    """The Profile tab's data (the protocol's `profile` body of the run, each line with its source)
    and the What-if tab's `what_if`: the original token reproduces the run, another diverges at once."""
    run = lab.run(complete, "The capital of France is", 5, record=True, profile=True, display=False)
    w = run.widget
    spy = CommSpy(w)
    pid = run.wait_launched()
    text = run.result(timeout=120)
    prof = wait_for(lambda: (w.view.get("profile") or {}).get("done") and w.view["profile"], what="the final profile")
    loop = [r for r in prof["lines"] if r["text"] == "t = sym.pred(kv, toks).argmax()"]
    assert len(loop) == 1 and loop[0]["preds"] == 5 and loop[0]["forward"] > 0, prof["lines"]
    assert loop[0]["file"].endswith("test_widgets.py") and loop[0]["tokens"] >= 5
    assert {r["text"] for r in prof["lines"]} >= {"kv = sym.kv_create()", "toks = sym.tokenize(prompt)"}
    (th,) = prof["threads"]
    assert abs(th["total"] - th["wall"]) <= 0.05 * th["wall"]
    # the sidebar's path: the protocol's `profile` reads the same collector, with the lines' source
    top2 = spy.request("profile", pid=pid, top=2)["body"]
    assert top2["lines"] == prof["lines"][:2] and top2["lines_total"] == prof["lines_total"]

    (thr,) = w.view["what_if_threads"]
    n_prompt = len(lab.engine.tokenize("The capital of France is"))
    assert thr == {"tid": 1, "tokens": n_prompt + 5, "prompt": n_prompt}
    paris = lab.engine.tokenize(" Paris")[0]
    same = spy.request("what_if", pid=pid, tid=1, position=n_prompt, token=paris, max_tokens=4)
    assert same["success"], same
    assert same["body"]["diverge_at"] is None and same["body"]["reproduces_recording"]
    assert text.startswith(same["body"]["texts"]["original"])
    alt = spy.request("what_if", pid=pid, tid=1, position=n_prompt, text=" Rome", max_tokens=4)["body"]
    assert alt["diverge_at"] == 0 and alt["token_texts"]["alternative"][0] == " Rome" and alt["original"][0] == paris
    wait_for(lambda: (w.view.get("what_if") or {}).get("diverge_at") == 0, what="the what-if in the widget's view")
    bad = spy.request("what_if", pid=pid, tid=1, position=0, text=" Rome")
    assert not bad["success"] and "position must be in" in bad["message"]


def _topk(stop: dict) -> list[tuple[int, float]]:
    return [(t["token"], t["logit"]) for t in stop["result"]["topk"]]


def test_widget_records_and_steps_back_to_the_recorded_topk(lab):
    """Record from the widget on entry, step three preds, then Step back twice: each replayed
    stop shows the top-k the original run had at that pred, from the recorded logits."""
    run = lab.run(complete, "The capital of France is", 6, stop_on_entry=True, display=False)
    w = run.widget
    spy = CommSpy(w)
    pid = run.wait_launched()
    wait_for(lambda: w.view.get("status") == "stopped" and w.view.get("record"), what="the entry stop")
    assert w.view["record"]["recorded"] is False and w.view["record"]["can_step_back"] is False
    assert spy.request("record", pid=pid, enabled=True)["success"]  # the widget's Record button
    wait_for(lambda: w.view["record"]["recorded"] and w.view["record"]["complete"], what="the record indicator")
    assert run.record, "a relaunch records too"
    stops: list[dict] = []
    for _ in range(3):
        before = w.view["stops"][0]["stop_id"]
        assert spy.request("step", pid=pid, tid=1)["success"]
        wait_for(
            lambda before=before: (
                w.view.get("stops")
                and w.view["stops"][0]["stop_id"] != before
                and w.view["stops"][0]["where"] == "after"
            ),
            what="the step's stop in the widget",
        )
        stops.append(w.view["stops"][0])
    assert [s["preds"] for s in stops] == [1, 2, 3]
    wait_for(lambda: w.view["record"]["can_step_back"], what="step back offered")
    recorded = {e["seq"]: e for e in lab.debugger.recording(pid, entries=True)["entries"] if e["call"] == "pred"}
    waited: dict = {}  # a cell blocked on run.result() (like the browser test's second cell) follows the run
    waiter = threading.Thread(target=lambda: waited.update(text=run.result(120)))
    waiter.start()

    # the widget's Step back button: replay into a new process that stops after pred 2
    resp = spy.request("step_back", pid=pid, tid=1, steps=1)
    assert resp["success"], resp
    new = resp["body"]["pid"]
    assert new != pid and resp["body"]["target_pred"] == 2 and resp["body"]["from_pid"] == pid
    wait_for(
        lambda: w.view.get("pid") == new and w.view.get("stops") and w.view["stops"][0]["where"] == "after",
        what="the widget to follow the replay to its stop",
    )
    back = w.view["stops"][0]
    assert back["preds"] == 2 and back["pid"] == new
    assert _topk(back) == _topk(stops[1]), "the replayed stop shows the recorded top-k"
    assert [t["text"] for t in back["result"]["topk"]] == [t["text"] for t in stops[1]["result"]["topk"]]
    top5 = recorded[stops[1]["seq"]]["top5"]
    assert [t for t, _ in top5] == [t["token"] for t in back["result"]["topk"][:5]]
    assert [p for _, p in top5] == pytest.approx([t["p"] for t in back["result"]["topk"][:5]], abs=1e-5)
    rv = w.view["record"]
    assert rv["replay_of"] == pid and rv["recorded"] and rv["can_step_back"]
    assert run.pid == new and run.pids[-2:] == [pid, new]
    assert lab.engine.runtime.processes[pid].done, "the stepped-back process is cancelled"
    assert [t["text"] for t in w.view["tokens"]] == [" Paris"], "the replay's token stream, up to the stop"

    # again, from the replay: back to pred 1
    before = back["stop_id"]
    assert spy.request("step_back", pid=new, tid=1)["success"]
    wait_for(
        lambda: (
            w.view.get("pid") not in (pid, new)
            and w.view.get("stops")
            and w.view["stops"][0]["where"] == "after"
            and w.view["stops"][0]["stop_id"] != before
        ),
        what="the second step back",
    )
    assert w.view["stops"][0]["preds"] == 1 and _topk(w.view["stops"][0]) == _topk(stops[0])
    assert w.view["record"]["replay_of"] == pid, "a replay of a replay names the run first recorded"

    # and on to the end: the same text as the recorded run would have produced
    assert spy.request("continue", pid=run.pid)["success"]
    wait_for(lambda: w.view.get("status") == "finished", what="the replayed run to finish")
    assert w.view["result"] == run.result(0) and w.view["result"].startswith(" Paris")
    assert [t["text"] for t in w.view["tokens"]][:3] == [
        " Paris",
        stops[1]["result"]["chosen"]["text"],
        stops[2]["result"]["chosen"]["text"],
    ]
    assert not lab.debugger.replay_status(run.pid)["diverged"]
    waiter.join(30)
    assert waited.get("text") == w.view["result"], waited


def test_step_back_needs_a_recording(lab):
    run = lab.run(complete, "Hi", 3, stop_on_entry=True, display=False)
    spy = CommSpy(run.widget)
    pid = run.wait_launched()
    run.wait_stopped(30)
    run.step()
    resp = spy.request("step_back", pid=pid, tid=1)
    assert resp["success"] is False and "no recording" in resp["message"], resp
    assert run.pid == pid
    run.continue_()
    run.result(60)


@pytest.mark.parametrize(
    "content, says",
    [
        ("garbage", "expected a request object"),
        ({"type": "request", "command": "launch", "arguments": {"fn": "os:system", "args": ["true"]}}, "not allowed"),
        ({"type": "request", "command": "frobnicate"}, "unknown command"),
        ({"type": "request", "command": "step", "arguments": {"pid": "one"}}, "'pid' must be an integer"),
    ],
)
def test_malformed_widget_messages_are_rejected(lab, content, says):
    run = lab.run(complete, "Hi", 1, display=False)
    spy = CommSpy(run.widget)
    run.widget._on_custom(run.widget, content, [])
    resp = spy.sent[-1]
    assert resp["success"] is False and says in resp["message"], resp
    run.result(60)


def test_relaunch_runs_the_new_definition(lab):
    run = lab.run(complete, "The capital of France is", 3, display=False)
    first = run.result(60)
    old_pid = run.pid
    new_pid = run.relaunch(fn=shout)
    assert new_pid != old_pid and run.pids == [old_pid, new_pid]
    assert run.result(60) == first.upper()
    # the lab command (what the widget's Relaunch button sends) relaunches too
    resp = lab.handle({"type": "request", "seq": 9, "command": "relaunch", "arguments": {"pid": new_pid}})
    assert resp["success"] and resp["body"]["pid"] != new_pid
    assert run.result(60) == first.upper()


def test_engine_view_widget_and_lab_view(lab):
    w = lab.views()
    wait_for(lambda: w.view.get("kv_tree") is not None, what="the engine view")
    assert {"processes", "stops", "breakpoints", "kv_tree", "timeline"} <= set(w.view)
    resp = lab.handle({"type": "request", "seq": 1, "command": "lab_view"})
    assert resp["success"] and resp["body"]["engine"]["ready"]


def test_bridge_answers_while_the_kernel_thread_is_blocked(lab, tmp_path):
    """The reason for the bridge: a Step sent while a cell waits on the stopped LIP still runs."""
    from symphony_lab.jupyter.bridge import KernelBridge

    bridge = KernelBridge(lab.handle, "kernel-under-test", str(tmp_path)).start()
    try:
        run = lab.run(complete, "The capital of France is", 4, stop_on_entry=True, display=False)
        pid = run.wait_launched()
        run.wait_stopped(30)
        got: dict = {}

        def browser():
            with socket.create_connection(("127.0.0.1", bridge.port), timeout=30) as s:
                f = s.makefile("rb")
                s.sendall((json.dumps({"secret": bridge.secret}) + "\n").encode())
                assert json.loads(f.readline())["type"] == "hello"
                s.sendall(b'{"type": "request", "seq": 1, "command": "continue", "arguments": {"pid": %d}}\n' % pid)
                while True:
                    m = json.loads(f.readline())
                    if m.get("type") == "response":
                        got["resp"] = m
                        return

        t = threading.Thread(target=browser)
        t.start()
        text = run.result(60)  # this thread blocks, like a busy kernel; the bridge resumes the LIP
        t.join(30)
        assert got["resp"]["success"] and text.startswith(" Paris")
    finally:
        bridge.stop()


def test_a_view_that_fails_to_build_is_built_again(lab, monkeypatch):
    """The view pump builds a run's view again when building it failed (the engine moved under it):
    a process stopped at a breakpoint sends no further event, so a dropped update would leave its
    widget stale for good."""
    run = lab.run(complete, "Hi", 2, stop_on_entry=True, display=False)
    w = run.widget
    pid = run.wait_launched()
    wait_for(lambda: w.view.get("status") == "stopped", what="the entry stop")
    real = lab.run_views.run_view
    failed: list[int] = []

    def flaky(r):  # fails this run's first build only: the session's earlier runs may be built meanwhile
        if r.pid == pid and not failed:
            failed.append(r.pid)
            raise RuntimeError("dictionary changed size during iteration")
        return real(r)

    monkeypatch.setattr(lab.run_views, "run_view", flaky)
    run.scope = "engine"  # a change only a rebuilt view shows
    lab.mark_dirty(pid)
    wait_for(lambda: w.view.get("scope") == "engine", what="the view built again after a failure")
    assert failed == [pid]
    run.process.cancel("test over")
    assert run.process.wait(30)


def test_a_widget_made_as_its_process_stops_shows_the_stop(lab, monkeypatch):
    """The widget's first view is built before the process stops, and the pump, finding no
    widget yet, drops the stop's update: the widget must still come to show the stop (a stopped
    process sends no further event)."""
    from symphony_lab.notebook.view_pump import VIEW_INTERVAL

    run = lab.run(complete, "Hi", 2, stop_on_entry=True, display=False)
    pid = run.wait_launched()
    lab.debugger.wait_stopped(pid, timeout=60)
    time.sleep(3 * VIEW_INTERVAL)  # the pump's rounds take the stop's mark while the run has no widget
    real = lab.run_views.run_view

    def built_before_the_stop(r):
        view = real(r)
        return {**view, "status": "running", "stops": []} if r is run and run._widget is None else view

    monkeypatch.setattr(lab.run_views, "run_view", built_before_the_stop)
    w = run.widget
    assert w.view["status"] == "running"
    wait_for(lambda: w.view.get("status") == "stopped", timeout=10, what="the widget to show the stop")
    assert w.view["stops"][0]["where"] == "entry"
    run.process.cancel("test over")
    assert run.process.wait(30)
