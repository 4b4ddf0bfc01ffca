"""The protocol's one schema, and the checks made with it.

`ARGUMENTS` (protocol_args.py), `RESPONSES` (protocol_responses.py) and `EVENT_BODIES`
(protocol_events.py) name a type for every command's arguments, every command's body and every
event's body. `check_arguments` is what `handle_command` runs before a command: a wrong type or
an unknown name is a `ProtocolError` naming the command and the field. `check_body` /
`check_event` validate what the debugger sends (the tests run real traffic through them).
schema_ts.py generates extension/src/generated/protocol.ts from the same types.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .protocol_args import ARGUMENTS
from .protocol_events import EVENT_BODIES
from .protocol_responses import RESPONSES

# The modules whose `__all__` types are written to the TypeScript file (schema_ts.py), in order.
# A module of protocol types added here is generated and checked with the rest.
SCHEMA_MODULES = [
    "symphony_lab.debugger.protocol_views",
    "symphony_lab.debugger.protocol_bodies",
    "symphony_lab.debugger.protocol_args",
    "symphony_lab.debugger.protocol_responses",
    "symphony_lab.debugger.protocol_events",
    "symphony_lab.debugger.snapshot",
]


class ProtocolError(Exception):
    """A malformed request (not a command error): the client sent what the protocol refuses."""


@cache
def _adapter(table: str, name: str) -> TypeAdapter:
    return TypeAdapter({"args": ARGUMENTS, "body": RESPONSES, "event": EVENT_BODIES}[table][name])


def _where(loc: tuple) -> str:
    """A field's path, `sampler.top_k` or `ids[3]`; a union's branch names itself in the
    location ("int", "list[int]", a tag) and is left out."""
    path = ""
    for p in loc:
        if isinstance(p, int):
            path += f"[{p}]"
        elif not any(c in p for c in "[]-") and p not in ("int", "str", "float", "bool", "none"):
            path += f".{p}" if path else p
    return path or "(root)"


def describe(e: ValidationError, what: str, fields: list[str] | None = None) -> str:
    """One line naming every field that is wrong and why."""
    extra: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for err in e.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            extra.setdefault(_where(loc[:-1]), []).append(str(loc[-1]))
        else:
            msgs = wrong.setdefault(_where(loc), [])
            if err["msg"] not in msgs:
                msgs.append(err["msg"])
    parts = []
    for at, names in extra.items():
        if at == "(root)":
            takes = f"; it takes {sorted(fields)}" if fields is not None else ""
            parts.append(f"unknown argument(s) {sorted(names)}{takes}")
        else:
            parts.append(f"{at}: unknown field(s) {sorted(names)}")
    parts += [f"{at}: {' or '.join(msgs)}" for at, msgs in wrong.items()]
    return f"{what}: " + "; ".join(parts)


def check_arguments(command: str, args: dict) -> None:
    """Raise `ProtocolError` unless `args` are what `command` takes (names and JSON types)."""
    adapter = _adapter("args", command)
    try:
        adapter.validate_python(args)
    except ValidationError as e:
        fields = sorted(ARGUMENTS[command].__annotations__)
        raise ProtocolError(describe(e, command, fields)) from None


def check_body(command: str, body: Any) -> Any:
    """Validate a command's success body; raises `pydantic.ValidationError`."""
    return _adapter("body", command).validate_python(body)


def check_event(event: str, body: Any) -> Any:
    """Validate an event's body; raises `pydantic.ValidationError`."""
    return _adapter("event", event).validate_python(body)


__all__ = ["SCHEMA_MODULES", "ProtocolError", "check_arguments", "check_body", "check_event", "describe"]
