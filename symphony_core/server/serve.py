"""`symphony serve`: load the engine, start the sandbox, run the ASGI app under uvicorn.

Shutdown (SIGTERM or Ctrl-C): new programs are refused (503); running processes get `drain_s` seconds
to finish (drain.py), then what still runs is cancelled and its waiters are answered; then
connections close, the sandbox zygote kills its remaining workers and exits, and the
engine's scheduler stops. No worker outlives the server: each one also dies with its parent
(PR_SET_PDEATHSIG), and everything a worker starts dies with it (it is pid 1 of its own pid
namespace, and forking is refused by seccomp).
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading

from .vllm_flags import OpenAIOptions, chat_template_text, generation_defaults, torch_dtype

log = logging.getLogger("symphony.server")


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_taken(host: str, port: int) -> str | None:
    """Why (host, port) cannot be listened on, found before the model loads; None when it can."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return str(e)
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(addr)
        except OSError as e:
            return e.strerror or str(e)
    return None


def _mallopt(param: int, value: int) -> None:
    """glibc's mallopt, where the C library has it (a no-op elsewhere)."""
    try:
        ctypes.CDLL(None).mallopt(param, value)
    except (OSError, AttributeError):
        pass


def _few_heap_arenas() -> None:
    """glibc gives threads heap arenas of their own, up to eight a core; the server's record, request and
    drain threads come and go, and memory they freed stayed spread over those arenas: a server's RSS rose
    ~15 MB a round over 16 rounds of the hostile soak with nothing live behind it, and stayed flat with
    two arenas (as the sandbox's workers run). MALLOC_ARENA_MAX in the environment, if set, wins."""
    if "MALLOC_ARENA_MAX" not in os.environ:
        _mallopt(-8, 2)  # M_ARENA_MAX, before the engine's and the server's threads start


def _free_large_blocks_at_once() -> None:
    """Blocks of 256 KiB and more (large messages) come from mmap and go back to the OS when freed;
    glibc's default raises that threshold as blocks are freed, so freed memory stayed in the heap."""
    _mallopt(-3, 256 << 10)  # M_MMAP_THRESHOLD


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str = "smollm2",
    users_file: str | None = None,
    user_flags: list[str] | None = None,
    sandbox: bool = True,
    max_workers: int = 32,
    cpu_seconds: int = 60,
    memory_mb: int = 1024,
    num_pages: int | None = None,
    kv_cache_gb: float = 1.0,
    threads: int | None = None,
    max_body: int = 1 << 20,
    wall_time: float = 600.0,
    log_level: str = "info",
    plugins: list[str] | None = None,
    keep_finished_s: float = 600.0,
    user_memory_mb: int = 128,
    drain_s: float = 5.0,
    weights: str = "fp32",
    kv_cache_dtype: str = "auto",
    prefix_cache: bool = True,
    openai: OpenAIOptions | None = None,
) -> int:
    _few_heap_arenas()
    import uvicorn

    from ..engine import Engine
    from ..errors import ModelError
    from ..sandbox.confine import SandboxSpec
    from ..sandbox.pool import SandboxManager
    from .app import create_app
    from .drain import start_drain
    from .gc_pauses import freeze_startup_heap
    from .http_errors import JSONErrorH11Protocol
    from .plugins import PluginError, load_plugin
    from .state import ServerConfig
    from .users import Users, load_users

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        users = Users(load_users(users_file, user_flags))
    except (OSError, ValueError) as e:
        print(f"symphony serve: bad users configuration: {e}", file=sys.stderr)
        return 2
    if users.open and not _is_loopback(host):
        print(
            f"symphony serve: refusing to listen on {host} without API tokens (give --user NAME:TOKEN or "
            "--users-file); without tokens only loopback addresses are allowed",
            file=sys.stderr,
        )
        return 2
    try:  # fail before the model loads if a plugin is not there
        for spec in plugins or []:
            load_plugin(spec)
    except PluginError as e:
        print(f"symphony serve: {e}", file=sys.stderr)
        return 2
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve() must run on the main thread (the sandbox is tied to it)")
    if (why := _port_taken(host, port)) is not None:
        print(f"symphony serve: cannot listen on {host}:{port}: {why}", file=sys.stderr)
        return 2
    oa = openai or OpenAIOptions()
    try:
        template = chat_template_text(oa.chat_template) if oa.chat_template else None
    except ValueError as e:
        print(f"symphony serve: {e}", file=sys.stderr)
        return 2
    try:
        engine = Engine(
            model,
            dtype=torch_dtype(oa.dtype, "cpu"),
            num_pages=num_pages,
            kv_cache_gb=kv_cache_gb,
            threads=threads,
            weights=weights,
            kv_cache_dtype=kv_cache_dtype,
            prefix_cache=prefix_cache,
        )
        gen_defaults = generation_defaults(oa.generation_config, engine.model_dir)
    except (ModelError, ValueError) as e:
        print(f"symphony serve: {e}", file=sys.stderr)
        return 2
    if template is not None:
        engine.tokenizer.template_source = template  # before anything is rendered with the model's
    if oa.max_num_seqs:
        engine.runtime.batch.max_batch = oa.max_num_seqs
    mgr = None
    if sandbox:
        mgr = SandboxManager(
            engine, max_workers=max_workers, defaults=SandboxSpec(cpu_seconds=cpu_seconds, memory_mb=memory_mb)
        )
        mgr.start()
        conf = mgr.probe()
        for line in conf.get("enforced", []):
            log.info("sandbox enforces %s", line)
        for line in conf.get("missing", []):
            log.warning("sandbox does NOT enforce %s", line)
    config = ServerConfig(
        max_body=max_body,
        sandbox=sandbox,
        max_workers=max_workers,
        default_wall_time=wall_time,
        keep_finished_s=keep_finished_s,
        user_memory_mb=user_memory_mb,
        drain_s=drain_s,
        served_model_name=oa.served_model_name,
        generation_defaults=gen_defaults,
        max_model_len=oa.max_model_len,
        allowed_origins=tuple(oa.allowed_origins) if oa.allowed_origins is not None else ("*",),
    )
    _free_large_blocks_at_once()
    app = create_app(engine, users, config, mgr, plugins=plugins or [])
    # WebSocket frames up to twice --max-body reach the app, which answers "over the limit" in a
    # message; larger ones are refused by uvicorn itself (close code 1009, message too big).
    uv = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=JSONErrorH11Protocol,  # an unparsable request is answered in the JSON error format
        ws_max_size=2 * max_body,
        ws_ping_interval=None,
        timeout_graceful_shutdown=3,  # after the drain (DrainingServer): for connections still open
        lifespan="on",
        access_log=False,
        backlog=4096,
    )
    state = app.state.symphony

    class DrainingServer(uvicorn.Server):
        """On the first SIGTERM/SIGINT, drains (drain.py) while still accepting connections (a new
        program gets a JSON 503, not a refused connection), then stops; a second signal stops now."""

        def handle_exit(self, sig, frame) -> None:
            if state.draining:
                super().handle_exit(sig, frame)
                return
            stop = super().handle_exit
            start_drain(state, lambda: stop(sig, frame))

    server = DrainingServer(uv)
    frozen = freeze_startup_heap()  # the last thing before serving: gc_pauses.py
    if frozen:
        log.info("froze %d objects of the start-up heap out of the garbage collector's walks", frozen)
    auth = "no tokens (loopback only)" if users.open else f"{len(users.users)} user(s)"
    mounted = "".join(f", plugin {p} at {path}" for p, path in app.state.plugin_paths)
    print(
        f"symphony: serving {engine.model_name} on http://{host}:{port} "
        f"({'sandboxed' if sandbox else 'UNSANDBOXED'} programs, {auth}{mounted}); pid {os.getpid()}",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn re-raises the signal that stopped it once it is done; let it land on a no-op so the
    # clean-up below runs (and the exit status is 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: None)
    try:
        server.run()
    finally:
        log.info("shutting down")
        rt = engine._runtime
        if rt is not None:
            for p in list(rt.processes.values()):
                if not p.done:
                    p.cancel("the server is shutting down")
        if mgr is not None:
            mgr.shutdown()
        engine.shutdown()
        print("symphony: stopped", file=sys.stderr, flush=True)
    return 0
