"""Symphony Lab in a real browser: JupyterLab + Debian's chromium, driven by Playwright.

Opens a notebook, runs a cell that launches the beam-search example stopped on entry, records
it and steps it twice from the widget, steps back once (a replay that must show the recorded
top-k), steps again and overrides a token, continues, and checks the rendered widget and the
LIP's result; opens the Symphony Lab sidebar and checks that its KV tree and scheduler view
update. Screenshots go to test-artifacts/jupyterlab/.

Waits are on state that stays put until the test acts (the widget's data attributes, a cell's
printed output), never on a transient one: JupyterLab's kernel status is *not* usable to tell
that the second cell is running. With ipykernel 7 JupyterLab sends widget comms over a kernel
subshell, created by a `create_subshell_request` on the control channel when the widget's comm
opens; the kernel publishes busy/idle for that request on IOPub, and since that message type
is not in jupyter-server's `untracked_message_types` JupyterLab takes the `idle` as the
kernel's status. When that `idle` lands after the second cell's `busy` (a race of a few ms),
the status bar reads Idle for as long as the cell runs.
"""

from __future__ import annotations

import json
import os
import time

import nbformat
import pytest
from jupyter_harness import ROOT, chromium_path, start_server

SHOTS = ROOT / "test-artifacts" / "jupyterlab"
LABEXT = ROOT / "symphony_lab" / "jupyter" / "labextension" / "package.json"
WIDGET_JS = ROOT / "symphony_lab" / "widgets" / "static" / "widget.js"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
PROMPT = "The capital of France is"
WAITING = "cell 2: waiting for the LIP"

pytestmark = pytest.mark.slow


def _skip_reason() -> str | None:
    if chromium_path() is None:
        return "chromium is not installed (make setup installs Debian's chromium)"
    if not LABEXT.exists() or not WIDGET_JS.exists():
        return "the front-end is not built (make setup)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright (python) is not installed"
    return None


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    reason = _skip_reason()
    if reason and os.environ.get("CI"):  # CI's set-up installs all of it: a missing piece is a failure
        pytest.fail(reason)
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("jlab")
    # JupyterLab loads this checkout's build of the extension (first on JUPYTER_PATH), not whichever
    # one the environment's share/jupyter/labextensions links to
    jpath = tmp / "jupyter-path"
    (jpath / "labextensions").mkdir(parents=True)
    (jpath / "labextensions" / "symphony-lab").symlink_to(LABEXT.parent)
    srv = start_server(tmp, app="lab", env_extra={"SYMPHONY_LAB_TOPK": "5", "JUPYTER_PATH": str(jpath)})
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import sys\n"
            f"sys.path.insert(0, {str(ROOT / 'examples' / 'lips')!r})\n"
            "from symphony_lab import lab\n"
            "from beam_search import beam_search\n"
            f"run = lab.run(beam_search, {PROMPT!r}, 2, 6, stop_on_entry=True)"
        ),
        # the kernel then stays busy in this cell until the LIP ends: every click below happens meanwhile
        nbformat.v4.new_code_cell(
            f"print({WAITING!r}, flush=True)\nbest = run.result(600)['best']['text']\nprint('BEST:', repr(best))"
        ),
        # runs once the beam search has ended: a profiled, recorded greedy loop for the Profile and What-if tabs
        nbformat.v4.new_code_cell(
            "def greedy(sym, prompt, n):\n"
            "    kv = sym.kv_create()\n"
            "    d = sym.pred(kv, sym.tokenize(prompt))\n"
            "    for _ in range(n - 1):\n"
            "        d = sym.pred(kv, [d.argmax()])  # the loop's line\n"
            "    sym.kv_close(kv)\n"
            "    return n\n"
            f"run2 = lab.run(greedy, {PROMPT!r}, 6, stop_on_entry=True, record=True, profile=True)"
        ),
    ]
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nbformat.write(nb, srv.root_dir / "beam.ipynb")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def page(lab_server):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = ctx.new_page()
    console: list[str] = []
    pg.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    pg.console_log = console
    yield pg
    ctx.close()
    browser.close()
    pw.stop()


def _wait(page, predicate_js: str, timeout: float, what: str, arg=None):
    try:
        return page.wait_for_function(predicate_js, arg=arg, timeout=timeout * 1000)
    except Exception as e:
        page.screenshot(path=str(SHOTS / "failure.png"))
        raise AssertionError(f"timed out waiting for {what}; console:\n" + "\n".join(page.console_log[-30:])) from e


W = ".symphony-lab-widget[data-kind='run']"
# the second cell has started (its first line printed) and has not finished (its prompt is [*])
SECOND_CELL_WAITING = (
    "(marker) => { const c = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[1];"
    " if (!c) return false; const p = c.querySelector('.jp-InputPrompt');"
    " const o = c.querySelector('.jp-OutputArea');"
    " return !!(p && p.textContent.includes('*') && o && o.textContent.includes(marker)"
    " && !o.textContent.includes('BEST:')); }"
)
TOPK_ROWS = (
    "(sel) => [...document.querySelectorAll(sel + ' .sl-topk-row')]"
    ".map(r => [...r.querySelectorAll('td')].slice(0, 3).map(td => td.textContent.trim()))"
)
KERNEL_READY = (
    "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
    " const sc = w && w.sessionContext; const k = sc && sc.session && sc.session.kernel;"
    " return !!(sc && sc.isReady && k && k.connectionStatus === 'connected' && k.status === 'idle'); }"
)


def _accept_dialogs_until(page, ready_js: str, timeout: float, what: str = "the notebook's kernel") -> None:
    """Wait until `ready_js` holds, accepting any dialog JupyterLab puts up on the way (kernel choice)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        if page.evaluate(ready_js):
            return
        time.sleep(0.3)
    page.screenshot(path=str(SHOTS / "failure.png"))
    raise AssertionError(f"timed out waiting for {what}; console:\n" + "\n".join(page.console_log[-30:]))


def test_beam_search_step_override_continue_in_jupyterlab(lab_server, page):
    t0 = time.monotonic()
    page.goto(f"{lab_server.url}/lab/tree/beam.ipynb?token={lab_server.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    # the extension is loaded: its sidebar tab is in the left bar
    tab = page.locator(".jp-SideBar.jp-mod-left [data-id='symphony-lab-sidebar']")
    tab.wait_for(timeout=30_000)
    _wait(
        page,
        "() => document.querySelector('.jp-Notebook') && window.jupyterapp !== undefined",
        30,
        "the JupyterLab app",
    )
    _accept_dialogs_until(page, KERNEL_READY, 120)
    no_news = page.locator(".Toastify button", has_text="No")  # JupyterLab's "notify about news?" toast
    if no_news.count():
        no_news.first.click()
    # run the cell (as a user would: Run > Run All Cells)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }")
    _accept_dialogs_until(
        page,
        f"() => {{ const w = document.querySelector(\"{W}\"); return w && w.dataset.stopWhere === 'entry'; }}",
        150,
        "the widget to show the LIP stopped on entry",
    )
    widget = page.locator(W).first  # the third cell adds a second run widget at the end
    assert widget.get_attribute("data-status") == "stopped"
    assert "stopped on entry" in widget.locator(".sl-stop-line").inner_text()
    assert "beam_search" in widget.locator(".sl-source").inner_text()

    # open the sidebar: processes, KV tree, scheduler
    tab.click()
    side = page.locator(".symphony-lab-sidebar")
    _wait(
        page,
        "() => { const s = document.querySelector('.symphony-lab-sidebar');"
        " return s && s.dataset.connected && s.querySelector('.sl-thread'); }",
        60,
        "the sidebar to connect to the kernel's lab",
    )
    assert "stopped" in side.locator(".sl-procs").inner_text()

    def stop_id() -> str:
        return widget.get_attribute("data-stop-id") or ""

    # the second cell waits on the stopped LIP: the kernel is busy in it from here to the end
    _wait(
        page,
        SECOND_CELL_WAITING,
        120,
        "the second cell to be running (its output printed, its prompt [*])",
        arg=WAITING,
    )
    # record from the widget while stopped on entry (so the recording is complete: it can be replayed)
    _wait(
        page,
        f"() => document.querySelector(\"{W}\").dataset.transport === 'server'",
        20,
        "the widget to reach the kernel through the server extension",
    )
    assert widget.get_attribute("data-record") == "off"
    assert widget.locator("button.sl-step-back").is_disabled()
    widget.locator("button.sl-record").click()
    _wait(
        page,
        f"() => document.querySelector(\"{W}\").dataset.record === 'recording'",
        20,
        "the widget's record indicator",
    )

    def step(n: int) -> None:
        before = stop_id()
        widget.locator("button.sl-step").click()
        _wait(
            page,
            "([sel, before]) => { const w = document.querySelector(sel);"
            " return w.dataset.stopId && w.dataset.stopId !== before && w.dataset.stopWhere === 'after'; }",
            60,
            f"step {n} to stop after a pred",
            arg=[W, before],
        )

    # step twice from the widget (commands go over the server extension's WebSocket)
    step(1)
    topk_1 = page.evaluate(TOPK_ROWS, W)
    step(2)
    assert len(topk_1) >= 3 and page.evaluate(TOPK_ROWS, W) != topk_1

    # step back: the recorded run replays into a new process stopped after pred 1, same top-k
    t_back = time.monotonic()
    pid_1, before = widget.get_attribute("data-pid"), stop_id()
    widget.locator("button.sl-step-back").click()
    _wait(
        page,
        "([sel, pid, before]) => { const w = document.querySelector(sel); return w.dataset.pid !== pid"
        " && w.dataset.stopWhere === 'after' && w.dataset.stopId !== before && w.dataset.record === 'replay'; }",
        60,
        "step back to replay to pred 1",
        arg=[W, pid_1, before],
    )
    assert page.evaluate(TOPK_ROWS, W) == topk_1, "the replayed stop shows the recorded top-k"
    assert f"replay of pid {pid_1}" in widget.locator(".sl-rec").inner_text()
    widget.screenshot(path=str(SHOTS / "widget-step-back.png"))
    step(3)  # to pred 2 again, in the replayed process
    print(f"record + step back + step took {time.monotonic() - t_back:.1f}s")
    rows = widget.locator(".sl-topk-row")
    assert rows.count() >= 3
    assert "sl-chosen" in (rows.nth(0).get_attribute("class") or "")
    updates_stopped = int(side.get_attribute("data-updates") or 0)
    _wait(
        page,
        "() => document.querySelectorAll('.symphony-lab-sidebar .sl-kv .sl-kvnode').length >= 1"
        " && document.querySelectorAll('.symphony-lab-sidebar .sl-tl .sl-batch').length >= 2",
        30,
        "the sidebar's KV tree and scheduler to show the stepped LIP",
    )
    batches_stopped = page.locator(".symphony-lab-sidebar .sl-tl .sl-batch").count()

    # override: use the model's second choice
    alt = rows.nth(1)
    alt_text = alt.locator("code").text_content()
    alt_token = alt.locator("button.sl-override-pick").get_attribute("data-token")
    alt.locator("button.sl-override-pick").click()
    _wait(
        page,
        "([sel, t]) => { const c = document.querySelector(sel + ' .sl-chosen-text');"
        " return c && c.textContent === t && document.querySelector(sel + ' .sl-dist').textContent.includes('override'); }",
        30,
        "the override to show in the widget",
        arg=[W, alt_text],
    )
    widget.screenshot(path=str(SHOTS / "widget-stopped-override.png"))
    side.screenshot(path=str(SHOTS / "sidebar-stopped.png"))

    # from the sidebar: a breakpoint on kv_close, so the run stops where beams have forked
    pid = widget.get_attribute("data-pid")
    side.locator(".sl-bp-call").fill("kv_close")
    side.locator(".sl-bp-pid").fill(pid)
    side.locator("button.sl-bp-add").click()
    _wait(
        page,
        "() => document.querySelector('.symphony-lab-sidebar .sl-bps').textContent.includes('kv_close')",
        20,
        "the breakpoint in the sidebar's list",
    )
    widget.locator("button.sl-continue").click()
    _wait(
        page,
        f"() => {{ const w = document.querySelector(\"{W}\"); return w.dataset.stopWhere === 'before'"
        f" && w.querySelector('.sl-stop-line').textContent.includes('kv_close'); }}",
        60,
        "the LIP to stop at the kv_close breakpoint",
    )
    _wait(
        page,
        "() => document.querySelectorAll('.symphony-lab-sidebar .sl-kv .sl-kvnode').length >= 2"
        " && document.querySelector('.symphony-lab-sidebar .sl-kv .sl-shared')",
        30,
        "the sidebar's KV tree to show forked files sharing pages",
    )
    side.locator(".sl-kv .sl-kvnode").nth(1).click()
    _wait(
        page,
        "() => document.querySelector('.symphony-lab-sidebar .sl-kv-details .sl-pages')",
        10,
        "a KV file's pages after a click",
    )
    side.screenshot(path=str(SHOTS / "sidebar-kv-forks.png"))
    widget.screenshot(path=str(SHOTS / "widget-breakpoint.png"))
    side.locator("button.sl-bp-rm").first.click()
    _wait(
        page,
        "() => document.querySelector('.symphony-lab-sidebar .sl-bps').textContent.includes('no breakpoints')",
        20,
        "the breakpoint to be removed",
    )

    # continue to the end, from the sidebar's thread controls
    side.locator(f".sl-cmd[data-cmd='continue'][data-pid='{pid}'][data-tid='1']").click()
    _wait(page, f"() => document.querySelector(\"{W}\").dataset.status === 'finished'", 120, "the LIP to finish")
    out = widget.locator(".sl-output").inner_text()
    result = json.loads(out.split("── result ──", 1)[1])
    best = result["best"]["text"]
    assert best.startswith(alt_text), (best, alt_text)  # the LIP continued from our token
    toks = widget.locator(".sl-tokens .sl-tok-override")
    assert toks.count() >= 1 and toks.first.text_content() == alt_text
    assert int(alt_token) >= 0
    # one lane per thread (the beams' threads never interleave), and the run's KV fork tree is
    # still there after the run ended (the kept tree), with a scrubber over the kept ones
    lanes = widget.locator(".sl-tokens .sl-lane")
    assert lanes.count() >= 3, widget.locator(".sl-tokens").inner_text()
    tids = [lanes.nth(i).get_attribute("data-tid") for i in range(lanes.count())]
    assert len(set(tids)) == len(tids) and "1" in tids, tids
    _wait(
        page,
        f"() => {{ const w = document.querySelector(\"{W}\"); return w.dataset.kvSource === 'kept'"
        f" && w.querySelectorAll('.sl-kv .sl-kvnode').length >= 1; }}",
        30,
        "the widget's KV tree kept after the run ended",
    )
    assert "the run has ended" in widget.locator(".sl-kv-note").inner_text()
    assert not widget.locator(".sl-kv-scrub").is_disabled()

    # the busy cell got the same result once the LIP ended
    _wait(
        page,
        "() => [...document.querySelectorAll('.jp-OutputArea-output')].some(o => o.textContent.includes('BEST:'))",
        60,
        "the second cell to print the LIP's result",
    )
    printed = next(t for t in page.locator(".jp-OutputArea-output").all_text_contents() if "BEST:" in t)
    assert repr(best) in printed, (printed, best)

    # the sidebar kept up: more batches, the process finished
    _wait(
        page,
        "([n0, b0]) => { const s = document.querySelector('.symphony-lab-sidebar');"
        " return Number(s.dataset.updates) > n0 && s.querySelectorAll('.sl-tl .sl-batch').length > b0"
        " && s.querySelector('.sl-procs').textContent.includes('finished'); }",
        30,
        "the sidebar to show the finished run",
        arg=[updates_stopped, batches_stopped],
    )
    # export the run as a Perfetto trace from the sidebar
    with page.expect_download(timeout=30_000) as dl:
        side.locator("button.sl-export").click()
    trace_path = SHOTS / "symphony-trace.json"
    dl.value.save_as(str(trace_path))
    trace = json.loads(trace_path.read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"pred", "kv_fork"} <= names, sorted(n for n in names if n)[:40]
    widget.screenshot(path=str(SHOTS / "widget-finished.png"))
    side.screenshot(path=str(SHOTS / "sidebar-finished.png"))
    profile_and_what_if(page, side)
    page.screenshot(path=str(SHOTS / "jupyterlab.png"))
    errors = [m for m in page.console_log if m.startswith("error") and "symphony" in m.lower()]
    assert not errors, errors
    print(f"browser flow took {time.monotonic() - t0:.1f}s")


W2 = f'document.querySelectorAll("{W}")[1]'  # the third cell's run widget


def profile_and_what_if(page, side) -> None:
    """The third cell's run: step over from the sidebar, then the widget's Profile and What-if
    tabs and the sidebar's Profile and What-if sections on the finished run."""
    _wait(page, f"() => {{ const w = {W2}; return w && w.dataset.stopWhere === 'entry'; }}", 120, "run 2 on entry")
    w2 = page.locator(W).nth(1)
    pid2 = w2.get_attribute("data-pid")
    over = side.locator(f".sl-cmd[data-cmd='step_over'][data-pid='{pid2}'][data-tid='1']")
    over.wait_for(timeout=20_000)  # the sidebar folded run 2's process_start and stopped events
    assert "step over" in (over.get_attribute("title") or "")
    assert int(side.get_attribute("data-folded") or 0) >= 2
    entry = w2.get_attribute("data-stop-id")
    over.click()
    _wait(
        page,
        f"(e) => {{ const w = {W2}; return w.dataset.stopId !== e && w.dataset.stopWhere === 'after'; }}",
        60,
        "the sidebar's step over to stop after run 2's first pred",
        arg=entry,
    )
    assert "sym.pred(kv, sym.tokenize(prompt))" in w2.locator(".sl-source .sl-cur").inner_text()
    assert "(v)" in (w2.locator("button.sl-step-over").get_attribute("title") or "")
    side.locator(f".sl-cmd[data-cmd='continue'][data-pid='{pid2}'][data-tid='1']").click()
    _wait(page, f"() => {W2}.dataset.status === 'finished'", 120, "run 2 to finish")

    w2.locator(".sl-tab[data-tab='profile']").click()
    _wait(page, f"() => {W2}.querySelectorAll('.sl-prof-row').length >= 2", 30, "the widget's profile table")
    rows = w2.locator(".sl-prof-row")
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    loop = next(t for t in texts if "the loop's line" in t)
    assert "\t5\t5" in loop, loop  # the loop's line: 5 preds, 5 tokens fed
    assert any("sym.tokenize(prompt)" in t for t in texts), texts
    w2.screenshot(path=str(SHOTS / "widget-profile.png"))

    w2.locator(".sl-tab[data-tab='whatif']").click()
    pos = w2.locator(".sl-wi-pos").input_value()
    assert int(pos) >= 1
    w2.locator(".sl-wi-token").fill(" Rome")
    w2.locator("button.sl-wi-run").click()
    _wait(page, f"() => {W2}.dataset.whatIf === '0'", 60, "the widget's what-if to diverge at once")
    assert w2.locator(".sl-wi-table td").count() == 2
    assert w2.locator(".sl-wi-alternative .sl-wi-diverge").inner_text().strip() == "Rome"
    assert w2.locator(".sl-wi-original .sl-wi-tok").count() >= 2
    w2.screenshot(path=str(SHOTS / "widget-what-if.png"))

    side.locator(".sl-prof-pid").select_option(pid2)
    side.locator("button.sl-prof-refresh").click()
    _wait(
        page, "() => document.querySelectorAll('.symphony-lab-sidebar .sl-prof-row').length >= 2", 30, "sidebar profile"
    )
    assert "the loop's line" in side.locator(".sl-prof").inner_text()
    side.locator(".sl-wi-pid").select_option(pid2)
    side.locator(".sl-wi-pos").fill(pos)
    side.locator(".sl-wi-token").fill(" Rome")
    side.locator("button.sl-wi-run").click()
    _wait(page, "() => document.querySelector('.symphony-lab-sidebar').dataset.whatIf === '0'", 60, "sidebar what-if")
    assert side.locator(".sl-wi-table td").count() == 2
    side.screenshot(path=str(SHOTS / "sidebar-profile-what-if.png"))


def test_labextension_is_listed_enabled():
    import subprocess
    import sys

    if not LABEXT.exists():
        pytest.skip("the front-end is not built (make setup)")
    out = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    text = out.stdout + out.stderr
    line = next((ln for ln in text.splitlines() if "symphony-lab" in ln), "")
    assert "enabled" in line and "OK" in line, text
