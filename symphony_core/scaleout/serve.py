"""`symphony serve --ray [ADDRESS] --replicas N`: start (or join) Ray, start the replicas, serve the front."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import signal
import sys

NAMESPACE = "symphony"  # Ray namespace of the replica actors (named symphony-r1, symphony-r2, ...)
SHIMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_shims")

# `symphony serve` flags every replica gets as they were given (the front itself runs no engine)
_PASS_THROUGH = [
    ("model", "--model"),
    ("max_workers", "--max-workers"),
    ("cpu_seconds", "--cpu-seconds"),
    ("memory_mb", "--memory-mb"),
    ("wall_time", "--wall-time"),
    ("num_pages", "--num-pages"),
    ("kv_cache_gb", "--kv-cache-gb"),
    ("threads", "--threads"),
    ("max_body", "--max-body"),
    ("log_level", "--log-level"),
]


def ray_env(env: dict | None = None) -> dict:
    """`env` (default: os.environ) with the import shims first on PYTHONPATH, for Ray's processes."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIMS, env.get("PYTHONPATH", "")) if p)
    return env


def replica_serve_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for attr, flag in _PASS_THROUGH:
        v = getattr(args, attr, None)
        if v is not None:
            out += [flag, str(v)]
    if getattr(args, "no_sandbox", False):
        out.append("--no-sandbox")
    for p in getattr(args, "plugin", None) or []:
        out += ["--plugin", p]
    return out


def load_users_doc(users_file: str | None, user_flags: list[str] | None) -> dict:
    """The users file's content plus `--user NAME:TOKEN` flags, as one users document."""
    users: list[dict] = []
    if users_file:
        with open(users_file) as f:
            users = list(json.load(f).get("users", []))
    for flag in user_flags or []:
        name, sep, token = flag.partition(":")
        if not sep or not name or not token:
            raise ValueError(f"--user expects NAME:TOKEN, got {flag!r}")
        users.append({"name": name, "token": token})
    return {"users": users}


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_on_ray(args: argparse.Namespace) -> int:
    try:
        import ray
        import uvicorn
    except ImportError as e:
        print(f"symphony serve --ray: {e}; install the extra: pip install 'symphony-lip[ray]'", file=sys.stderr)
        return 2
    from .front import create_front_app
    from .pool import ReplicaPool
    from .replica import ReplicaSpec

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded request otherwise
    try:
        users = load_users_doc(args.users_file, args.user)
    except (OSError, ValueError) as e:
        print(f"symphony serve: bad users configuration: {e}", file=sys.stderr)
        return 2
    if not users["users"] and not _is_loopback(args.host):
        print(
            f"symphony serve: refusing to listen on {args.host} without API tokens (give --user NAME:TOKEN or "
            "--users-file); without tokens only loopback addresses are allowed",
            file=sys.stderr,
        )
        return 2
    if args.replicas < 1:
        print(f"symphony serve: --replicas must be at least 1, got {args.replicas}", file=sys.stderr)
        return 2
    if args.ray == "local":
        from .local_cluster import init_local_ray

        os.environ.update(ray_env())  # the local Ray's processes inherit it
        init_local_ray(logging_level=logging.WARNING, namespace=NAMESPACE)
    else:
        ray.init(address=args.ray, logging_level=logging.WARNING, namespace=NAMESPACE)
    spec = ReplicaSpec(
        serve_args=replica_serve_args(args),
        users=users,
        host=args.replica_host,
        env={"PYTHONPATH": ray_env()["PYTHONPATH"]},
    )
    pool = ReplicaPool(args.replicas, spec, num_cpus=args.replica_cpus)
    try:
        infos = pool.start()
        app = create_front_app(pool)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_level="warning",
                ws_max_size=2 * args.max_body,
                ws_ping_interval=None,
                lifespan="on",
                timeout_graceful_shutdown=3,
                access_log=False,
                backlog=4096,
            )
        )
        where = ", ".join(f"{i.name} at {i.url} (node {i.node_id[:8]})" for i in infos)
        print(
            f"symphony: serving on http://{args.host}:{args.port} through {len(infos)} Ray replica(s): {where}; "
            f"pid {os.getpid()}",
            file=sys.stderr,
            flush=True,
        )
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda s, f: None)
        server.run()
    finally:
        pool.shutdown()
        ray.shutdown()
        print("symphony: stopped", file=sys.stderr, flush=True)
    return 0
