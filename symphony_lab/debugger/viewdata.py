"""What the debugger shows at a stop, and its views, as JSON-serialisable data (named so as not to
shadow the standard library's `inspect`).

Every function here returns plain dicts / lists / numbers / strings, so the same value goes to
a notebook widget, the terminal UI or over a WebSocket. Nothing here blocks a LIP: the
functions read the KV file system under its lock and the scheduler's queue under its own.
"""

from __future__ import annotations

import math
import os
import reprlib
import types
from typing import Any

import torch

import symphony_core
from symphony_core.kvfs import KV, KVFile
from symphony_core.model.dist import Dist

_CORE_DIR = os.path.dirname(os.path.abspath(symphony_core.__file__))
_LIP_DIR = os.path.join(_CORE_DIR, "lip")
_LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_repr = reprlib.Repr()
_repr.maxstring = 120
_repr.maxother = 120
_repr.maxlist = 12
_repr.maxtuple = 12
_repr.maxdict = 8
_repr.maxset = 8
_repr.maxlevel = 3


# --- JSON ------------------------------------------------------------------------------------------


def jsonable(x: Any, depth: int = 0) -> Any:
    """`x` as JSON data: tuples become lists, tensors small lists or a shape, the rest a repr."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else (None if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if depth > 8:
        return _repr.repr(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in x]
    if isinstance(x, torch.Tensor):
        if x.numel() <= 16:
            return jsonable(x.tolist(), depth + 1)
        return {"tensor": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    if isinstance(x, Dist):
        return dist_brief(x)
    if isinstance(x, KV):
        return kv_brief(x)
    return _repr.repr(x)


# --- values at a stop -----------------------------------------------------------------------------


def kv_brief(kv: KV) -> dict:
    f = kv.file
    return {
        "kind": "kv",
        "file": f.fid,
        "path": f.path,
        "len": f.length,
        "pages": len(f.pages),
        "mode": kv.mode,
        "closed": kv.closed,
    }


def dist_brief(d: Dist) -> dict:
    if d.logits.dim() == 1:
        t, p = d.topk(1)[0]
        return {"kind": "dist", "argmax": t, "p": round(p, 4), "token": d.token}
    return {"kind": "dist", "positions": len(d), "token": jsonable(d.token)}


def summarize_value(v: Any) -> dict:
    """A short picture of one local variable: its type and a bounded repr (KV, Dist, tensors specially)."""
    t = type(v).__name__
    if isinstance(v, KV):
        return {"type": "KV", "value": v.describe(), **kv_brief(v)}
    if isinstance(v, Dist):
        return {"type": "Dist", "value": repr(v), **dist_brief(v)}
    if isinstance(v, torch.Tensor):
        return {"type": "Tensor", "value": f"tensor{list(v.shape)} {str(v.dtype).replace('torch.', '')}"}
    if isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
        return {"type": t, "value": getattr(v, "__qualname__", getattr(v, "__name__", t))}
    if t == "Sym":
        return {"type": "Sym", "value": f"sym(pid={v.pid}, tid={v.tid})"}
    try:
        r = _repr.repr(v)
    except Exception as e:  # a LIP's own __repr__ may fail
        r = f"<repr failed: {type(e).__name__}>"
    out = {"type": t, "value": r}
    if isinstance(v, (list, tuple, dict, set, str)):
        out["len"] = len(v)
    return out


def _is_machinery(code: types.CodeType) -> bool:
    fn = code.co_filename
    return fn.startswith(_LIP_DIR) or fn.startswith(_LAB_DIR)


def capture_frames(frame: types.FrameType | None, max_frames: int = 16, max_locals: int = 40) -> list[dict]:
    """The LIP's stack from `frame` outwards, innermost first, with summarised locals.

    Skips the syscall machinery (symphony_core.lip, symphony_lab) and stops at the runtime's
    thread entry. Frames in symphony_core's libraries (e.g. `lib.generate`) are kept and
    marked `library`; `lip_frame` in the caller's result is the first frame of the LIP's own
    code (what the kernel reports as the event's file and line).
    """
    out: list[dict] = []
    f = frame
    while f is not None and len(out) < max_frames:
        code = f.f_code
        if code.co_name == "_thread_main" and code.co_filename.startswith(_LIP_DIR):
            break
        if not _is_machinery(code):
            names = {}
            try:
                items = list(f.f_locals.items())
            except Exception as e:  # locals that cannot be read are shown as such, in their place
                items = [("<locals unreadable>", f"{type(e).__name__}: {e}")]
            for k, v in items[:max_locals]:
                if k.startswith("__"):
                    continue
                names[k] = summarize_value(v)
            out.append(
                {
                    "function": code.co_name,
                    "file": code.co_filename,
                    "line": f.f_lineno,
                    "library": code.co_filename.startswith(_CORE_DIR),
                    "locals": names,
                }
            )
        f = f.f_back
    return out


def lip_depth(frame: types.FrameType | None) -> int:
    """How many frames of the LIP's own code (libraries included) are on the stack from `frame`
    outwards: what step over / step out compare (cheaper than `capture_frames`)."""
    n = 0
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == "_thread_main" and code.co_filename.startswith(_LIP_DIR):
            break
        if not _is_machinery(code):
            n += 1
        f = f.f_back
    return n


def syscall_locals(frame: types.FrameType | None, call: str) -> dict:
    """The arguments of the `sym.<call>` method on the stack (full token list, KV handle)."""
    f = frame
    syscalls_file = os.path.join(_LIP_DIR, "syscalls.py")
    while f is not None:
        if f.f_code.co_filename == syscalls_file and f.f_code.co_name == call:
            return dict(f.f_locals)
        f = f.f_back
    return {}


def as_token_list(x: Any) -> list[int] | None:
    if x is None:
        return None
    if isinstance(x, int):
        return [x]
    if isinstance(x, torch.Tensor):
        return [int(t) for t in x.reshape(-1).tolist()]
    try:
        return [int(t) for t in x]
    except (TypeError, ValueError):
        return None


def tokens_view(ids: list[int], tokenizer) -> dict:
    return {"ids": list(ids), "text": tokenizer.detokenize(ids), "pieces": [tokenizer.token_text(t) for t in ids]}


def dist_view(
    d: Dist,
    tokenizer,
    k: int = 10,
    position: int = -1,
    chosen: int | None = None,
    fed: int | None = None,
    original: Dist | None = None,
) -> dict:
    """Top-k of one position of a Dist with probabilities and text, what the model preferred and
    what the program took.

    `preferred` is the argmax. `taken` is the token the program takes, when known: an override
    (`chosen`), the engine's sample (`Dist.token`, `pred(sampler=)`), or `fed` (the token the
    program fed to its next `pred`, known only later); else None. `chosen` is `taken` when
    known, else the argmax (`by: "argmax"`). An override's `p` is the model's, from `original`
    (the Dist before the edit, not the edited one's 1; that is `p_edited`).
    """
    row = d if d.logits.dim() == 1 else d[position]
    top = row.topk(k)
    probs = row.probs

    def tok_view(t: int, by: str | None = None) -> dict:
        v = {"token": t, "text": tokenizer.token_text(t), "p": float(probs[t])}
        return v if by is None else {**v, "by": by}

    taken = None
    if chosen is not None:
        taken = tok_view(chosen, "override")
        if original is not None:
            orow = original if original.logits.dim() == 1 else original[position]
            taken.update(p=float(orow.probs[chosen]), p_edited=taken["p"])
    else:
        tok = row.token if row.token is not None and not isinstance(row.token, list) else None
        if tok is not None:
            taken = tok_view(tok, "engine")
        elif fed is not None:
            taken = tok_view(fed, "fed")
    preferred = row.argmax()
    return {
        "positions": len(d),
        "position": position,
        "topk": [{"token": t, "text": tokenizer.token_text(t), "p": p, "logit": float(row.logits[t])} for t, p in top],
        "preferred": tok_view(preferred),
        "taken": taken,
        "chosen": taken if taken is not None else tok_view(preferred, "argmax"),
        "entropy": row.entropy(),
    }


# --- KV files -------------------------------------------------------------------------------------


def _page_map(kvfs) -> dict[int, list[int]]:
    m: dict[int, list[int]] = {}
    for f in kvfs.files.values():
        for p in f.pages:
            if p >= 0:
                m.setdefault(p, []).append(f.fid)
    return m


def _ancestry(kvfs, f: KVFile, known: dict[int, dict]) -> list[int]:
    chain, seen = [], {f.fid}
    parent = f.parent
    while parent is not None and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        g = kvfs.files.get(parent)
        parent = g.parent if g is not None else known.get(parent, {}).get("parent")
    return chain


def _holders(runtime) -> dict[int, list[int]]:
    """fid -> pids of the processes holding an open handle to it."""
    out: dict[int, list[int]] = {}
    for proc in list(runtime.processes.values()):
        if proc.done:
            continue
        for h in list(proc.handles):
            if not h.closed:
                out.setdefault(h.file.fid, [])
                if proc.pid not in out[h.file.fid]:
                    out[h.file.fid].append(proc.pid)
    return out


def file_view(
    kvfs,
    f: KVFile,
    tokenizer,
    page_map: dict[int, list[int]],
    known: dict[int, dict] | None = None,
    holders: dict[int, list[int]] | None = None,
    with_text: bool = True,
) -> dict:
    ps = kvfs.pool.page_size
    pages = []
    for i, p in enumerate(f.pages):
        toks = f.tokens[i * ps : (i + 1) * ps]
        entry = {
            "index": i,
            "page": p,
            "slots": [i * ps, i * ps + len(toks)],
            "refcount": kvfs.pool.refcount[p] if p >= 0 else 0,
            "shared_with": [g for g in page_map.get(p, []) if g != f.fid] if p >= 0 else [],
            "swapped": p < 0,
        }
        if with_text:
            entry["tokens"] = list(toks)
            entry["text"] = tokenizer.detokenize(toks) if toks else ""
        pages.append(entry)
    return {
        "file": f.fid,
        "path": f.path,
        "owner": f.owner,
        "parent": f.parent,
        "ancestry": _ancestry(kvfs, f, known or {}),
        "children": sorted(g.fid for g in kvfs.files.values() if g.parent == f.fid),
        "length": f.length,
        "n_pages": len(f.pages),
        "shared_pages": sum(1 for pg in pages if pg["shared_with"]),
        "open_handles": f.open_handles,
        "held_by": (holders or {}).get(f.fid, []),
        "evicted": f.evicted,
        "swapped": f.swapped is not None,
        "pages": pages,
    }


def kv_file(runtime, fid: int, tokenizer, known: dict[int, dict] | None = None) -> dict | None:
    """One KV file in full: length, pages (who shares each, token text), fork ancestry."""
    kvfs = runtime.kvfs
    with kvfs.lock:
        f = kvfs.files.get(fid)
        if f is None:
            return None
        return file_view(kvfs, f, tokenizer, _page_map(kvfs), known, _holders(runtime))


def kv_tree(runtime, tokenizer, known: dict[int, dict] | None = None, with_text: bool = True) -> dict:
    """The KV fork tree: every live file, its fork parent, shared pages, token text per page.

    `known` remembers files that have since closed, so a fork's ancestry still reads through
    them (they appear in `gone`).
    """
    kvfs = runtime.kvfs
    with kvfs.lock:
        pm = _page_map(kvfs)
        holders = _holders(runtime)
        files = [file_view(kvfs, f, tokenizer, pm, known, holders, with_text) for f in kvfs.files.values()]
        stats = kvfs.stats()
    live = {f["file"] for f in files}
    gone = sorted({a for f in files for a in f["ancestry"] if a not in live})
    return {
        "page_size": stats["page_size"],
        "pages_total": stats["pages_total"],
        "pages_used": stats["pages_used"],
        "files": sorted(files, key=lambda f: f["file"]),
        "edges": [[f["parent"], f["file"]] for f in files if f["parent"] is not None],
        "roots": sorted(f["file"] for f in files if f["parent"] is None or f["parent"] not in live),
        "gone": gone,
        "shared_pages": sorted(p for p, fs in pm.items() if len(fs) > 1),
    }


# --- the scheduler ------------------------------------------------------------------------------------


def pending_view(p, tokens: int | None = None) -> dict:
    """One queued `pred` call as the scheduler sees it."""
    return {
        "pid": p.pid,
        "tid": p.tid,
        "user": p.user,
        "file": p.call.kv.file.fid,
        "remaining": p.remaining,
        "total": len(p.call.tokens),
        "done": p.done_tokens,
        "kind": "decode" if len(p.call.tokens) == 1 else "prefill",
        "tokens": tokens if tokens is not None else p.remaining,
        "waiting_pages": p.waiting_pages,
        "parked": p.parked,
    }


def batch_plan(chosen: list, token_budget: int) -> list[dict]:
    """What each chosen call will feed in this batch (the scheduler's own chunking rule)."""
    budget = token_budget
    out = []
    for p in chosen:
        n = min(p.remaining, max(budget, 1))
        budget -= n
        d = pending_view(p, n)
        d["chunk"] = [p.done_tokens, p.done_tokens + n, len(p.call.tokens)]
        out.append(d)
    return out


def timeline(runtime, since: int = 0, limit: int = 500) -> dict:
    """Batches with members and token counts (bid > since), the queue now, pages in use."""
    batch = runtime.batch
    log = batch.log
    recs = log.since(since)[-limit:] if limit else log.since(since)
    queued = batch.queued()
    pool = runtime.kvfs.pool
    return {
        "batches": [jsonable(r.to_dict()) for r in recs],
        "queue": [pending_view(p) for p in queued],
        "queue_depth": len(queued),
        "pages_used": pool.used_pages,
        "pages_total": pool.n_pages,
        "policy": batch.policy.name,
        "token_budget": batch.token_budget,
        "totals": {"batches": log.total_batches, "tokens": log.total_tokens, "members": log.total_members},
    }


def process_view(proc, stops: dict) -> dict:
    d = proc.summary()
    for t in d["threads"]:
        s = stops.get((proc.pid, t["tid"]))
        t["stopped"] = None if s is None else {"stop_id": s.id, "reason": s.reason, "where": s.where}
    d["done"] = proc.done
    err = getattr(proc, "error", None)
    if proc.done and err is not None:  # a failed LIP's traceback travels with its view
        d["traceback"] = getattr(err, "traceback_text", None) or str(err)
    return d


def where_is(code_or_fn) -> tuple[str | None, int | None]:
    """A function's file and first line; a (file, line) pair is taken as it is (a program the
    server runs elsewhere, e.g. in a sandbox, says where its entry point is)."""
    if isinstance(code_or_fn, tuple):
        return code_or_fn
    code = getattr(code_or_fn, "__code__", None)
    if code is None:
        return None, None
    return code.co_filename, code.co_firstlineno


__all__ = [
    "as_token_list",
    "batch_plan",
    "capture_frames",
    "dist_view",
    "jsonable",
    "kv_file",
    "kv_tree",
    "lip_depth",
    "pending_view",
    "process_view",
    "summarize_value",
    "syscall_locals",
    "timeline",
    "tokens_view",
]
