"""Tool calls: `tools` / `tool_choice` parsing, the prompt that lists the tools, the grammar
that makes a call's arguments valid under the tool's JSON schema, and reading a call back.

A call is written `{"name": ..., "arguments": {...}}`. With `tool_choice` "required" or a named
function the whole reply is such an object (a JSON-schema grammar: `anyOf` one object per tool,
`name` a constant, `arguments` the tool's `parameters`). With "auto" the reply is either free
text or `<tool_call>` followed by that object (a Lark grammar with an inline `%json` rule).
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


def call_schema(tools: list[dict], choice: ToolChoice) -> dict:
    """The JSON schema of one call to any allowed tool."""
    allowed = [t for t in tools if choice.mode != "function" or t["name"] == choice.name]
    alts = [
        {
            "type": "object",
            "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in allowed
    ]
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def auto_lark(tools: list[dict]) -> str:
    """Lark source for "auto": free text (not starting with '<'), or the marker and a call."""
    schema = json.dumps(call_schema(tools, ToolChoice("auto")))
    return f'start: call | text\ncall: "{CALL_MARKER}" body\nbody: %json {schema}\ntext: /[^<][\\s\\S]*/\n'


def tools_prompt(tools: list[dict], choice: ToolChoice) -> str:
    """The system text that tells the model what it may call and how."""
    lines = ["You can call these tools (JSON schema of the arguments after each name):"]
    for t in tools:
        if choice.mode == "function" and t["name"] != choice.name:
            continue
        desc = f" — {t['description']}" if t["description"] else ""
        lines.append(f"- {t['name']}{desc}: {json.dumps(t['parameters'])}")
    how = '{"name": <tool name>, "arguments": {...}}'
    if choice.mode == "auto":
        lines.append(f"To call a tool, reply with {CALL_MARKER} and then {how}; otherwise reply with text.")
    else:
        lines.append(f"Reply with a tool call: {how}.")
    return "\n".join(lines)


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it


def read_tool_call(text: str, choice: ToolChoice) -> ToolCall | None:
    """The call in a finished reply, or None when the reply is text (or the call was cut short)."""
    if choice.mode == "none":
        return None
    body = text
    if choice.mode == "auto":
        if not text.startswith(CALL_MARKER):
            return None
        body = text[len(CALL_MARKER) :]
    try:
        obj = json.loads(body)
    except ValueError:
        return None  # max_tokens ran out inside the call
    return ToolCall(obj["name"], json.dumps(obj["arguments"]))


def render_tool_calls(calls: list[dict]) -> str:
    """An assistant message's earlier `tool_calls`, as the text the model would have written."""
    parts = []
    for c in calls:
        fn = c.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            raise _bad("messages: a tool call's function.arguments is not JSON", "messages") from None
        parts.append(CALL_MARKER + json.dumps({"name": fn.get("name"), "arguments": args}))
    return "".join(parts)
