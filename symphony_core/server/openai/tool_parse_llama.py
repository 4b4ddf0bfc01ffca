"""Llama 3.1 / 3.2 / 3.3 tool calls (vLLM's `llama3_json`): the reply is one JSON object
`{"name": ..., "parameters": {...}}` (`"arguments"` is read too), optionally after the
`<|python_tag|>` special token; several calls are separated by `;`. A reply that starts with
neither `{` nor the tag is text. Anything after a call but another call makes the whole reply
text (as vLLM's parser falls back to content), and so does a call object that cannot be read.
"""

from __future__ import annotations

from .tool_json import ParsedCall, ParsedReply, read_call

PYTHON_TAG = "<|python_tag|>"


def parse_llama(text: str, may_be_text: bool = True, tag: str = PYTHON_TAG) -> ParsedReply:
    """What `text` (a whole reply, or the start of one) holds: text, or calls so far."""
    if tag.startswith(text):
        return ParsedReply(None)  # nothing yet, or the tag half written
    starts_call = text.startswith(tag) or text.startswith("{")
    if may_be_text and not starts_call:
        return ParsedReply(text)
    pos = len(tag) if text.startswith(tag) else 0
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
        if not rest.startswith(";"):
            return ParsedReply(text)
        pos = len(text) - len(rest) + 1
        if not text[pos:].strip():
            return ParsedReply(None, calls)  # the next call has not started


__all__ = ["PYTHON_TAG", "parse_llama"]
