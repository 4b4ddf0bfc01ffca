"""Theme-aware labels for widgets that still take Rich `Text` (Textual's `Tree`); how a stop reads."""

from __future__ import annotations

import functools

from rich.text import Text
from textual.app import ScreenStackError
from textual.content import Content
from textual.css.query import NoMatches
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


def quiet_when_gone(fn):
    """Workers finish after the app has closed: their redraws then find no widgets; skip them."""

    @functools.wraps(fn)
    def wrapper(self, *a, **kw):
        try:
            return fn(self, *a, **kw)
        except (NoMatches, ScreenStackError):
            if self.is_running and not getattr(self, "_exit", False):
                raise

    return wrapper


def describe_stop(stop: dict) -> str:
    """'on entry', 'after pred (step)', 'after pred (step into thread)', 'before kv_fork (breakpoint)'."""
    if stop.get("where") == "entry" or stop.get("call") is None:
        return "on entry"
    reason = "step into thread" if "follow" in (stop.get("reasons") or []) else stop.get("reason")
    return f"{stop.get('where', 'at')} {stop.get('call')} ({reason})"
