"""Modal screens: help, override (type a word or a token id), launch arguments."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Markdown, Static

HELP = """\
# Symphony Lab — keys

| key | what it does |
|---|---|
| `s` / `F11` | **step** (into): run the focused thread until its next `pred` returns, then stop (into the threads it spawns) |
| `v` / `F10` | **step over**: run until the next `pred` returns in the focused thread's function or a caller (preds in called functions such as `generate` run through) |
| `f` / `shift+F11` | **step out**: run until the focused thread leaves the function it is stopped in |
| `c` / `F5` | **continue** every stopped thread (of the focused process) |
| `p` / `F6` | **pause** the focused process (all, if none is focused) |
| `b` / `F9` | **toggle a breakpoint** on the cursor's line in the program pane (on every `pred` when no source is shown) |
| `o` | **override** the token the focused thread is about to get: type a word or `#id`; or press Enter on a top-k row |
| `m` | scheduler **step mode** on/off (fire one batch per command) |
| `n` | **step one batch** (in step mode) |
| `u` / `F7` | **step back**: replay the run up to the previous `pred` of the focused thread |
| `r` | **relaunch** the program (same function, same arguments) |
| `F3` | **profile**: where the program's time goes, per line (queue, forward, own, blocking), and a flame view |
| `F4` | **what if**: at a token position of the focused thread's recorded run, feed another token and see both continuations |
| `t` | light / dark theme |
| `1`…`5` | show a pane (tabs when the terminal is narrow) and focus it |
| `tab` | move focus between panes |
| `?` / `F1` | this help |
| `q` / `ctrl+q` | quit |

Colours in the token pane: green — the model was sure (p ≥ 0.7), yellow — a toss-up (p ≥ 0.3),
red — unlikely (p < 0.3), underlined on blue — a token you overrode.

Select a process or thread in the processes pane to focus it; the program, token and
KV panes follow the focused thread. Select a file in the KV tree to see its pages.

Press `escape` or `?` to close.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(HELP)


class OverrideScreen(ModalScreen[str | None]):
    """Ask for the token to force: a word (its first token) or `#1234` for a token id."""

    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]

    def __init__(self, where: str, suggestion: str = "") -> None:
        super().__init__()
        self.where, self.suggestion = where, suggestion

    def compose(self) -> ComposeResult:
        with Vertical(id="override-box"):
            yield Static(Content.assemble(Content.styled("Override the token", "bold"), f"  {self.where}"))
            yield Static(
                Content.styled("a word (its first token is used) or #id; Enter to apply, Esc to cancel", "$text-muted")
            )
            yield Input(value=self.suggestion, placeholder="word or #token-id", id="override-input")

    def on_input_submitted(self, ev: Input.Submitted) -> None:
        self.dismiss(ev.value if ev.value != "" else None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
