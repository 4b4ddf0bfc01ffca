"""Errors a LIP or a client can see. Every message names what was wrong."""


class SymphonyError(Exception):
    """Base of every error Symphony raises on purpose."""


class KVError(SymphonyError):
    """Misuse of a KV file or handle (closed, read-only, evicted, missing)."""


class KVPermissionError(KVError):
    """A user touched a file in another user's private namespace."""


class KVNotFound(KVError):
    """No named file at that path."""


class OutOfPages(KVError):
    """The page pool cannot hold what was asked; nothing was changed."""


class PredError(SymphonyError):
    """A `pred` call with bad arguments (tokens, positions, outputs, mask)."""


class ModelError(SymphonyError):
    """A model could not be found, converted or loaded."""
