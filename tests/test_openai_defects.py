"""The OpenAI API's silent defects of issue #51 (and the 500s of #53 point 8), each checked for its
effect with the official `openai` client (or raw HTTP where a client would not send the shape)
against a real `symphony serve` on loopback (one server for the module)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.conftest import OPENAI_TOKEN

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {OPENAI_TOKEN}"}, timeout=120)


def test_explicit_null_max_completion_tokens_leaves_max_tokens_in_force(openai_server):
    body = {
        "model": "symphony",
        "messages": [{"role": "user", "content": "Count from one to fifty."}],
        "max_tokens": 5,
        "max_completion_tokens": None,
        "temperature": 0,
        "top_p": None,
        "n": None,
        "stop": None,
        "seed": None,
    }
    r = post(openai_server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 5 and r.json()["choices"][0]["finish_reason"] == "length"
    c = post(
        openai_server, "/v1/completions", {"model": "symphony", "prompt": "One, two,", "max_tokens": 3, "echo": None}
    )
    assert c.status_code == 200 and c.json()["usage"]["completion_tokens"] == 3, c.text


def test_a_tool_call_cut_short_is_reported_as_cut_not_as_text(oc):
    r = oc.chat.completions.create(
        model="symphony", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=6, temperature=0
    )
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert not c.message.content, f"half a call passed off as text: {c.message.content!r}"
    # what was generated of the call is the call's, as the stream shows it
    if c.message.tool_calls:
        assert c.message.tool_calls[0].function.name in ("", "get_weather")
    chunks = list(
        oc.chat.completions.create(
            model="symphony",
            messages=ASK,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=6,
            temperature=0,
            stream=True,
        )
    )
    assert not "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["length"]


def test_completions_skip_special_tokens_by_default(oc):
    # A chat turn left open: the model goes on with `<|im_start|>assistant`, a special token.
    prompt = "<|im_start|>user\nSay hi.<|im_end|>\n"
    kw = {"model": "symphony", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    raw_kw = {"skip_special_tokens": False, "spaces_between_special_tokens": False}
    raw = oc.completions.create(extra_body=raw_kw, **kw).choices[0].text
    assert raw.startswith("<|im_start|>"), raw
    text = oc.completions.create(**kw).choices[0].text
    assert "<|im_start|>" not in text and text == raw[len("<|im_start|>") :]
    streamed = "".join(c.choices[0].text for c in oc.completions.create(stream=True, **kw))
    assert streamed == text
    spaced = (
        oc.completions.create(extra_body={"skip_special_tokens": False, "spaces_between_special_tokens": True}, **kw)
        .choices[0]
        .text
    )
    assert spaced.startswith("<|im_start|> ") or spaced == raw, spaced  # spaces only where a special token meets text


def test_cached_tokens_come_from_the_prefix_cache(oc):
    msgs = [{"role": "user", "content": "Cached tokens test. " + "Lorem ipsum dolor sit amet. " * 12}]
    first = oc.chat.completions.create(model="symphony", messages=msgs, max_tokens=1, temperature=0)
    again = oc.chat.completions.create(model="symphony", messages=msgs, max_tokens=1, temperature=0)
    # the first request may find only the template's system prompt cached; the second finds the whole prompt
    assert first.usage.prompt_tokens_details.cached_tokens < 48
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert again.usage.prompt_tokens - 16 <= cached < again.usage.prompt_tokens, again.usage
    other = "Responses cache test. " + "Sed ut perspiciatis unde omnis. " * 12
    r1 = oc.responses.create(model="symphony", input=other, max_output_tokens=1)
    r2 = oc.responses.create(model="symphony", input=other, max_output_tokens=1)
    assert r1.usage.input_tokens_details.cached_tokens < 48
    assert r2.usage.input_tokens - 16 <= r2.usage.input_tokens_details.cached_tokens < r2.usage.input_tokens


def test_logprob_bytes_reassemble_multibyte_text_exactly(oc):
    schema = {"type": "object", "properties": {"w": {"const": "日本語です"}}, "required": ["w"]}
    r = oc.chat.completions.create(
        model="symphony",
        messages=[{"role": "user", "content": "Japanese word as JSON."}],
        max_tokens=30,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    )
    c = r.choices[0]
    assert "日本語です" in c.message.content
    content = c.logprobs.content
    assert bytes(b for t in content for b in t.bytes).decode() == c.message.content
    assert any(t.token == "\ufffd" or len(t.bytes) != len(t.token.encode()) for t in content), "no split character"


def test_a_message_name_the_template_cannot_render_is_refused(oc):
    msgs = [{"role": "user", "name": "alice", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError) as e:
        oc.chat.completions.create(model="symphony", messages=msgs, max_tokens=2)
    assert e.value.body["param"] == "messages[0].name", e.value.body


def test_a_template_that_renders_name_gets_it():
    from symphony_core.server.openai.messages import chat_messages

    out = chat_messages([{"role": "user", "name": "alice", "content": "Hi"}], names=True)
    assert out == [{"role": "user", "name": "alice", "content": "Hi"}]


def test_malformed_tool_calls_and_recursive_schemas_are_400(openai_server):
    base = {"model": "symphony", "max_tokens": 2}
    bad_calls = [
        ["not an object"],
        [{"type": "function"}],
        [{"type": "function", "function": {"name": 3, "arguments": "{}"}}],
        [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}],
        [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}],
    ]
    for calls in bad_calls:
        msgs = [*ASK, {"role": "assistant", "content": None, "tool_calls": calls}]
        r = post(openai_server, "/v1/chat/completions", {**base, "messages": msgs})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("messages"), (calls, r.text)
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}}
    r = post(openai_server, "/v1/chat/completions", {**base, "messages": ASK, "response_format": rf})
    assert r.status_code == 400 and "response_format" in r.json()["error"]["param"], r.text
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}]
    r = post(
        openai_server, "/v1/chat/completions", {**base, "messages": ASK, "tools": tools, "tool_choice": "required"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert json.loads(post(openai_server, "/v1/chat/completions", {**base, "messages": ASK}).text)["choices"]
