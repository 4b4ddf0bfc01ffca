"""Errors a LIP or a client can see. Every message names what was wrong."""


class SymphonyError(Exception):
    """Base of every error Symphony raises on purpose."""


class KVError(SymphonyError):
    """Misuse of a KV file or handle: not a handle, closed, read-only, evicted, a bad path,
    a file that already exists, a bad `kv_truncate` length or `kv_hint` value."""


class KVPermissionError(KVError):
    """A user touched a file in another user's private namespace (`permission denied:
    <path> is private to user <name>`), or wrote, removed or hinted someone else's `/shared/`
    file (`permission denied: <path> belongs to <owner>; others may only read it`)."""


class KVNotFound(KVError):
    """No named file at that path: `no KV file at <path>`."""


class OutOfPages(KVError):
    """The page pool cannot hold what was asked, even after evicting hinted files and parking
    other processes; nothing was changed."""


class PredError(SymphonyError):
    """A `pred` call with bad arguments (tokens, positions, outputs, sampler, mask), a bad
    `Sampler` or `Dist` query, or bad input to `tokenize` / `chat_template`."""


class ModelError(SymphonyError):
    """A model could not be found, converted or loaded."""
