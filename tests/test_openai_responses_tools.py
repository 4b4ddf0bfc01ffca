"""Function tools on the Responses API (`/v1/responses`), with the official `openai` client
against a real `symphony serve`: calls come back as `function_call` items, stream as their own
events with the arguments in pieces, and a follow-up carrying the tool's output is answered."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "The forecast for a city", "parameters": WEATHER},
    {
        "type": "function",
        "name": "get_time",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
]
ASK = "What is the weather in Paris for 2 days?"
FORCED = {"type": "function", "name": "get_weather"}


def test_a_forced_call_is_a_function_call_item_with_valid_arguments(oc):
    r = oc.responses.create(
        model="symphony", input=ASK, tools=TOOLS, tool_choice=FORCED, max_output_tokens=40, temperature=0
    )
    assert r.status == "completed" and len(r.output) == 1, r.output
    call = r.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert r.tool_choice.name == "get_weather" and [t.name for t in r.tools] == ["get_weather", "get_time"]
    # "required" without parallel calls: exactly one call, to either tool
    one = oc.responses.create(
        model="symphony",
        input=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=40,
        temperature=0,
    )
    assert [o.type for o in one.output] == ["function_call"] and one.parallel_tool_calls is False
    assert one.output[0].name in ("get_weather", "get_time")
    json.loads(one.output[0].arguments)
    # tools listed but "none" chosen: a plain message
    plain = oc.responses.create(model="symphony", input=ASK, tools=TOOLS, tool_choice="none", max_output_tokens=6)
    assert [o.type for o in plain.output] == ["message"] and plain.output_text


def test_a_streamed_call_sends_its_arguments_in_pieces_in_order(oc):
    events = list(
        oc.responses.create(
            model="symphony",
            input=ASK,
            tools=TOOLS,
            tool_choice=FORCED,
            max_output_tokens=40,
            stream=True,
            temperature=0,
        )
    )
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert collapsed == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ], kinds
    added = events[2].item
    assert added.type == "function_call" and added.name == "get_weather" and added.arguments == ""
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) > 1  # the arguments arrive as they are written, not at the end
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == "".join(pieces) and done.item_id == added.id
    jsonschema.validate(json.loads(done.arguments), WEATHER)
    final = events[-1].response
    assert final.output[0].call_id == added.call_id and final.output[0].arguments == done.arguments
    # the same call, not streamed, is the same (greedy)
    whole = oc.responses.create(
        model="symphony", input=ASK, tools=TOOLS, tool_choice=FORCED, max_output_tokens=40, temperature=0
    )
    assert whole.output[0].arguments == done.arguments


def test_a_follow_up_with_the_tools_output_is_answered(oc):
    first = oc.responses.create(
        model="symphony", input=ASK, tools=TOOLS, tool_choice=FORCED, max_output_tokens=40, temperature=0
    )
    call = first.output[0]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"forecast": "sunny"}'}
    # via the stored conversation
    nxt = oc.responses.create(
        model="symphony", previous_response_id=first.id, input=[result], tools=TOOLS, max_output_tokens=8, temperature=0
    )
    assert nxt.output and nxt.previous_response_id == first.id
    # the same turn with the whole conversation in `input`: the same prompt, so the same answer
    items = [{"role": "user", "content": ASK}, call.model_dump(exclude_none=True), result]
    again = oc.responses.create(model="symphony", input=items, tools=TOOLS, max_output_tokens=8, temperature=0)
    assert [o.type for o in again.output] == [o.type for o in nxt.output]
    assert again.usage.input_tokens == nxt.usage.input_tokens
    assert nxt.usage.input_tokens > first.usage.input_tokens + 5  # the call and its output are in the prompt
    # a message answer when tools are not called
    answer = oc.responses.create(
        model="symphony", previous_response_id=first.id, input=[result], tool_choice="none", max_output_tokens=8
    )
    assert [o.type for o in answer.output] == ["message"] and answer.output_text


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function", "parameters": WEATHER}, "tools[0].name"),
        ({"type": "function", "name": "f", "parameters": "not a schema"}, "tools[0].parameters"),
        ({"type": "function", "name": "f", "colour": "red"}, "tools[0].colour"),
        ({"type": "web_search"}, "tools[0].type"),
    ],
)
def test_a_bad_tool_definition_is_a_400_naming_the_field(oc, tool, param):
    with pytest.raises(openai.BadRequestError) as e:
        oc.responses.create(model="symphony", input=ASK, tools=[tool], max_output_tokens=4)
    assert e.value.body["param"] == param, e.value.body


def test_a_bad_follow_up_item_is_a_400(oc):
    with pytest.raises(openai.BadRequestError) as e:
        oc.responses.create(
            model="symphony", input=[{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{not json"}]
        )
    assert "arguments" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oc.responses.create(model="symphony", input=ASK, tools=TOOLS, tool_choice={"type": "function", "name": "nope"})
    assert e.value.body["param"] == "tool_choice"
    # a tool's output with no call before it (here or in the stored conversation)
    with pytest.raises(openai.BadRequestError, match="no function_call with call_id 'c9'"):
        oc.responses.create(model="symphony", input=[{"type": "function_call_output", "call_id": "c9", "output": "1"}])
