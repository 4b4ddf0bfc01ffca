"""The grammar of a reply when tools may be called: Lark (llguidance's dialect) with inline `%json`
rules, each call written in the request's `CallFormat` (tool_parse.py), its arguments valid under
the tool's `parameters` (tools.call_schema).

With `tool_choice` "required" the reply is calls (one without `parallel_tool_calls`), with a named
function one call; with "auto" it is free text or calls, the text unable to start the way a call
starts. A call's JSON is spaced as the format says (for a template's own format as its `tojson`
writes it, for Symphony's compact). A marker that is a special token of the model (Llama's
`<|python_tag|>`, Mistral's `[TOOL_CALLS]` and `[ARGS]`) is written as that token (`<[id]>`), as
the model writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from .tool_parse import OWN_FORMAT, CallFormat
from .tools import ToolChoice, call_schema


def _lit(s: str, token_ids: Mapping[str, int]) -> str:
    return f"<[{token_ids[s]}]>" if s in token_ids else json.dumps(s)


def tools_lark(
    tools: list[dict],
    choice: ToolChoice,
    parallel: bool,
    fmt: CallFormat = OWN_FORMAT,
    token_ids: Mapping[str, int] | None = None,
) -> str:
    """Lark source of a reply under `choice`. `token_ids`: the model's ids of `fmt.markers`."""
    ids = token_ids or {}
    several = parallel and choice.mode != "function"  # a named function: one call
    item, key = fmt.separators
    style = {"x-guidance": {"whitespace_flexible": False, "item_separator": item, "key_separator": key}}
    schema = {**call_schema(tools, choice, fmt.args_key), **style}
    body = f"body: %json {json.dumps(schema)}"
    if fmt.kind == "llama3_json":
        call = "call: body"
        more = ' ("; " call)*' if several else ""
        calls = f"calls: tag? call{more}\ntag: {_lit(fmt.open, ids)}"
        text = r"/[^{][\s\S]*/"
    elif fmt.kind == "mistral":
        call = "call: body"
        more = f" ({json.dumps(item)} call)*" if several else ""
        calls = f'calls: {_lit(fmt.open, ids)} {json.dumps(fmt.lead or "[")} call{more} "]"'
        text = r"/[\s\S]+/"
    elif fmt.kind == "mistral_args":  # the name outside the JSON: one alternative per tool
        allowed = [t for t in tools if choice.mode != "function" or t["name"] == choice.name]
        alts, rules = [], []
        for i, t in enumerate(allowed):
            args = {"$ref": f"#/$defs/tool{i}", "$defs": schema["$defs"], **style}
            alts.append(f"{_lit(fmt.open, ids)} {json.dumps(t['name'])} {_lit(fmt.close, ids)} args{i}")
            rules.append(f"args{i}: %json {json.dumps(args)}")
        call = "call: " + " | ".join(alts)
        body = "\n".join(rules)
        calls = "calls: call+" if several else "calls: call"
        text = r"/[\s\S]+/"
    elif fmt.close:  # tagged, one call per line: <tool_call>\n{...}\n</tool_call>
        call = f'call: "{fmt.open}\\n" body "\\n{fmt.close}"'
        calls = 'calls: call ("\\n" call)*' if several else "calls: call"
        text = r"/[^<][\s\S]*/"
    else:  # Symphony's own: <tool_call>{...}, one after another
        call = f'call: "{fmt.open}" body'
        calls = "calls: call+" if several else "calls: call"
        text = r"/[^<][\s\S]*/"
    start = "start: calls | text" if choice.mode == "auto" else "start: calls"
    return f"{start}\n{calls}\n{call}\n{body}\ntext: {text}\n"


__all__ = ["tools_lark"]
