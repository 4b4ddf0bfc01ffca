"""Chat messages (and the Responses API's `input`) -> the `{"role", "content"}` list the model's
chat template renders. Text only; a tool's result and an earlier call become text turns. A
message's `name` is passed to the template when the template renders names, and refused (400)
when it does not: it is never dropped."""

from __future__ import annotations

import re
from typing import Any

from ..validate import BadRequest
from .tools import ToolChoice, checked_calls, render_tool_calls, tools_prompt

_ROLES = ("system", "user", "assistant", "developer", "tool")
_MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
_NAME_IN_TEMPLATE = re.compile(r"""\.name\b|\[\s*['"]name['"]\s*\]""")


def template_renders_names(template_source: str | None) -> bool:
    """Whether a chat template reads a message's `name`."""
    return bool(template_source) and _NAME_IN_TEMPLATE.search(template_source or "") is not None


def _bad(msg: str, param: str) -> BadRequest:
    return BadRequest(400, msg, param=param)


def _text(content: Any, where: str, param: str, part_types: tuple[str, ...]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") not in part_types or not isinstance(p.get("text"), str):
                raise _bad(f"{where}.content: only text parts ({', '.join(part_types)}) are supported", param)
            parts.append(p["text"])
        return "".join(parts)
    raise _bad(f"{where}.content must be a string or a list of text parts", param)


def chat_messages(
    msgs: list,
    tools: list[dict] | None = None,
    choice: ToolChoice | None = None,
    names: bool = False,
    template_tools: bool = False,
) -> list[dict]:
    """`names`: the template renders a message's `name` (else a `name` is refused).
    `template_tools`: the template renders tools, earlier calls and tool results itself."""
    out = []
    for i, m in enumerate(msgs):
        at = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"{at} must be an object with a 'role' string", "messages")
        role = m["role"]
        if role not in _ROLES:
            raise _bad(f"{at}.role {role!r} is not one of {', '.join(_ROLES)}", "messages")
        unknown = sorted(set(m) - _MESSAGE_FIELDS)
        if unknown:
            raise _bad(f"{at}: unknown field(s) {', '.join(map(repr, unknown))}", f"{at}.{unknown[0]}")
        text = _text(m.get("content"), at, "messages", ("text",))
        if m.get("refusal") is not None:
            raise _bad(f"{at}.refusal: an earlier refusal cannot be rendered for this model", f"{at}.refusal")
        if m.get("tool_calls") is not None:
            if role != "assistant" or not isinstance(m["tool_calls"], list):
                raise _bad(f"{at}.tool_calls must be a list on an assistant message", at)
            if not template_tools:
                text += render_tool_calls(m["tool_calls"], at)
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text}
        if template_tools and m.get("tool_calls") is not None:
            msg["tool_calls"] = [
                {"id": c.get("id"), "type": "function", "function": {"name": c["function"]["name"], "arguments": a}}
                for c, a in checked_calls(m["tool_calls"], at)
            ]
        if template_tools and isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name") is not None:
            if not isinstance(m["name"], str):
                raise _bad(f"{at}.name must be a string", f"{at}.name")
            if not names:
                raise _bad(
                    f"{at}.name: this model's chat template does not render a message's name; "
                    "put it in the content instead",
                    f"{at}.name",
                )
            msg["name"] = m["name"]
        out.append(msg)
    if not out:
        raise _bad("messages must not be empty", "messages")
    if tools and choice is not None and choice.active and not template_tools:
        out = _with_system(out, tools_prompt(tools, choice))
    return out


def _with_system(msgs: list[dict], text: str) -> list[dict]:
    if msgs[0]["role"] == "system":
        return [{"role": "system", "content": f"{msgs[0]['content']}\n\n{text}"}, *msgs[1:]]
    return [{"role": "system", "content": text}, *msgs]


def responses_input(inp: str | list, instructions: str | None, history: list[dict] | None = None) -> list[dict]:
    """The Responses API's `input` (a string, or a list of message items) as chat messages, after
    `history` (a stored conversation); `instructions` as the system message. `function_call` /
    `function_call_output` items become an assistant's `tool_calls` / a tool message."""
    if isinstance(inp, str):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": inp}]
    else:
        msgs = []
        for i, item in enumerate(inp):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind in ("function_call", "function_call_output"):
                _tool_item(msgs, item, i)
                continue
            if kind != "message":
                raise _bad(
                    f"input[{i}]: only message, function_call and function_call_output items are supported", "input"
                )
            role = item.get("role")
            if role not in ("system", "user", "assistant", "developer"):
                raise _bad(f"input[{i}].role must be system, user, assistant or developer, got {role!r}", "input")
            text = _text(item.get("content"), f"input[{i}]", "input", ("input_text", "output_text"))
            msgs.append({"role": "system" if role == "developer" else role, "content": text})
        if not msgs:
            raise _bad("input must not be empty", "input")
    msgs = [*(history or []), *msgs]
    called: set[str] = set()
    for m in msgs:
        called.update(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool" and m.get("tool_call_id") not in called:
            raise _bad(f"input: no function_call with call_id {m['tool_call_id']!r} before its output", "input")
    return _with_system(msgs, instructions) if instructions else msgs


def _tool_item(msgs: list[dict], item: dict, i: int) -> None:
    """A `function_call` item joins the assistant turn before it (as chat `tool_calls`); a
    `function_call_output` becomes a tool message."""
    for f in ("call_id", *(("name", "arguments") if item["type"] == "function_call" else ("output",))):
        if not isinstance(item.get(f), str):
            raise _bad(f"input[{i}].{f} must be a string", f"input[{i}].{f}")
    if item["type"] == "function_call_output":
        msgs.append({"role": "tool", "content": item["output"], "tool_call_id": item["call_id"]})
        return
    call = {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }
    checked_calls([call], f"input[{i}]")
    if msgs and msgs[-1]["role"] == "assistant" and "tool_calls" in msgs[-1]:
        msgs[-1]["tool_calls"].append(call)
    else:
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
