"""A `launch` or `attach` request's arguments, checked: what to debug and where it runs.

    launch  {"program": "examples/lips/prefix_parallel.py:prefix_parallel", "args": [...],
             "kwargs": {...}, "stopOnEntry": true, "engine": {"num_pages": 512}}
    launch  {"program": "my_lip.py:main", "server": "http://127.0.0.1:8000", "token": "T"}
    attach  {"server": "http://127.0.0.1:8000", "token": "T", "pid": 7}

`engine` options build the in-process `Engine`; `server` runs the program on a `symphony serve
--plugin debugger` server through its own launch path (its sandbox and quotas).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENGINE_OPTIONS = {"model": str, "device": str, "num_pages": int, "kv_cache_gb": (int, float), "weights": str}
# keys an editor adds to every configuration (VS Code's launch.json, nvim-dap), not ours to check
EDITOR_KEYS = {
    "type",
    "request",
    "name",
    "cwd",
    "presentation",
    "internalConsoleOptions",
    "preLaunchTask",
    "postDebugTask",
    "debugServer",
    "noDebug",
    "console",
}
LAUNCH_KEYS = {"program", "args", "kwargs", "stopOnEntry", "engine", "server", "token", "sandbox", "stopScope", "topk"}
ATTACH_KEYS = {"server", "token", "pid", "stopScope", "topk"}


class ConfigError(ValueError):
    """A launch / attach configuration that cannot be used; the message says which field and why."""


@dataclass
class DebugConfig:
    request: str  # "launch" | "attach"
    program: str | None = None  # FILE.py:FUNC or module:FUNC
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    stop_on_entry: bool = False
    engine: dict = field(default_factory=dict)
    server: str | None = None
    token: str | None = None
    sandbox: bool = True
    pid: int | None = None
    stop_scope: str = "thread"
    topk: int = 10


def _typed(args: dict, key: str, kind: Any, what: str) -> Any:
    v = args.get(key)
    if v is None:
        return None
    if isinstance(v, bool) and kind is not bool:
        raise ConfigError(f"{key} must be {what}, got {v!r}")
    if not isinstance(v, kind):
        raise ConfigError(f"{key} must be {what}, got {v!r}")
    return v


def parse_config(request: str, args: Any) -> DebugConfig:
    """`args` of a `launch` / `attach` request as a `DebugConfig`, or ConfigError naming the problem."""
    if not isinstance(args, dict):
        raise ConfigError(f"{request} arguments must be a JSON object")
    allowed = LAUNCH_KEYS if request == "launch" else ATTACH_KEYS
    unknown = sorted(k for k in args if k not in allowed and k not in EDITOR_KEYS and not k.startswith("__"))
    if unknown:
        raise ConfigError(f"{request}: unknown field(s) {unknown}; it takes {sorted(allowed)}")
    cfg = DebugConfig(request=request)
    cfg.server = _typed(args, "server", str, "a URL like http://127.0.0.1:8000")
    cfg.token = _typed(args, "token", str, "a string")
    scope = _typed(args, "stopScope", str, "'thread' or 'process'") or "thread"
    if scope not in ("thread", "process"):
        raise ConfigError(f"stopScope must be 'thread' (non-stop) or 'process', got {scope!r}")
    cfg.stop_scope = scope
    topk = _typed(args, "topk", int, "an integer from 1 to 100")
    if topk is not None and not 1 <= topk <= 100:
        raise ConfigError(f"topk must be an integer from 1 to 100, got {topk}")
    cfg.topk = topk or 10
    if request == "attach":
        if cfg.server is None:
            raise ConfigError("attach needs server: the URL of a `symphony serve --plugin debugger` server")
        pid = _typed(args, "pid", int, "a process id (an integer)")
        if pid is None:
            raise ConfigError("attach needs pid: the process to debug (GET /v1/processes lists them)")
        cfg.pid = pid
        return cfg
    program = _typed(args, "program", str, "'FILE.py:FUNC' or 'module:FUNC'")
    if not program or ":" not in program:
        raise ConfigError(f"launch needs program: 'FILE.py:FUNC' or 'module:FUNC', got {program!r}")
    cfg.program = program
    cfg.args = list(_typed(args, "args", list, "a list of the LIP's arguments") or [])
    cfg.kwargs = dict(_typed(args, "kwargs", dict, "an object of the LIP's keyword arguments") or {})
    cfg.stop_on_entry = bool(_typed(args, "stopOnEntry", bool, "true or false"))
    sandbox = _typed(args, "sandbox", bool, "true or false")
    cfg.sandbox = True if sandbox is None else sandbox
    engine = _typed(args, "engine", dict, "an object of Engine options") or {}
    for k, v in engine.items():
        kind = ENGINE_OPTIONS.get(k)
        if kind is None:
            raise ConfigError(f"engine: unknown option {k!r}; it takes {sorted(ENGINE_OPTIONS)}")
        if isinstance(v, bool) or not isinstance(v, kind):
            raise ConfigError(f"engine.{k} has the wrong type: {v!r}")
    if engine and cfg.server:
        raise ConfigError("give engine (run in this process) or server (run on a server), not both")
    cfg.engine = dict(engine)
    return cfg


__all__ = ["ConfigError", "DebugConfig", "parse_config"]
