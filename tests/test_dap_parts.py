"""The DAP adapter's parts without a model: frames on the wire, launch configurations, hit
conditions, what a user may type for a token, the post-mortem's reading of a real limit error,
and the VS Code extension's debugger contribution against the adapter's own configuration."""

from __future__ import annotations

import io
import json
import os

import pytest
from jsonschema import Draft7Validator

from symphony_lab.dap.breakpoints import parse_hit_condition
from symphony_lab.dap.config import LAUNCH_KEYS, ConfigError, parse_config
from symphony_lab.dap.console import ConsoleError, parse_token
from symphony_lab.dap.framing import FramingError, encode_frame, read_frame
from symphony_lab.dap.postmortem import failure_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VSCODE = os.path.join(ROOT, "editors", "vscode", "package.json")


def test_frames_round_trip_and_bad_frames_are_named():
    msgs = [
        {"seq": 1, "type": "request", "command": "initialize"},
        {"seq": 2, "type": "event", "event": "output", "body": {"output": "é\n"}},
    ]
    stream = io.BytesIO(b"".join(encode_frame(m) for m in msgs))
    assert [read_frame(stream), read_frame(stream), read_frame(stream)] == [*msgs, None]
    assert encode_frame({"a": "é"}).startswith(b"Content-Length: 10\r\n\r\n")  # bytes, not characters
    for raw, msg in (
        (b"Content-Length: x\r\n\r\n{}", "bad Content-Length"),
        (b"Content-Length: 2\r\n\r\n[]", "JSON object"),
        (b"Content-Length: 3\r\n\r\n{x}", "not JSON"),
    ):
        with pytest.raises(FramingError, match=msg):
            read_frame(io.BytesIO(raw))


def test_launch_configurations():
    cfg = parse_config(
        "launch", {"type": "symphony-lip", "name": "x", "program": "a.py:f", "args": [1], "engine": {"num_pages": 64}}
    )
    assert (cfg.program, cfg.args, cfg.engine, cfg.stop_on_entry, cfg.sandbox) == (
        "a.py:f",
        [1],
        {"num_pages": 64},
        False,
        True,
    )
    cfg = parse_config("attach", {"server": "http://h:8000", "token": "t", "pid": 7})
    assert (cfg.server, cfg.pid) == ("http://h:8000", 7)
    for req, args, msg in (
        ("launch", {"program": "a.py:f", "engine": {"num_pages": 1}, "server": "http://h"}, "not both"),
        ("launch", {"program": "a.py:f", "args": "x"}, "args must be a list"),
        ("launch", {"program": "a.py:f", "topk": 0}, "topk must be"),
        ("launch", {"program": "a.py:f", "engine": {"num_pages": True}}, "engine.num_pages has the wrong type"),
        ("attach", {"pid": 3}, "attach needs server"),
    ):
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
            parse_config(req, args)


def test_hit_conditions_and_tokens_typed_by_a_user():
    assert [parse_hit_condition(x) for x in ("3", "==3", " >= 2 ", "%4", "", None)] == [
        ("==", 3),
        ("==", 3),
        (">=", 2),
        ("%", 4),
        None,
        None,
    ]
    for bad in ("0", "<3", "three"):
        with pytest.raises(ValueError):
            parse_hit_condition(bad)
    top = [{"token": 10}, {"token": 20}]
    assert parse_token("#2", top) == {"token": 20}
    assert parse_token("1234") == {"token": 1234}
    assert parse_token('" Lyon"') == {"text": " Lyon"} and parse_token("' Lyon'") == {"text": " Lyon"}
    assert parse_token("Lyon") == {"text": "Lyon"}
    with pytest.raises(ConsoleError, match="has 2 entries"):
        parse_token("#3", top)


def test_a_real_limit_error_is_the_limit_filter_and_a_bug_the_error_filter(engine):
    from symphony_core.lip import Limits
    from tests.dap_lips import fails, over_limit

    for fn, limits, kind, type_ in (
        (over_limit, Limits(max_tokens=64), "limit", "LimitExceeded"),
        (fails, None, "error", "ValueError"),
    ):
        proc = engine.launch(fn, limits=limits) if limits else engine.run(fn)
        assert proc.wait(120)
        pm = failure_of({"status": proc.status, "error": str(proc.error)}, lambda *a, **k: {"processes": []}, proc.pid)
        assert pm is not None and (pm.filter, pm.error_type) == (kind, type_), str(proc.error)


def test_the_vscode_extension_contributes_the_adapters_configuration():
    with open(VSCODE) as f:
        pkg = json.load(f)
    (dbg,) = pkg["contributes"]["debuggers"]
    assert dbg["type"] == "symphony-lip" and "onDebugResolve:symphony-lip" in pkg["activationEvents"]
    launch = dbg["configurationAttributes"]["launch"]
    assert set(launch["properties"]) <= LAUNCH_KEYS and launch["required"] == ["program"]
    schema = {**launch, "type": "object"}
    for snippet in dbg["configurationSnippets"]:  # every snippet the editor offers is one the adapter takes
        body = snippet["body"]
        if body["request"] == "launch":
            Draft7Validator(schema).validate({k: v for k, v in body.items() if k in launch["properties"]})
        placeholders = {"program": "lip.py:main", "token": "T"}  # VS Code fills in ${file}, ${env:...}
        parse_config(body["request"], {k: placeholders.get(k, v) for k, v in body.items()})


NODE_CHECK = """
const Module = require('module');
const made = [];
const vscode = {
  DebugAdapterExecutable: class { constructor(c, a) { made.push(['exe', c, a]); } },
  DebugAdapterServer: class { constructor(p, h) { made.push(['server', p, h]); } },
  debug: {
    registerDebugAdapterDescriptorFactory: (t, f) => { made.push(['factory', t]); vscode.f = f; return {dispose() {}}; },
    registerDebugConfigurationProvider: (t, p) => { vscode.p = p; return {dispose() {}}; },
  },
  workspace: {getConfiguration: () => ({get: (k, d) => ['/venv/bin/symphony-lab', 'dap']})},
  window: {showErrorMessage: (m) => { made.push(['error', m]); return Promise.resolve(); }},
};
const load = Module._load;
Module._load = function (req, ...rest) { return req === 'vscode' ? vscode : load.call(this, req, ...rest); };
const ext = require(process.argv[1]);
const ctx = {subscriptions: []};
ext.activate(ctx);
vscode.f.createDebugAdapterDescriptor({configuration: {type: 'symphony-lip', request: 'launch', name: 'x', program: 'a.py:f'}});
vscode.f.createDebugAdapterDescriptor({configuration: {type: 'symphony-lip', request: 'launch', name: 'x', debugServer: 4711}});
const refused = vscode.p.resolveDebugConfiguration(undefined, {type: 'symphony-lip', request: 'launch', name: 'x'});
console.log(JSON.stringify({made, subscriptions: ctx.subscriptions.length, refused: refused === undefined}));
"""


def test_the_built_vscode_extension_starts_the_adapter():
    import shutil
    import subprocess

    built = os.path.join(ROOT, "editors", "vscode", "dist", "extension.js")
    if not os.path.exists(built) or shutil.which("node") is None:
        pytest.skip("the VS Code extension is not built (make vscode-ext) or node is missing")
    out = subprocess.run(["node", "-e", NODE_CHECK, built], capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got["made"][:3] == [
        ["factory", "symphony-lip"],
        ["exe", "/venv/bin/symphony-lab", ["dap"]],
        ["server", 4711, "127.0.0.1"],
    ]
    assert got["subscriptions"] == 2 and got["refused"] and got["made"][3][0] == "error"
