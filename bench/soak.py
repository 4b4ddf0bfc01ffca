"""A bounded soak of `symphony serve`: benign and hostile programs mixed, for a fixed time.

Starts a real server on loopback (from this checkout, or from `--root DIR`, another checkout
of the project, to compare before/after), then for `--seconds` runs client threads side by side:
benign ones launch a short greedy decode and check its tokens are exactly the first run's; hostile
ones cycle through message floods nobody reads, posts to a program that never recv()s, CPU
spins, memory hogs, thread bombs, programs with syntax errors, bad token ids, and prompts past
the context on the OpenAI endpoint. It samples the server's RSS every second and reports RSS
growth, KV pages before and after, errors (a 5xx, a wrong benign answer, a dropped connection)
and the benign programs' p50/p99 latency.

    python -m bench.soak [--seconds 60] [--benign 3] [--hostile 2] [--root DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx

from symphony_core.server.child import terminate

from . import lips
from .server_process import start_server

BENIGN = Path(lips.__file__).read_text()  # greedy(sym, prompt, n) -> token ids
HOSTILE = {
    "flood": ("def flood(sym):\n    for i in range(200):\n        sym.send('x' * (256 << 10))\n", []),
    "deaf": ("def deaf(sym):\n    import time\n    time.sleep(8)\n", []),
    "spin": ("def spin(sym):\n    while True:\n        pass\n", []),
    "hog": ("def hog(sym):\n    a = []\n    while True:\n        a.append(bytearray(16 << 20))\n", []),
    "threads": (
        "def threads(sym):\n    import threading, time\n    for _ in range(10000):\n"
        "        threading.Thread(target=time.sleep, args=(5,)).start()\n",
        [],
    ),
    "syntax": ("def syntax(sym:\n", []),
    "bad_ids": ("def bad_ids(sym):\n    return sym.detokenize([-5, 10**9])\n", []),
}
PROMPTS = ["Once upon a time", "The capital of France is", "def fib(n):"]


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024
    except (OSError, StopIteration):
        return float("nan")


def _pages(c: httpx.Client) -> int:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith("symphony_kv_pages_used "):
            return int(float(line.split()[1]))
    return -1


class Soak:
    def __init__(
        self, root: str, seconds: float, benign: int, hostile: int, keep_finished: float | None = None
    ) -> None:
        self.root, self.seconds, self.n_benign, self.n_hostile = root, seconds, benign, hostile
        self.keep_finished = keep_finished
        self.lat: list[float] = []
        self.errors: collections.Counter = collections.Counter()
        self.outcomes: collections.Counter = collections.Counter()
        self.expected: dict[str, str] = {}
        self.lock = threading.Lock()

    # --- the server ---------------------------------------------------------------------------
    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="symphony-soak-")
        users = [{"name": "good", "token": "tok-good"}, {"name": "evil", "token": "tok-evil"}]
        limits = ["--cpu-seconds", "4", "--memory-mb", "256", "--wall-time", "20", "--max-workers", "8"]
        if self.keep_finished is not None:  # finished records (and their messages) dropped sooner
            limits += ["--keep-finished", str(self.keep_finished)]
        self.proc, self.url = start_server(
            users,
            self.dir,
            ["--num-pages", "2048", "--threads", "2", *limits],
            cwd=self.root,
            env={**os.environ, "PYTHONPATH": self.root},
        )

    def stop(self) -> int:
        return terminate(self.proc, 60)

    # --- clients --------------------------------------------------------------------------------
    def _client(self, user: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer tok-{user}"}, timeout=90)

    def _count(self, what: str, error: bool = False) -> None:
        with self.lock:
            (self.errors if error else self.outcomes)[what] += 1

    def _run(self, c: httpx.Client, source: str, entry: str, args: list) -> tuple[int, dict]:
        r = c.post("/v1/processes", json={"source": source, "entry": entry, "args": args})
        if r.status_code != 201:
            return r.status_code, r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        return 200, c.get(f"/v1/processes/{r.json()['pid']}/result", params={"wait": 60}).json()

    def benign(self, end: float, k: int) -> None:
        with self._client("good") as c:
            for i in itertools.count():
                if time.time() > end:
                    return
                prompt = PROMPTS[(i + k) % len(PROMPTS)]
                t0 = time.perf_counter()
                try:
                    status, out = self._run(c, BENIGN, "greedy", [prompt, 8])
                except httpx.HTTPError as e:
                    self._count(f"benign: {type(e).__name__}", True)
                    continue
                dt = time.perf_counter() - t0
                if status != 200 or "result" not in out:
                    self._count(f"benign: {status} {str(out)[:80]}", True)
                    continue
                with self.lock:
                    want = self.expected.setdefault(prompt, out["result"])
                    self.lat.append(dt)
                if out["result"] != want:
                    self._count("benign: wrong tokens", True)
                else:
                    self._count("benign ok")

    def hostile(self, end: float, k: int) -> None:
        kinds = itertools.cycle([*HOSTILE, "post_flood", "openai_overflow"])
        for _ in range(k):
            next(kinds)
        with self._client("evil") as c:
            while time.time() < end:
                kind = next(kinds)
                try:
                    status = self._hostile_once(c, kind)
                except httpx.HTTPError as e:
                    self._count(f"{kind}: {type(e).__name__}", True)
                    continue
                self._count(f"{kind}: {status}", error=status >= 500)

    def _hostile_once(self, c: httpx.Client, kind: str) -> int:
        if kind == "post_flood":
            r = c.post("/v1/processes", json={"source": HOSTILE["deaf"][0], "entry": "deaf"})
            if r.status_code != 201:
                return r.status_code
            pid = r.json()["pid"]
            codes = [
                c.post(f"/v1/processes/{pid}/messages", json={"data": "y" * (512 << 10)}).status_code for _ in range(60)
            ]
            c.post(f"/v1/processes/{pid}/cancel")
            return max(codes)
        if kind == "openai_overflow":
            r = c.post("/v1/completions", json={"model": "smollm2", "prompt": "hello " * 9000, "max_tokens": 2})
            return r.status_code
        src, args = HOSTILE[kind]
        status, out = self._run(c, src, kind, args)
        return status

    def run(self) -> dict:
        self.start()
        try:
            with self._client("good") as c:
                self._run(c, BENIGN, "greedy", [PROMPTS[0], 8])  # warm
                time.sleep(1)
                pages0, rss0 = _pages(c), _rss_mb(self.proc.pid)
                end = time.time() + self.seconds
                threads = [threading.Thread(target=self.benign, args=(end, k)) for k in range(self.n_benign)]
                threads += [threading.Thread(target=self.hostile, args=(end, k)) for k in range(self.n_hostile)]
                for t in threads:
                    t.start()
                samples = []
                while any(t.is_alive() for t in threads):
                    samples.append(_rss_mb(self.proc.pid))
                    time.sleep(1)
                for t in threads:
                    t.join()
                time.sleep(3)  # workers reaped, pages returned
                pages1, rss1 = _pages(c), _rss_mb(self.proc.pid)
        finally:
            rc = self.stop()
        lat = sorted(self.lat)

        def pct(q: float) -> float:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 1) if lat else float("nan")

        return {
            "seconds": self.seconds,
            "rss_start_mb": round(rss0),
            "rss_peak_mb": round(max(samples + [rss1])),
            "rss_end_mb": round(rss1),
            "rss_growth_mb": round(rss1 - rss0),
            "rss_slope_mb_per_min": round(rss_slope(samples[len(samples) // 2 :]) * 60, 1),
            "rss_samples_mb": [round(x) for x in samples],
            "pages_start": pages0,
            "pages_end": pages1,
            "benign_runs": len(lat),
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "errors": dict(self.errors),
            "outcomes": dict(self.outcomes),
            "exit_status": rc,
        }


def rss_slope(samples: list[float], dt: float = 1.0) -> float:
    """Least-squares slope of RSS samples taken every `dt` s, in MB per second (0 for fewer than 2)."""
    n = len(samples)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(samples) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(samples))
    return num / sum((i - mx) ** 2 for i in range(n)) / dt


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--benign", type=int, default=3)
    ap.add_argument("--hostile", type=int, default=2)
    ap.add_argument(
        "--root",
        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        help="the checkout whose server to soak (default: this one)",
    )
    ap.add_argument("--keep-finished", type=float, help="the server's --keep-finished (default: its own, 600 s)")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args(argv)
    res = Soak(os.path.abspath(a.root), a.seconds, a.benign, a.hostile, a.keep_finished).run()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    errs = sum(res["errors"].values())
    md = (
        f"soak {res['seconds']:g} s ({a.root}): RSS {res['rss_start_mb']} → peak {res['rss_peak_mb']} → end "
        f"{res['rss_end_mb']} MB (growth {res['rss_growth_mb']:+d} MB, slope over the second half "
        f"{res['rss_slope_mb_per_min']:+.1f} MB/min); pages {res['pages_start']} → {res['pages_end']}; "
        f"{res['benign_runs']} benign runs, p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms; {errs} error(s) "
        f"{res['errors']}; exit status {res['exit_status']}"
    )
    return md


if __name__ == "__main__":
    print(main())
