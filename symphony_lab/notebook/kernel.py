"""Where the notebook runs: the Jupyter kernel's id and the notebook's current definitions."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)


def kernel_id() -> str | None:
    """The id of the Jupyter kernel we run in (from its connection file), or None outside one."""
    try:
        from ipykernel.connect import get_connection_file

        base = os.path.basename(get_connection_file())
    except Exception as e:  # a kernel of another kind (no connection file): the lab runs without the sidebar's bridge
        log.warning("no Jupyter kernel id (the sidebar cannot connect): %s: %s", type(e).__name__, e)
        return None
    if base.startswith("kernel-") and base.endswith(".json"):
        return base[len("kernel-") : -len(".json")]
    return None


def in_kernel() -> bool:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return ip is not None and getattr(ip, "kernel", None) is not None
    except ImportError:  # no IPython: not in a kernel
        return False


def current_definition(fn: Callable) -> Callable:
    """The function now bound to `fn`'s name in the notebook (an edited cell's new version)."""
    name = getattr(fn, "__name__", None)
    try:
        from IPython import get_ipython

        ip = get_ipython()
        ns = ip.user_ns if ip is not None else {}
    except ImportError:  # no IPython: no notebook to take a newer definition from
        ns = {}
    new = ns.get(name) if name else None
    if callable(new) and getattr(new, "__module__", None) == getattr(fn, "__module__", None):
        return new
    return fn


__all__ = ["current_definition", "in_kernel", "kernel_id"]
