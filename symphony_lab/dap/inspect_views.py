"""What an editor shows at a stop, from the debugger's views: the stack (the LIP's Python frames
topped by a frame for the syscall it is stopped at) and the variables of three scopes — the
frame's locals, "Model" (the last `pred`'s top-k, the token taken) and "KV" (the process's
files: tokens, pages, forks).

Every `variablesReference` and frame id handed out here is valid until the program runs again
(`Handles.reset`), as the DAP specification lets an adapter choose.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from typing import Any, TypedDict


class DapVariable(TypedDict, total=False):
    name: str
    value: str
    type: str
    variablesReference: int
    evaluateName: str


class DapScope(TypedDict):
    name: str
    presentationHint: str
    variablesReference: int
    expensive: bool


class Handles:
    """Integers standing for frames and expandable variables while the program is stopped."""

    def __init__(self) -> None:
        self._next = 1
        self._frames: dict[int, tuple[int, int]] = {}  # frame id -> (tid, index in the stack; -1 the syscall)
        self._vars: dict[int, Callable[[], list[DapVariable]]] = {}
        self._scopes: dict[int, tuple[str, int]] = {}  # variablesReference -> (scope name, tid)

    def reset(self) -> None:
        self._frames.clear()
        self._vars.clear()
        self._scopes.clear()

    def _new(self) -> int:
        n, self._next = self._next, self._next + 1
        return n

    def frame(self, tid: int, index: int) -> int:
        n = self._new()
        self._frames[n] = (tid, index)
        return n

    def frame_of(self, frame_id: int) -> tuple[int, int] | None:
        return self._frames.get(frame_id)

    def variables(self, produce: Callable[[], list[DapVariable]], scope: tuple[str, int] | None = None) -> int:
        n = self._new()
        self._vars[n] = produce
        if scope is not None:
            self._scopes[n] = scope
        return n

    def produce(self, ref: int) -> list[DapVariable] | None:
        fn = self._vars.get(ref)
        return None if fn is None else fn()

    def scope_of(self, ref: int) -> tuple[str, int] | None:
        return self._scopes.get(ref)


def token_repr(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def token_value(t: dict) -> str:
    """`" Paris"  id 6342  p=0.6231` for one token view of the debugger (token, text, p)."""
    return f"{token_repr(t.get('text') or '')}  id {t.get('token')}  p={float(t.get('p') or 0.0):.4f}"


def sent_text(value: Any) -> str:
    """A `send` event's value (the message's repr) as the program's output: a string as itself."""
    if isinstance(value, str) and value[:1] in "'\"":
        try:
            v = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
        if isinstance(v, str):
            return v
    return str(value)


def syscall_label(stop: dict) -> str:
    """The syscall frame's name: `pred(kv=3, 5 tokens)`, with `→ " Paris"` once it returned."""
    call = stop.get("call")
    if not call:
        return "entry"
    args = stop.get("args") or {}
    parts = []
    if isinstance(args.get("file"), int):
        parts.append(f"kv={args['file']}")
    if isinstance(args.get("n_tokens"), int):
        n = args["n_tokens"]
        parts.append(f"{n} token{'s' if n != 1 else ''}")
    if not parts:
        parts = [f"{k}={v}" for k, v in args.items() if isinstance(v, (int, str)) and len(str(v)) <= 24][:3]
    label = f"{call}({', '.join(parts)})"
    res = stop.get("result") if isinstance(stop.get("result"), dict) else {}  # a join returns a value
    if stop.get("where") == "after" and res.get("kind") == "dist" and res.get("chosen"):
        label += f" → {token_repr(res['chosen'].get('text') or '')}"
    elif stop.get("where") == "after":
        label += " returned"
    return label


def locals_variables(frame: dict) -> list[DapVariable]:
    out: list[DapVariable] = []
    for name, v in (frame.get("locals") or {}).items():
        out.append(
            {
                "name": name,
                "value": str(v.get("value", "")),
                "type": str(v.get("type", "")),
                "variablesReference": 0,
                "evaluateName": name,
            }
        )
    return out


def argument_variables(stop: dict) -> list[DapVariable]:
    out: list[DapVariable] = [{"name": "call", "value": str(stop.get("call") or "entry"), "variablesReference": 0}]
    out.append({"name": "where", "value": str(stop.get("where")), "variablesReference": 0})
    for k, v in (stop.get("args") or {}).items():
        out.append({"name": k, "value": v if isinstance(v, str) else json.dumps(v), "variablesReference": 0})
    inp = stop.get("input")
    if inp:
        out.append({"name": "input text", "value": token_repr(inp.get("text") or ""), "variablesReference": 0})
    return out


def topk_variables(dist: dict) -> list[DapVariable]:
    return [
        {"name": f"top {i}", "value": token_value(t), "type": "token", "variablesReference": 0}
        for i, t in enumerate(dist.get("topk") or [], 1)
    ]


def model_variables(
    dist: dict | None, preds: int | None, current: bool, original: tuple[dict, int] | None = None
) -> list[DapVariable]:
    """The Model scope: `taken` (settable: an override), `preferred`, `entropy`, then the top-k;
    after an override, `original` is the model's own distribution (its view, a reference to its top-k)."""
    if dist is None:
        return [{"name": "pred", "value": "no pred has returned yet in this thread", "variablesReference": 0}]
    taken = dist.get("taken") or dist.get("chosen") or {}
    by = taken.get("by") or ("argmax" if dist.get("taken") is None else "")
    out: list[DapVariable] = [
        {"name": "taken", "value": token_value(taken), "type": f"token ({by})", "variablesReference": 0},
        {"name": "preferred", "value": token_value(dist.get("preferred") or {}), "variablesReference": 0},
        {
            "name": "entropy",
            "value": f"{dist['entropy']:.4f}" if isinstance(dist.get("entropy"), float) else "(not recorded)",
            "variablesReference": 0,
        },
        {
            "name": "pred",
            "value": f"#{preds} of this thread" + ("" if current else " (the last one; stopped elsewhere now)"),
            "variablesReference": 0,
        },
    ]
    if original is not None:
        view, ref = original
        out.append(
            {
                "name": "before the override",
                "value": f"the model preferred {token_value(view.get('preferred') or {})}",
                "type": "distribution",
                "variablesReference": ref,
            }
        )
    return out + topk_variables(dist)


def _file_value(f: dict) -> str:
    s = f"{f.get('length')} tokens, {f.get('n_pages')} pages"
    if f.get("shared_pages"):
        s += f" ({f['shared_pages']} shared)"
    if f.get("parent") is not None:
        s += f", fork of {f['parent']}"
    if f.get("children"):
        s += f", forked into {f['children']}"
    return s


def kv_file_variables(f: dict) -> list[DapVariable]:
    text = "".join(p.get("text") or "" for p in f.get("pages") or [])
    rows: list[tuple[str, Any]] = [
        ("path", f.get("path")),
        ("tokens", f.get("length")),
        ("pages", [p.get("page") for p in f.get("pages") or []]),
        ("shared pages", f.get("shared_pages")),
        ("parent", f.get("parent")),
        ("ancestry", f.get("ancestry")),
        ("children", f.get("children")),
        ("held by", f.get("held_by")),
        ("text", text[-400:]),
    ]
    return [
        {"name": k, "value": v if isinstance(v, str) else json.dumps(v), "variablesReference": 0}
        for k, v in rows
        if v is not None
    ]


def kv_variables(tree: dict, pid: int, stop_file: int | None, handles: Handles) -> list[DapVariable]:
    """The KV scope: the files process `pid` holds (and the stopped call's), each expandable."""
    files = [f for f in tree.get("files") or [] if pid in (f.get("held_by") or []) or f.get("file") == stop_file]
    out: list[DapVariable] = [
        {
            "name": "pool",
            "value": f"{tree.get('pages_used')} of {tree.get('pages_total')} pages used",
            "variablesReference": 0,
        }
    ]
    for f in files:
        name = f"file {f['file']}" + (f" {f['path']}" if f.get("path") else "")
        if f.get("file") == stop_file:
            name += " (this call's)"
        out.append(
            {
                "name": name,
                "value": _file_value(f),
                "type": "KV file",
                "variablesReference": handles.variables(lambda f=f: kv_file_variables(f)),
            }
        )
    return out


__all__ = [
    "DapScope",
    "DapVariable",
    "Handles",
    "argument_variables",
    "kv_variables",
    "locals_variables",
    "model_variables",
    "sent_text",
    "syscall_label",
    "token_repr",
    "token_value",
    "topk_variables",
]
