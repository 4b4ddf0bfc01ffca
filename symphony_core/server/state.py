"""What the server holds while it runs: its configuration, the uploaded programs, the process
records, the quotas, the sandbox. Every route, the launch path and the plugins share one `State`."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from ..sandbox.pool import SandboxManager
from .metrics import ServerMetrics
from .records import KEEP_FINISHED_S, Registry
from .user_budget import DEFAULT_USER_MEMORY_MB, NAME_ENTRY_COST
from .users import QuotaKeeper, Users


@dataclass
class ServerConfig:
    max_body: int = 1 << 20  # bytes of one HTTP body or WebSocket message
    max_source: int = 512 << 10  # bytes of one program
    max_programs_per_user: int = 256
    sandbox: bool = True  # False: run every program in-process (development only)
    default_wall_time: float = 600.0  # seconds a program may run, unless it asks for less
    max_threads: int = 16  # LIP threads per program
    max_workers: int = 32  # sandboxed workers alive at once (more programs wait for one)
    sandbox_defaults: dict = field(default_factory=dict)  # SandboxSpec fields: cpu_seconds, memory_mb, ...
    keep_finished_s: float = KEEP_FINISHED_S  # how long a finished process's record (and result) is kept
    user_memory_mb: int = DEFAULT_USER_MEMORY_MB  # server memory one user's programs may hold in all (user_budget.py)
    drain_s: float = 5.0  # on SIGTERM: seconds running processes get to finish before they are cancelled
    # the OpenAI-compatible API (server/openai): the model's name in replies, and the sampling
    # defaults a request's unset fields take (--generation-config: temperature, top_p, top_k, ...)
    served_model_name: str | None = None
    generation_defaults: dict = field(default_factory=dict)
    max_model_len: int | None = None  # prompt + reply tokens of one request (--max-model-len)
    allowed_origins: tuple[str, ...] = ("*",)  # CORS (--allowed-origins)


@dataclass
class Program:
    id: str
    user: str
    source: str
    entry: str | None
    name: str
    created: float


class State:
    def __init__(self, engine, users: Users, config: ServerConfig, sandbox: SandboxManager | None) -> None:
        self.engine = engine
        self.users = users
        self.config = config
        self.sandbox = sandbox
        self.quotas = QuotaKeeper(engine, users)
        self.registry = Registry(
            on_drop=lambda pid: engine.runtime.reap(pid),
            keep_finished_s=config.keep_finished_s,
            user_memory_bytes=config.user_memory_mb << 20,
            name_bytes=lambda user: engine.kvfs.name_bytes(user, NAME_ENTRY_COST),
        )
        self.programs: dict[str, dict[str, Program]] = {}
        self.launch_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = time.time()
        self.metrics = ServerMetrics(engine, sandbox, config.served_model_name)
        self.draining = False  # SIGTERM received: no new processes, running ones get config.drain_s
        self.drained = False  # the drain deadline passed: what still ran is cancelled


__all__ = ["Program", "ServerConfig", "State"]
