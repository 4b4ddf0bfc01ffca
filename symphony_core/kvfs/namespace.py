"""Paths and rights of named KV files.

Every user has a private directory `/users/<name>/`; `/shared/` is readable by everyone and
writable by a file's owner. A relative path names a file in the caller's own directory.

Names are bounded so that one user's names cannot crowd out everyone else's: a path is at most
MAX_PATH_BYTES, a user owns at most MAX_NAMES_PER_USER named files (their directory and
/shared/ together), and a listing holds at most MAX_LIST paths, the caller's own first.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from ..errors import KVError, KVPermissionError

SHARED = "/shared/"
MAX_PATH_BYTES = 512
MAX_NAMES_PER_USER = 1024
MAX_LIST = 1000


def user_home(user: str) -> str:
    return f"/users/{user}/"


def resolve(user: str, path: str) -> str:
    """Make `path` absolute and normal, refusing anything outside the two namespaces."""
    if not isinstance(path, str) or not path.strip():
        raise KVError(f"KV path must be a non-empty string, got {path!r}")
    full = path if path.startswith("/") else user_home(user) + path
    try:
        size = len(full.encode())
    except UnicodeEncodeError:
        raise KVError(f"KV path {path!a} is not Unicode text (a lone surrogate)") from None
    if size > MAX_PATH_BYTES:
        raise KVError(f"KV path of {size} bytes is over the limit of {MAX_PATH_BYTES} bytes")
    norm = posixpath.normpath(full)
    if norm.endswith("/") or norm in ("/shared", f"/users/{user}", "/users"):
        raise KVError(f"KV path {path!r} names a directory, not a file")
    if not (norm.startswith(SHARED) or norm.startswith("/users/")) or norm.count("/") < 2:
        raise KVError(f"KV path {path!r} is outside /users/<name>/ and /shared/")
    if norm.startswith("/users/") and len(norm.split("/")) < 4:
        raise KVError(f"KV path {path!r} names no file inside a user directory")
    return norm


def check_access(user: str, path: str, owner: str | None, write: bool) -> None:
    """Raise KVPermissionError unless `user` may read (or write) the file at `path`."""
    if path.startswith(SHARED):
        if write and owner is not None and owner != user:
            raise KVPermissionError(f"permission denied: {path} belongs to {owner}; others may only read it")
        return
    home_owner = path.split("/")[2]
    if home_owner != user:
        raise KVPermissionError(f"permission denied: {path} is private to user {home_owner!r}")


def check_name_quota(user: str, owners: Iterable[str]) -> None:
    """Raise KVError if `user` already owns MAX_NAMES_PER_USER of the named files (`owners`: each
    named file's owner)."""
    n = sum(1 for o in owners if o == user)
    if n >= MAX_NAMES_PER_USER:
        raise KVError(
            f"user {user!r} owns {n} named KV files, the limit; remove some (kv_remove) or use anonymous files"
        )


def visible(user: str, names: Iterable[str], prefix: str | None) -> list[str]:
    """The named files `user` may see (under `prefix`): their own directory's, then /shared/'s,
    each sorted, at most MAX_LIST in all."""
    if prefix is not None and not isinstance(prefix, str):
        raise KVError(f"kv_list prefix must be a string, got {type(prefix).__name__}")
    home = user_home(user)
    full = None if prefix is None else prefix if prefix.startswith("/") else home + prefix
    mine, shared = [], []
    for p in names:
        if full is not None and not p.startswith(full):
            continue
        if p.startswith(home):
            mine.append(p)
        elif p.startswith(SHARED):
            shared.append(p)
    mine.sort()
    if len(mine) < MAX_LIST:
        shared.sort()
        mine.extend(shared[: MAX_LIST - len(mine)])
    return mine[:MAX_LIST]
