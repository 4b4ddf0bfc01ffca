"""Tool calls in the model's own format, when its chat template has tools.

A template that renders `tools` (as `apply_chat_template(tools=...)` passes them) in one of the
formats below is used as is: the tools go to the template, earlier calls and tool results go to
it as structured messages (an assistant's `tool_calls`, `tool` messages with `tool_call_id`), and
the reply's calls are read in that format (tool_parse.py). The formats, as vLLM's tool parsers
name them, and how a template is recognised (in this order):

- `hermes`: `<tool_call>` and `</tool_call>` in the template (Hermes, Qwen 2.5 / 3);
- `mistral`: `[TOOL_CALLS]` (Mistral v0.3, Nemo, Small); with `[ARGS]` the newer
  `[TOOL_CALLS]name[ARGS]{...}` form. Call ids go to the template as the 9 letters and digits
  it demands (`CallFormat.call_id`; any id the client sends is mapped to one, the same each time);
- `llama3_json`: a Llama 3 header template (`<|start_header_id|>`) with an `ipython` role and
  calls written as `"parameters"` JSON or after `<|python_tag|>` (Llama 3.1, 3.2, 3.3).

Any other template gets Symphony's own format (tools.py: a system prompt and `<tool_call>{...}`).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import PredError
from ..validate import BadRequest
from .tool_parse import OWN_FORMAT, CallFormat
from .tool_parse_llama import PYTHON_TAG
from .tool_parse_mistral import ARGS, TOOL_CALLS

_TOJSON = (", ", ": ")  # calls are generated with the spacing the template's `tojson` writes them in
HERMES = CallFormat("tagged", open="<tool_call>", close="</tool_call>", separators=_TOJSON)
LLAMA3_JSON = CallFormat(
    "llama3_json", open=PYTHON_TAG, args_key="parameters", markers=(PYTHON_TAG,), separators=_TOJSON
)
MISTRAL = CallFormat("mistral", open=TOOL_CALLS, markers=(TOOL_CALLS,), id_length=9, lead=" [", separators=_TOJSON)
MISTRAL_ARGS = CallFormat(
    "mistral_args", open=TOOL_CALLS, close=ARGS, markers=(TOOL_CALLS, ARGS), id_length=9, separators=_TOJSON
)


def call_format(template_source: str | None) -> CallFormat:
    """The format the model writes calls in: the template's own when it has tools, else ours."""
    src = template_source or ""
    if "tools" not in src:
        return OWN_FORMAT
    if HERMES.open in src and HERMES.close in src:
        return HERMES
    if TOOL_CALLS in src:
        if ARGS in src:
            return MISTRAL_ARGS
        return MISTRAL if f"{TOOL_CALLS} [" in src else replace(MISTRAL, lead="[")  # Nemo: no space
    if "<|start_header_id|>" in src and "ipython" in src and ('"parameters"' in src or PYTHON_TAG in src):
        return LLAMA3_JSON
    return OWN_FORMAT


def _with_ids(messages: list[dict], fmt: CallFormat) -> list[dict]:
    """The messages with every call id as the template accepts it (an assistant's `tool_calls`
    and the `tool_call_id` of a result mapped alike, so they still match)."""
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "id": fmt.call_id(c.get("id") or f"{i}_{k}")} for k, c in enumerate(m["tool_calls"])
            ]
        if isinstance(m.get("tool_call_id"), str):
            m["tool_call_id"] = fmt.call_id(m["tool_call_id"])
        out.append(m)
    return out


def render_with_tools(
    tokenizer, messages: list[dict], tools: list[dict], fmt: CallFormat, add_generation_prompt: bool = True
) -> str:
    """The prompt, rendered by the model's template with `tools` (OpenAI's tool objects; none when
    empty), as `apply_chat_template(tools=...)` renders it (`Tokenizer.chat_template`)."""
    openai_tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
        }
        for t in tools
    ]
    if fmt.id_length:
        messages = _with_ids(messages, fmt)
    try:
        return tokenizer.chat_template(messages, add_generation_prompt, tools=openai_tools or None)
    except PredError as e:  # a template error on these messages is the request's
        raise BadRequest(400, f"the chat template cannot render these messages: {e}", param="messages") from None


def chat_prompt(engine, messages: list[dict], tools: list[dict], fmt: CallFormat) -> str:
    """The request's prompt: through the template's own tool format when it has one (`tools` the
    ones the reply may call, none with tool_choice "none"), else the plain chat template."""
    if fmt is OWN_FORMAT:
        return engine.chat_template(messages, True)
    return render_with_tools(engine.tokenizer, messages, tools, fmt)
