"""Tool calls in Llama 3.1's and Mistral v0.3's own formats (issue #51), end to end: `symphony serve` on
a tiny random-weight model of each family (random_models.py, its chat template the real one's tool
branches), the official `openai` client on loopback.

Random weights write random text, so what the model writes is forced the way a client can force it:
`tool_choice` "required" / named (the grammar writes the call in the model's format, the model picks
the arguments), and under "auto" `logit_bias` on the token that starts a call (Mistral's
`[TOOL_CALLS]`, Llama's `{`) or on a word. The proof that the call was written in the model's own
format is the reply's own tokens (logprobs), and that the tools and the history went through the
model's template is the prompt's token count, equal to transformers' `apply_chat_template`."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from symphony_core.model.random_models import make_random_model
from tests.server_harness import Server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 6}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# what starts a call in each family's format, and where its template puts the tools
CALL_START = {"llama": "{", "mistral": "[TOOL_CALLS]"}


@pytest.fixture(scope="module", params=["llama", "mistral"])
def fam(request, tmp_path_factory):
    from transformers import AutoTokenizer

    d = make_random_model(request.param, tmp_path_factory.mktemp(request.param))
    cfg = json.loads((d / "config.json").read_text())  # Llama's template alone is ~600 of this tokenizer's
    cfg["max_position_embeddings"] = max(cfg["max_position_embeddings"], 2048)  # tokens; the tiny model has 512
    (d / "config.json").write_text(json.dumps(cfg))
    server = Server([], extra=["--model", str(d)], num_pages=256)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    yield request.param, client, AutoTokenizer.from_pretrained(str(d))
    assert server.stop() == 0, server.log()[-3000:]


def prompt_text(client, messages, tools=None) -> str:
    """The prompt the server renders for a conversation, special tokens and all (/tokenize, /detokenize)."""
    url = str(client.base_url).removesuffix("/v1/")
    ids = httpx.post(url + "/tokenize", json={"messages": messages, "tools": tools or []}).json()["tokens"]
    return httpx.post(url + "/detokenize", json={"tokens": ids}).json()["prompt"]


def hf_prompt_tokens(tok, messages, tools) -> int:
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return len(tok(text, add_special_tokens=False).input_ids)


def chat(client, **kw):
    return client.chat.completions.create(model="symphony", messages=kw.pop("messages", ASK), temperature=0, **kw)


def streamed(client, **kw) -> tuple[list[str], list, list[str]]:
    """(content pieces, tool-call deltas, finish reasons) of a streamed chat completion."""
    text, calls, finish = [], [], []
    for ch in chat(client, stream=True, **kw):
        for c in ch.choices:
            if c.delta.content:
                text.append(c.delta.content)
            calls.extend(c.delta.tool_calls or [])
            if c.finish_reason:
                finish.append(c.finish_reason)
    return text, calls, finish


@pytest.mark.slow  # with the model's making and the server's start (~20 s)
def test_calls_in_the_models_own_format_streamed_and_not(fam):
    family, client, tok = fam
    kw = {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 80}
    shown = prompt_text(client, ASK, TOOLS)
    assert "You can call these tools" not in shown and "<tool_call>" not in shown  # not Symphony's own format
    if family == "llama":  # in the first user turn, after the template's instructions, as indented JSON
        assert shown.index("Given the following functions") < shown.index('"name": "get_weather"')
        assert shown.index('"name": "get_time"') < shown.index("What is the weather in Paris?<|eot_id|>")
    else:  # before the last user turn, inside [AVAILABLE_TOOLS]
        assert '[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather", "description": ' in shown
        assert shown.index("[/AVAILABLE_TOOLS]") < shown.index("[INST] What is the weather in Paris?[/INST]")
    r = chat(client, logprobs=True, **kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    # the tools reached the model through its own template: the prompt is transformers' rendering of them
    assert r.usage.prompt_tokens == hf_prompt_tokens(tok, ASK, TOOLS)
    written = "".join(t.token for t in c.logprobs.content)
    assert written.startswith(CALL_START[family]), written  # the model wrote the call its own way
    (call,) = c.message.tool_calls
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    assert set(args) == set(WEATHER["required"] if call.function.name == "get_weather" else TIME["required"])
    if family == "mistral":
        assert len(call.id) == 9 and call.id.isalnum()  # what Mistral's template takes back
    text, deltas, finish = streamed(client, **kw)
    assert not text and finish == ["tool_calls"]
    assert deltas[0].function.name == call.function.name and deltas[0].id and len(deltas) > 2
    assert family != "mistral" or (len(deltas[0].id) == 9 and deltas[0].id.isalnum())
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    # a named function is the one called
    named = chat(client, **{**kw, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert [t.function.name for t in named.choices[0].message.tool_calls] == ["get_time"]
    assert set(json.loads(named.choices[0].message.tool_calls[0].function.arguments)) == {"zone"}

    # the call and its result go back through the template; the prompt is transformers' rendering of them
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    hf_history = [*history[:1], {**history[1], "tool_calls": [{**call.model_dump(), "function": {
        "name": call.function.name, "arguments": args}}]}, history[2]]  # fmt: skip
    follow = chat(client, messages=history, tools=TOOLS, tool_choice="none", max_tokens=4)
    assert follow.choices[0].message.content and follow.choices[0].message.tool_calls is None
    assert follow.usage.prompt_tokens == hf_prompt_tokens(tok, hf_history, None)
    again = chat(client, messages=history, **kw)
    assert again.usage.prompt_tokens == hf_prompt_tokens(tok, hf_history, TOOLS)
    shown = prompt_text(client, history, TOOLS)
    if family == "llama":
        assert (
            f'{{"name": "{call.function.name}", "parameters": {json.dumps(args, ensure_ascii=False)}}}<|eot_id|>'
            in shown
        )
        assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18 degrees, sunny"<|eot_id|>' in shown
    else:
        assert f'"arguments": {json.dumps(args, ensure_ascii=False)}, "id": "{call.id}"}}]</s>' in shown
        assert f'[TOOL_RESULTS] {{"content": 18 degrees, sunny, "call_id": "{call.id}"}}[/TOOL_RESULTS]' in shown
        # an id of another shape (another provider's) is mapped to one the template takes, alike in call and result
        other = [history[0], {**history[1], "tool_calls": [{**history[1]["tool_calls"][0], "id": "call_abc_1"}]},
                 {**history[2], "tool_call_id": "call_abc_1"}]  # fmt: skip
        ids = re.findall(r'"(?:call_)?id": "(\w+)"', prompt_text(client, other, TOOLS))
        assert len(ids) == 2 and ids[0] == ids[1] and len(ids[0]) == 9 and ids[0] != "call_abc_1"


def test_auto_reads_a_call_or_text_and_streams_text_at_once(fam):
    family, client, tok = fam
    start = tok.convert_tokens_to_ids(CALL_START[family])
    kw = {"tools": TOOLS, "parallel_tool_calls": False, "max_tokens": 80}
    # the model starts a call under "auto": it comes back as a call, not as text
    r = chat(client, logit_bias={str(start): 100}, **kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None and len(c.message.tool_calls) == 1, c
    assert c.message.tool_calls[0].function.name in ("get_weather", "get_time")
    text, deltas, finish = streamed(client, logit_bias={str(start): 100}, **kw)
    assert not text and deltas[0].function.name == c.message.tool_calls[0].function.name
    assert "".join(d.function.arguments or "" for d in deltas) == c.message.tool_calls[0].function.arguments
    # plain text stays content, and is streamed as it is written, not held back to the end
    word = tok("Sunny", add_special_tokens=False).input_ids[0]
    plain = chat(client, logit_bias={str(word): 100}, **{**kw, "max_tokens": 8}).choices[0]
    assert plain.message.tool_calls is None and plain.message.content and plain.finish_reason == "length"
    text, deltas, finish = streamed(client, logit_bias={str(word): 100}, **{**kw, "max_tokens": 8})
    assert not deltas and len(text) >= 4 and "".join(text) == plain.message.content and finish == ["length"]


def test_a_call_cut_by_the_token_limit_is_a_cut_call(fam):
    family, client, _ = fam
    kw = {"tools": TOOLS, "tool_choice": "required", "max_tokens": 7}
    c = chat(client, **kw).choices[0]
    assert c.finish_reason == "length" and not c.message.content, c
    for t in c.message.tool_calls or []:
        assert t.function.name in ("get_weather", "get_time")
    text, _, finish = streamed(client, **kw)
    assert not text and finish == ["length"]


def test_responses_calls_and_their_output_go_through_the_template(fam):
    """The Responses API on the same machinery: a forced call in the model's format is a `function_call` item;
    its output, sent back by `call_id` (not a 9-character id: Mistral's template gets one mapped from it), is
    rendered by the template as transformers renders the same conversation."""
    family, client, tok = fam
    flat = [{"type": "function", **t["function"]} for t in TOOLS]
    forced = {"type": "function", "name": "get_weather"}
    first = client.responses.create(
        model="symphony", input=ASK, tools=flat, tool_choice=forced, max_output_tokens=60, temperature=0
    )
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees, sunny"}
    nxt = client.responses.create(
        model="symphony", previous_response_id=first.id, input=[result], tools=flat, max_output_tokens=4, temperature=0
    )
    call_id = call.call_id
    if family == "mistral":  # the id the template got, as the chat route renders the same call_id
        chat_form = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "18 degrees, sunny"}]  # fmt: skip
        (call_id,) = set(re.findall(r'"(?:call_)?id": "(\w+)"', prompt_text(client, chat_form, TOOLS)))
        assert len(call_id) == 9
    hf = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": json.loads(call.arguments)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18 degrees, sunny"},
    ]  # fmt: skip
    assert nxt.usage.input_tokens == hf_prompt_tokens(tok, hf, TOOLS)
