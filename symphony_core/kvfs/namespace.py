"""Paths and rights of named KV files.

Every user has a private directory `/users/<name>/`; `/shared/` is readable by everyone and
writable by a file's owner. A relative path names a file in the caller's own directory.
"""

from __future__ import annotations

import posixpath

from ..errors import KVError, KVPermissionError

SHARED = "/shared/"


def user_home(user: str) -> str:
    return f"/users/{user}/"


def resolve(user: str, path: str) -> str:
    """Make `path` absolute and normal, refusing anything outside the two namespaces."""
    if not isinstance(path, str) or not path.strip():
        raise KVError(f"KV path must be a non-empty string, got {path!r}")
    full = path if path.startswith("/") else user_home(user) + path
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
