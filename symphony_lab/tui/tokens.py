"""The token pane: generated text coloured by probability, and the current top-k.

Each generated token is drawn on a background that says how sure the model was (green: likely,
yellow: a toss-up, red: unlikely, underlined on blue: overridden by the user). Below, the top-k table of
the current step; pressing Enter on a row overrides the stopped thread's token with it.
"""

from __future__ import annotations

from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Static

from .labels import Quiet

BAR = "█"


def prob_style(p: float | None, overridden: bool = False) -> str:
    """The style of one generated token: by probability bands, theme variables only."""
    if overridden:
        return "bold underline $text on $primary-muted"
    if p is None:
        return "$text"
    if p >= 0.7:
        return "$text on $success-muted"
    if p >= 0.3:
        return "$text on $warning-muted"
    return "$text on $error-muted"


def visible(text: str) -> str:
    """A token's text with whitespace made visible enough to read in a table cell."""
    return (
        text.replace("\n", "⏎").replace("\t", "⇥")
        if text.strip()
        else (text.replace(" ", "␣").replace("\n", "⏎") or "∅")
    )


def render_tokens(prompt: str, tokens: list[dict]) -> Content:
    """Prompt (dim) then each generated token on its probability background."""
    parts = [Content.styled(prompt, "$text-muted")] if prompt else []
    for t in tokens:
        parts.append(Content.styled(t.get("text", ""), prob_style(t.get("p"), t.get("overridden", False))))
    return Content.assemble(*parts) if parts else Content.styled("(nothing generated yet)", "$text-muted")


class TopK(DataTable):
    """The top-k table; Enter on a row asks for an override with that token."""

    class Chosen(Message):
        def __init__(self, token: int, text: str) -> None:
            super().__init__()
            self.token, self.text = token, text

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_column("#", key="rank", width=2)
        self.add_column("token", key="text", width=14)
        self.add_column("id", key="id", width=6)
        self.add_column("p", key="p", width=6)
        self.add_column("", key="bar", width=12)

    _sig = None

    def show(self, topk: list[dict], chosen: int | None) -> None:
        sig = (tuple((r.get("token"), r.get("p")) for r in topk), chosen)
        if sig == self._sig:
            return  # redrawing would move the cursor back to the top
        same_rows = self._sig is not None and self._sig[0] == sig[0]
        self._sig = sig
        keep = self.cursor_row if same_rows else 0
        self.clear()
        for i, r in enumerate(topk):
            p = float(r.get("p", 0.0))
            mark = "▸" if r.get("token") == chosen else str(i + 1)
            bar = Content.styled(BAR * max(1, round(p * 12)) if p > 0.005 else "", "$text-primary")
            text = Content.styled(visible(r.get("text", "")), "bold" if r.get("token") == chosen else "")
            self.add_row(mark, text, str(r.get("token")), f"{p:.3f}", bar, key=str(r.get("token")))
        if topk:
            self.move_cursor(row=min(keep, len(topk) - 1), animate=False)

    def on_data_table_row_selected(self, ev: DataTable.RowSelected) -> None:
        ev.stop()
        key = ev.row_key.value
        if key is None:
            return
        text = str(self.get_row(key)[1])
        self.post_message(self.Chosen(int(key), text))


class TokensPane(Vertical):
    _shown: tuple | None = None

    def compose(self):
        yield Quiet("", id="tokens-title", classes="pane-subtitle")
        with VerticalScroll(id="tokens-scroll"):
            yield Quiet(Content.styled("(nothing generated yet)", "$text-muted"), id="tokens-text")
        yield Quiet("", id="topk-title", classes="pane-subtitle")
        yield TopK(id="topk")

    def show_text(self, title: str, prompt: str, tokens: list[dict]) -> None:
        self.query_one("#tokens-title", Static).update(title)
        sig = (prompt, tuple((t.get("token"), t.get("p"), t.get("overridden")) for t in tokens))
        if sig != self._shown:
            self._shown = sig
            self.query_one("#tokens-text", Static).update(render_tokens(prompt, tokens))
            self.query_one("#tokens-scroll", VerticalScroll).scroll_end(animate=False)

    def show_topk(self, dist: dict | None, original: dict | None = None) -> None:
        """The top-k of the stopped pred. After an override the distribution the LIP gets has
        one token left; the table keeps showing the model's own top-k (`original`), the
        forced token marked."""
        table = self.query_one(TopK)
        title = self.query_one("#topk-title", Static)
        if not dist:
            table.show([], None)
            title.update(Content.styled("top-k: step a pred to see the distribution", "$text-muted"))
            return
        ch = dist.get("chosen") or {}
        shown = original if (original and ch.get("by") == "override") else dist
        ent = shown.get("entropy")
        if ch.get("by") == "override":
            was = (original or {}).get("chosen") or {}
            what = Content.assemble(
                "  overridden → ",
                Content.styled(visible(ch.get("text", "")), "bold underline"),
                f" (model: {visible(was.get('text', '?'))} {was.get('p', 0):.2f})" if was else "",
            )
        else:
            what = Content.assemble(
                "  chosen ",
                Content.styled(visible(ch.get("text", "")), "bold"),
                f" ({ch.get('p', 0):.2f}, {ch.get('by', '?')})",
            )
        title.update(
            Content.assemble(
                Content.styled("top-k", "bold"),
                what,
                f"  H={abs(ent):.2f}" if isinstance(ent, (int, float)) else "",
                Content.styled("  ⏎ override", "$text-muted"),
            )
        )
        table.show(shown.get("topk", []), ch.get("token"))
