"""The scheduler pane: batches as a sparkline, queue depth, pages in use, tokens/s, next batch.

Fed by the debugger's scheduler `timeline` snapshot. Tokens/s is measured over the batches
shown (their own timestamps), never against the wall clock, so a paused session reads the
same when you come back to it. In scheduler step mode the queued calls — what the next
`step batch` will fire — are listed.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import DataTable, Static

from .labels import Quiet

WINDOW = 120  # batches in the sparkline and the rate


def tokens_per_s(batches: list[dict]) -> float | None:
    if not batches:
        return None
    t0 = min(b["t_start"] for b in batches)
    t1 = max(b["t_end"] for b in batches)
    busy = sum(max(0.0, b["t_end"] - b["t_start"]) for b in batches)
    span = max(t1 - t0, busy, 1e-6)
    return sum(b.get("tokens", 0) for b in batches) / span


def stats_line(tl: dict, step_mode: bool) -> Content:
    batches = tl.get("batches", [])[-WINDOW:]
    tps = tokens_per_s(batches)
    totals = tl.get("totals", {})
    used, total = tl.get("pages_used", 0), tl.get("pages_total", 0) or 1
    frac = used / total
    return Content.assemble(
        Content.styled("batches ", "$text-muted"),
        f"{totals.get('batches', len(batches))}",
        Content.styled("  queue ", "$text-muted"),
        Content.styled(str(tl.get("queue_depth", 0)), "bold"),
        Content.styled("  pages ", "$text-muted"),
        Content.styled(f"{used}/{total}", "$text-error" if frac > 0.9 else "$text-warning" if frac > 0.7 else ""),
        Content.styled("  tok/s ", "$text-muted"),
        f"{tps:,.0f}" if tps is not None else "—",
        Content.styled(f"  {tl.get('policy', '')}", "$text-muted"),
        Content.styled("  STEP MODE", "bold $text-warning") if step_mode else "",
    )


BLOCKS = " ▁▂▃▄▅▆▇█"


class BatchBars(Widget):
    """Batch sizes as bars from zero (Textual's Sparkline scales from the minimum, which hides
    a run of equal batches): newest on the right, the tallest batch labelled."""

    DEFAULT_CSS = "BatchBars { height: 3; }"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.sizes: list[int] = []

    def show(self, sizes: list[int]) -> None:
        if sizes != self.sizes:
            self.sizes = list(sizes)
            self.refresh()

    def render(self) -> Content:
        w, h = max(1, self.size.width), max(1, self.size.height)
        label = f" max {max(self.sizes)}" if self.sizes else " no batches yet"
        data = self.sizes[-max(1, w - len(label)) :]
        top = max(data) if data else 1
        rows = []
        for r in range(h):  # r = 0 is the top row
            line = []
            for v in data:
                eighths = round(v / top * h * 8) if top else 0
                level = eighths - (h - 1 - r) * 8
                line.append(BLOCKS[max(0, min(8, level))])
            text = "".join(line)
            rows.append(
                Content.assemble(
                    Content.styled(text, "$text-primary"), Content.styled(label if r == 0 else "", "$text-muted")
                )
            )
        return Content("\n").join(rows)


class BatchTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_column("batch", key="bid", width=6)
        self.add_column("n", key="n", width=3)
        self.add_column("tok", key="tok", width=4)
        self.add_column("members (pid.tid kind tokens)", key="members")

    _sig = None

    def _reset(self, sig) -> bool:
        """Clear for new rows; False when the rows would be the same (keep the cursor)."""
        if sig == self._sig:
            return False
        self._sig = sig
        self._keep = self.cursor_row
        self.clear()
        return True

    def _restore(self) -> None:
        if self.row_count:
            self.move_cursor(row=min(self._keep, self.row_count - 1), animate=False)

    def show_batches(self, batches: list[dict], limit: int = 40) -> None:
        if not self._reset(("b", tuple(b["bid"] for b in batches[-limit:]))):
            return
        for b in reversed(batches[-limit:]):
            ms = " ".join(
                f"{m.get('pid')}.{m.get('tid')}{'p' if m.get('kind') == 'prefill' else 'd'}{m.get('tokens')}"
                for m in b.get("members", [])
            )
            self.add_row(str(b["bid"]), str(b.get("size", len(b.get("members", [])))), str(b.get("tokens", 0)), ms)
        self._restore()

    def show_queue(self, queue: list[dict]) -> None:
        if not self._reset(("q", repr(queue))):
            return
        for i, q in enumerate(queue):
            chunk = q.get("chunk")
            extra = f" {chunk[0]}-{chunk[1]}/{chunk[2]}" if chunk else ""
            wait = " waiting pages" if q.get("waiting_pages") else " parked" if q.get("parked") else ""
            self.add_row(
                f"next{i + 1}" if i < 9 else "…",
                "1",
                str(q.get("tokens", q.get("remaining", 0))),
                f"{q.get('pid')}.{q.get('tid')} {q.get('kind')} file #{q.get('file')}{extra}{wait}",
            )
        self._restore()


class SchedulerPane(Vertical):
    def compose(self):
        yield Quiet("", id="sched-stats")
        yield BatchBars(id="sched-spark")
        yield Quiet("", id="sched-table-title", classes="pane-subtitle")
        yield BatchTable(id="sched-table")

    def show(self, tl: dict, step_mode: bool = False, next_batch: list[dict] | None = None) -> None:
        batches = tl.get("batches", [])
        self.query_one("#sched-stats", Static).update(stats_line(tl, step_mode))
        self.query_one(BatchBars).show([int(b.get("size", len(b.get("members", [])))) for b in batches[-WINDOW:]])
        title = self.query_one("#sched-table-title", Static)
        table = self.query_one(BatchTable)
        if step_mode:
            queue = next_batch if next_batch is not None else tl.get("queue", [])
            title.update(
                Content.assemble(
                    Content.styled("queued for the next batch", "bold"),
                    Content.styled("  (n: fire one batch)", "$text-muted"),
                )
            )
            table.show_queue(queue)
        else:
            title.update(
                Content.assemble(
                    Content.styled("recent batches", "bold"),
                    Content.styled("  bars: batch sizes, newest right", "$text-muted"),
                )
            )
            table.show_batches(batches)
