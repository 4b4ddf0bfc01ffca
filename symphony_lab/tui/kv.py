"""The KV pane: the fork tree of KV files, and the pages of the selected file.

Built from the debugger's `kv_tree` snapshot (files, fork parents, shared pages, token text
per page). A node reads `#fid path  len · pages · shared` (no path for an unnamed file); selecting it lists its pages with
the files each page is shared with and the text its token slots hold.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Static, Tree

from .labels import ContentTree, Quiet
from .tokens import visible


def file_label(f: dict, holders: bool = True, sharing: bool = True) -> Content:
    """`#fid name  len tok · pages pg · n shared · pid p`: the name is a named file's last path
    component (the full path heads its pages), an unnamed file has none, and the holders are
    left out when one process holds every file, and so is the shared count of a file whose forks
    hang below it (they say it) — so the labels of 5 forks fit a 46-column pane."""
    shared = f.get("shared_pages", 0) if sharing else 0
    held = (f.get("held_by") or []) if holders else []
    parts = [
        Content.styled(f"#{f['file']}", "bold"),
        Content.styled(f" {f['path'].rstrip('/').rsplit('/', 1)[-1]}", "$text-primary") if f.get("path") else "",
        f"  {f.get('length', 0)} tok · {f.get('n_pages', 0)} pg",
    ]
    if shared:
        parts.append(Content.styled(f" · {shared} shared", "$text-success"))
    if held:
        parts.append(Content.styled(" · pid " + ",".join(str(p) for p in held), "dim"))
    if f.get("swapped") or f.get("evicted"):
        parts.append(Content.styled(" · swapped" if f.get("swapped") else " · evicted", "$text-warning"))
    return Content.assemble(*parts)


class KVTree(ContentTree):
    def __init__(self, **kw) -> None:
        super().__init__("KV files", **kw)
        self.show_root = True
        self.guide_depth = 3
        self._sig: tuple | None = None

    def show(self, tree: dict) -> None:
        files = {f["file"]: f for f in tree.get("files", [])}
        # Only rebuild when the shape or a label changes: rebuilding loses the cursor.
        sig = tuple(
            (
                fid,
                f.get("parent"),
                f.get("length"),
                f.get("n_pages"),
                f.get("shared_pages"),
                tuple(f.get("held_by") or ()),
            )
            for fid, f in sorted(files.items())
        )
        if sig == self._sig:
            return
        self._sig = sig
        cursor = self.cursor_node.data if self.cursor_node is not None else None
        self.clear()
        used, total = tree.get("pages_used", 0), tree.get("pages_total", 0)
        self.root.set_label(
            Content.assemble(Content.styled("KV files", "bold"), f"  {len(files)} files · {used}/{total} pages")
        )
        children: dict[int | None, list[int]] = {}
        for fid, f in files.items():
            parent = f.get("parent")
            anc = [a for a in f.get("ancestry", []) if a in files]
            # A closed parent: hang the file under its nearest live ancestor.
            key = parent if parent in files else (anc[0] if anc else None)
            children.setdefault(key, []).append(fid)
        target = None
        holders = len({p for f in files.values() for p in f.get("held_by") or []}) > 1

        def add(node, fid: int) -> None:
            nonlocal target
            f = files[fid]
            kids = sorted(children.get(fid, []))
            if kids:
                n = node.add(file_label(f, holders, sharing=False), data=fid, expand=True)
                for k in kids:
                    add(n, k)
            else:
                n = node.add_leaf(file_label(f, holders), data=fid)
            if fid == cursor:
                target = n

        for fid in sorted(children.get(None, [])):
            add(self.root, fid)
        self.root.expand()
        if target is not None:
            self.call_after_refresh(self.move_cursor, target)


class PagesTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_column("pg", key="i", width=3)
        self.add_column("page", key="page", width=5)
        self.add_column("slots", key="slots", width=8)
        self.add_column("ref", key="ref", width=3)
        self.add_column("shared with", key="shared", width=11)
        self.add_column("text", key="text")

    _sig = None

    def show(self, f: dict | None) -> None:
        sig = (
            None
            if not f
            else (
                f["file"],
                f.get("length"),
                tuple(
                    (pg.get("page"), tuple(pg.get("shared_with", [])), pg.get("refcount")) for pg in f.get("pages", [])
                ),
            )
        )
        if sig == self._sig:
            return
        keep = self.cursor_row if (sig and self._sig and sig[0] == self._sig[0]) else 0
        self._sig = sig
        self.clear()
        if not f:
            return
        for pg in f.get("pages", []):
            shared = ",".join(f"#{g}" for g in pg.get("shared_with", [])) or "—"
            a, b = pg.get("slots", [0, 0])
            text = visible(pg.get("text", "")) if pg.get("text") is not None else ""
            self.add_row(
                str(pg.get("index")),
                "swap" if pg.get("swapped") else str(pg.get("page")),
                f"{a}-{b}",
                str(pg.get("refcount", "")),
                Content.styled(shared, "$text-success" if pg.get("shared_with") else "$text-muted"),
                text[:200],
            )
        if self.row_count:
            self.move_cursor(row=min(keep, self.row_count - 1), animate=False)


class KVPane(Vertical):
    def compose(self):
        yield KVTree(id="kv-tree")
        yield Quiet(
            Content.styled("select a file to see its pages", "$text-muted"), id="kv-file-title", classes="pane-subtitle"
        )
        yield PagesTable(id="kv-pages")

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.kvdata: dict = {}
        self.selected: int | None = None

    def show(self, tree: dict) -> None:
        self.kvdata = tree or {}
        self.query_one(KVTree).show(self.kvdata)
        self._show_selected()

    def _show_selected(self) -> None:
        f = next((f for f in self.kvdata.get("files", []) if f["file"] == self.selected), None)
        title = self.query_one("#kv-file-title", Static)
        if f is None:
            title.update(Content.styled("select a file to see its pages", "$text-muted"))
        else:
            anc = " ← ".join(f"#{a}" for a in f.get("ancestry", []))
            title.update(
                Content.assemble(
                    Content.styled(f"#{f['file']} {f.get('path') or ''}", "bold"),
                    f"  {f.get('length')} tokens, {f.get('n_pages')} pages",
                    f"  forked from {anc}" if anc else "",
                )
            )
        self.query_one(PagesTable).show(f)

    def on_tree_node_selected(self, ev: Tree.NodeSelected) -> None:
        if isinstance(ev.node.data, int):
            self.selected = ev.node.data
            self._show_selected()

    def on_tree_node_highlighted(self, ev: Tree.NodeHighlighted) -> None:
        if isinstance(ev.node.data, int) and ev.node.data != self.selected:
            self.selected = ev.node.data
            self._show_selected()
