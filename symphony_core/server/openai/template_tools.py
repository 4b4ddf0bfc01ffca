"""Tool calls in the model's own format, when its chat template has tools.

A template that renders `tools` (as `apply_chat_template(tools=...)` passes them) and writes calls
as `<tool_call>` … `</tool_call>` (the Hermes / Qwen convention) is used as is: the tools go to the
template, earlier calls and tool results go to it as structured messages, and the reply's calls
are read in that format (tool_parse.py, `HERMES`). Any other template gets Symphony's own format
(tools.py: a system prompt and `<tool_call>{...}`).
"""

from __future__ import annotations

from ...errors import PredError
from ..validate import BadRequest
from .tool_parse import OWN_FORMAT, CallFormat

HERMES = CallFormat(open="<tool_call>", close="</tool_call>")


def call_format(template_source: str | None) -> CallFormat:
    """The format the model writes calls in: the template's own when it has tools, else ours."""
    src = template_source or ""
    if "tools" in src and HERMES.open in src and HERMES.close in src:
        return HERMES
    return OWN_FORMAT


def render_with_tools(tokenizer, messages: list[dict], tools: list[dict]) -> str:
    """The prompt, rendered by the model's template with `tools` (OpenAI's tool objects), as
    `apply_chat_template(tools=...)` renders it (`Tokenizer.chat_template`)."""
    openai_tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
        }
        for t in tools
    ]
    try:
        return tokenizer.chat_template(messages, True, tools=openai_tools)
    except PredError as e:  # a template error on these messages is the request's
        raise BadRequest(400, f"the chat template cannot render these messages: {e}", param="messages") from None
