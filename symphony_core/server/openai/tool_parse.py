"""Reading tool calls out of a reply as it grows, so a stream can send each call's name as soon as
it is written and its arguments piece by piece (the way vLLM's tool parsers stream), and a reply
cut short says which call was cut.

A reply with tools is either text or one or more calls, each `OPEN {"name": ..., "arguments":
{...}} CLOSE` (our own format: OPEN `<tool_call>`, no CLOSE; a Hermes-style template's:
`<tool_call>` ... `</tool_call>`). The grammar (constraints.py) guarantees the shape, so the
parser only has to find where each part ends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')
_DECODER = json.JSONDecoder()


@dataclass
class ParsedCall:
    name: str
    arguments: str  # the arguments' JSON text as written (all of it once `complete`)
    complete: bool


@dataclass
class ParsedReply:
    text: str | None  # the reply's text when it is text, else None
    calls: list[ParsedCall] = field(default_factory=list)


@dataclass(frozen=True)
class CallFormat:
    open: str = "<tool_call>"
    close: str = ""


OWN_FORMAT = CallFormat()


def _value_end(s: str) -> int | None:
    """Where the JSON value at the start of `s` ends, or None while it is incomplete."""
    try:
        v, end = _DECODER.raw_decode(s)
    except ValueError:
        return None
    if end == len(s) and not isinstance(v, (dict, list, str)):
        return None  # a number or literal may still grow
    return end


def parse_reply(text: str, fmt: CallFormat = OWN_FORMAT, may_be_text: bool = True) -> ParsedReply:
    """What `text` (a whole reply, or the start of one) holds: text, or calls so far."""
    if may_be_text and text and not fmt.open.startswith(text[: len(fmt.open)]):
        return ParsedReply(text=text)
    calls: list[ParsedCall] = []
    pos = 0
    while True:
        rest = text[pos:].lstrip()
        pos = len(text) - len(rest)
        if not rest.startswith(fmt.open):
            return ParsedReply(None, calls)  # nothing more yet (or a marker half written)
        pos += len(fmt.open)
        head = _HEAD.match(text, pos)
        if head is None:
            whole = _value_end(text[pos:].lstrip())
            if whole is None:
                return ParsedReply(None, calls)  # the name is still being written
            obj = json.loads(text[pos:].lstrip()[:whole])  # name after arguments: read it whole
            calls.append(ParsedCall(str(obj.get("name")), json.dumps(obj.get("arguments")), True))
            pos = len(text) - len(text[pos:].lstrip()) + whole
        else:
            name = json.loads(head.group(1))
            args_at = head.end()
            end = _value_end(text[args_at:])
            if end is None:
                calls.append(ParsedCall(name, text[args_at:].rstrip(), False))
                return ParsedReply(None, calls)
            calls.append(ParsedCall(name, text[args_at : args_at + end], True))
            tail = text[args_at + end :].lstrip()
            if not tail.startswith("}"):
                calls[-1].complete = False
                return ParsedReply(None, calls)
            pos = len(text) - len(tail) + 1
        if fmt.close:
            tail = text[pos:].lstrip()
            if not tail.startswith(fmt.close):
                return ParsedReply(None, calls)
            pos = len(text) - len(tail) + len(fmt.close)


class CallStream:
    """Turns successive views of a growing reply into what is new: text, and per call its name
    (once) and the next piece of its arguments."""

    def __init__(self, fmt: CallFormat = OWN_FORMAT, may_be_text: bool = True) -> None:
        self.fmt, self.may_be_text = fmt, may_be_text
        self.text_sent = 0
        self.sent: list[tuple[str, int]] = []  # per call: name, arguments characters sent

    def update(self, text: str) -> tuple[str, list[tuple[int, str | None, str]]]:
        """(new text, [(call index, its name if new else None, new arguments text)])."""
        r = parse_reply(text, self.fmt, self.may_be_text)
        if r.text is not None:
            new, self.text_sent = r.text[self.text_sent :], len(r.text)
            return new, []
        out: list[tuple[int, str | None, str]] = []
        for i, c in enumerate(r.calls):
            if i == len(self.sent):
                self.sent.append((c.name, 0))
                out.append((i, c.name, ""))
            name, n = self.sent[i]
            if len(c.arguments) > n:
                out.append((i, None, c.arguments[n:]))
                self.sent[i] = (name, len(c.arguments))
        return "", out


__all__ = ["OWN_FORMAT", "CallFormat", "CallStream", "ParsedCall", "ParsedReply", "parse_reply"]
