"""Mistral tool calls (vLLM's `mistral` parser), in the two ways Mistral's templates write them:

- v0.3 / Nemo / Small 3.0 templates: `[TOOL_CALLS]` (a special token) then a JSON array of call
  objects, `[{"name": ..., "arguments": {...}}, ...]` (a lone object is read too; an `"id"` key
  the model copies from earlier turns is ignored);
- newer templates (tokenizer v11+, `[ARGS]` in the template): `[TOOL_CALLS]name[ARGS]{...}` per call.

A reply that does not start with `[TOOL_CALLS]` is text; one that starts with it but cannot be
read as calls (and is not merely cut short) is text too, all of it.
"""

from __future__ import annotations

import re

from .tool_json import ParsedCall, ParsedReply, json_prefix, read_call_list, value_end

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


def _start(text: str, marker: str, may_be_text: bool) -> ParsedReply | None:
    """The reply when its start already decides it (text, or nothing yet); else None."""
    if marker.startswith(text):
        return ParsedReply(None)
    if may_be_text and not text.startswith(marker):
        return ParsedReply(text)
    return None


def parse_mistral(text: str, may_be_text: bool = True, marker: str = TOOL_CALLS) -> ParsedReply:
    """`[TOOL_CALLS][{...}, {...}]`: text, or calls so far."""
    if (early := _start(text, marker, may_be_text)) is not None:
        return early
    body = text[len(marker) :] if text.startswith(marker) else text
    rest = body.lstrip()
    at = len(text) - len(rest)
    if not rest:
        return ParsedReply(None)
    lone = rest.startswith("{")
    if not lone and not rest.startswith("["):
        return ParsedReply(text)
    if lone:
        return read_call_list(text, at, None)
    return read_call_list(text, at + 1, ",", "]")


def parse_mistral_args(text: str, may_be_text: bool = True, marker: str = TOOL_CALLS, args: str = ARGS) -> ParsedReply:
    """`[TOOL_CALLS]name[ARGS]{...}` per call: text, or calls so far."""
    if (early := _start(text, marker, may_be_text)) is not None:
        return early
    calls: list[ParsedCall] = []
    pos = 0
    while True:
        if not text.startswith(marker, pos):
            return ParsedReply(None, calls) if marker.startswith(text[pos:]) else ParsedReply(text)
        pos += len(marker)
        sep = text.find(args, pos)
        if sep < 0:  # the name is still being written, or this is not a call
            tail = text[pos:].lstrip()
            cut = next((k for k in range(1, len(args)) if tail.endswith(args[:k])), 0)
            if _NAME.fullmatch(tail[: len(tail) - cut]):
                return ParsedReply(None, calls)
            return ParsedReply(text)
        name = text[pos:sep].strip()
        if not name or not _NAME.fullmatch(name):
            return ParsedReply(text)
        at = sep + len(args)
        rest = text[at:].lstrip()
        at = len(text) - len(rest)
        end = value_end(rest)
        if end is None:
            if not json_prefix(rest) or rest[:1] not in ("{", ""):
                return ParsedReply(text)
            calls.append(ParsedCall(name, rest.rstrip(), False))
            return ParsedReply(None, calls)
        if not rest.startswith("{"):
            return ParsedReply(text)
        calls.append(ParsedCall(name, rest[:end], True))
        rest = text[at + end :].lstrip()
        if not rest:
            return ParsedReply(None, calls)
        pos = len(text) - len(rest)


__all__ = ["ARGS", "TOOL_CALLS", "parse_mistral", "parse_mistral_args"]
