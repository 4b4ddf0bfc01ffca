"""The documentation stays true: the site builds strictly, every Python snippet runs, and no file
of the project points outside the repository.

- `mkdocs build --strict` fails on a broken link, a missing page, an unknown `::: module.name`
  or cross-reference, and a docstring that documents a parameter the code does not have.
- Every ```python block of README.md and docs/**/*.md is executed: one subprocess per page, its
  blocks in order in one namespace (as a reader would run them), on the real model. The server
  guide's snippets run against a real `symphony serve` on a loopback port.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
# Pages whose snippets talk to a server: the test starts one and passes its address and a token.
NEEDS_SERVER = {"docs/server.md"}


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SYMPHONY_SERVER", "SYMPHONY_TOKEN")}
    return {**env, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1", **extra}


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of a Markdown file, in order."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) == "python":
            out.append((text.count("\n", 0, m.start(2)) + 1, m.group(2)))
    return out


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


PAGES_WITH_SNIPPETS = [str(p.relative_to(ROOT)) for p in doc_pages() if python_blocks(p)]


def process_group(page: str) -> str:
    """Pages run one after another in one process per group, sharing one Engine per set of
    arguments: the pages that attach a debugger (symphony_lab) in one, the others in another; a
    page that talks to a server runs alone, next to its server."""
    if page in NEEDS_SERVER:
        return page
    return "debugger" if any("symphony_lab" in code for _, code in python_blocks(ROOT / page)) else "engine"


# Runs pages' blocks: each page in a fresh namespace, its blocks in order; a failure names the
# page and the block's line, and the next page still runs. `Engine(...)` returns one shared,
# already loaded engine per set of arguments, so the pages pay the model load once.
RUNNER = """
import io, json, os, sys, traceback
pages, out_path = json.load(open(sys.argv[1])), sys.argv[2]
import symphony_core, symphony_core.engine
_Real = symphony_core.engine.Engine

class Engine(_Real):
    _shared = {}
    def __new__(cls, *args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in cls._shared:
            cls._shared[key] = inst = super().__new__(cls)
            inst._docs_loaded = False
        return cls._shared[key]
    def __init__(self, *args, **kwargs):
        if not self._docs_loaded:
            super().__init__(*args, **kwargs)
            self._docs_loaded = True

symphony_core.Engine = symphony_core.engine.Engine = Engine
results = {}
for page, blocks in pages:
    ns = {"__name__": "__main__"}
    results[page] = None
    for line, code in blocks:
        try:
            exec(compile("\\n" * (line - 1) + code, page, "exec"), ns)
        except BaseException:
            results[page] = f"the snippet at {page}:{line} failed:\\n" + traceback.format_exc()
            break
    print(f"\\n[{page}: {'failed' if results[page] else 'ok'}]", flush=True)
    if "symphony_lab.debugger.core" in sys.modules:  # the next page starts with no debugger attached
        import gc
        from symphony_lab.debugger.core import Debugger
        for obj in gc.get_objects():
            if isinstance(obj, Debugger) and obj._attached:
                obj.detach()
json.dump(results, open(out_path, "w"))
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)  # a snippet may leave a server or an engine running: the pages are done
"""


def run_pages(pages: list[str], env: dict, timeout: float = 600) -> dict[str, str | None]:
    """{page: None if every snippet ran, else the failure}; the process's output on a crash."""
    with tempfile.TemporaryDirectory(prefix="symphony-docs-") as tmp:
        spec, out = Path(tmp) / "pages.json", Path(tmp) / "results.json"
        spec.write_text(json.dumps([[p, python_blocks(ROOT / p)] for p in pages]))
        r = subprocess.run(
            [sys.executable, "-c", RUNNER, str(spec), str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not out.exists():
            crash = f"the snippet runner crashed (exit {r.returncode})\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
            return {p: crash for p in pages}
        results = json.loads(out.read_text())
        return {p: None if results[p] is None else f"{results[p]}\n--- output\n{r.stdout[-3000:]}" for p in pages}


_group_results: dict[str, str | None] = {}


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS)
def test_python_snippets_run(page):
    if page not in _group_results:  # the first page of a group runs the whole group
        group = [p for p in PAGES_WITH_SNIPPETS if process_group(p) == process_group(page)]
        extra: dict[str, str] = {}
        server = None
        if page in NEEDS_SERVER:
            from server_harness import Server

            token = "docs-token-alice"
            server = Server([{"name": "alice", "token": token}])
            extra = {"SYMPHONY_SERVER": server.url, "SYMPHONY_TOKEN": token}
        try:
            _group_results.update(run_pages(group, _env(**extra)))
        finally:
            if server is not None:
                server.stop()
    failure = _group_results[page]
    assert failure is None, failure


def test_snippet_extraction_sees_every_python_fence():
    """The fence pattern finds each ```python block whole, and only those."""
    text = "intro\n```python\nx = 1\n\ny = 2\n```\n```bash\nls\n```\n```python\nprint(x + y)\n```\n"
    p = Path(tempfile.mkdtemp()) / "page.md"
    p.write_text(text)
    assert python_blocks(p) == [(3, "x = 1\n\ny = 2\n"), (11, "print(x + y)\n")]
    assert len(PAGES_WITH_SNIPPETS) >= 8 and "README.md" in PAGES_WITH_SNIPPETS


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict`, and the generated pages hold what the code has."""
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    from symphony_core.cli import build_parser as core_parser
    from symphony_lab.cli import build_parser as lab_parser

    def options(parser):
        for a in parser._actions:
            if not isinstance(a, argparse._HelpAction):  # -h is in each usage line, not in the tables
                yield from a.option_strings
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from options(sub)

    missing = [o for p in (core_parser(), lab_parser()) for o in options(p) if o not in cli]
    assert not missing, f"the CLI reference lacks {missing}"
    labs = (site / "labs" / "index.html").read_text()
    for nb in (ROOT / "tutorials").glob("*.ipynb"):
        assert nb.name in labs
    syscalls = (site / "reference" / "syscalls" / "index.html").read_text()
    for call in (
        "pred",
        "kv_create",
        "kv_open",
        "kv_fork",
        "kv_truncate",
        "kv_close",
        "kv_remove",
        "kv_hint",
        "kv_list",
        "tokenize",
        "detokenize",
        "chat_template",
        "send",
        "recv",
        "spawn",
    ):
        assert f'id="symphony_core.lip.syscalls.Sym.{call}"' in syscalls, call


def test_http_reference_lists_every_route(engine):
    """Every route the server's app mounts appears in docs/reference/http-api.md (method and path)."""
    from starlette.routing import WebSocketRoute

    from symphony_core.server import create_app

    app = create_app(engine)  # no sandbox started and no request made: only its routes are read
    page = (ROOT / "docs" / "reference" / "http-api.md").read_text()
    routes, missing = [], []
    for r in app.routes:
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: "{" + m.group(1) + "}", r.path).replace("{prog}", "{id}")
        methods = (
            ["GET"] if isinstance(r, WebSocketRoute) else sorted(set(getattr(r, "methods", None) or {"GET"}) - {"HEAD"})
        )
        for m in methods:
            routes.append(f"{m} {path}")
            if f"`{m} {path}`" not in page:
                missing.append(f"{m} {path}")
    assert len(routes) >= 20, routes
    assert not missing, f"docs/reference/http-api.md does not document {missing}"


def test_no_file_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for name in tracked:
        p = ROOT / name
        if name == "tests/test_docs.py" or not p.is_file():
            continue
        try:
            text = p.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for needle in ("../shared", "DESIGN.md"):
            if needle in text:
                bad.append(f"{name}: {needle}")
    assert not bad, f"files refer to things outside the repository: {bad}"


# --- the reference's error messages are the code's -------------------------------------------------


def documented_raises(obj) -> dict[str, list[re.Pattern]]:
    """{exception name: message patterns} from the *Raises* section of `obj`'s docstring: each
    `backticked` text, with `<placeholder>`, `…` and `[...]` standing for any text."""
    import inspect

    doc = inspect.getdoc(obj) or ""
    section = doc.split("Raises:", 1)[1] if "Raises:" in doc else ""
    entries: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        m = re.match(r"^    (\w+): ?(.*)$", line)
        if m:
            name = m.group(1)
            entries[name] = m.group(2)
        elif name and line.startswith("        "):
            entries[name] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break
    out = {}
    for exc, text in entries.items():
        pats = []
        for t in re.findall(r"`([^`]+)`", " ".join(text.split())):
            rx = re.escape(t)
            rx = re.sub(r"<[^>]*>", ".+?", rx.replace(r"\<", "<").replace(r"\>", ">"))
            rx = rx.replace("…", ".*").replace(r"\[\.\.\.\]", r"\[.*?\]")
            pats.append(re.compile(rx))
        out[exc] = pats
    return out


def test_reference_states_the_errors_bad_input_gets(engine):
    """Bad input to each system call (and to Dist / Sampler) raises the class its docstring's
    Raises section names, with a message one of its documented messages matches."""
    import torch

    from symphony_core.lip.syscalls import Sym
    from symphony_core.model.dist import Dist
    from symphony_core.model.sampling import Sampler

    def probe(sym):
        ro_path = f"/shared/docs-probe-{sym.pid}.kv"
        sym.kv_close(sym.kv_create(ro_path))
        ro = sym.kv_open(ro_path)
        kv = sym.kv_create()
        closed = sym.kv_create()
        sym.kv_close(closed)
        multi = sym.pred(kv, sym.tokenize("one two three"), outputs="all")
        V = sym.vocab_size
        cases = [
            ("pred", lambda: sym.pred(kv, [])),
            ("pred", lambda: sym.pred(kv, "text")),
            ("pred", lambda: sym.pred(kv, [1.5])),
            ("pred", lambda: sym.pred(kv, [V + 7])),
            ("pred", lambda: sym.pred(kv, [1, 2], positions=[0])),
            ("pred", lambda: sym.pred(kv, [1], positions=[10**7])),
            ("pred", lambda: sym.pred(kv, [1, 2], outputs="first")),
            ("pred", lambda: sym.pred(kv, [1, 2], outputs=[5])),
            ("pred", lambda: sym.pred(kv, [1], sampler="top")),
            ("pred", lambda: sym.pred(kv, [1], mask=torch.ones(3, dtype=torch.bool))),
            ("pred", lambda: sym.pred(kv, [1], mask=[V + 1])),
            ("pred", lambda: sym.pred(kv, [1], mask=[])),
            ("pred", lambda: sym.pred(ro, [1])),
            ("pred", lambda: sym.pred(closed, [1])),
            ("pred", lambda: sym.pred("kv", [1])),
            ("kv_create", lambda: sym.kv_create("/etc/passwd")),
            ("kv_create", lambda: sym.kv_create(ro_path)),
            ("kv_create", lambda: sym.kv_create("/users/somebody-else/x.kv")),
            ("kv_open", lambda: sym.kv_open("no-such-file.kv")),
            ("kv_open", lambda: sym.kv_open(ro_path, "x")),
            ("kv_fork", lambda: sym.kv_fork(3)),
            ("kv_fork", lambda: sym.kv_fork(closed)),
            ("kv_truncate", lambda: sym.kv_truncate(kv, 10**6)),
            ("kv_truncate", lambda: sym.kv_truncate(ro, 0)),
            ("kv_close", lambda: sym.kv_close(closed)),
            ("kv_close", lambda: sym.kv_close("kv")),
            ("kv_remove", lambda: sym.kv_remove("no-such-file.kv")),
            ("kv_hint", lambda: sym.kv_hint(kv, keep_for=-1)),
            ("kv_hint", lambda: sym.kv_hint(kv, priority=1.5)),
            ("tokenize", lambda: sym.tokenize(5)),
            ("chat_template", lambda: sym.chat_template("hi")),
            ("recv", lambda: sym.recv(timeout=0.05)),
            ("spawn", lambda: sym.spawn(5)),
            ("Dist.topk", lambda: multi.topk()),
            ("Dist.entropy", lambda: multi.entropy()),
            ("Dist.logprob", lambda: multi[0].logprob(-1)),
            ("Dist.sample", lambda: multi[0].sample(top_p=0)),
            ("Sampler", lambda: Sampler(temperature=-1)),
        ]
        seen = []
        for call, fn in cases:
            try:
                fn()
                seen.append((call, None, None))
            except Exception as e:
                seen.append((call, type(e).__name__, " ".join(str(e).split())))
        sym.kv_remove(ro_path)
        return seen

    owners = {"Dist": Dist, "Sampler": Sampler}
    problems = []
    for call, exc, msg in engine.run(probe).result(timeout=300):
        head, _, member = call.partition(".")
        obj = getattr(owners[head], member) if head in owners and member else owners.get(head) or getattr(Sym, call)
        if exc is None:
            problems.append(f"{call}: no error raised")
            continue
        documented = documented_raises(obj)
        if exc not in documented:
            problems.append(f"{call}: raises {exc}, its docstring names {sorted(documented)}")
        elif not any(p.fullmatch(msg) for p in documented[exc]):
            problems.append(f"{call}: {exc}({msg!r}) matches none of its documented messages")
    assert not problems, "\n".join(problems)
