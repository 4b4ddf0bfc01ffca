"""Tool calls: `tools` / `tool_choice` parsing, the prompt that lists the tools (Symphony's own
format), the JSON schema of one call, and a request's earlier calls checked (and written as text).

In Symphony's own format a call is written `<tool_call>{"name": ..., "arguments": {...}}`
(tool_parse.py reads it back, also while it grows; a model whose template has tools writes them
its own way, template_tools.py). `call_schema` is the JSON schema of one call: `anyOf` one object
per allowed tool, `name` a constant, the arguments the tool's `parameters`; tool_grammar.py makes
the request's grammar from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..validate import BadRequest, check_fields

CALL_MARKER = "<tool_call>"
_FUNCTION_FIELDS = {
    "name": ((str,), True),
    "description": ((str,), False),
    "parameters": ((dict,), False),
    "strict": ((bool, type(None)), False),
}


@dataclass
class ToolChoice:
    mode: str = "none"  # "none" | "auto" | "required" | "function"
    name: str | None = None  # the function, when mode is "function"

    @property
    def active(self) -> bool:
        return self.mode != "none"


def _bad(msg: str, param: str) -> BadRequest:
    return BadRequest(400, msg, param=param)


def parse_tools(tools: list | None) -> list[dict]:
    """`[{"type": "function", "function": {...}}]` -> `[{"name", "description", "parameters"}]`."""
    out: list[dict] = []
    for i, t in enumerate(tools or []):
        check_fields(t, {"type": ((str,), True), "function": ((dict,), True)}, f"tools[{i}]")
        if t["type"] != "function":
            raise _bad(f"tools[{i}].type must be 'function', got {t['type']!r}", "tools")
        f = check_fields(t["function"], _FUNCTION_FIELDS, f"tools[{i}].function")
        if any(o["name"] == f["name"] for o in out):
            raise _bad(f"tools[{i}]: a second tool named {f['name']!r}", "tools")
        out.append(
            {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": f.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return out


def parse_response_tools(tools: list | None) -> list[dict]:
    """The Responses API's flat function tools (`{"type": "function", "name", "parameters", ...}`)."""
    chat_form = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or t.get("type") != "function":
            got = t.get("type") if isinstance(t, dict) else t
            raise _bad(f"tools[{i}].type: only function tools are supported here, got {got!r}", f"tools[{i}].type")
        try:
            f = check_fields(t, {"type": ((str,), True), **_FUNCTION_FIELDS}, f"tools[{i}]")
        except BadRequest as e:  # a bad tool is a bad request (400), named down to its field
            raise _bad(str(e), f"tools[{i}].{e.param}") from None
        chat_form.append({"type": "function", "function": {k: v for k, v in f.items() if k != "type"}})
    return parse_tools(chat_form)


def response_tool_choice(choice: Any, tools: list[dict]) -> ToolChoice:
    """The Responses API's `tool_choice`: a mode, or `{"type": "function", "name": ...}`."""
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        check_fields(choice, {"type": ((str,), True), "name": ((str,), True)}, "tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return parse_tool_choice(choice, tools)


def parse_tool_choice(choice: Any, tools: list[dict]) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _bad(f"tool_choice must be 'none', 'auto', 'required' or a function, got {choice!r}", "tool_choice")
        if choice != "none" and not tools:
            raise _bad(f"tool_choice {choice!r} needs tools", "tool_choice")
        return ToolChoice(choice)
    check_fields(choice, {"type": ((str,), True), "function": ((dict,), True)}, "tool_choice")
    name = check_fields(choice["function"], {"name": ((str,), True)}, "tool_choice.function")["name"]
    if choice["type"] != "function" or all(t["name"] != name for t in tools):
        raise _bad(f"tool_choice names function {name!r}, which is not among the tools", "tool_choice")
    return ToolChoice("function", name)


def _rebase(node: Any, prefix: str) -> Any:
    """A tool's parameters schema with its `$ref`s pointed into the call schema's `$defs`."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                rest = v[1:]
                for head in ("/$defs/", "/definitions/"):
                    if rest.startswith(head):
                        rest = "_" + rest[len(head) :]
                out[k] = f"#/$defs/{prefix}{rest}" if rest else f"#/$defs/{prefix}"
            elif k in ("$defs", "definitions"):
                continue
            else:
                out[k] = _rebase(v, prefix)
        return out
    if isinstance(node, list):
        return [_rebase(v, prefix) for v in node]
    return node


def call_schema(tools: list[dict], choice: ToolChoice, args_key: str = "arguments") -> dict:
    """The JSON schema of one call to any allowed tool (its arguments under `args_key`). Each
    tool's parameters become `$defs` entries of their own, `tool<i>` (their `$defs` beside them),
    so a `$ref` in them means what it meant."""
    allowed = [t for t in tools if choice.mode != "function" or t["name"] == choice.name]
    defs: dict[str, Any] = {}
    alts = []
    for i, t in enumerate(allowed):
        params = t["parameters"]
        prefix = f"tool{i}"
        for key in ("$defs", "definitions"):
            for name, sub in (params.get(key) or {}).items() if isinstance(params, dict) else ():
                defs[f"{prefix}_{name}"] = _rebase(sub, prefix)
        defs[prefix] = _rebase(params, prefix)
        alts.append(
            {
                "type": "object",
                "properties": {"name": {"const": t["name"]}, args_key: {"$ref": f"#/$defs/{prefix}"}},
                "required": ["name", args_key],
                "additionalProperties": False,
            }
        )
    for name in defs:  # a `$ref` to itself and nothing else (`{"$ref": "#"}`) describes no value
        seen, at = set(), name
        while isinstance(defs.get(at), dict) and set(defs[at]) == {"$ref"}:
            if at in seen:
                raise _bad(f"tools: the parameters schema of a tool refers only to itself ({name})", "tools")
            seen.add(at)
            at = str(defs[at]["$ref"]).removeprefix("#/$defs/")
    root = alts[0] if len(alts) == 1 else {"anyOf": alts}
    return {**root, "$defs": defs}


def tools_prompt(tools: list[dict], choice: ToolChoice) -> str:
    """The system text that tells the model what it may call and how."""
    lines = ["You can call these tools (JSON schema of the arguments after each name):"]
    for t in tools:
        if choice.mode == "function" and t["name"] != choice.name:
            continue
        desc = f" — {t['description']}" if t["description"] else ""
        lines.append(f"- {t['name']}{desc}: {json.dumps(t['parameters'])}")
    how = f'{CALL_MARKER}{{"name": <tool name>, "arguments": {{...}}}}'
    if choice.mode == "auto":
        lines.append(f"To call a tool, reply with {how}; otherwise reply with text.")
    else:
        lines.append(f"Reply with a tool call: {how}.")
    return "\n".join(lines)


def checked_calls(calls: list, where: str) -> list[tuple[dict, dict]]:
    """An assistant message's earlier `tool_calls`, checked: (the call, its arguments parsed)."""
    out = []
    for k, c in enumerate(calls):
        at = f"{where}.tool_calls[{k}]"
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            raise _bad(f"{at} must be an object with a 'function' object", at)
        if c.get("type", "function") != "function":
            raise _bad(f"{at}.type must be 'function', got {c['type']!r}", at)
        fn = c["function"]
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise _bad(f"{at}.function needs 'name' and 'arguments' (JSON text), both strings", at)
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            raise _bad(f"{at}.function.arguments is not JSON: {fn['arguments']!r:.80}", at) from None
        if not isinstance(args, dict):
            raise _bad(f"{at}.function.arguments must be a JSON object, got {fn['arguments']!r:.80}", at)
        out.append((c, args))
    return out


def render_tool_calls(calls: list, where: str) -> str:
    """An assistant message's earlier `tool_calls`, as the text the model would have written."""
    return "".join(
        CALL_MARKER + json.dumps({"name": c["function"]["name"], "arguments": args})
        for c, args in checked_calls(calls, where)
    )
