"""The debug console's commands (DAP `evaluate`), for the thread the editor has selected:

    override " Lyon"     the stopped pred hands the program this token (text, id, or #2: the runner-up)
    topk 10              the stopped pred's 10 most likely tokens
    what-if 3 " Lyon"    the recorded run's token 3 of this thread replaced: both continuations
    help                 this list

Anything else is looked up among the selected frame's locals (hovers and watches).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

from .backend import BackendError
from .inspect_views import token_repr, token_value

HELP = __doc__.split("\n\n", 1)[1].split("\n\nAnything", 1)[0]


class ConsoleError(Exception):
    """A console line that cannot be carried out; the message says why."""


def parse_token(text: str, topk: list[dict] | None = None) -> dict:
    """What a user typed for a token → `{"token": id}` or `{"text": s}`: `#2` is the top-k's second,
    `1234` an id, `" Lyon"` (JSON or Python quotes) a text, anything else the text as typed."""
    s = text.strip()
    if not s:
        raise ConsoleError('give a token: a text like " Lyon", an id like 1234, or #2 for the top-k\'s second')
    if s.startswith("#") and s[1:].isdigit():
        rank = int(s[1:])
        if not topk or not 1 <= rank <= len(topk):
            raise ConsoleError(f"{s}: the top-k here has {len(topk or [])} entries")
        return {"token": int(topk[rank - 1]["token"])}
    if s.isdigit():
        return {"token": int(s)}
    if s[0] in "\"'" and s[-1] == s[0] and len(s) >= 2:
        try:
            return {"text": json.loads(s) if s[0] == '"' else s[1:-1]}
        except json.JSONDecodeError:
            return {"text": s[1:-1]}
    return {"text": s}


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, posix=False)
    except ValueError as e:
        raise ConsoleError(f"cannot read {line!r}: {e}") from None


class Console:
    """`evaluate(line)` for one stopped thread; `request` is the debugger's command function."""

    def __init__(self, request: Callable[..., Any], override: Callable[[int, dict], str]) -> None:
        self.request = request
        self.override = override

    def evaluate(self, line: str, pid: int | None, tid: int | None, frame: dict | None) -> str:
        words = _split(line)
        if not words:
            raise ConsoleError("type help for the console's commands")
        cmd, rest = words[0].lower(), line.strip()[len(words[0]) :].strip()
        if cmd == "help":
            return HELP
        if cmd in ("override", "topk", "what-if", "whatif") and (pid is None or tid is None):
            raise ConsoleError(f"{cmd}: no stopped thread is selected")
        if cmd == "override":
            dist = self._dist(pid, tid, None, quiet=True)
            return self.override(tid, parse_token(rest, (dist or {}).get("topk")))  # type: ignore[arg-type]
        if cmd == "topk":
            k = int(rest) if rest.isdigit() else 10 if not rest else None
            if k is None or not 1 <= k <= 1000:
                raise ConsoleError(f"topk takes a count from 1 to 1000, got {rest!r}")
            d = self._dist(pid, tid, k)
            assert d is not None
            taken = d.get("taken") or d.get("chosen") or {}
            lines = [f"{i:>3}. {token_value(t)}" for i, t in enumerate(d["topk"], 1)]
            return "\n".join(lines + [f"taken: {token_value(taken)} ({taken.get('by')})"])
        if cmd in ("what-if", "whatif"):
            return self._what_if(pid, tid, rest)  # type: ignore[arg-type]
        if frame is not None and line.strip() in (frame.get("locals") or {}):
            return str(frame["locals"][line.strip()].get("value"))
        raise ConsoleError(f"unknown command {cmd!r}; type help (or name a local of the selected frame)")

    def _dist(self, pid, tid, k: int | None, quiet: bool = False) -> dict | None:
        try:
            return self.request("dist", pid=pid, tid=tid, **({"k": k} if k else {}))
        except (BackendError, TimeoutError) as e:
            if quiet:  # the caller shows the stop without its distribution
                return None
            raise ConsoleError(str(e)) from None

    def _what_if(self, pid: int, tid: int, rest: str) -> str:
        words = _split(rest)
        if len(words) < 2 or not words[0].isdigit():
            raise ConsoleError('what-if POSITION TOKEN [MAX_TOKENS], e.g. what-if 3 " Lyon"')
        max_tokens = 16
        if len(words) >= 3 and words[-1].isdigit():
            max_tokens = int(words[-1])
            words = words[:-1]
        tok = parse_token(" ".join(words[1:]))
        w = self.request("what_if", pid=pid, tid=tid, position=int(words[0]), max_tokens=max_tokens, **tok)
        texts = w.get("texts") or {}
        return "\n".join(
            [
                f"at token {w.get('position')} of thread {tid}:",
                f"  original    {token_repr(texts.get('original') or '')}",
                f"  alternative {token_repr(texts.get('alternative') or '')}",
                f"  they differ from token {w.get('diverge_at')}; the prefix shares {len(w.get('shared_pages') or [])} KV pages",
            ]
        )


__all__ = ["Console", "ConsoleError", "parse_token"]
