"""The TUI's layout and keys: its five panes (their order in the tabs and in the wide grid, and
which widget takes the keyboard in each) and the key bindings (debugger keys as in VS Code too)."""

from __future__ import annotations

from textual.binding import Binding

from .kv import KVPane
from .processes import ProcessesPane
from .program import ProgramPane
from .scheduler import SchedulerPane
from .tokens import TokensPane

PANES = [
    ("program", "Program", ProgramPane),
    ("tokens", "Tokens", TokensPane),
    ("kv", "KV", KVPane),
    ("sched", "Scheduler", SchedulerPane),
    ("procs", "Processes", ProcessesPane),
]
# Grid order in the wide layout (see app.tcss): program spans two rows on the left.
GRID_ORDER = ["program", "procs", "kv", "tokens", "sched"]


FOCUS_IN_PANE = {
    "program": "#source",
    "tokens": "#topk",
    "kv": "#kv-tree",
    "sched": "#sched-table",
    "procs": "#proc-tree",
}

KEY_BINDINGS = [
    Binding("s", "step", "Step"),
    Binding("f11", "step", "Step into", show=False),
    Binding("v", "step_over", "Over"),
    Binding("f10", "step_over", "Step over", show=False),
    Binding("f", "step_out", "Out"),
    Binding("shift+f11", "step_out", "Step out", show=False),
    Binding("c", "continue", "Cont"),
    Binding("f5", "continue", "Continue", show=False),
    Binding("p", "pause", "Pause"),
    Binding("f6", "pause", "Pause", show=False),
    Binding("b", "toggle_breakpoint", "Break"),
    Binding("f9", "toggle_breakpoint", "Breakpoint", show=False),
    Binding("o", "override", "Override"),
    Binding("n", "step_batch", "Batch", show=False),  # the footer keeps to 80 columns: `?` lists these
    Binding("m", "step_mode", "Step mode", show=False),
    Binding("u", "step_back", "Back"),
    Binding("f7", "step_back", "Step back", show=False),
    Binding("r", "relaunch", "Relaunch", show=False),
    Binding("t", "toggle_dark", "Theme", show=False),
    Binding("f3", "profile", "Profile", show=False),
    Binding("f4", "what_if", "What if", show=False),
    # priority: a focused pane (source view, tables, trees) must not swallow `?` (F1 works anyway)
    Binding("question_mark,f1", "help", "Help", priority=True),
    Binding("q", "quit", "Quit"),
    *[Binding(str(i + 1), f"show_pane('{key}')", label, show=False) for i, (key, label, _) in enumerate(PANES)],
]


__all__ = ["KEY_BINDINGS", "FOCUS_IN_PANE", "GRID_ORDER", "PANES"]
