"""Prompt prefixes whose K/V the pool still holds: a `pred` that starts a file with the same tokens
reuses them instead of computing them again (what vLLM calls automatic prefix caching and SGLang
a radix cache).

A LIP shares a prefix on purpose by forking a file (`kv_fork`, or a named file every program
opens). This cache is for the prefixes nobody arranged to share: a thousand programs whose prompts
begin alike, each prefilling its own file. After a prefill of an empty file at the default positions
0..n-1 has run, its pages go into a trie per user: a full page under the token tuple it holds, below
the page before it; the last, partly filled page as a candidate whose first tokens may match another
prompt, found by its first HEAD tokens. A later prefill of an empty file by the same user walks the
trie: every full page that matches is shared (reference counted, copy-on-write, as a fork shares it)
and the longest matching start of a partly matching page is copied into a fresh page of its own.
Only the rest is computed, and always at least the last token, whose logits the `pred` returns.

Two files holding the same tokens at the same positions hold the same K/V, up to float rounding
(the forward pass that wrote them batched other rows with them). A user's cached prompts never
serve another user: the cache would otherwise tell one user, by its speed, what another asked.

The pool keeps an indexed page's K/V after the last file holding it lets go (`PagePool.keep`): it
stays allocatable, counted in `free_pages`, and is only taken back, oldest first, once the truly
free pages have run out (`PagePool.forget` then drops it from the trie). Writing into an indexed
page never happens: a full page is never written again, a partly filled one is only appended to
(its candidate names only the tokens it held when indexed), and a truncation into an indexed page
drops it from the trie first (`KVFS.truncate`, `KVFS.rollback`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .pool import PagePool

# Partly matching pages are found by their first HEAD tokens; the most recent PARTIAL_CANDIDATES of one
# head are kept (a thousand prompts of one text start with the same word at many places).
HEAD = 2
PARTIAL_CANDIDATES = 16


class _Node:
    """The pages that may follow one prefix: full pages by their tokens, partly matching ones by their first tokens."""

    __slots__ = ("full", "partial")

    def __init__(self) -> None:
        self.full: dict[tuple[int, ...], tuple[int, _Node]] = {}
        self.partial: dict[tuple[int, ...], list[tuple[tuple[int, ...], int]]] = {}


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """The trie of cached prompt pages, per user, over `pool` (see the module docstring)."""

    def __init__(self, pool: PagePool) -> None:
        self.pool = pool
        self._roots: dict[str, _Node] = {}
        # page -> (node it hangs in, its full-page key or None, its head): to take it out again
        self._where: dict[int, tuple[_Node, tuple[int, ...] | None, tuple[int, ...]]] = {}
        self.reused_tokens = 0  # tokens whose K/V a prefill took from the cache instead of computing them
        pool.keep = self._where.__contains__
        pool.forget = self.drop

    def match(self, owner: str, tokens: Sequence[int]) -> tuple[list[int], int, int]:
        """The longest cached start of `tokens` at positions 0.. for `owner`, leaving the last token to
        compute: (full pages to share, a page whose first `k` slots to copy or -1, k)."""
        node = self._roots.get(owner)
        ps = self.pool.page_size
        limit = len(tokens) - 1
        full: list[int] = []
        d = 0
        while node is not None and (d + 1) * ps <= limit:
            hit = node.full.get(tuple(tokens[d * ps : (d + 1) * ps]))
            if hit is None:
                break
            full.append(hit[0])
            node = hit[1]
            d += 1
        best_page, best_k = -1, 0
        if node is not None and d * ps + HEAD <= limit:
            rest = tokens[d * ps : limit]
            for cand, page in node.partial.get(tuple(rest[:HEAD]), ()):
                k = _common(cand, rest)
                if k > best_k:
                    best_page, best_k = page, k
        return full, best_page, best_k

    def register(self, owner: str, pages: Sequence[int], tokens: Sequence[int]) -> None:
        """A file holding `tokens` at positions 0.. in `pages` (their K/V written): index its pages."""
        ps = self.pool.page_size
        node = self._roots.setdefault(owner, _Node())
        for d, page in enumerate(pages):
            chunk = tuple(tokens[d * ps : (d + 1) * ps])
            if not chunk:
                return
            if len(chunk) == ps:
                hit = node.full.get(chunk)
                if hit is None:
                    if page in self._where:  # indexed elsewhere already (it cannot be: one content per page)
                        return
                    hit = node.full[chunk] = (page, _Node())
                    self._where[page] = (node, chunk, chunk[:HEAD])
                    self._add_partial(node, chunk, page)
                node = hit[1]  # the same content under another page: go on below the indexed one
                continue
            if page not in self._where and len(chunk) >= HEAD:
                self._where[page] = (node, None, chunk[:HEAD])
                self._add_partial(node, chunk, page)
            return

    def _add_partial(self, node: _Node, chunk: tuple[int, ...], page: int) -> None:
        cands = node.partial.setdefault(chunk[:HEAD], [])
        cands.append((chunk, page))
        if len(cands) > PARTIAL_CANDIDATES:
            old_chunk, old_page = cands[0]
            where = self._where.get(old_page)
            if where is not None and where[1] is None:  # a partly filled page indexed only here: forget it
                self.drop(old_page)
            else:
                del cands[0]  # a full page stays under its key

    def drop(self, page: int) -> None:
        """Take `page` out of the trie (it is about to be written, or reused for other K/V); the
        pages indexed below a full page go with it."""
        where = self._where.pop(page, None)
        if where is None:
            return
        node, key, head = where
        cands = node.partial.get(head)
        if cands is not None:
            cands[:] = [c for c in cands if c[1] != page]
            if not cands:
                del node.partial[head]
        if key is not None:
            hit = node.full.pop(key, None)
            if hit is not None:
                self._drop_below(hit[1])
        self.pool.uncache(page)

    def _drop_below(self, node: _Node) -> None:
        for page, child in list(node.full.values()):
            self._where.pop(page, None)
            self.pool.uncache(page)
            self._drop_below(child)
        for cands in node.partial.values():
            for _, page in cands:
                if self._where.pop(page, None) is not None:
                    self.pool.uncache(page)
        node.full.clear()
        node.partial.clear()

    def clear(self) -> None:
        """Forget every cached prompt (pages no file holds become truly free)."""
        for page in list(self._where):
            self.drop(page)

    @property
    def indexed_pages(self) -> int:
        return len(self._where)
