"""Llama 3.1 / 3.2 / 3.3 tool calls (vLLM's `llama3_json`): the reply is one JSON object
`{"name": ..., "parameters": {...}}` (`"arguments"` is read too), optionally after the
`<|python_tag|>` special token; several calls are separated by `;`. A reply that starts with
neither `{` nor the tag is text. Anything after a call but another call makes the whole reply
text (as vLLM's parser falls back to content), and so does a call object that cannot be read.
"""

from __future__ import annotations

from .tool_json import ParsedReply, read_call_list

PYTHON_TAG = "<|python_tag|>"


def parse_llama(text: str, may_be_text: bool = True, tag: str = PYTHON_TAG) -> ParsedReply:
    """What `text` (a whole reply, or the start of one) holds: text, or calls so far."""
    if tag.startswith(text):
        return ParsedReply(None)  # nothing yet, or the tag half written
    starts_call = text.startswith(tag) or text.startswith("{")
    if may_be_text and not starts_call:
        return ParsedReply(text)
    pos = len(tag) if text.startswith(tag) else 0
    return read_call_list(text, pos, ";")


__all__ = ["PYTHON_TAG", "parse_llama"]
