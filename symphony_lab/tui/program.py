"""The program pane: the LIP's source, the line it is stopped at, and breakpoint markers.

The source comes from the debugger's stop (its file and line); the text itself is read from
that file, as any debugger front-end does. Lines are an `OptionList`, so the cursor, scrolling
and mouse work as in every Textual list; `b` toggles a breakpoint on the cursor's line.
"""

from __future__ import annotations

import linecache

from textual.containers import Vertical
from textual.content import Content
from textual.highlight import highlight
from textual.widgets import OptionList

from .labels import Quiet


class SourceView(OptionList):
    """Source lines with a gutter: ● breakpoint, ▶ the stopped line."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.file: str | None = None
        self.lines: list[Content] = []
        self.raw: list[str] = []
        self.current: int | None = None
        self.breaks: set[int] = set()

    def load(self, file: str | None, text: str | None = None) -> bool:
        """Show `file` (its text read from disk unless given); False if it cannot be read."""
        if file == self.file and text is None and self.raw:
            return True
        if text is None and file:
            linecache.checkcache(file)
            text = "".join(linecache.getlines(file))
        if not text:
            self.file, self.raw, self.lines = file, [], []
            self.clear_options()
            return False
        self.file = file
        self.raw = text.splitlines()
        self.lines = highlight(text, language="python", path=file).split("\n", allow_blank=True)
        while len(self.lines) < len(self.raw):
            self.lines.append(Content(""))
        self._rebuild()
        return True

    def forget(self) -> None:
        """Read the file again at the next `load` (it may have changed)."""
        self.file = None

    def _prompt(self, i: int) -> Content:
        n = i + 1
        width = len(str(len(self.raw)))
        mark = Content.styled("●", "$text-error bold") if n in self.breaks else Content(" ")
        arrow = Content.styled("▶", "$text-warning bold") if n == self.current else Content(" ")
        num = Content.styled(f"{n:>{width}} ", "$text-muted" if n != self.current else "$text-warning bold")
        body = self.lines[i] if i < len(self.lines) else Content("")
        line = Content.assemble(mark, arrow, num, body)
        if n == self.current:
            line = line.stylize("on $warning 25%")
        return line

    def _rebuild(self) -> None:
        keep = self.highlighted
        self.clear_options()
        self.add_options([self._prompt(i) for i in range(len(self.raw))])
        if keep is not None and keep < len(self.raw):
            self.highlighted = keep

    def _refresh_line(self, n: int | None) -> None:
        if n is not None and 1 <= n <= len(self.raw):
            self.replace_option_prompt_at_index(n - 1, self._prompt(n - 1))

    def set_current(self, line: int | None, follow: bool = True) -> None:
        old, self.current = self.current, line
        if old != line:
            self._refresh_line(old)
            self._refresh_line(line)
        if follow and line is not None and 1 <= line <= len(self.raw):
            self.highlighted = line - 1
            self.scroll_to_highlight()
            self.call_after_refresh(self._center, line - 1)

    def _center(self, index: int) -> None:
        self.scroll_to(y=max(0, index - self.scrollable_content_region.height // 2), animate=False)

    def set_breaks(self, lines: set[int]) -> None:
        changed = self.breaks ^ set(lines)
        self.breaks = set(lines)
        for n in changed:
            self._refresh_line(n)

    @property
    def cursor_line(self) -> int | None:
        return None if self.highlighted is None else self.highlighted + 1

    def line_text(self, n: int) -> str:
        return self.raw[n - 1] if 1 <= n <= len(self.raw) else ""


class ProgramPane(Vertical):
    """Title line (file, function, stop reason) above the source view."""

    def compose(self):
        yield Quiet("no program", id="program-title", classes="pane-subtitle")
        yield SourceView(id="source")

    _shown: tuple | None = None

    def show_stop(self, file: str | None, line: int | None, where, text: str | None = None, key=None) -> None:
        """Show `file` at `line`; the cursor jumps there only when the place (or `key`, the
        stop) changes, so moving the cursor to set a breakpoint survives the next refresh."""
        src = self.query_one(SourceView)
        if file and (file != src.file or not src.raw):
            src.load(file, text)
        place = (file, line, key)
        src.set_current(line, follow=place != self._shown)
        self._shown = place
        self.query_one("#program-title", Quiet).update(where)
