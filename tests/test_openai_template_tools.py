"""Tool calls in the model's own format (issue #51): a chat template with tools that writes calls
as `<tool_call>` … `</tool_call>` (Hermes / Qwen style; given here with --chat-template) renders
the tools, the earlier calls and the tool results itself, and the reply's calls are read in that
format, streamed and not."""

from __future__ import annotations

import json
import os

import httpx
import openai
import pytest

from tests.server_harness import ROOT, Server

TEMPLATE = os.path.join(ROOT, "tests", "data", "hermes_tools_template.jinja")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    s = Server([{"name": "alice", "token": "tok-a"}], extra=["--chat-template", TEMPLATE])
    yield s
    assert s.stop() == 0, s.log()[-3000:]


def prompt_text(server, messages, tools=None) -> str:
    auth = {"Authorization": "Bearer tok-a"}
    body = {"messages": messages, **({"tools": tools} if tools else {})}
    ids = httpx.post(server.url + "/tokenize", json=body, headers=auth).json()["tokens"]
    return httpx.post(server.url + "/detokenize", json={"tokens": ids}, headers=auth).json()["prompt"]


@pytest.mark.slow
def test_the_templates_own_tool_format(server):
    oc = openai.OpenAI(base_url=server.url + "/v1", api_key="tok-a", max_retries=0)
    shown = prompt_text(server, ASK, TOOLS)
    assert "<tools>" in shown and '"name": "get_weather"' in shown and "You can call these tools" not in shown
    kw = {
        "model": "symphony",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,  # this small model would call again and again
        "max_tokens": 40,
    }
    r = oc.chat.completions.create(temperature=0, **kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
    deltas = [
        tc
        for ch in oc.chat.completions.create(temperature=0, stream=True, **kw)
        if ch.choices
        for tc in ch.choices[0].delta.tool_calls or []
    ]
    assert deltas[0].function.name == "get_weather" and len(deltas) > 2
    assert "".join(d.function.arguments or "" for d in deltas if d.index == 0) == call.function.arguments
    # the call and its result go back to the template as structured messages
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    shown = prompt_text(server, history, TOOLS)
    assert "<tool_response>\n18 degrees, sunny\n</tool_response>" in shown
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city"' in shown
    follow = oc.chat.completions.create(
        model="symphony", messages=history, tools=TOOLS, tool_choice="none", max_tokens=6, temperature=0
    )
    assert follow.choices[0].message.content
