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
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import publish

ROOT = Path(__file__).resolve().parent.parent

GREEDY = """
def greedy(sym, prompt, n):
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for _ in range(n):
        t = sym.pred(kv, toks).argmax()
        out.append(t)
        toks = [t]
    sym.kv_close(kv)
    return len(out)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_front(address: str, replicas: int, users: list[dict], tmp: str) -> tuple[subprocess.Popen, str]:
    import httpx

    from symphony_core.scaleout.serve import ray_env

    uf = os.path.join(tmp, f"users-{replicas}.json")
    Path(uf).write_text(json.dumps({"users": users}))
    port = _free_port()
    log = open(os.path.join(tmp, f"front-{replicas}.log"), "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "symphony_core.cli",
            "serve",
            "--ray",
            address,
            "--replicas",
            str(replicas),
            "--replica-host",
            "127.0.0.1",
            "--port",
            str(port),
            "--users-file",
            uf,
            "--num-pages",
            "1024",
            "--threads",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=ray_env(),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"front exited: {Path(log.name).read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("front not ready in 600 s")


def stop_front(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def workload(url: str, users: list[dict], programs: int, tokens: int) -> dict:
    from symphony_core.client import Client

    errors: list[str] = []
    done = [0]
    lock = threading.Lock()

    def one_user(u: dict) -> None:
        c = Client(url, token=u["token"], timeout=600)
        for i in range(programs):
            try:
                p = c.launch(None, f"User {u['name']} asks question {i}:", tokens, source=GREEDY, entry="greedy")
                n = p.result(timeout=600)
                with lock:
                    done[0] += n
            except Exception as e:  # counted, and reported
                errors.append(f"{u['name']}: {type(e).__name__}: {e}")

    # one warm-up program per user (places users on replicas, warms each engine)
    ths = [
        threading.Thread(
            target=lambda u=u: (
                Client(url, token=u["token"], timeout=600)
                .launch(None, "warm", 1, source=GREEDY, entry="greedy")
                .result(timeout=600)
            )
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
                        stop_front(proc)
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
