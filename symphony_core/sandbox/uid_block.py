"""A block of worker uids that this server alone uses, so that no two servers on one host (nor two
Ray replicas on one node) give their workers the same uid: RLIMIT_NPROC counts a uid's threads
host-wide, and two workers of one uid could signal each other.

A block is claimed with an exclusive `flock` on a file named after it, held for the server's
life; the kernel drops the lock when the process ends, however it ends, so a crashed server's
block is free again at once (its workers died with it: see confine.py's lifetime rules).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile

UID_FLOOR = 2_000_000
BLOCK = 1024  # uids per block: a server's worker slots (--max-workers) must fit in one
BLOCKS = 1000


def _lock_dir() -> str:
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    d = os.path.join(base, f"symphony-uid-blocks-{os.geteuid()}")
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(f"{d} is not a private directory of this user: refusing to claim worker uids there")
    return d


class UidBlock:
    """`base`: the first uid of a block no other live server holds; `release()` gives it back."""

    def __init__(self, size: int) -> None:
        if size > BLOCK:
            raise ValueError(f"at most {BLOCK} worker slots per server, got {size}")
        d = _lock_dir()
        for b in range(BLOCKS):
            fd = os.open(os.path.join(d, f"block-{b}"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.fd: int | None = fd
            self.base = UID_FLOOR + b * BLOCK
            return
        raise OSError(f"all {BLOCKS} blocks of worker uids are held by other servers on this host")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


__all__ = ["UidBlock"]
