"""LIPs the server and scale-out tests send over the network. The whole file is each program's source, so
it imports nothing from the tests (and only what a sandboxed LIP may import)."""

from __future__ import annotations

import time


def greedy(sym, prompt: str, n: int = 4) -> str:
    """A short greedy generation; streams each piece."""
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for _ in range(n):
        t = sym.pred(kv, toks).argmax()
        out.append(t)
        sym.send(sym.detokenize([t]))
        toks = [t]
    sym.kv_close(kv)
    return sym.detokenize(out)


def tiny(sym, i: int) -> list:
    """One pred: what 200 clients run at once."""
    kv = sym.kv_create()
    d = sym.pred(kv, [1, 2, 3, 4])
    sym.send(i)
    sym.kv_close(kv)
    return [i, d.argmax()]


def echo(sym, rounds: int = 2) -> str:
    """Messages both ways: answers each message it receives."""
    for _ in range(rounds):
        m = sym.recv(timeout=60)
        sym.send({"echo": m})
    return "done"


def waits(sym) -> str:
    """Holds a process slot until told to stop (or cancelled)."""
    sym.recv(timeout=120)
    return "released"


def waits_for_message(sym) -> str:
    """Holds until it receives a message (or is cancelled); names the message."""
    return f"released by {sym.recv(timeout=170)!r}"


def remember(sym, path: str, text: str) -> int:
    """Creates the named file `path` holding `text`; returns its length in tokens."""
    kv = sym.kv_create(path)
    sym.pred(kv, sym.tokenize(text))
    n = kv.len
    sym.kv_close(kv)
    return n


def recall(sym, path: str) -> int:
    """Opens the named file `path` (KVNotFound when it is not there); returns its length."""
    kv = sym.kv_open(path)
    n = kv.len
    sym.kv_close(kv)
    return n


def make_files(sym, private: str, shared: str, text: str) -> list[str]:
    """A private and a /shared/ named file, both holding `text`."""
    for path in (private, shared):
        kv = sym.kv_create(path)
        sym.pred(kv, sym.tokenize(text))
        sym.kv_close(kv)
    return sym.kv_list()


def _outcome(fn) -> str:
    try:
        r = fn()
        return "ok" if r is None or not isinstance(r, (str, int, list)) else f"ok: {r}"
    except Exception as e:  # the point: which error, with which message
        return f"{type(e).__name__}: {e}"


def trespass(sym, private: str, private_dir: str, shared: str) -> dict:
    """Another user's private file: open, fork (with a forged handle), list, remove — and /shared/."""
    out = {
        "open_r": _outcome(lambda: sym.kv_open(private, "r")),
        "open_w": _outcome(lambda: sym.kv_open(private, "w")),
        "create_in_their_dir": _outcome(lambda: sym.kv_create(private + ".mine")),
        "list": _outcome(lambda: sym.kv_list(private_dir)),
        "remove": _outcome(lambda: sym.kv_remove(private)),
        "listing_shows_it": private in sym.kv_list(),
    }
    mine = sym.kv_create()
    forged = type(mine).__new__(type(mine))  # a handle id this process never received
    forged.hid, forged.len, forged.path, forged.mode, forged.closed = 10**6, 0, private, "w", False
    forged._sym = sym
    out["fork_forged"] = _outcome(lambda: sym.kv_fork(forged))
    out["pred_forged"] = _outcome(lambda: sym.pred(forged, [1]))
    sh = sym.kv_open(shared, "r")
    fk = sym.kv_fork(sh)
    out["shared_len"] = sh.len
    out["shared_pred_on_fork"] = _outcome(lambda: sym.pred(fk, [1]).argmax())
    out["shared_pred_readonly"] = _outcome(lambda: sym.pred(sh, [1]))
    out["shared_remove"] = _outcome(lambda: sym.kv_remove(shared))
    out["shared_listed"] = shared in sym.kv_list()
    return out


# --- hostile programs ----------------------------------------------------------------------------


def spin(sym):
    """An infinite loop in pure Python."""
    while True:
        pass


def hog(sym):
    """Allocates memory until something stops it."""
    blocks = []
    while True:
        blocks.append(bytearray(32 << 20))


def thread_bomb(sym):
    """Starts threads until something stops it."""
    import threading

    threads = []
    while True:
        t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        t.start()
        threads.append(t)


def spawn_bomb(sym):
    """Starts LIP threads (sym.spawn) until something stops it."""
    handles = []
    while True:
        handles.append(sym.spawn(lambda s: time.sleep(30)))


def sockets(sym, port: int):
    """Opens a socket to the server itself."""
    import socket

    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
    return s.recv(100).decode()


def read_files(sym, path: str):
    """Reads a file outside the scratch directory (the server's users file)."""
    with open(path) as f:
        return f.read()


def internals(sym, victim_path: str):
    """Imports the engine's internals to reach another user's pages."""
    from symphony_core.engine import Engine  # noqa: F401

    return "imported the engine"


def garbage(sym):
    """Writes garbage into its connection to the server (found among its descriptors)."""
    import os
    import stat

    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, b"\xff" * 64)
        except OSError:
            pass
    time.sleep(30)
    return "still here"


def bypass_probe(sym, port: int, path: str, victim_path: str) -> dict:
    """Tries the same things with the Python-level guards out of the way (ctypes, os.*, gc)."""
    import ctypes
    import gc
    import os
    import sys

    libc = ctypes.CDLL(None, use_errno=True)
    out = {}

    def raw(name, ret):
        return f"{name}={ret} errno={os.strerror(ctypes.get_errno())}" if ret < 0 else f"{name}={ret}"

    out["ctypes_socket"] = raw("socket", libc.socket(2, 1, 0))  # AF_INET, SOCK_STREAM
    out["ctypes_open_users_file"] = raw("open", libc.open(path.encode(), 0))
    out["ctypes_open_etc_passwd"] = raw("open", libc.open(b"/etc/passwd", 0))
    pid = libc.fork()
    if pid == 0:  # (never expected: fork is refused) the child must not run the rest
        os._exit(0)
    out["ctypes_fork"] = raw("fork", pid)
    out["uid"] = os.getuid()
    out["root_listing"] = sorted(os.listdir("/"))
    out["write_outside_scratch"] = _outcome(lambda: open("/usr/evil", "w"))
    out["write_scratch"] = _outcome(lambda: open("/scratch/ok.txt", "w").write("ok"))
    # remove the import guard, then look for any engine state in this process
    sys.meta_path[:] = [m for m in sys.meta_path if getattr(m, "__name__", "") != "_EngineBlocker"]
    try:
        import symphony_core.kvfs.fs as fs

        out["kvfs_imported"] = True
        out["kvfs_instances"] = sum(1 for o in gc.get_objects() if isinstance(o, fs.KVFS))
        out["frozen_objects"] = gc.get_freeze_count()  # objects gc.get_objects() would not have shown
    except Exception as e:
        out["kvfs_imported"] = f"{type(e).__name__}: {e}"
    out["open_victim"] = _outcome(lambda: sym.kv_open(victim_path))
    out["procs"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
    return out


# --- the proxy `sym` against the real one -----------------------------------------------------------


def features(sym) -> dict:
    """Exercises what crosses the sandbox boundary: multi-row Dists, seeded samplers, masks (tensor
    and ids), forks, truncation, handle properties, threads, listing. Same answer in or out."""
    import torch

    from symphony_core import Sampler

    out: dict = {}
    kv = sym.kv_create()
    toks = sym.tokenize("The quick brown fox jumps over the lazy dog, and then it ran into the woods")
    d = sym.pred(kv, toks, outputs="all")  # many rows: more than a shared-memory slot holds
    out["all_shape"] = list(d.logits.shape)
    out["all_argmax"] = d.argmax()
    out["row3_top"] = [t for t, _ in d[3].topk(3)]
    out["len"] = kv.len
    fk = sym.kv_fork(kv)
    s = Sampler(temperature=0.8, top_p=0.9, seed=7)
    t = toks[-1]
    picks = []
    for _ in range(4):
        t = sym.pred(fk, [t], sampler=s).token
        picks.append(t)
    out["sampled"] = picks
    mask = torch.zeros(sym.vocab_size, dtype=torch.bool)
    mask[[11, 22, 33]] = True
    out["masked_tensor"] = sym.pred(fk, [t], mask=mask).argmax()
    out["masked_ids"] = sym.pred(fk, [5], mask=[5, 6, 7]).argmax()
    out["two_rows"] = sym.pred(fk, [1, 2, 3], outputs=[0, 2]).argmax()
    sym.kv_truncate(fk, 5)
    out["truncated"] = [fk.len, fk.tokens, fk.positions]
    out["logprob"] = round(sym.pred(fk, [toks[5]]).logprob(toks[6]), 4)
    out["pages"] = len(fk.pages)
    out["thread"] = sym.spawn(lambda s2, k: s2.pred(s2.kv_fork(k), [1]).argmax(), kv).join()
    named = sym.kv_create("features.kv")
    sym.pred(named, [1, 2])
    out["named"] = [named.path, named.len]
    out["listed"] = [p for p in sym.kv_list() if p.endswith("features.kv")]
    sym.kv_close(named)
    sym.kv_remove("features.kv")
    out["eos"] = sorted(sym.eos_token_ids)
    out["text"] = sym.detokenize(sym.tokenize("round trip"))
    out["chat"] = sym.chat_template([{"role": "user", "content": "hi"}])[:40]
    for k in ("pred_closed", "open_missing"):
        out[k] = None
    sym.kv_close(fk)
    try:
        sym.pred(fk, [1])
    except Exception as e:
        out["pred_closed"] = f"{type(e).__name__}: {e}"[:40]
    try:
        sym.kv_open("nope.kv")
    except Exception as e:
        out["open_missing"] = type(e).__name__
    return out


def traced(sym):
    kv = sym.kv_create()
    sym.pred(kv, [1, 2, 3])
    sym.send("x")
    return kv.len


def chat_with_tools(sym, messages: list, tools: list) -> str:
    """The model's chat template with tools, as the program sees it."""
    return sym.chat_template(messages, tools=tools)
