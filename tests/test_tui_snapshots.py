"""Snapshot tests of Symphony Lab's main screen (pytest-textual-snapshot), at 80×24, 120×40 and 160×48.

The screen is drawn from a *recorded* session — the state the TUI held after a real run of the
parallel-decoding example (stop on entry, three steps, an override), saved as JSON in
tests/data/tui_session_state.json with process, thread, file and page ids renumbered,
timestamps replaced by a fixed clock and the program's source embedded. So the pictures do not
depend on timing, test order or the machine. Re-record (real model, ~30 s) and refresh the
pictures with:

    SYMPHONY_TUI_RECORD=1 pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest

pytest.importorskip("textual")
pytest.importorskip("pytest_textual_snapshot")

from symphony_lab.tui import StaticSession, SymphonyLab  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = os.path.join(ROOT, "tests", "data", "tui_session_state.json")
EXAMPLE = os.path.join(ROOT, "examples", "lips", "prefix_parallel.py")
TITLE = "examples/lips/prefix_parallel.py:prefix_parallel"


# --- the recorded state -------------------------------------------------------------------------


def normalize(state: dict, root: str) -> dict:
    """Renumber pids, KV file ids and page ids in order of appearance; fix the clock; make
    paths relative to the repository; embed the program's source."""
    maps: dict[str, dict] = {"pid": {}, "file": {}, "page": {}, "bid": {}}
    seen: dict[str, set] = {k: set() for k in maps}
    collecting = True

    def m(kind: str, v):
        """Renumber in the order of the original ids (so forks keep coming after their parent)."""
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return v
        if collecting:
            seen[kind].add(v)
            return v
        return maps[kind][v]

    clock = iter(range(1, 1_000_000))

    def walk(x, key: str | None = None):
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in ("pid",):
                    out[k] = m("pid", v)
                elif k in ("file", "kv_file", "parent") and isinstance(v, int):
                    out[k] = m("file", v)
                elif k == "file" and isinstance(v, str):
                    out[k] = os.path.relpath(v, root) if os.path.isabs(v) else v
                elif k in ("ancestry", "children", "shared_with", "roots", "gone"):
                    out[k] = [m("file", f) for f in v]
                elif k == "edges":
                    out[k] = [[m("file", a), m("file", b)] for a, b in v]
                elif k == "held_by":
                    out[k] = [m("pid", p) for p in v]
                elif k == "page":
                    out[k] = m("page", v)
                elif k == "bid":
                    out[k] = m("bid", v)
                elif k == "shared_pages" and isinstance(v, list):
                    out[k] = [m("page", p) for p in v]
                elif k in ("ts", "t_start", "t_end", "stopped_for"):
                    out[k] = None if v is None else round(next(clock) * 0.01, 2)
                else:
                    out[k] = walk(v, k)
            return out
        if isinstance(x, list):
            return [walk(v, key) for v in x]
        return x

    walk(state)
    for k in ("history", "locations", "tracebacks"):
        for key in state.get(k) or {}:
            m("pid", int(str(key).partition(".")[0]))
    for kind, vals in seen.items():
        maps[kind] = {v: i + 1 for i, v in enumerate(sorted(vals))}
    collecting = False
    clock = iter(range(1, 1_000_000))
    st = walk(state)
    # Batch times: each 40 ms long, 50 ms apart (a fixed clock for tokens/s); totals of these only.
    tl = st.get("timeline", {})
    batches = tl.get("batches", [])
    for i, b in enumerate(batches):
        b["t_start"], b["t_end"] = round(i * 0.05, 3), round(i * 0.05 + 0.04, 3)
    tl["totals"] = {
        "batches": len(batches),
        "tokens": sum(b.get("tokens", 0) for b in batches),
        "members": sum(b.get("size", 0) for b in batches),
    }

    def rekey(d: dict) -> dict:
        out = {}
        for k, v in d.items():
            pid, _, tid = str(k).partition(".")
            nk = str(m("pid", int(pid))) + (f".{tid}" if tid else "")
            out[nk] = v
        return out

    for k in ("history", "locations", "tracebacks"):
        st[k] = rekey(st.get(k) or {})
    for loc in st["locations"].values():
        if loc.get("file") and os.path.isabs(loc["file"]):
            loc["file"] = os.path.relpath(loc["file"], root)
    pf = st.get("program_file")
    if pf and os.path.isabs(pf):
        st["program_file"] = os.path.relpath(pf, root)
    for b in st.get("line_breakpoints", []):
        if b.get("source") and os.path.isabs(b["source"]):
            b["source"] = os.path.relpath(b["source"], root)
    st["sources"] = {}
    for f in (
        {st.get("program_file")}
        | {s.get("file") for s in st.get("stops", [])}
        | {loc.get("file") for loc in st["locations"].values()}
    ):
        if f:
            with open(os.path.join(root, f)) as fh:
                st["sources"][f] = fh.read()
    st.pop("version", None)
    st.pop("ts", None)
    return st


def absolutize(state: dict, root: str) -> dict:
    """The saved state's relative paths made absolute under this checkout."""

    def fix(p):
        return os.path.join(root, p) if p and not os.path.isabs(p) else p

    state["program_file"] = fix(state.get("program_file"))
    for s in state.get("stops", []):
        s["file"] = fix(s.get("file"))
    for loc in state.get("locations", {}).values():
        loc["file"] = fix(loc.get("file"))
    for b in state.get("line_breakpoints", []):
        b["source"] = fix(b.get("source"))
    state["sources"] = {fix(k): v for k, v in state.get("sources", {}).items()}
    return state


def record_state(engine) -> dict:
    """Run the real session the snapshots show and return the TUI's state, normalized."""
    from symphony_lab.tui import EmbeddedSession

    path = f"/shared/tui-snap-{uuid.uuid4().hex[:8]}.kv"
    session = EmbeddedSession(
        f"{EXAMPLE}:prefix_parallel", engine=engine, kwargs={"max_tokens": 8, "path": path}
    )  # the example's four questions
    app = SymphonyLab(session)

    async def until(pilot, cond, timeout=120):
        t0 = time.monotonic()
        while not cond():
            assert time.monotonic() - t0 < timeout
            await pilot.pause(0.1)

    async def drive() -> dict:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.focused_stop() is not None)
            for _ in range(3):
                before = [s["stop_id"] for s in app.state.get("stops", [])]
                await pilot.press("s")
                await until(
                    pilot,
                    lambda before=before: (
                        app.busy is None
                        and app.focused_stop() is not None
                        and app.focused_stop()["stop_id"] not in before
                    ),
                )
            await pilot.press("2", "down", "enter")
            await until(pilot, lambda: app.focused_stop()["result"]["chosen"]["by"] == "override")
            # Let the other threads finish, then take the state the screen was drawn from.
            pid = app.focus_pt[0]
            await until(
                pilot,
                lambda: all(
                    t.get("state") in ("finished", "stopped") or t["tid"] == 1
                    for p in app.state["processes"]
                    if p["pid"] == pid
                    for t in p["threads"]
                ),
            )
            st = session.state()
            await pilot.press("c")
            await until(pilot, lambda: any(p["pid"] == pid and p.get("done") for p in app.state["processes"]))
            return st

    try:
        st = asyncio.run(drive())
    finally:
        session.close()
        try:
            engine.kv_remove(path)
        except Exception:
            pass
    return normalize(st, ROOT)


@pytest.fixture(scope="module")
def recorded_state(request) -> dict:
    if os.environ.get("SYMPHONY_TUI_RECORD"):
        st = record_state(request.getfixturevalue("engine"))
        with open(STATE, "w") as f:
            json.dump({"title": TITLE, "state": st}, f, indent=1, sort_keys=True)
            f.write("\n")
    with open(STATE) as f:
        d = json.load(f)
    return d


def make_app(recorded: dict, theme: str | None = None) -> SymphonyLab:
    state = absolutize(json.loads(json.dumps(recorded["state"])), ROOT)
    return SymphonyLab(StaticSession(state, recorded["title"]), poll=0, theme=theme)


async def _ready(pilot) -> None:
    app = pilot.app
    t0 = time.monotonic()
    while not app.state.get("processes"):
        assert time.monotonic() - t0 < 10, "the recorded state never arrived"
        await pilot.pause(0.05)
    await pilot.pause(0.2)


# --- snapshots -----------------------------------------------------------------------------------


def test_main_screen_80x24(snap_compare, recorded_state):
    """Narrow terminal: one pane at a time under tabs; the program pane at the stopped line."""
    assert snap_compare(make_app(recorded_state), terminal_size=(80, 24), run_before=_ready)


def test_token_tab_80x24(snap_compare, recorded_state):
    """Narrow terminal, token tab: coloured text (with the overridden token) and the top-k table."""
    assert snap_compare(make_app(recorded_state), terminal_size=(80, 24), run_before=_ready, press=["2"])


def test_main_screen_160x48(snap_compare, recorded_state):
    """Wide terminal: every pane at once."""
    assert snap_compare(make_app(recorded_state), terminal_size=(160, 48), run_before=_ready)


def test_main_screen_120x40(snap_compare, recorded_state):
    """The narrowest wide layout: the KV pane shows the named file and all 4 forks, labels whole."""
    assert snap_compare(make_app(recorded_state), terminal_size=(120, 40), run_before=_ready)


def test_main_screen_160x48_light(snap_compare, recorded_state):
    """The light theme: every colour comes from theme variables."""
    assert snap_compare(make_app(recorded_state, theme="textual-light"), terminal_size=(160, 48), run_before=_ready)


# --- behaviour on the recorded state (fast, no model) ---------------------------------------------


def test_recorded_state_is_what_the_snapshots_claim(recorded_state):
    st = recorded_state["state"]
    stop = st["stops"][-1]
    assert (stop["where"], stop["call"]) == ("after", "pred")
    assert stop["result"]["chosen"]["by"] == "override"
    toks = st["history"][f"{stop['pid']}.{stop['tid']}"]["tokens"]
    assert any(t.get("overridden") for t in toks)
    assert any(f.get("shared_pages") for f in st["kv_tree"]["files"])
    assert st["timeline"]["batches"]


def test_tabs_help_and_theme_on_recorded_state(recorded_state):
    app = make_app(recorded_state)

    def text() -> str:
        return "\n".join(s.text for s in app.screen._compositor.render_strips())

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await _ready(pilot)
            assert "1 Program" in text() and "def answer" in text()
            for key, marker in (("2", "top-k"), ("3", "KV files"), ("4", "recent batches"), ("5", "prefix_parallel")):
                await pilot.press(key)
                await pilot.pause(0.1)
                assert marker in text(), (key, text())
            assert "def answer" not in text()
            await pilot.press("3", "down", "enter")  # select a KV file: its pages show with token text
            await pilot.pause(0.2)
            assert "shared with" in text() and "#" in text()
            # Focus another thread from the processes tab: the token pane follows it.
            before = app.focus_pt
            await pilot.press("5", "down", "down", "enter")
            await pilot.pause(0.2)
            assert app.focus_pt != before and app.focus_pt[0] == before[0]
            await pilot.press("2")
            await pilot.pause(0.1)
            assert f"pid {app.focus_pt[0]} t{app.focus_pt[1]}" in text()
            await pilot.press("question_mark")
            await pilot.pause(0.2)
            assert "Symphony Lab — keys" in text()
            await pilot.press("escape")
            dark = app.current_theme.dark
            await pilot.press("t")
            await pilot.pause(0.1)
            assert app.current_theme.dark != dark
            await pilot.press("s")  # a recorded session refuses commands, and says so
            await pilot.pause(0.3)
            assert app.last_error and "recorded session" in app.last_error

    asyncio.run(drive())
