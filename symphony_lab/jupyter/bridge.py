"""The kernel side of the sidebar's connection: the debugger protocol on a loopback socket.

Why a socket beside the kernel rather than Jupyter comms: comm messages from the browser are
handled on the kernel's shell channel, so while a cell runs (say `proc.result()` on a LIP that
is stopped at a breakpoint) a Step button sent over a comm would wait behind the very cell
that waits for it. The bridge runs on its own threads: it answers while the kernel is busy.

Wire format: newline-delimited JSON over TCP on 127.0.0.1. The first line a client sends is
`{"secret": "<the secret from the registry file>"}`; after that each line is a request
(docs/protocol.md), answered by a response line; event lines (`{"type": "event", ...}`) are
pushed to every client as they happen.
"""

from __future__ import annotations

import hmac
import json
import queue
import secrets
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from . import registry
from .messages import MalformedMessage, error_response, parse_message

HELLO_TIMEOUT = 5.0


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.out: queue.Queue = queue.Queue(maxsize=2000)
        self.closed = threading.Event()

    def put(self, msg: dict) -> None:
        if self.closed.is_set():
            return
        try:
            self.out.put_nowait(msg)
        except queue.Full:  # a client that does not read loses events, never blocks the engine
            pass


class KernelBridge:
    """Serve `handle(request) -> response` to authenticated loopback clients; push events to all."""

    def __init__(self, handle: Callable[[dict], dict], kernel_id: str, runtime_dir: str | None = None) -> None:
        self.handle = handle
        self.kernel_id = kernel_id
        self.runtime_dir = runtime_dir
        self.secret = secrets.token_hex(24)
        self._clients: set[_Client] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="symphony-lab-cmd")
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(16)
        self.port = self._srv.getsockname()[1]
        self._stopped = threading.Event()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="symphony-lab-bridge", daemon=True)

    def start(self, extra: dict | None = None) -> KernelBridge:
        import os

        self._accept_thread.start()
        registry.write_entry(
            self.kernel_id,
            {"pid": os.getpid(), "port": self.port, "secret": self.secret, **(extra or {})},
            self.runtime_dir,
        )
        return self

    @property
    def n_clients(self) -> int:
        return len(self._clients)

    def broadcast(self, msg: dict) -> None:
        for c in list(self._clients):
            c.put(msg)

    def stop(self) -> None:
        self._stopped.set()
        registry.remove_entry(self.kernel_id, self.runtime_dir)
        try:
            self._srv.close()
        except OSError:
            pass
        for c in list(self._clients):
            c.closed.set()
            try:
                c.sock.close()
            except OSError:
                pass
        self._pool.shutdown(wait=False)

    # --- internals -------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="symphony-lab-client", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        client = _Client(sock)
        f = sock.makefile("rb")
        try:
            sock.settimeout(HELLO_TIMEOUT)
            try:
                hello = json.loads(f.readline() or b"null")
            except (ValueError, OSError):
                hello = None
            ok = (
                isinstance(hello, dict)
                and isinstance(hello.get("secret"), str)
                and hmac.compare_digest(hello["secret"], self.secret)
            )
            if not ok:
                sock.sendall(b'{"type": "error", "message": "unauthenticated: bad or missing secret"}\n')
                return
            sock.settimeout(None)
            with self._lock:
                self._clients.add(client)
            threading.Thread(target=self._writer, args=(client,), name="symphony-lab-writer", daemon=True).start()
            client.put({"type": "hello", "kernel_id": self.kernel_id})
            for line in f:
                if not line.strip():
                    continue
                try:
                    req = parse_message(line)
                except MalformedMessage as e:
                    try:
                        parsed = json.loads(line)
                    except ValueError:
                        parsed = None
                    client.put(error_response(parsed, e))
                    continue
                self._pool.submit(self._run, client, req)
        except OSError:
            pass
        finally:
            client.closed.set()
            client.put({"type": "close"})
            with self._lock:
                self._clients.discard(client)
            try:
                sock.close()
            except OSError:
                pass

    def _run(self, client: _Client, req: dict) -> None:
        try:
            resp = self.handle(req)
        except Exception as e:  # the handler answers errors itself; this is a last resort
            resp = {
                "type": "response",
                "request_seq": req.get("seq"),
                "command": req.get("command"),
                "success": False,
                "message": f"{type(e).__name__}: {e}",
                "error": type(e).__name__,
            }
        client.put(resp)

    def _writer(self, client: _Client) -> None:
        while not client.closed.is_set():
            try:
                msg = client.out.get(timeout=0.5)
            except queue.Empty:
                continue
            if msg.get("type") == "close":
                return
            try:
                data = (json.dumps(msg, default=str) + "\n").encode()
                client.sock.sendall(data)
            except (OSError, TypeError, ValueError):
                client.closed.set()
                return
