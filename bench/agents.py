"""W4 — ReAct agents: a program that keeps its KV file against a client that re-sends the prompt.

4 agents run at once; each takes 8 steps: generate 32 tokens (greedy, the "thought and
action"), call a tool that takes 50 ms, append the tool's observation, repeat. Every side runs
on the same `symphony serve` server (a subprocess on loopback, the engine on the same threads),
so the only difference is what crosses the API:

- ours (server, LIP): each agent is a LIP sent with `symphony_core.client.Client` (sandboxed,
  as any uploaded program runs). It keeps one KV file for the whole episode: each step decodes
  32 tokens into it, the tool runs inside the program, and only the observation's tokens are
  fed — nothing is recomputed.
- prompt serving (server, `/v1/completions`): the official `openai` client, one thread per
  agent, as a vLLM user would write it: every step re-sends the whole growing prompt
  (`max_tokens=32, temperature=0`), then sleeps 50 ms for the tool and appends the observation.
- ours (embedded) is the same LIP on an in-process `Engine` (no server, no sandbox): for
  reference, it shows what the server path costs.

Both sides generate exactly 32 tokens per step: the LIP decodes with no stop tokens; the
agents' prompts are plain text (no chat template), where the model does not end its turn
early, and the completion token counts the endpoint reports are checked and shown.

    python -m bench.agents [--quick] [--agents 4] [--steps 8] [--step-tokens 32] [--tool-ms 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import busy, med, publish
from .machine import describe, wait_until_idle

ROOT = Path(__file__).resolve().parent.parent

PREAMBLE = """You are a research agent. You solve the task step by step. Each step you write a short thought about what to do next, then an action. Actions: search[query] looks a query up in the archive; read[document] opens a document; note[text] saves a note; finish[answer] gives the final answer. After each action you get an observation with its result. Keep thoughts short and factual, and never repeat an action that already failed.
"""

TASKS = [
    "find out when the old stone bridge in Alder Creek was built and who paid for it",
    "compare the harvests of the two largest farms in the valley over the last three years",
    "collect the opening hours of every public library in the district and list them by day",
    "work out how many buses stop at the main square each weekday morning",
    "summarise what the council decided about the new clinic at its last two meetings",
    "find the three oldest trees in the town park and say how old each one is",
    "check which schools in the district have solar panels and when they were installed",
    "list the rivers that flow into the lake and the length of each one",
]


def agent_prompt(i: int) -> str:
    return f"{PREAMBLE}\nTask: {TASKS[i % len(TASKS)]}.\n\nStep 1.\nThought:"


def observation(agent: int, step: int) -> str:
    """What the tool returns (canned, deterministic): the text appended after a step."""
    return (
        f"\nObservation: the archive returned {3 + (agent * 7 + step) % 5} records; the first one, "
        f"filed in {1950 + (agent * 13 + step * 11) % 70}, mentions the town council and a letter of the mayor."
        f"\n\nStep {step + 2}.\nThought:"
    )


# --- ours: the agent as a LIP ---------------------------------------------------------------------
# Sent to the server as source (only this function travels, so its imports are inside it).
def react_lip(sym, agent: int, prompt: str, steps: int, step_tokens: int, tool_ms: float) -> dict:
    import time

    from symphony_core.lib import generate

    def observation(agent, step):  # the same canned tool result as the client loop's
        return (
            f"\nObservation: the archive returned {3 + (agent * 7 + step) % 5} records; the first one, "
            f"filed in {1950 + (agent * 13 + step * 11) % 70}, mentions the town council and a letter of the mayor."
            f"\n\nStep {step + 2}.\nThought:"
        )

    kv = sym.kv_create()
    pending = sym.tokenize(prompt)
    fed = len(pending)
    texts = []
    for step in range(steps):
        g = generate(sym, kv, pending, step_tokens, stop_tokens=[])  # exactly step_tokens tokens
        texts.append(g.text)
        time.sleep(tool_ms / 1000)  # the tool runs here, next to the model
        if step + 1 < steps:  # (after the last step the observation is never read, on either side)
            obs = sym.tokenize(observation(agent, step))
            pending = g.pending + obs  # the last generated token and the observation: all that is new
            fed += len(obs)
    n = kv.len
    sym.kv_close(kv)
    return {"texts": texts, "kv_tokens": n, "fed_prompt_tokens": fed, "generated": steps * step_tokens}


def _lip_source() -> str:
    import inspect

    return inspect.getsource(react_lip)


# --- prompt serving: the client loop ----------------------------------------------------------------
def client_agent(oc, model: str, agent: int, steps: int, step_tokens: int, tool_ms: float) -> dict:
    prompt = agent_prompt(agent)
    sent, generated, short = 0, 0, 0
    texts = []
    for step in range(steps):
        r = oc.completions.create(model=model, prompt=prompt, max_tokens=step_tokens, temperature=0)
        text = r.choices[0].text
        texts.append(text)
        sent += r.usage.prompt_tokens
        generated += r.usage.completion_tokens
        short += r.usage.completion_tokens < step_tokens
        time.sleep(tool_ms / 1000)  # the tool, on the client
        prompt = prompt + text + observation(agent, step)
    return {"texts": texts, "prompt_tokens_sent": sent, "generated": generated, "short_steps": short}


# --- the server ---------------------------------------------------------------------------------------
class Server:
    """`symphony serve` on a free loopback port, no users (loopback-only, user `local`)."""

    def __init__(self, threads: int, num_pages: int, ready_timeout: float = 180.0) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="symphony-bench-", suffix=".log", delete=False)
        script = Path(sys.executable).with_name("symphony")
        cmd = [str(script)] if script.exists() else [sys.executable, "-m", "symphony_core.cli"]
        cmd += [
            "serve",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--num-pages",
            str(num_pages),
            "--log-level",
            "warning",
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, cwd=ROOT)
        import httpx

        deadline = time.time() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"symphony serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError(f"symphony serve not ready after {ready_timeout}s:\n{log}")
            time.sleep(0.25)
        self.health = httpx.get(self.url + "/health").json()

    def log(self) -> str:
        return Path(self.log_file.name).read_text()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        os.unlink(self.log_file.name)


def scheduler_totals(client) -> dict:
    """The server's batch scheduler counters (GET /metrics): forward passes, tokens, pred calls."""
    want = {
        "symphony_batches_total": "forwards",
        "symphony_batch_tokens_total": "tokens",
        "symphony_batch_members_total": "preds",
        "symphony_prefix_cache_reused_tokens_total": "reused",
    }
    out = {}
    for line in client.metrics().splitlines():
        name, _, value = line.partition(" ")
        if name in want:
            out[want[name]] = float(value)
    return out


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a if k in b}


# --- the runs ---------------------------------------------------------------------------------------------
def run_lip_server(client, n: int, steps: int, step_tokens: int, tool_ms: float) -> tuple[float, list[dict]]:
    src = _lip_source()
    t0 = time.perf_counter()
    procs = [
        client.launch(
            None, i, agent_prompt(i), steps, step_tokens, tool_ms, source=src, entry="react_lip", name=f"agent-{i}"
        )
        for i in range(n)
    ]
    out = [p.result(timeout=600) for p in procs]
    return time.perf_counter() - t0, out


def run_lip_embedded(eng, n: int, steps: int, step_tokens: int, tool_ms: float) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    procs = [eng.run(react_lip, i, agent_prompt(i), steps, step_tokens, tool_ms) for i in range(n)]
    out = [p.result() for p in procs]
    return time.perf_counter() - t0, out


def run_client_loop(oc, model: str, n: int, steps: int, step_tokens: int, tool_ms: float) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(client_agent, oc, model, i, steps, step_tokens, tool_ms) for i in range(n)]
        out = [f.result() for f in futs]
    return time.perf_counter() - t0, out


def bench(
    n: int, steps: int, step_tokens: int, tool_ms: float, repeats: int, idle_wait: float, threads: int, embedded: bool
) -> dict:
    import openai

    from symphony_core.client import Client

    prompt_pages = 4 * n * (steps * (step_tokens + 48) + 400) // 16
    server = Server(threads, num_pages=max(1024, prompt_pages))
    try:
        client = Client(server.url)
        oc = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        model = oc.models.list().data[0].id
        # Warm the server (sandbox worker, kernels) and the client outside the timings.
        run_lip_server(client, 1, 1, 2, 0)
        run_client_loop(oc, model, 1, 1, 2, 0)
        eng = None
        if embedded:
            from symphony_core import Engine

            eng = Engine(num_pages=max(1024, prompt_pages), threads=threads)
            run_lip_embedded(eng, 1, 1, 2, 0)
        times = {"server": [], "client": [], "embedded": []}
        contended = 0
        first = {}
        for r in range(repeats):
            contended += busy(wait_until_idle(idle_wait))
            m0 = scheduler_totals(client)
            t, lip_out = run_lip_server(client, n, steps, step_tokens, tool_ms)
            m1 = scheduler_totals(client)
            times["server"].append(t)
            contended += busy(wait_until_idle(idle_wait))
            m2 = scheduler_totals(client)
            tc, cl_out = run_client_loop(oc, model, n, steps, step_tokens, tool_ms)
            m3 = scheduler_totals(client)
            times["client"].append(tc)
            msg = f"  repeat {r + 1}/{repeats}: LIP on the server {t:.2f} s, client loop {tc:.2f} s"
            if eng is not None:
                contended += busy(wait_until_idle(idle_wait))
                te, _ = run_lip_embedded(eng, n, steps, step_tokens, tool_ms)
                times["embedded"].append(te)
                msg += f", LIP embedded {te:.2f} s"
            print(msg, flush=True)
            if r == 0:
                first = {"lip": lip_out, "client": cl_out, "lip_sched": _delta(m0, m1), "client_sched": _delta(m2, m3)}
        if eng is not None:
            eng.shutdown()
        client.close()
    finally:
        server.stop()
    lip, cl = first["lip"], first["client"]
    res = {
        "agents": n,
        "steps": steps,
        "step_tokens": step_tokens,
        "tool_ms": tool_ms,
        "repeats": repeats,
        "lip_server_s": med(times["server"]),
        "client_s": med(times["client"]),
        "lip_embedded_s": med(times["embedded"]) if times["embedded"] else None,
        "lip_generated": sum(o["generated"] for o in lip),
        "client_generated": sum(o["generated"] for o in cl),
        "client_short_steps": sum(o["short_steps"] for o in cl),
        "lip_prompt_tokens": sum(o["fed_prompt_tokens"] for o in lip),
        "client_prompt_tokens": sum(o["prompt_tokens_sent"] for o in cl),
        "same_first_step": sum(a["texts"][0] == b["texts"][0] for a, b in zip(lip, cl)),
        "tool_floor_s": steps * tool_ms / 1000,
        "lip_sched": first["lip_sched"],
        "client_sched": first["client_sched"],
        "contended": f"{contended}/{(3 if embedded else 2) * repeats}" if idle_wait > 0 else "not checked",
    }
    res["ratio"] = res["client_s"] / res["lip_server_s"]
    if res["lip_embedded_s"]:
        res["ratio_embedded"] = res["client_s"] / res["lip_embedded_s"]
    return res


def table(r: dict) -> str:
    n, steps, st = r["agents"], r["steps"], r["step_tokens"]
    lines = [
        f"### ReAct agents (W4): {n} agents × {steps} tool calls, tool {r['tool_ms']:.0f} ms, {st} tokens per step, "
        f"median of {r['repeats']}",
        "",
        f"Machine: {describe()}; one `symphony serve` subprocess on loopback serves both sides",
        "",
        "| | end-to-end s | ratio | prompt tokens fed | tokens generated |",
        "|---|---:|---:|---:|---:|",
        f"| ours: one LIP per agent on the server (`Client`, sandboxed), KV kept across steps | {r['lip_server_s']:.2f} "
        f"| {r['ratio']:.2f}× | {r['lip_prompt_tokens']} | {r['lip_generated']} |",
        f"| prompt serving: `openai` client → `/v1/completions`, prompt re-sent every step | {r['client_s']:.2f} | 1.00× "
        f"| {r['client_prompt_tokens']} | {r['client_generated']} |",
    ]
    if r.get("lip_embedded_s"):
        lines.append(
            f"| ours, embedded: the same LIP on an in-process `Engine` (no server) | {r['lip_embedded_s']:.2f} "
            f"| {r['ratio_embedded']:.2f}× | {r['lip_prompt_tokens']} | {r['lip_generated']} |"
        )
    lines += [
        "",
        f"- End-to-end ratio (client loop ÷ LIP, both on the server): **{r['ratio']:.2f}×** (target ≥ 2×"
        + (", met). " if r["ratio"] >= 2 else ", **missed**). ")
        + f"The tools alone take {r['tool_floor_s']:.2f} s per agent (run concurrently).",
        '- "Prompt tokens fed": prompt tokens sent to the model — the LIP feeds each observation once; the '
        "client loop's whole prompt (history included) is sent again every step. The server's prefix cache "
        "(on by default) spares the client loop what the previous request's prompt had computed: "
        f"{r['client_sched'].get('reused', 0):.0f} of its prompt tokens came from it in one run (the LIP's "
        f"{r['lip_sched'].get('reused', 0):.0f}).",
        f"- Where the time goes (the server's scheduler counters over one run): ours {_sched(r['lip_sched'])}; "
        f"the client loop {_sched(r['client_sched'])}. Both decode the same tokens in about the same number of "
        "forward passes; the client loop's passes also carry the re-sent prompts, and a pass that prefills a "
        "chunk of prompt costs several decode passes.",
        f"- Steps where the endpoint stopped before {st} tokens (EOS): {r['client_short_steps']} of {n * steps}. "
        f"First steps identical on both sides (same prompt, greedy): {r['same_first_step']}/{n}.",
        f"- Runs started under other load: {r['contended']}.",
    ]
    return "\n".join(lines)


def _sched(d: dict) -> str:
    if not d.get("forwards"):
        return "(no counters)"
    return (
        f"{d['forwards']:.0f} forward passes, {d['tokens'] - d.get('reused', 0):.0f} tokens through the model, "
        f"{d['preds'] / d['forwards']:.1f} pred calls per pass"
    )


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy size: 2 agents × 2 steps, 4 tokens per step, 10 ms tool")
    ap.add_argument("--agents", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--step-tokens", type=int, default=None)
    ap.add_argument("--tool-ms", type=float, default=None)
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (quick 1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-embedded", action="store_true", help="skip the in-process reference row")
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=None,
        help="seconds to wait for idle CPUs before each timed run (default 120; quick 0)",
    )
    args = ap.parse_args(argv)
    n, steps, st, tool = (2, 2, 4, 10.0) if args.quick else (4, 8, 32, 50.0)
    n, steps, st = args.agents or n, args.steps or steps, args.step_tokens or st
    tool = args.tool_ms if args.tool_ms is not None else tool
    repeats = args.repeats or (1 if args.quick else 3)
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 120.0)
    r = bench(n, steps, st, tool, repeats, idle_wait, args.threads, embedded=not args.no_embedded and not args.quick)
    publish(__name__, r)
    md = table(r)
    print(md)
    return md


if __name__ == "__main__":
    main()
