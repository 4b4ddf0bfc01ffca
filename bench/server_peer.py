"""The OpenAI endpoint next to llama.cpp's own server (`llama-server`), same weights, same client, one run.

Both servers run on this machine with the same threads and serve the same GGUF: Symphony as
`symphony serve FILE --weights q4` against `llama-server -m FILE` for the shipped Q4_1 file,
and `--weights fp32` against llama.cpp's F32 file made from it (bench/llama_cpp_peer.py). The
client is the official `openai` package: `concurrency` threads, each sending its share of
streamed chat completions one after another (temperature 0, `max_tokens`, `ignore_eos` so every
reply has the same length, a different prompt each request). Figures per run:

- tok/s: completion tokens of all requests ÷ wall time from the first request to the last reply;
- TTFT: request sent → first content chunk, p50 over the requests;
- ITL: one request's (last chunk − first chunk) ÷ (its tokens − 1), p50 over the requests.

Each repeat runs every server once per concurrency in a rotated order; medians over repeats.
llama-server is built from llama-cpp-python's own llama.cpp source (`make llama-server`); its
path comes from `--llama-server`, `$LLAMA_SERVER`, `PATH` or `.venv/bin/llama-server`.

    python -m bench.server_peer [--quick] [--concurrency 1,8,32] [--max-tokens 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from symphony_core import openmp_waits

from .common import publish
from .decode import TEXT
from .machine import describe, wait_until_idle

API_KEY = "bench"
PAIRS = (("q4", "Q4_1"), ("fp32", "F32"))  # Symphony's weights, llama.cpp's file type
PEER_OF = {f"symphony {ours}": f"llama-server {theirs}" for ours, theirs in PAIRS}


def find_llama_server(given: str | None) -> str | None:
    for cand in (given, os.environ.get("LLAMA_SERVER"), shutil.which("llama-server")):
        if cand and os.access(cand, os.X_OK):
            return cand
    local = Path(sys.executable).parent / "llama-server"
    return str(local) if os.access(local, os.X_OK) else None


def _wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout: float) -> None:
    import urllib.request

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"server not ready in {timeout:.0f}s:\n{log.read_text()[-2000:]}")


@dataclass
class Server:
    name: str
    cmd: list[str]
    proc: subprocess.Popen | None = None
    url: str = ""
    model: str = ""

    def start(self, workdir: Path, port: int) -> None:
        log = workdir / f"{self.name.replace(' ', '_')}.log"
        with open(log, "w") as f:
            # llama-server with the environment its users start it in: not the OpenMP waits symphony_core set here
            env = openmp_waits.without_ours()
            self.proc = subprocess.Popen([*self.cmd, "--port", str(port)], stdout=f, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{port}"
        _wait_ready(self.proc, self.url, log, 600)
        import openai

        self.model = openai.OpenAI(base_url=self.url + "/v1", api_key=API_KEY).models.list().data[0].id

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def symphony_server(gguf: Path, weights: str, threads: int, seqs: int) -> Server:
    cmd = [sys.executable, "-m", "symphony_core.cli", "serve", str(gguf), "--weights", weights]
    cmd += ["--threads", str(threads), "--api-key", API_KEY, "--max-num-seqs", str(seqs), "--log-level", "warning"]
    return Server(f"symphony {weights}", cmd)


def llama_server(binary: str, gguf: Path, ftype: str, threads: int, seqs: int, ctx_per_seq: int) -> Server:
    # one unified KV cache for every slot, as Symphony's one page pool; continuous batching is llama-server's default
    cmd = [binary, "-m", str(gguf), "--host", "127.0.0.1", "-t", str(threads), "-tb", str(threads)]
    cmd += ["-np", str(seqs), "-c", str(seqs * ctx_per_seq), "-kvu", "--no-webui", "--api-key", API_KEY, "-ngl", "0"]
    return Server(f"llama-server {ftype}", cmd)


@dataclass
class Reply:
    sent: float
    chunks: list[float] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int = 0


def one_request(client, model: str, prompt: str, max_tokens: int) -> Reply:
    r = Reply(time.perf_counter())
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            r.chunks.append(time.perf_counter())
        if chunk.usage is not None:
            r.tokens, r.prompt_tokens = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
    if not r.chunks or r.tokens == 0:
        raise RuntimeError(f"{model}: a reply with no content or no usage")
    return r


def prompts(n: int, offset: int) -> list[str]:
    words = TEXT.split()
    out = []
    for i in range(n):
        start = (7 * (i + offset)) % (len(words) - 40)
        out.append(f"Request {i + offset}. Continue this text: " + " ".join(words[start : start + 40]))
    return out


def load(server: Server, concurrency: int, per_client: int, max_tokens: int, offset: int) -> dict:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=600)
    texts = prompts(concurrency * per_client, offset)
    replies: list[Reply] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        try:
            for j in range(per_client):
                rep = one_request(client, server.model, texts[k * per_client + j], max_tokens)
                with lock:
                    replies.append(rep)
        except BaseException as e:  # noqa: BLE001 - reported after the join
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{server.name} at concurrency {concurrency}: {errors[0]!r}")
    return {
        "tok_s": sum(r.tokens for r in replies) / wall,
        "ttft": statistics.median(r.chunks[0] - r.sent for r in replies),
        "itl": statistics.median((r.chunks[-1] - r.chunks[0]) / max(r.tokens - 1, 1) for r in replies),
        "tokens": statistics.median(r.tokens for r in replies),
        "prompt_tokens": statistics.median(r.prompt_tokens for r in replies),
    }


def bench(binary, conc, max_tokens, repeats, threads, idle_wait, per_client, pairs) -> tuple[list[dict], str]:
    from .weights import _peer_files, model_files

    sources = model_files(None)
    files, why = _peer_files(threads, sources)
    if why:
        files = {"Q4_1": sources["Q4_1"]}
    seqs = max(conc)
    servers: list[Server] = []
    for ours, theirs in pairs:
        if theirs not in files:
            print(f"  no llama.cpp {theirs} file ({why or 'quantiser failed'}); pair skipped", flush=True)
            continue
        servers.append(symphony_server(sources[ours], ours, threads, seqs))
        servers.append(llama_server(binary, files[theirs], theirs, threads, seqs, ctx_per_seq=max_tokens + 192))
    from symphony_core.server.child import free_port

    work = Path(tempfile.mkdtemp(prefix="server_peer-"))
    results: dict[tuple[str, int], list[dict]] = {}
    contended = runs = 0
    try:
        for s in servers:
            s.start(work, free_port())
            load(s, 2, 1, 8, offset=10_000)  # warm-up: first requests build caches and pools
        for r in range(repeats):
            for c in conc:
                order = servers[r % len(servers) :] + servers[: r % len(servers)]
                for s in order:
                    busy = wait_until_idle(idle_wait)
                    contended += int(busy is not None and busy >= 0.1)
                    runs += 1
                    res = load(s, c, per_client, max_tokens, offset=1000 * r + 100 * c)
                    results.setdefault((s.name, c), []).append(res)
                    print(
                        f"  repeat {r + 1}/{repeats} c={c} {s.name}: {res['tok_s']:.1f} tok/s, "
                        f"TTFT {1e3 * res['ttft']:.0f} ms, ITL {1e3 * res['itl']:.1f} ms",
                        flush=True,
                    )
    finally:
        for s in servers:
            s.stop()
    rows = []
    for s in servers:
        for c in conc:
            rs = results[(s.name, c)]
            rows.append(
                {
                    "server": s.name,
                    "concurrency": c,
                    **{
                        k: statistics.median(x[k] for x in rs)
                        for k in ("tok_s", "ttft", "itl", "tokens", "prompt_tokens")
                    },
                }
            )
    return rows, f"{contended}/{runs}"


def verdicts(rows: list[dict]) -> list[tuple[str, str, str, bool]]:
    """The issue's server targets: ≥ 1.2× llama-server's tok/s at each concurrency, TTFT p50 no worse."""
    by = {(r["server"], r["concurrency"]): r for r in rows}
    out = []
    for (name, c), a in by.items():
        b = by.get((PEER_OF.get(name, ""), c))
        if b:
            x, t = a["tok_s"] / b["tok_s"], a["ttft"] / b["ttft"]
            measured = f"{x:.2f}× tok/s, TTFT p50 {1e3 * a['ttft']:.0f} vs {1e3 * b['ttft']:.0f} ms"
            out.append(
                (
                    f"server, {name.split()[1]}, concurrency {c}",
                    measured,
                    "≥ 1.2× llama-server, TTFT no worse",
                    x >= 1.2 and t <= 1.0,
                )
            )
    return out


def table(rows: list[dict], conc, max_tokens, repeats, per_client, contended) -> str:
    by = {(r["server"], r["concurrency"]): r for r in rows}
    names = list(dict.fromkeys(r["server"] for r in rows))
    lines = [
        f"### Through the OpenAI endpoint: `symphony serve` vs `llama-server` ({describe()})",
        "",
        f"Streamed chat completions from the official `openai` client, {max_tokens} tokens each (`ignore_eos`), "
        f"{per_client} request(s) per client thread; medians of {repeats}; {contended} runs started while "
        "something else used the CPUs. The server path users run: HTTP, the chat template, one program per request. "
        "Symphony's fp32 decodes its fewest rows from the GGUF blocks that hold its fp32 weights exactly (the same "
        "logits bit for bit, a sixth of the bytes: symphony_core/model/exact_blocks.py); llama-server's "
        "F32 streams its dense file.",
        "",
        "| server | concurrency | tok/s | TTFT p50 ms | ITL p50 ms | prompt / reply tokens (median) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        for c in conc:
            r = by.get((n, c))
            if r:
                lines.append(
                    f"| {n} | {c} | {r['tok_s']:.1f} | {1e3 * r['ttft']:.0f} | {1e3 * r['itl']:.1f} "
                    f"| {r['prompt_tokens']:.0f} / {r['tokens']:.0f} |"
                )
    pairs = [(n, PEER_OF[n]) for n in names if n in PEER_OF]
    lines += [
        "",
        "| Symphony ÷ llama-server | concurrency | tok/s | TTFT p50 (lower is better) |",
        "|---|---:|---:|---:|",
    ]
    for ours, theirs in pairs:
        for c in conc:
            a, b = by.get((ours, c)), by.get((theirs, c))
            if a and b:
                lines.append(
                    f"| {ours} ÷ {theirs} | {c} | {a['tok_s'] / b['tok_s']:.2f}× | {a['ttft'] / b['ttft']:.2f}× |"
                )
    lines += ["", "| target | measured | goal | verdict |", "|---|---|---|---|"]
    lines += [f"| {n} | {m} | {g} | {'met' if ok else '**missed**'} |" for n, m, g, ok in verdicts(rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(prog="python -m bench.server_peer", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--per-client", type=int, default=2, help="requests each client thread sends in turn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--idle-wait", type=float, default=30.0)
    ap.add_argument(
        "--pairs", default="q4,fp32", help="Symphony weight formats to run (q4 pairs with Q4_1, fp32 with F32)"
    )
    ap.add_argument("--llama-server", default=None)
    args = ap.parse_args(argv)
    binary = find_llama_server(args.llama_server)
    if binary is None:
        md = "### `symphony serve` vs `llama-server`\n\nSkipped: no llama-server binary (`make llama-server` builds one)."
        publish(__name__, {"rows": [], "skipped": "no llama-server binary"})
        print(md)
        return md
    conc = [int(c) for c in args.concurrency.split(",")]
    pairs = [p for p in PAIRS if p[0] in args.pairs.split(",")]
    if args.quick:
        conc, args.max_tokens, args.repeats, args.per_client, args.idle_wait = [1, 4], 16, 1, 1, 0.0
        pairs = pairs[:1]
    rows, contended = bench(
        binary, conc, args.max_tokens, args.repeats, args.threads, args.idle_wait, args.per_client, pairs
    )
    publish(__name__, {"rows": rows, "contended": contended})
    md = table(rows, conc, args.max_tokens, args.repeats, args.per_client, contended)
    print(md)
    return md


if __name__ == "__main__":
    main()
