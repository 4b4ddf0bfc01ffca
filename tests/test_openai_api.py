"""The OpenAI-compatible chat and text completions, parameter by parameter, with the official
`openai` client against a real `symphony serve` on loopback (one server for the module).

Each parameter is checked streaming and not; greedy (temperature 0) runs are deterministic, so
a stream must reassemble into exactly the non-streaming reply. Token counts are kept tiny.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import jsonschema
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

MSGS = [{"role": "user", "content": "Name a colour."}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]


def chat(oc, **kw):
    return oc.chat.completions.create(model="symphony", **{"messages": MSGS, "max_tokens": 4, "temperature": 0, **kw})


def stream_chat(oc, **kw):
    """A streamed chat completion reassembled per choice: (texts, finishes, logprobs, tool calls, usage)."""
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    lps: dict[int, list] = {}
    calls: dict[int, dict] = {}
    usage = None
    for chunk in chat(oc, stream=True, stream_options={"include_usage": True}, **kw):
        usage = chunk.usage or usage
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
            if ch.logprobs is not None and ch.logprobs.content:
                lps.setdefault(ch.index, []).extend(ch.logprobs.content)
            for tc in ch.delta.tool_calls or []:
                c = calls.setdefault(ch.index, {"name": "", "arguments": ""})
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
    return texts, finish, lps, calls, usage


def scrape(server) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(server.url + "/metrics").text):
        for s in fam.samples:
            if not s.labels:
                out[s.name] = s.value
    return out


def test_the_server_froze_its_start_up_heap_and_counts_its_collections(openai_server):
    """`symphony serve` froze the heap it started on (gc_pauses.py), and /metrics counts the full
    collection that froze it among the pauses of generation 2."""
    text = httpx.get(openai_server.url + "/metrics").text
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert next(s.value for s in samples if s.name == "symphony_gc_frozen_objects") > 50_000
    full = [s.value for s in samples if s.name == "symphony_gc_pause_seconds_count" and s.labels["generation"] == "2"]
    assert full and full[0] >= 1, text[-2000:]


# --- n: choices fork one prefilled prompt -----------------------------------------------------------


def test_n_choices_share_the_prompts_pages_and_prefill_it_once(openai_server, oc):
    """n=3: three choices; the prompt ran through the model once (the batch scheduler's token
    count grows by the prompt less its last token, plus one token per pred of each choice), and
    every choice's file still held the prompt's full pages at the end (usage + headers)."""
    prompt_msgs = [{"role": "user", "content": "Count from one to twenty: one, two, three,"}]
    before = scrape(openai_server)["symphony_batch_tokens_total"]
    raw = oc.chat.completions.with_raw_response.create(
        model="symphony", messages=prompt_msgs, max_tokens=3, temperature=0, n=3
    )
    after = scrape(openai_server)["symphony_batch_tokens_total"]
    r = raw.parse()
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in r.choices), r
    assert len({c.message.content for c in r.choices}) == 1  # greedy: the same reply three times
    p = r.usage.prompt_tokens
    assert r.usage.completion_tokens == 9
    assert after - before == (p - 1) + 3 * 3, "the prompt is prefilled once, each choice feeds its own tokens"
    extra = r.usage.model_extra
    page_size = 16
    assert extra["prompt_prefills"] == 1
    assert extra["shared_prompt_pages"] == (p - 1) // page_size > 0
    assert raw.headers["x-symphony-shared-prompt-pages"] == str(extra["shared_prompt_pages"])
    # sampled choices differ but still share the prompt; streamed, each choice has its own index
    texts, finish, _, _, usage = stream_chat(oc, messages=prompt_msgs, n=2, temperature=1.0, seed=7, max_tokens=3)
    assert sorted(texts) == [0, 1] and sorted(finish) == [0, 1] and all(texts.values())
    assert usage.completion_tokens == 6 and usage.model_extra["shared_prompt_pages"] == (p - 1) // page_size


# --- logprobs ------------------------------------------------------------------------------------------


def test_chat_logprobs_and_top_logprobs(oc):
    r = chat(oc, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens == 4
    assert "".join(t.token for t in content) == c.message.content
    for t in content:
        assert len(t.top_logprobs) == 3
        tops = [x.logprob for x in t.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(v <= 0 for v in tops)
        assert t.token == t.top_logprobs[0].token and t.logprob == pytest.approx(tops[0])  # greedy picks the top
        assert bytes(t.bytes).decode() == t.token
    texts, _, lps, _, _ = stream_chat(oc, logprobs=True, top_logprobs=3)
    assert texts[0] == c.message.content
    # The streamed request's prompt comes from the prefix cache (its rows run other matmul kernels): float rounding
    assert [t.token for t in lps[0]] == [t.token for t in content]
    assert [t.logprob for t in lps[0]] == pytest.approx([t.logprob for t in content], abs=1e-4)
    plain = chat(oc)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs(oc):
    kw = {"model": "symphony", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 2}
    r = oc.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == 4
    assert all(len(d) == 2 and max(d.values()) == pytest.approx(v) for d, v in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    streamed = [c.choices[0] for c in oc.completions.create(stream=True, **kw)]
    tokens = [t for ch in streamed if ch.logprobs for t in ch.logprobs.tokens]
    offsets = [o for ch in streamed if ch.logprobs for o in ch.logprobs.text_offset]
    assert tokens == lp.tokens and offsets == lp.text_offset
    assert "".join(ch.text for ch in streamed) == r.choices[0].text


# --- penalties, stop, seed -----------------------------------------------------------------------------


def test_presence_and_frequency_penalties_change_a_repetitive_output(oc):
    kw = {"model": "symphony", "prompt": "Repeat after me: go go go go go go", "max_tokens": 8, "temperature": 0}
    plain = oc.completions.create(**kw).choices[0].text
    freq = oc.completions.create(frequency_penalty=2.0, **kw).choices[0].text
    pres = oc.completions.create(presence_penalty=2.0, **kw).choices[0].text

    def top_count(text: str) -> int:
        return Counter(text.split()).most_common(1)[0][1] if text.split() else 0

    assert top_count(plain) >= 4, plain  # the model repeats itself...
    assert top_count(freq) < top_count(plain) and top_count(pres) < top_count(plain), (plain, freq, pres)
    streamed = "".join(c.choices[0].text for c in oc.completions.create(stream=True, frequency_penalty=2.0, **kw))
    assert streamed == freq
    texts, _, _, _, _ = stream_chat(oc, presence_penalty=2.0, max_tokens=6)
    assert texts[0] == chat(oc, presence_penalty=2.0, max_tokens=6).choices[0].message.content


def test_stop_sequences_cut_before_the_stop(oc):
    kw = {"model": "symphony", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    full = oc.completions.create(**kw).choices[0].text
    for stop in (".", [" is", "."]):
        r = oc.completions.create(stop=stop, **kw).choices[0]
        stops = [stop] if isinstance(stop, str) else stop
        assert r.finish_reason == "stop" and r.text and not any(s in r.text for s in stops)
        assert full.startswith(r.text) and any(full[len(r.text) :].startswith(s) for s in stops), (full, r.text)
        streamed = [c.choices[0] for c in oc.completions.create(stream=True, stop=stop, **kw)]
        assert "".join(c.text for c in streamed) == r.text and streamed[-1].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(oc):
    kw = {"max_tokens": 6, "temperature": 1.5, "messages": [{"role": "user", "content": "Write a random word."}]}
    a, b = (chat(oc, seed=1234, **kw).choices[0].message.content for _ in range(2))
    assert a == b
    others = {chat(oc, seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds sample different replies"
    texts, _, _, _, _ = stream_chat(oc, seed=1234, **kw)
    assert texts[0] == a


# --- response_format -----------------------------------------------------------------------------------


def test_response_format_json_schema_and_json_object(oc):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    msgs = [{"role": "user", "content": "Give a person's name and age as JSON."}]
    r = chat(oc, messages=msgs, max_tokens=40, response_format=rf)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    texts, finish, _, _, _ = stream_chat(oc, messages=msgs, max_tokens=40, response_format=rf)
    assert texts[0] == r.choices[0].message.content and finish[0] == "stop"
    sampled = chat(oc, messages=msgs, max_tokens=40, response_format=rf, temperature=1.0, seed=3)
    jsonschema.validate(json.loads(sampled.choices[0].message.content), PERSON)
    obj = chat(oc, messages=msgs, max_tokens=40, response_format={"type": "json_object"})
    assert obj.choices[0].finish_reason == "stop" and isinstance(json.loads(obj.choices[0].message.content), dict)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        chat(oc, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
    with pytest.raises(openai.BadRequestError, match="response_format.type"):
        chat(oc, response_format={"type": "yaml"})


# --- tools ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tool_calls_arguments_follow_the_tools_schema(oc):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = chat(oc, messages=msgs, max_tokens=30, tools=TOOLS, tool_choice="required")
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    call = c.message.tool_calls[0]
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), schema)
    # a named function is the one called
    named = chat(
        oc, messages=msgs, max_tokens=30, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}
    )
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "add"
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[1]["function"]["parameters"])
    # streamed: the call arrives in a delta and reassembles to the same call
    _, finish, _, calls, _ = stream_chat(oc, messages=msgs, max_tokens=30, tools=TOOLS, tool_choice="required")
    assert finish[0] == "tool_calls"
    assert calls[0] == {
        "name": c.message.tool_calls[0].function.name,
        "arguments": c.message.tool_calls[0].function.arguments,
    }
    # auto: text or a valid call; none: text only
    auto = chat(oc, messages=msgs, max_tokens=24, tools=TOOLS).choices[0]
    if auto.message.tool_calls:
        assert auto.finish_reason == "tool_calls"
        name = auto.message.tool_calls[0].function.name
        jsonschema.validate(
            json.loads(auto.message.tool_calls[0].function.arguments),
            {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[name],
        )
    else:  # text, or a call that max_tokens cut short
        assert auto.message.content
        assert not auto.message.content.startswith("<tool_call>") or auto.finish_reason == "length"
    none = chat(oc, messages=msgs, max_tokens=6, tools=TOOLS, tool_choice="none").choices[0]
    assert none.message.tool_calls is None and none.message.content
    # the call and its result go back in as history
    history = [
        *msgs,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    follow = chat(oc, messages=history, max_tokens=6, tools=TOOLS, tool_choice="none")
    assert follow.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        chat(oc, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        chat(oc, tool_choice="required")


# --- what is refused -----------------------------------------------------------------------------------


def test_unsupported_or_out_of_range_parameters_get_a_4xx_naming_them(oc):
    cases = [
        ({"n": 0}, "n"),
        ({"n": 17}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"seed": 2**64}, "seed"),
        ({"logit_bias": {"999999": 5}}, "logit_bias"),
        ({"logit_bias": {"1": 101}}, "logit_bias"),
        ({"response_format": {"type": "json_object"}, "tools": TOOLS, "tool_choice": "required"}, "response_format"),
    ]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            chat(oc, **kw)
        assert e.value.body["param"] == param and param in e.value.body["message"], (kw, e.value.body)
    with pytest.raises(openai.UnprocessableEntityError, match="nonsense_field"):
        chat(oc, extra_body={"nonsense_field": 5})
    for kw, param in (
        ({"logprobs": 6}, "logprobs"),
        ({"echo": True, "logprobs": 1}, "echo"),
        ({"suffix": "x"}, "suffix"),
    ):
        with pytest.raises(openai.BadRequestError) as e:
            oc.completions.create(model="symphony", prompt="Hi", max_tokens=2, **kw)
        assert e.value.body["param"] == param, e.value.body
    with pytest.raises(openai.BadRequestError, match="best_of"):
        oc.completions.create(model="symphony", prompt="Hi", max_tokens=2, best_of=2)
