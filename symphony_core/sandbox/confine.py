"""OS-level confinement of a sandboxed worker: namespaces, a private root, rlimits, seccomp, uid.

Called in the worker after `fork`, before any user code runs. Each step is tried and what
took effect is recorded in `Confinement.enforced` (what failed, with why, in `.missing`), so
the server can say exactly what this machine enforces (see docs/threat-model.md):

1. New namespaces: mount, network (no interfaces but a down loopback), pid, IPC, UTS — as
   root directly, otherwise inside a new user namespace when the kernel allows it.
2. A private root (tmpfs, then read-only) holding only read-only binds of the Python runtime
   and its packages, /dev/{null,zero,urandom}, a fresh /proc and a size-capped tmpfs scratch
   directory; `pivot_root` into it and detach the old root, so no path reaches the host.
3. Resource limits: address space, CPU time, open files, threads, file size, no core dumps.
4. When the server runs as root: a uid of its own per worker slot (so RLIMIT_NPROC counts
   only this worker's threads and no worker can signal or trace another).
5. seccomp: no sockets except AF_UNIX, no fork/exec (threads only), no mount, ptrace,
   namespaces, io_uring, bpf, kernel modules and the like.

This module runs inside the sandbox's process: it imports no engine internals.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import socket
import sys
from dataclasses import dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(src), _b(dst), _b(fstype), flags, _b(data)), f"mount {src} on {dst}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


@dataclass
class SandboxSpec:
    """What one worker may use. Sizes in MiB, time in seconds."""

    scratch_mb: int = 64
    memory_mb: int = 1024  # address space on top of the runtime's own (Python + torch)
    cpu_seconds: int = 30
    max_open_files: int = 64
    max_threads: int = 32
    uid: int | None = None  # a uid of its own when the server runs as root
    root_dir: str = "/tmp/symphony-sandbox-root"
    ro_paths: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> SandboxSpec:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class Confinement:
    enforced: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    userns: bool = False
    pidns: bool = False
    mountns: bool = False


def runtime_paths(package_dir: str) -> list[str]:
    """Read-only paths the worker needs: the Python runtime, its packages and symphony_core.

    Only site-packages-like entries of sys.path and the prefixes are taken, never the
    current directory or a project checkout (which may hold a tokens file).
    """
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    cand = set(prefixes) | {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"}
    for p in sys.path:
        if not p or not os.path.isdir(p):
            continue
        rp = os.path.realpath(p)
        if any(rp.startswith(x + "/") or rp == x for x in prefixes) or os.path.basename(rp) in (
            "site-packages",
            "dist-packages",
        ):
            cand.add(rp)
    cand.add(os.path.realpath(package_dir))
    out: list[str] = []
    for p in sorted(cand, key=len):
        if not os.path.lexists(p):
            continue
        if any(p.startswith(q.rstrip("/") + "/") for q in out if not os.path.islink(q)):
            continue  # already inside a bound parent
        out.append(p)
    return out


def _mkdirs(root: str, path: str) -> str:
    target = root + path
    os.makedirs(target, exist_ok=True)
    return target


def _bind_ro(root: str, src: str, conf: Confinement) -> None:
    if os.path.islink(src):
        dst = root + src
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.lexists(dst):
            os.symlink(os.readlink(src), dst)
        return
    if os.path.isdir(src):
        dst = _mkdirs(root, src)
    else:
        dst = root + src
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND)
    try:
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
    except OSError:  # in a user namespace the source's locked flags must be kept
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def enter_namespaces(conf: Confinement) -> None:
    """Monitor side, before forking the worker: unshare what this machine allows."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.getuid(), os.getgid()
    try:
        unshare(flags)
    except OSError as e:
        if os.geteuid() == 0:
            conf.missing.append(f"namespaces: {e}")
            return
        try:
            unshare(flags | CLONE_NEWUSER)
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
            conf.userns = True
        except OSError as e2:
            conf.missing.append(f"namespaces (no privilege and no user namespaces): {e2}")
            return
    conf.mountns = conf.pidns = True
    conf.enforced.append(
        "namespaces: mount, network, pid, ipc, uts" + (" (inside a user namespace)" if conf.userns else "")
    )
    conf.enforced.append("network: own empty network namespace (no interfaces up)")


def build_root(spec: SandboxSpec, conf: Confinement) -> None:
    """Worker side, in the new mount namespace: private read-only root + scratch; pivot into it."""
    if not conf.mountns:
        conf.missing.append("filesystem: no mount namespace, the host filesystem stays visible")
        return
    root = spec.root_dir
    try:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        os.makedirs(root, exist_ok=True)
        mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
        for p in spec.ro_paths:
            _bind_ro(root, p, conf)
        for dev in ("null", "zero", "urandom", "random"):
            _bind_ro(root, f"/dev/{dev}", conf)
        scratch = _mkdirs(root, "/scratch")
        opts = f"size={spec.scratch_mb}m,mode=0700"
        if spec.uid is not None:
            opts += f",uid={spec.uid},gid={spec.uid}"
        mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts)
        if not os.path.lexists(root + "/tmp"):  # /tmp already holds read-only paths when the runtime lives there
            os.symlink("/scratch", root + "/tmp")
        proc_ok = False
        if conf.pidns:
            try:
                _mkdirs(root, "/proc")
                mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                proc_ok = True
            except OSError:
                pass
        mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
        os.chdir(root)
        if _SYS_PIVOT_ROOT is not None and _libc.syscall(_SYS_PIVOT_ROOT, b".", b".") == 0:
            _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
            how = "pivot_root (old root detached)"
        else:
            os.chroot(".")
            how = "chroot"
        os.chdir("/scratch")
        conf.enforced.append(
            f"filesystem: private root via {how}: read-only Python runtime and packages, "
            f"/dev/null|zero|urandom, {'own /proc, ' if proc_ok else ''}writable tmpfs /scratch of {spec.scratch_mb} MiB"
        )
    except OSError as e:
        conf.missing.append(f"filesystem: private root failed ({e}); the host filesystem stays visible")


def set_limits(spec: SandboxSpec, conf: Confinement) -> None:
    vm = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    vm = int(line.split()[1]) * 1024
    except OSError:
        pass
    limits = {
        "RLIMIT_AS": (vm + spec.memory_mb * 2**20, f"address space {spec.memory_mb} MiB beyond the runtime"),
        "RLIMIT_CPU": (spec.cpu_seconds, f"CPU time {spec.cpu_seconds} s"),
        "RLIMIT_NOFILE": (spec.max_open_files, f"{spec.max_open_files} open files"),
        "RLIMIT_FSIZE": (spec.scratch_mb * 2**20, f"file size {spec.scratch_mb} MiB"),
        "RLIMIT_CORE": (0, "no core dumps"),
        "RLIMIT_NPROC": (spec.max_threads, f"{spec.max_threads} threads"),
    }
    for name, (val, what) in limits.items():
        if name == "RLIMIT_AS" and not vm:
            conf.missing.append("memory limit: could not read the runtime's size")
            continue
        hard = val + 2 if name == "RLIMIT_CPU" else val  # SIGXCPU at soft, SIGKILL 2 s later
        try:
            resource.setrlimit(getattr(resource, name), (val, hard))
            if name == "RLIMIT_NPROC" and spec.uid is None:
                conf.missing.append(
                    "thread limit: RLIMIT_NPROC counts every process of the server's user "
                    "(and none for root), so only the spawn limit applies"
                )
            else:
                conf.enforced.append(f"rlimit: {what}")
        except (OSError, ValueError) as e:
            conf.missing.append(f"rlimit {what}: {e}")


def drop_privileges(spec: SandboxSpec, conf: Confinement) -> None:
    if spec.uid is None or os.geteuid() != 0 or conf.userns:
        if os.geteuid() == 0 and not conf.userns:
            conf.missing.append("uid: runs as root (no uid given)")
        return
    try:
        os.setgroups([])
        os.setresgid(spec.uid, spec.uid, spec.uid)
        os.setresuid(spec.uid, spec.uid, spec.uid)
        conf.enforced.append(f"uid: own unprivileged uid {spec.uid}, no capabilities")
    except OSError as e:
        conf.missing.append(f"uid: could not drop root ({e})")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a credential change clears it


def apply_seccomp(conf: Confinement) -> None:
    try:
        import pyseccomp as seccomp
    except Exception as e:  # missing package or libseccomp
        conf.missing.append(f"seccomp: unavailable ({type(e).__name__}: {e})")
        try:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
        except OSError:
            pass
        return
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        eperm = seccomp.ERRNO(errno.EPERM)
        f.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
        f.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # glibc falls back to clone, which is filtered
        # The parent-death signal is the worker's tie to its monitor (and so to the zygote and the
        # server): a worker that cleared it could outlive them all, keeping its uid.
        f.add_rule(eperm, "prctl", seccomp.Arg(0, seccomp.EQ, PR_SET_PDEATHSIG))
        denied = [
            "fork",
            "vfork",
            "execve",
            "execveat",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "unshare",
            "setns",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "request_key",
            "userfaultfd",
            "swapon",
            "swapoff",
            "syslog",
            "acct",
            "reboot",
            "settimeofday",
            "clock_settime",
            "clock_adjtime",
            "adjtimex",
            "mknod",
            "mknodat",
            "open_by_handle_at",
            "name_to_handle_at",
            "iopl",
            "ioperm",
            "personality",
            "quotactl",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "setuid",
            "setgid",
            "setreuid",
            "setregid",
            "setresuid",
            "setresgid",
            "setgroups",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "fsopen",
            "fsmount",
            "fsconfig",
            "fspick",
            "pidfd_open",
            "pidfd_getfd",
            "kcmp",
        ]
        for name in denied:
            try:
                f.add_rule(eperm, name)
            except Exception:
                pass  # not a syscall on this architecture
        f.load()
        conf.enforced.append("seccomp: no sockets but AF_UNIX, no fork/exec, no mount/ptrace/namespaces/io_uring/bpf")
    except Exception as e:
        conf.missing.append(f"seccomp: could not load a filter ({e})")


def close_other_fds(keep: set[int]) -> None:
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 256))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
