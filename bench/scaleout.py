"""1 vs 2 replicas behind `symphony serve --ray` on a local Ray cluster of two simulated nodes.

The same closed workload runs against the front with `--replicas 1`, then `--replicas 2` (then
again, alternating, with --rounds 2): U users, each with its own token, run P greedy programs
of N tokens one after another, all users at once, through `symphony_core.client.Client` (the
WebSocket path). Reported: wall time, programs/s and generated tokens/s, and the ratio 2 vs 1 from
the same run. On the project's 2-core machine both replicas share the same two cores (each engine
runs with --threads 1), so little speed-up is expected here; on two real machines each replica
has its own.

    python -m bench.scaleout [--quick] [--users 4] [--programs 3] [--tokens 16] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from symphony_core.server.child import terminate

from .common import publish
from .lips import greedy
from .server_process import start_server

ROOT = Path(__file__).resolve().parent.parent


def start_front(address: str, replicas: int, users: list[dict], tmp: str) -> tuple[subprocess.Popen, str]:
    from symphony_core.scaleout.serve import ray_env

    args = ["--ray", address, "--replicas", str(replicas), "--replica-host", "127.0.0.1"]
    args += ["--num-pages", "1024", "--threads", "1"]
    return start_server(users, tmp, args, name=f"front-{replicas}", cwd=str(ROOT), env=ray_env(), ready_timeout=600)


def workload(url: str, users: list[dict], programs: int, tokens: int) -> dict:
    from symphony_core.client import Client

    errors: list[str] = []
    done = [0]
    lock = threading.Lock()

    def one_user(u: dict) -> None:
        c = Client(url, token=u["token"], timeout=600)
        for i in range(programs):
            try:
                n = len(c.run(greedy, f"User {u['name']} asks question {i}:", tokens).result(timeout=600))
                with lock:
                    done[0] += n
            except Exception as e:  # counted, and reported
                errors.append(f"{u['name']}: {type(e).__name__}: {e}")

    # one warm-up program per user (places users on replicas, warms each engine)
    ths = [
        threading.Thread(
            target=lambda u=u: Client(url, token=u["token"], timeout=600).run(greedy, "warm", 1).result(timeout=600)
        )
        for u in users
    ]
    [t.start() for t in ths]
    [t.join() for t in ths]
    t0 = time.perf_counter()
    ths = [threading.Thread(target=one_user, args=(u,)) for u in users]
    [t.start() for t in ths]
    [t.join() for t in ths]
    wall = time.perf_counter() - t0
    n_prog = len(users) * programs - len(errors)
    return {"wall_s": wall, "programs_per_s": n_prog / wall, "tokens_per_s": done[0] / wall, "errors": errors}


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description="1 vs 2 replicas behind symphony serve --ray")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--programs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)
    if a.quick:
        a.users, a.programs, a.tokens, a.rounds = 2, 1, 4, 1
    import ray

    from symphony_core.scaleout.local_cluster import start_local_cluster
    from symphony_core.scaleout.serve import ray_env

    users = [{"name": f"u{i}", "token": f"tok-u{i}"} for i in range(a.users)]
    saved = dict(os.environ)
    cluster = None
    rows = []
    try:
        os.environ.update(
            ray_env(
                {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
                }
            )
        )
        cluster = start_local_cluster(nodes=2, num_cpus=1, object_store_mb=100)
        with tempfile.TemporaryDirectory(prefix="symphony-scaleout-") as tmp:
            for rnd in range(a.rounds):
                for n in (1, 2):
                    proc, url = start_front(cluster.address, n, users, tmp)
                    try:
                        rows.append({"round": rnd, "replicas": n, **workload(url, users, a.programs, a.tokens)})
                    finally:
                        terminate(proc, 60)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)
    publish(__name__, {"rows": rows, "users": a.users, "programs": a.programs, "tokens": a.tokens})
    md = [
        f"{a.users} users x {a.programs} programs x {a.tokens} greedy tokens, all users at once",
        "",
        "| round | replicas | wall s | programs/s | tokens/s | errors |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['round']} | {r['replicas']} | {r['wall_s']:.1f} | {r['programs_per_s']:.2f} | "
            f"{r['tokens_per_s']:.1f} | {len(r['errors'])} |"
        )
    for rnd in range(a.rounds):
        one, two = (next(r for r in rows if r["round"] == rnd and r["replicas"] == n) for n in (1, 2))
        md.append(f"\nround {rnd}: 2 replicas vs 1: {two['tokens_per_s'] / one['tokens_per_s']:.2f}x tokens/s")
    return "\n".join(md)


if __name__ == "__main__":
    print(main())
