"""Tool calls in the model's own format, when its chat template has tools.

A template that renders `tools` (as `apply_chat_template(tools=...)` passes them) and writes calls
as `<tool_call>` … `</tool_call>` (the Hermes / Qwen convention) is used as is: the tools go to the
template, earlier calls and tool results go to it as structured messages, and the reply's calls
are read in that format (tool_parse.py, `HERMES`). Any other template gets Symphony's own format
(tools.py: a system prompt and `<tool_call>{...}`).

The template is rendered here, in a sandboxed Jinja environment like the tokenizer's, because
`Tokenizer.chat_template` takes no `tools` yet.
"""

from __future__ import annotations

from functools import lru_cache

from ..validate import BadRequest
from .tool_parse import OWN_FORMAT, CallFormat

HERMES = CallFormat(open="<tool_call>", close="</tool_call>")


def call_format(template_source: str | None) -> CallFormat:
    """The format the model writes calls in: the template's own when it has tools, else ours."""
    src = template_source or ""
    if "tools" in src and HERMES.open in src and HERMES.close in src:
        return HERMES
    return OWN_FORMAT


@lru_cache(maxsize=4)
def _compiled(source: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise BadRequest(400, f"the chat template refused the messages: {message}", param="messages")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def render_with_tools(tokenizer, messages: list[dict], tools: list[dict]) -> str:
    """The prompt, rendered by the model's template with `tools` (OpenAI's tool objects)."""
    openai_tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
        }
        for t in tools
    ]
    try:
        return _compiled(tokenizer.template_source).render(
            messages=messages,
            tools=openai_tools,
            add_generation_prompt=True,
            bos_token=tokenizer.bos_token or "",
            eos_token=tokenizer.eos_token or "",
        )
    except BadRequest:
        raise
    except Exception as e:  # a template error on these messages is the request's
        raise BadRequest(400, f"the chat template cannot render these messages: {e}", param="messages") from None
