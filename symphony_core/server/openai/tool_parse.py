"""Reading tool calls out of a reply as it grows, so a stream can send each call's name as soon as
it is written and its arguments piece by piece (the way vLLM's tool parsers stream), and a reply
cut short says which call was cut.

A reply with tools is either text or one or more calls, written the way `CallFormat` says:

- "tagged": `OPEN {"name": ..., "arguments": {...}} CLOSE` per call; our own format (OPEN
  `<tool_call>`, no CLOSE) and a Hermes / Qwen template's (`<tool_call>` ... `</tool_call>`);
- "llama3_json": Llama 3.1+ JSON calls (tool_parse_llama.py);
- "mistral" / "mistral_args": Mistral's `[TOOL_CALLS]` calls (tool_parse_mistral.py).

The request's grammar (tool_grammar.py) keeps generation to that shape, so the parsers mostly
find where each part ends; what they do with a malformed reply is said in each parser.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass

from .tool_json import ParsedCall, ParsedReply, read_call
from .tool_parse_llama import parse_llama
from .tool_parse_mistral import parse_mistral, parse_mistral_args

_ID_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class CallFormat:
    kind: str = "tagged"  # "tagged" | "llama3_json" | "mistral" | "mistral_args"
    open: str = "<tool_call>"  # what starts a call (llama3_json: the optional <|python_tag|>)
    close: str = ""  # what ends one ("tagged"), or separates its name and arguments ("mistral_args")
    args_key: str = "arguments"  # the key a call object's arguments go under when generated
    markers: tuple[str, ...] = ()  # special tokens of the format, kept in the text the parser reads
    id_length: int = 0  # the template takes call ids of exactly this many letters and digits (0: any)
    lead: str = ""  # what the template writes between `open` and a list of calls ("mistral": "[" or " [")
    separators: tuple[str, str] = (",", ":")  # a generated call's JSON item and key separators

    def call_id(self, seed: str) -> str:
        """A call id this format's template accepts: `seed` itself, or one made from it (the same
        seed always gives the same id, so a call and its result still match)."""
        n = self.id_length
        if not n or (len(seed) == n and seed.isascii() and seed.isalnum()):
            return seed
        digest = hashlib.sha256(seed.encode()).digest()
        return "".join(_ID_ALPHABET[b % len(_ID_ALPHABET)] for b in digest[:n])


OWN_FORMAT = CallFormat()


def _parse_tagged(text: str, fmt: CallFormat, may_be_text: bool) -> ParsedReply:
    if may_be_text and text and not fmt.open.startswith(text[: len(fmt.open)]):
        return ParsedReply(text=text)
    calls: list[ParsedCall] = []
    pos = 0
    while True:
        rest = text[pos:].lstrip()
        pos = len(text) - len(rest)
        if not rest.startswith(fmt.open):
            return ParsedReply(None, calls)  # nothing more yet (or a marker half written)
        r = read_call(text, pos + len(fmt.open))
        if r.bad:
            return ParsedReply(text)
        if r.call is not None:
            calls.append(r.call)
        if r.end is None:
            return ParsedReply(None, calls)
        pos = r.end
        if fmt.close:
            tail = text[pos:].lstrip()
            if not tail.startswith(fmt.close):
                return ParsedReply(None, calls)
            pos = len(text) - len(tail) + len(fmt.close)


def parse_reply(text: str, fmt: CallFormat = OWN_FORMAT, may_be_text: bool = True) -> ParsedReply:
    """What `text` (a whole reply, or the start of one) holds: text, or calls so far."""
    if fmt.kind == "llama3_json":
        return parse_llama(text, may_be_text, fmt.open)
    if fmt.kind == "mistral":
        return parse_mistral(text, may_be_text, fmt.open)
    if fmt.kind == "mistral_args":
        return parse_mistral_args(text, may_be_text, fmt.open, fmt.close)
    return _parse_tagged(text, fmt, may_be_text)


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
