"""The sandbox fork server ("zygote"), run as a script by the server: `python zygote.py FD PPID`.

It imports torch and the few pieces of symphony_core a worker needs (never the engine: the
package `__init__`s are stubbed so `symphony_core.engine` is not even loaded), then forks one
worker per sandboxed program — a fork costs milliseconds where a fresh interpreter with torch
costs seconds. Each fork is a *monitor* that enters new namespaces and forks the *worker*
(pid 1 of its own pid namespace: when it dies, everything it started dies with it). The
monitor reports the worker's exit status and CPU time through a status pipe.

Control messages (JSON over a SOCK_SEQPACKET socket, file descriptors attached with
SCM_RIGHTS): server → zygote `spawn` (fds: the worker's socket end and its logits memfd),
`kill`, `shutdown`; zygote → server `ready`, `spawned`, `exited`.
"""

from __future__ import annotations

import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)


def _stub_packages() -> None:
    """Make `symphony_core.model.dist` importable without running any package `__init__`."""
    if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
        sys.path.pop(0)
    for name, path in (
        ("symphony_core", _PKG),
        ("symphony_core.model", f"{_PKG}/model"),
        ("symphony_core.sched", f"{_PKG}/sched"),
        ("symphony_core.sandbox", _HERE),
    ):
        m = types.ModuleType(name)
        m.__path__ = [path]
        m.__package__ = name
        sys.modules[name] = m


_stub_packages()

import ctypes  # noqa: E402
import encodings.idna  # noqa: E402,F401  (socket name lookups need it; the sandbox cannot import it later)
import json  # noqa: E402
import mmap  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402,F401  (loaded once here, shared copy-on-write by every worker)

from symphony_core import errors as _errors  # noqa: E402
from symphony_core.model import dist as _dist  # noqa: E402,F401
from symphony_core.model import sampling as _sampling  # noqa: E402
from symphony_core.sandbox import confine, worker  # noqa: E402

# what `from symphony_core.model import …` needs (set on the module object: mypy sees no such attributes)
sys.modules["symphony_core.model"].Dist = _dist.Dist  # type: ignore[attr-defined]
sys.modules["symphony_core.model"].Sampler = _sampling.Sampler  # type: ignore[attr-defined]

try:  # loaded now: after the pivot into the sandbox's root, libseccomp could not be found
    import pyseccomp  # noqa: F401
except Exception:  # reported per worker as "seccomp: unavailable"
    pass

PR_SET_NAME = 15
_DEBUG = bool(os.environ.get("SYMPHONY_SANDBOX_DEBUG"))
EXIT_CPU = 152

# What a sandboxed LIP may import from symphony_core; everything else is the engine's.
_ALLOWED = (
    "symphony_core",
    "symphony_core.errors",
    "symphony_core.model",
    "symphony_core.model.dist",
    "symphony_core.model.sampling",
    "symphony_core.sched",
    "symphony_core.sched.process",
    "symphony_core.events",
    "symphony_core.lib",
    "symphony_core.sandbox",
    "symphony_core.sandbox.worker",
    "symphony_core.sandbox.remote_handles",
    "symphony_core.sandbox.protocol",
    "symphony_core.syscall_surface",
    "symphony_core.programs",
)


def _set_name(name: str) -> None:
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except Exception:
        pass


class _EngineBlocker:
    """Import hook inside the worker: the engine's internals are not there to import."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if (
            name.startswith("symphony_core.") and name not in _ALLOWED and not name.startswith("symphony_core.lib.")
        ) or name.startswith("symphony_lab"):
            raise ImportError(
                f"{name} is not available inside a sandboxed LIP: the engine runs in another process, outside "
                "the sandbox — use the `sym` handle (symphony_core.errors, .model.dist, .model.sampling and .lib "
                "are importable)"
            )
        return None


def _install_worker_guards(spec: confine.SandboxSpec) -> None:
    pkg = sys.modules["symphony_core"]
    for n in ("SymphonyError", "KVError", "KVPermissionError", "KVNotFound", "OutOfPages", "PredError", "ModelError"):
        setattr(pkg, n, getattr(_errors, n))
    # stand-ins set on the module objects (attributes mypy cannot see)
    pkg.Dist, pkg.Sampler, pkg.KV = _dist.Dist, _sampling.Sampler, worker.RemoteKV  # type: ignore[attr-defined]

    def _missing(name: str):
        raise ImportError(
            f"symphony_core.{name} is not available inside a sandboxed LIP: the engine runs in "
            "another process, outside the sandbox — use the `sym` handle"
        )

    # a module-level __getattr__ (PEP 562) installed on the module objects
    pkg.__getattr__ = _missing  # type: ignore[method-assign]
    sys.modules["symphony_core.model"].__getattr__ = lambda name: _missing(f"model.{name}")  # type: ignore[method-assign]
    for name in list(sys.modules):
        if name.startswith("symphony_core.") and name not in _ALLOWED and name != "symphony_core.sandbox.confine":
            sys.modules.pop(name, None)
    sys.meta_path.insert(0, _EngineBlocker)

    visible = ("/scratch", "/dev/", "/proc/", *[p.rstrip("/") for p in spec.ro_paths])

    def audit(event: str, args: tuple) -> None:
        if event == "socket.__new__":
            raise PermissionError("sandbox: network access is not allowed for a sandboxed LIP (no sockets)")
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            p = os.fsdecode(args[0])
            full = os.path.normpath(p if p.startswith("/") else os.path.join("/scratch", p))
            if not any(full == v or full.startswith(v.rstrip("/") + "/") for v in visible):
                raise PermissionError(
                    f"sandbox: cannot open {p!r}: a sandboxed LIP sees only its scratch "
                    "directory /scratch, the read-only Python runtime and sym.tokenizer_file"
                )

    sys.addaudithook(audit)


def _worker_process(sock_fd: int, shm_fd: int, msg: dict, conf: confine.Confinement) -> int:
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _set_name("symphony-worker")
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1) if _DEBUG else (0, 1, 2):  # SYMPHONY_SANDBOX_DEBUG=1 keeps stderr for setup errors
        os.dup2(null, fd)
    confine.close_other_fds({sock_fd, shm_fd, 0, 1, 2})
    if _DEBUG:  # SIGUSR1 dumps every thread's stack to stderr
        import faulthandler

        faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = confine.SandboxSpec.from_dict(msg["spec"])
    shm = mmap.mmap(shm_fd, msg["shm_size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(shm_fd)
    confine.build_root(spec, conf)
    confine.set_limits(spec, conf)
    confine.drop_privileges(spec, conf)
    threading.stack_size(4 << 20)
    signal.signal(signal.SIGXCPU, lambda *a: os._exit(EXIT_CPU))
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    sock = socket.socket(fileno=sock_fd)
    _install_worker_guards(spec)
    confine.apply_seccomp(conf)
    conf_d = {"enforced": conf.enforced, "missing": conf.missing}
    return worker.run(sock, shm, msg["slot_bytes"], msg["n_slots"], conf_d, lambda info: None)


def _monitor(sock_fd: int, shm_fd: int, msg: dict, status_w: int, ctl_fd: int, status_r: int) -> None:
    """The forked child: enter namespaces, fork the worker, report how it ended."""
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.close(ctl_fd)
    os.close(status_r)
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    _set_name("symphony-sbxmon")
    conf = confine.Confinement()
    confine.enter_namespaces(conf)
    w = os.fork()
    if w == 0:
        code = 71
        try:
            os.close(status_w)
            code = _worker_process(sock_fd, shm_fd, msg, conf)
        except BaseException as e:  # report why the sandbox could not be set up
            import traceback

            try:
                from symphony_core.sandbox.protocol import send_frame

                send_frame(
                    socket.socket(fileno=sock_fd),
                    {
                        "op": "exit",
                        "err": {
                            "type": "SandboxSetupError",
                            "msg": f"{type(e).__name__}: {e}",
                            "tb": traceback.format_exc(),
                        },
                    },
                )
            except BaseException:
                pass
            if _DEBUG:
                os.write(2, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(sock_fd)
    os.close(shm_fd)
    signal.signal(signal.SIGTERM, lambda *a: os.kill(w, signal.SIGKILL))
    _, status, ru = os.wait4(w, 0)
    report = {
        "op": "status",
        "pid": os.getpid(),
        "cpu": round(ru.ru_utime + ru.ru_stime, 3),
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "maxrss_kb": ru.ru_maxrss,
    }
    os.write(status_w, (json.dumps(report) + "\n").encode())


def main() -> None:
    ctl_fd, ppid = int(sys.argv[1]), int(sys.argv[2])
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != ppid:
        sys.exit(0)  # the server is already gone
    _set_name("symphony-zygote")
    ctl = socket.socket(fileno=ctl_fd)
    status_r, status_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    children: dict[int, float | None] = {}  # monitor pid -> when it was asked to die
    statuses: dict[int, dict] = {}
    pending = b""

    def send(obj: dict) -> None:
        try:
            ctl.send(json.dumps(obj).encode())
        except OSError:
            pass

    def kill_all() -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    send({"op": "ready", "pid": os.getpid()})
    shutting_down = False
    try:
        while True:
            watched: list[socket.socket | int] = [ctl, status_r, wake_r]
            r, _, _ = select.select(watched, [], [], 0.5)
            if wake_r in r:
                os.read(wake_r, 4096)
            if status_r in r:
                pending += os.read(status_r, 65536)
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    try:
                        st = json.loads(line)
                        statuses[st["pid"]] = st
                    except (ValueError, KeyError):
                        pass
            while children:  # reap
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                children.pop(pid, None)
                st = statuses.pop(pid, None) or {
                    "code": None,
                    "signal": None,
                    "cpu": None,
                    "note": f"monitor ended with status {status}",
                }
                send({**st, "op": "exited", "pid": pid})
            now = time.monotonic()
            for pid, asked in list(children.items()):
                if asked is not None and now - asked > 1.0:  # monitor did not go on SIGTERM
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if shutting_down and not children:
                return
            if ctl not in r:
                continue
            try:
                data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 4)
            except OSError:
                data, fds = b"", []
            if not data:  # the server went away
                kill_all()
                shutting_down = True
                if not children:
                    return
                continue
            msg = json.loads(data)
            op = msg.get("op")
            if op == "spawn":
                if len(fds) != 2:
                    for fd in fds:
                        os.close(fd)
                    send({"op": "error", "id": msg.get("id"), "msg": "spawn needs two descriptors"})
                    continue
                pid = os.fork()
                if pid == 0:
                    try:
                        _monitor(fds[0], fds[1], msg, status_w, ctl.fileno(), status_r)
                    finally:
                        os._exit(0)
                for fd in fds:
                    os.close(fd)
                children[pid] = None
                send({"op": "spawned", "id": msg.get("id"), "pid": pid})
            elif op == "kill":
                pid = msg.get("pid")
                if pid in children and children[pid] is None:
                    children[pid] = time.monotonic()
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            elif op == "shutdown":
                shutting_down = True
                for pid in children:
                    children[pid] = time.monotonic()
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                if not children:
                    return
    finally:
        kill_all()


if __name__ == "__main__":
    main()
