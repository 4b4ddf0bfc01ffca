"""Theme-aware labels for widgets that still take Rich `Text` (Textual's `Tree`)."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content
from textual.widgets import Static, Tree


def to_text(content: Content, app) -> Text:
    """`content` as Rich Text, its `$variables` resolved against the app's current theme."""
    out = Text(no_wrap=True, overflow="ellipsis")
    for s, style in content.render(end="", parse_style=app.stylesheet.parse_style):
        out.append(s, style.rich_style if style else None)
    return out


class ContentTree(Tree):
    """A `Tree` whose labels may be `Content` (with theme variables); redrawn on theme change."""

    def process_label(self, label):
        if isinstance(label, Content):
            return to_text(label, self.app)
        return super().process_label(label)


class Quiet(Static):
    """A `Static` that ignores an update with what it already shows (no repaint every poll)."""

    _last: str | None = None

    def update(self, content="", **kw) -> None:
        key = content.markup if isinstance(content, Content) else repr(content)
        if key == self._last:
            return
        self._last = key
        super().update(content, **kw)
