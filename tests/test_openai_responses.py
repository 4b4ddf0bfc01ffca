"""The Responses API (`/v1/responses`) with the official `openai` client, and `/metrics` read
with `prometheus_client`'s own parser — against a real `symphony serve` (one for the module)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def streamed(oc, **kw):
    events = list(oc.responses.create(model="symphony", stream=True, **kw))
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]  # the deltas as one
    assert collapsed[:-1] == EVENTS, kinds
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == deltas
    return events[-1], deltas


def test_text_and_message_input_streaming_and_not(oc):
    r = oc.responses.create(model="symphony", input="Name a colour.", max_output_tokens=4, temperature=0)
    assert r.object == "response" and r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text"
    assert r.usage.output_tokens == 4 and r.usage.input_tokens > 0
    last, text = streamed(oc, input="Name a colour.", max_output_tokens=4, temperature=0)
    assert last.type == "response.incomplete" and text == r.output_text
    assert last.response.output_text == text and last.response.usage.output_tokens == 4
    # message-list input with instructions; a short answer completes
    msgs = [{"role": "user", "content": [{"type": "input_text", "text": "Say yes."}]}]
    r2 = oc.responses.create(
        model="symphony", input=msgs, instructions="Answer with one word.", max_output_tokens=24, temperature=0
    )
    assert r2.status == "completed" and r2.output_text and r2.instructions == "Answer with one word."
    last, text = streamed(oc, input=msgs, instructions="Answer with one word.", max_output_tokens=24, temperature=0)
    assert last.type == "response.completed" and text == r2.output_text


def test_json_schema_output(oc):
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 10}},
        "required": ["colour"],
        "additionalProperties": False,
    }
    fmt = {"format": {"type": "json_schema", "name": "colour", "schema": schema, "strict": True}}
    r = oc.responses.create(model="symphony", input="Name a colour as JSON.", max_output_tokens=20, text=fmt)
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)
    last, text = streamed(oc, input="Name a colour as JSON.", max_output_tokens=20, text=fmt, temperature=0)
    jsonschema.validate(json.loads(text), schema)


def test_refusals_name_the_parameter(oc):
    with pytest.raises(openai.BadRequestError) as e:
        oc.responses.create(model="symphony", input="Hi", top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError, match="tools"):
        oc.responses.create(model="symphony", input="Hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.BadRequestError, match="input"):
        oc.responses.create(model="symphony", input=[{"type": "function_call_output", "call_id": "x", "output": "1"}])
    with pytest.raises(openai.NotFoundError):
        oc.responses.create(model="gpt-17", input="Hi")


def families(server) -> dict:
    text = httpx.get(server.url + "/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, family: str, sample: str, **labels) -> float:
    return sum(
        s.value
        for s in fams[family].samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_parse_and_are_cumulative_whatever_the_scrape_interval(openai_server, oc):
    """Every histogram is there; the batch-size histogram counts every batch the scheduler fired
    (its count equals the batches counter); a second scrape changes nothing (no reset on read);
    one more request adds exactly its own observations."""
    oc.chat.completions.create(
        model="symphony", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0
    )
    a, b = families(openai_server), families(openai_server)
    for fams in (a, b):
        assert fams["symphony_batch_size"].type == "histogram"
        assert (
            value(fams, "symphony_batch_size", "symphony_batch_size_count")
            == value(fams, "symphony_batches", "symphony_batches_total")
            > 0
        )
        for h in (
            "symphony_time_to_first_token_seconds",
            "symphony_inter_token_latency_seconds",
            "symphony_request_queue_time_seconds",
        ):
            assert fams[h].type == "histogram", h
        for g in ("symphony_kv_pages_used", "symphony_queue_depth", "symphony_tokens_per_second", "symphony_processes"):
            assert fams[g].type == "gauge", g
    same = (
        ("symphony_batch_size", "symphony_batch_size_count"),
        ("symphony_time_to_first_token_seconds", "symphony_time_to_first_token_seconds_count"),
    )
    for fam, sample in same:
        assert value(a, fam, sample) == value(b, fam, sample) > 0
    ttft = value(
        a, "symphony_time_to_first_token_seconds", "symphony_time_to_first_token_seconds_count", endpoint="chat"
    )
    itl = value(
        a, "symphony_inter_token_latency_seconds", "symphony_inter_token_latency_seconds_count", endpoint="chat"
    )
    queued = value(
        a, "symphony_request_queue_time_seconds", "symphony_request_queue_time_seconds_count", endpoint="chat"
    )
    oc.chat.completions.create(
        model="symphony", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0
    )
    c = families(openai_server)
    assert (
        value(c, "symphony_time_to_first_token_seconds", "symphony_time_to_first_token_seconds_count", endpoint="chat")
        == ttft + 1
    )
    assert (
        value(c, "symphony_inter_token_latency_seconds", "symphony_inter_token_latency_seconds_count", endpoint="chat")
        == itl + 2
    )  # three tokens, two gaps
    assert (
        value(c, "symphony_request_queue_time_seconds", "symphony_request_queue_time_seconds_count", endpoint="chat")
        == queued + 1
    )
    assert value(c, "symphony_openai_requests", "symphony_openai_requests_total", endpoint="chat") >= 2
    buckets = [s for s in c["symphony_batch_size"].samples if s.name == "symphony_batch_size_bucket"]
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)  # cumulative
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == value(
        c, "symphony_batch_size", "symphony_batch_size_count"
    )
