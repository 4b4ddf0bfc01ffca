"""Reading one tool call's JSON object (`{"name": ..., "arguments": {...}}`, or Llama's
`"parameters"`) at a position of a reply that may still be growing, and telling a reply cut short
(the JSON so far is the start of a valid value) from one that is malformed (it is not).

The call formats (tool_parse.py and the per-family parsers) find where each call starts; this
reads the call itself, name first, so a stream can send the name before the arguments are done.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

ARG_KEYS = ("arguments", "parameters")
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_DECODER = json.JSONDecoder()
_TOKEN = re.compile(
    r'\s*(?:("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")'  # 1: a whole string
    r"|(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)"  # 2: a number
    r"|(true|false|null)|([{}\[\]:,]))"  # 3: a literal, 4: punctuation
)
_PARTIAL_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*(?:\\u[0-9a-fA-F]{0,3}|\\)?')
_PARTIAL_SCALAR = re.compile(
    r"-?(?:0|[1-9]\d*)?(?:\.\d*)?(?:[eE][+-]?\d*)?|t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?|n(?:u(?:ll?)?)?"
)
_VALUE = ("value", "value_or_close")


@dataclass
class ParsedCall:
    name: str
    arguments: str  # the arguments' JSON text as written (all of it once `complete`)
    complete: bool


@dataclass
class ParsedReply:
    text: str | None  # the reply's text when it is text, else None
    calls: list[ParsedCall] = field(default_factory=list)


@dataclass
class Read:
    """One call object read at a position: `end` after it when whole; `call` None while its name
    is unwritten; `bad` when what is there cannot become a call."""

    call: ParsedCall | None = None
    end: int | None = None
    bad: bool = False


def value_end(s: str) -> int | None:
    """Where the JSON value at the start of `s` ends, or None while it is incomplete (or bad)."""
    try:
        v, end = _DECODER.raw_decode(s)
    except ValueError:
        return None
    if end == len(s) and not isinstance(v, (dict, list, str)):
        return None  # a number or literal may still grow
    return end


def json_prefix(s: str) -> bool:
    """Whether `s` is the start of some JSON value (possibly all of one): a cut, not an error."""
    stack: list[str] = []  # the open "{" and "["
    expect = "value"  # value | value_or_close | key | key_or_close | colon | comma
    pos = 0
    while s[pos:].strip():
        m = _TOKEN.match(s, pos)
        if m is None or (m.end() == len(s) and (m.group(2) or m.group(3))):  # the last token, cut
            rest = s[pos:].strip()
            if rest.startswith('"'):
                return expect in (*_VALUE, "key", "key_or_close") and _PARTIAL_STRING.fullmatch(rest) is not None
            return expect in _VALUE and _PARTIAL_SCALAR.fullmatch(rest) is not None
        pos = m.end()
        string, punct = m.group(1), m.group(4)
        if expect in ("key", "key_or_close"):
            if string is not None:
                expect = "colon"
            elif punct == "}" and expect == "key_or_close":
                stack.pop()
                expect = "comma"
            else:
                return False
        elif expect == "colon":
            if punct != ":":
                return False
            expect = "value"
        elif expect == "comma":
            if not stack or punct not in (",", "}" if stack[-1] == "{" else "]"):
                return False
            if punct == ",":
                expect = "key" if stack[-1] == "{" else "value"
            else:
                stack.pop()
        elif punct in ("{", "["):
            stack.append(punct)
            expect = "key_or_close" if punct == "{" else "value_or_close"
        elif punct == "]" and expect == "value_or_close":
            stack.pop()
            expect = "comma"
        elif punct is not None:
            return False
        else:
            expect = "comma"
        if not stack and expect == "comma":
            return not s[pos:].strip()
    return True


def _whole(obj: object) -> ParsedCall | None:
    """A call object read whole (its keys in any order), or None when it is not a call."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = next((obj[k] for k in ARG_KEYS if k in obj), None)
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], json.dumps(args), True)


def read_call(text: str, pos: int) -> Read:
    """The call object starting at `text[pos:]` (after blanks). Its arguments are an object; when
    "name" comes first they are read as written, piece by piece, else once the object is whole."""
    start = len(text) - len(text[pos:].lstrip())
    head = _HEAD.match(text, pos)
    if head is not None and text[head.end() : head.end() + 1] in ("{", ""):
        name = json.loads(head.group(1))
        at = head.end()
        end = value_end(text[at:])
        if end is None:
            return Read(ParsedCall(name, text[at:].rstrip(), False)) if json_prefix(text[at:]) else Read(bad=True)
        args = text[at : at + end]
        tail = text[at + end :].lstrip()
        if tail.startswith("}"):
            return Read(ParsedCall(name, args, True), len(text) - len(tail) + 1)
        whole = value_end(text[start:])  # more keys after the arguments (an "id"): read on to the end
        if whole is None:
            return Read(ParsedCall(name, args, False)) if json_prefix(text[start:]) else Read(bad=True)
        if _whole(json.loads(text[start : start + whole])) is None:
            return Read(bad=True)
        return Read(ParsedCall(name, args, True), start + whole)
    end = value_end(text[start:])
    if end is None:
        return Read() if json_prefix(text[start:]) else Read(bad=True)
    call = _whole(json.loads(text[start : start + end]))
    return Read(bad=True) if call is None else Read(call, start + end)


def read_call_list(text: str, pos: int, sep: str | None, close: str | None = None) -> ParsedReply:
    """The call objects of `text` from `pos` on, separated by `sep` (None: one object alone) and ended
    by `close` (None: by the end of the text). A call that cannot be read, or anything else after a
    call, makes the whole reply text; a list cut short gives the calls so far."""
    calls: list[ParsedCall] = []
    while True:
        r = read_call(text, pos)
        if r.bad:
            return ParsedReply(text)
        if r.call is not None:
            calls.append(r.call)
        if r.end is None:
            return ParsedReply(None, calls)  # cut short (or still growing)
        rest = text[r.end :].lstrip()
        if not rest:
            return ParsedReply(None, calls)
        if sep is not None and rest.startswith(sep):
            pos = len(text) - len(rest) + len(sep)
            if not text[pos:].strip():
                return ParsedReply(None, calls)  # the next call has not started
            continue
        if close is not None and rest.startswith(close) and not rest[len(close) :].strip():
            return ParsedReply(None, calls)
        return ParsedReply(text)


__all__ = ["ARG_KEYS", "ParsedCall", "ParsedReply", "Read", "json_prefix", "read_call", "read_call_list", "value_end"]
