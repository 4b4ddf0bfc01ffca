"""Who is asking: the API token a request or WebSocket carries (bearer header, `?token=` or
`x-api-key`), the user it names, and the processes that user may reach."""

from __future__ import annotations

from starlette.requests import Request

from .records import ProcessRecord
from .state import State
from .users import User
from .validate import BadRequest


def token_of(headers, query) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("token") or headers.get("x-api-key")


def authenticate(state: State, request: Request) -> User:
    user = state.users.authenticate(token_of(request.headers, request.query_params))
    if user is None:
        raise BadRequest(
            401, "missing or unknown API token: send 'Authorization: Bearer <token>'", type="authentication_error"
        )
    return user


def owned_record(state: State, user: User, pid: str) -> ProcessRecord:
    """The record of process `pid` if `user` launched it (another user's is as absent as none)."""
    try:
        n = int(pid)
    except ValueError:
        raise BadRequest(422, f"process id must be an integer, got {pid!r}", param="pid") from None
    rec = state.registry.get(n, user.name)
    if rec is None:
        raise BadRequest(404, f"no process {n} of user {user.name!r}", type="not_found")
    return rec


__all__ = ["authenticate", "owned_record", "token_of"]
