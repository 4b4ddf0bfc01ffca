"""`symphony serve` as a drop-in for `vllm serve` (issue #51): started the way vLLM is (positional
MODEL, --api-key, --served-model-name, --max-model-len, --max-num-seqs, --allowed-origins), read
with the official `openai` client: vLLM's routes, streamed tool calls, logit_bias, the metrics
under vLLM's names, and a walk over the OpenAI SDK's own field lists proving every field is
honoured (its effect observed, here or in the test named) or refused with a 400 naming it."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.test_openai_api as api_tests
import tests.test_openai_responses as responses_tests
import tests.test_openai_store as store_tests
from tests.server_harness import Server, symphony_cmd

KEY = "sk-vllm-style"
ORIGIN = "http://app.example"
MSGS = [{"role": "user", "content": "Name a colour."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


@pytest.fixture(scope="module")
def vllm_server():
    flags = ["smollm2", "--served-model-name", "my-model", "--max-model-len", "1024", "--api-key", KEY]
    s = Server([], extra=[*flags, "--max-num-seqs", "8", "--allowed-origins", ORIGIN])
    yield s
    assert s.stop() == 0, s.log()[-3000:]


@pytest.fixture(scope="module")
def vc(vllm_server):
    return openai.OpenAI(base_url=vllm_server.url + "/v1", api_key=KEY, max_retries=0)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def chat(vc, **kw):
    return vc.chat.completions.create(
        **{"model": "my-model", "messages": MSGS, "max_tokens": 4, "temperature": 0, **kw}
    )


def test_models_tokenize_detokenize_version_ping_embeddings_cors(vllm_server, vc):
    assert [m.id for m in vc.models.list().data] == ["my-model"]
    m = vc.models.retrieve("my-model")
    assert m.id == "my-model" and m.model_extra["max_model_len"] == 1024
    with pytest.raises(openai.NotFoundError):
        vc.models.retrieve("gpt-17")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=vllm_server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    r = chat(vc)
    assert r.model == "my-model"
    toks = post(vllm_server, "/tokenize", {"model": "my-model", "messages": MSGS}).json()
    assert toks["count"] == len(toks["tokens"]) == r.usage.prompt_tokens and toks["max_model_len"] == 1024
    text = post(vllm_server, "/tokenize", {"prompt": "Hello world"}).json()["tokens"]
    assert post(vllm_server, "/detokenize", {"tokens": text}).json() == {"prompt": "Hello world"}
    assert post(vllm_server, "/detokenize", {"tokens": [10**9]}).status_code == 400
    assert httpx.get(vllm_server.url + "/version").json()["version"]
    assert httpx.get(vllm_server.url + "/ping").status_code == 200
    with pytest.raises(openai.BadRequestError, match="not supported by this model"):
        vc.embeddings.create(model="my-model", input="hi")
    pre = httpx.options(
        vllm_server.url + "/v1/chat/completions",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.options(
        vllm_server.url + "/v1/models",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in other.headers


def test_max_model_len_refuses_what_would_not_fit(vc):
    with pytest.raises(openai.BadRequestError) as e:
        vc.completions.create(model="my-model", prompt="hello " * 1000, max_tokens=100)
    assert e.value.code == "context_length_exceeded" and "1024" in e.value.message


def test_a_taken_port_is_found_before_the_model_loads():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        p = subprocess.run([*symphony_cmd(), "serve", "--port", str(port)], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    assert p.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in p.stderr, p.stderr
    assert "serving" not in p.stderr and took < 30


def test_logit_bias_moves_the_pick(vllm_server, vc):
    kw = {"model": "my-model", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0}
    first = vc.completions.create(**kw).choices[0].text
    tid = post(vllm_server, "/tokenize", {"prompt": first}).json()["tokens"][0]
    banned = vc.completions.create(logit_bias={str(tid): -100}, **kw).choices[0].text
    assert banned != first
    forced_id = post(vllm_server, "/tokenize", {"prompt": " banana"}).json()["tokens"][0]
    forced = vc.completions.create(logit_bias={str(forced_id): 100}, **kw).choices[0].text
    assert forced == post(vllm_server, "/detokenize", {"tokens": [forced_id]}).json()["prompt"]
    # sampled picks go through the same bias
    sampled = vc.completions.create(**{**kw, "temperature": 1.0, "seed": 3, "logit_bias": {str(forced_id): 100}})
    assert sampled.choices[0].text == forced


def test_streamed_tool_calls_arrive_piece_by_piece_and_text_is_not_held_back(vc):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    whole = chat(vc, messages=ask, tools=TOOLS, tool_choice="required", max_tokens=30).choices[0]
    assert whole.finish_reason == "tool_calls"
    chunks = list(chat(vc, messages=ask, tools=TOOLS, tool_choice="required", max_tokens=30, stream=True))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert len(deltas) >= 3, "the call came in one piece"
    assert deltas[0].function.name == "get_weather" and deltas[0].id and deltas[0].type == "function"
    assert all(d.function.name is None and d.id is None for d in deltas[1:])
    assert "".join(d.function.arguments or "" for d in deltas) == whole.message.tool_calls[0].function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # with tools allowed but text chosen, the text streams as it comes
    hi = [{"role": "user", "content": "Say hello to me in five words."}]
    text_chunks = [
        ch.choices[0].delta.content
        for ch in chat(vc, messages=hi, tools=TOOLS, max_tokens=12, stream=True, tool_choice="auto")
        if ch.choices and ch.choices[0].delta.content
    ]
    plain = chat(vc, messages=hi, tools=TOOLS, max_tokens=12, tool_choice="auto").choices[0]
    if plain.message.content:  # the model chose text
        assert len(text_chunks) > 1 and "".join(text_chunks) == plain.message.content
    # parallel_tool_calls: false allows exactly one call; true lets the grammar take several
    one = chat(vc, messages=ask, tools=TOOLS, tool_choice="required", max_tokens=40, parallel_tool_calls=False)
    assert len(one.choices[0].message.tool_calls) == 1 and one.choices[0].finish_reason == "tool_calls"


def metrics(server) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(server.url + "/metrics").text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_under_vllms_names(vllm_server, vc):
    before = metrics(vllm_server)
    r = chat(vc, max_tokens=3)
    after = metrics(vllm_server)
    lbl = (("model_name", "my-model"),)

    def delta(name, labels=lbl):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert delta("vllm:prompt_tokens_total") == r.usage.prompt_tokens
    assert delta("vllm:generation_tokens_total") == 3
    assert delta("vllm:request_success_total", (("finished_reason", "length"), ("model_name", "my-model"))) == 1
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    assert delta("vllm:time_to_first_token_seconds_count") == 1
    assert after[("vllm:num_requests_running", lbl)] == 0 and after[("vllm:num_requests_waiting", lbl)] == 0
    assert after[("process_resident_memory_bytes", ())] > 0
    assert ("symphony_batches_total", ()) in after  # Symphony's own beside them


# --- every field of the OpenAI SDK's request types: honoured or refused ------------------------------

REFUSED_VALUES = {
    "audio": {"voice": "alloy", "format": "wav"},
    "function_call": "auto",
    "functions": [{"name": "f"}],
    "modalities": ["text", "audio"],
    "moderation": {"model": "x"},
    "prediction": {"type": "content", "content": "x"},
    "prompt_cache_key": "k",
    "prompt_cache_options": {"x": 1},
    "prompt_cache_retention": "24h",
    "reasoning_effort": "high",
    "verbosity": "low",
    "web_search_options": {},
    "best_of": 2,
    "suffix": "x",
    "access_programs": ["x"],
    "background": True,
    "background_options": {"x": 1},
    "context_management": [{"type": "compaction"}],
    "conversation": "conv_1",
    "image": {"x": 1},
    "include": ["message.output_text.logprobs"],
    "max_tool_calls": 2,
    "prompt": {"id": "pmpt_1"},
    "reasoning": {"effort": "low"},
    "truncation": "auto",
    "top_logprobs": 2,  # responses
    "store": True,
    "metadata": {"k": "v"},  # chat (kept with stored objects only)
    "service_tier": "flex",
    "stream_options": {"include_obfuscation": True},
}
# honoured: the test (in this module or another) that observes the field's effect
ELSEWHERE = {
    "frequency_penalty": api_tests.test_presence_and_frequency_penalties_change_a_repetitive_output,
    "presence_penalty": api_tests.test_presence_and_frequency_penalties_change_a_repetitive_output,
    "logprobs": api_tests.test_chat_logprobs_and_top_logprobs,
    "top_logprobs": api_tests.test_chat_logprobs_and_top_logprobs,
    "n": api_tests.test_n_choices_share_the_prompts_pages_and_prefill_it_once,
    "response_format": api_tests.test_response_format_json_schema_and_json_object,
    "seed": api_tests.test_seed_makes_sampling_reproducible,
    "temperature": api_tests.test_seed_makes_sampling_reproducible,
    "stop": api_tests.test_stop_sequences_cut_before_the_stop,
    "tools": api_tests.test_tool_calls_arguments_follow_the_tools_schema,
    "tool_choice": api_tests.test_tool_calls_arguments_follow_the_tools_schema,
    "parallel_tool_calls": test_streamed_tool_calls_arrive_piece_by_piece_and_text_is_not_held_back,
    "logit_bias": test_logit_bias_moves_the_pick,
    "instructions": responses_tests.test_text_and_message_input_streaming_and_not,
    "text": responses_tests.test_json_schema_output,
    "input": responses_tests.test_text_and_message_input_streaming_and_not,
    "previous_response_id": store_tests.test_previous_response_id_continues_the_stored_kv,
}


def _honoured_here(server, vc, endpoint: str) -> dict:
    """field -> a check that observes its effect on `endpoint` (run by the walk)."""

    def gen(**kw):
        if endpoint == "chat":
            return chat(vc, **kw)
        if endpoint == "completion":
            return vc.completions.create(
                **{"model": "my-model", "prompt": "Colours:", "max_tokens": 4, "temperature": 0, **kw}
            )
        return vc.responses.create(**{"model": "my-model", "input": "Name a colour.", "max_output_tokens": 4, **kw})

    def named_by_user(field):
        def check():
            gen(**{field: f"end-user-{field}"})
            procs = httpx.get(server.url + "/v1/processes", headers={"Authorization": f"Bearer {KEY}"}).json()
            assert any(p["name"].endswith(f"for end-user-{field}") for p in procs["processes"]), procs

        return check

    def max_tokens(field):
        def check():
            r = gen(**{field: 2})
            used = r.usage.output_tokens if endpoint == "responses" else r.usage.completion_tokens
            assert used == 2

        return check

    def model():
        with pytest.raises(openai.NotFoundError):
            gen(model="no-such-model")

    def top_p():
        greedy = gen(temperature=0)
        for seed in (1, 2):
            r = gen(temperature=2.0, top_p=1e-6, **({} if endpoint == "responses" else {"seed": seed}))
            assert _text(r, endpoint) == _text(greedy, endpoint)

    def stream_options():
        chunks = list(gen(stream=True, stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4

    def echo():
        r = gen(echo=True)
        assert r.choices[0].text.startswith("Colours:") and len(r.choices[0].text) > len("Colours:")

    def messages():
        a, b = chat(vc, messages=[{"role": "user", "content": "Hi"}]), chat(vc, messages=MSGS)
        assert a.usage.prompt_tokens != b.usage.prompt_tokens

    def prompt():
        assert gen(prompt="A").usage.prompt_tokens < gen(prompt="A B C D").usage.prompt_tokens

    def service_tier():
        assert gen(service_tier="default").service_tier == "default"

    def metadata():
        assert gen(metadata={"k": "v"}).metadata == {"k": "v"}

    def store():
        assert gen(store=False).store is False

    fn = {
        "type": "function",
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    }

    def tools():  # also `tool_choice`: the reply is a call to the named tool, not a message
        r = gen(tools=[fn], tool_choice={"type": "function", "name": "pick"}, max_output_tokens=30, temperature=0)
        assert r.output[0].type == "function_call" and r.output[0].name == "pick"
        assert r.status == "completed" and isinstance(json.loads(r.output[0].arguments)["n"], int)

    def parallel_tool_calls():
        r = gen(tools=[fn], tool_choice="required", parallel_tool_calls=False, max_output_tokens=60, temperature=0)
        assert [o.type for o in r.output] == ["function_call"] and r.parallel_tool_calls is False

    checks = {
        "user": named_by_user("user"),
        "safety_identifier": named_by_user("safety_identifier"),
        "max_tokens": max_tokens("max_tokens"),
        "max_completion_tokens": max_tokens("max_completion_tokens"),
        "max_output_tokens": max_tokens("max_output_tokens"),
        "model": model,
        "top_p": top_p,
        "service_tier": service_tier,
    }
    if endpoint == "chat":
        checks.update(messages=messages, stream_options=stream_options)
    if endpoint == "completion":
        checks.update(echo=echo, prompt=prompt, stream_options=stream_options)
    if endpoint == "responses":
        checks.update(
            metadata=metadata, store=store, tools=tools, tool_choice=tools, parallel_tool_calls=parallel_tool_calls
        )
    return checks


def _text(r, endpoint):
    if endpoint == "chat":
        return r.choices[0].message.content
    return r.choices[0].text if endpoint == "completion" else r.output_text


def _base(endpoint: str) -> dict:
    if endpoint == "chat":
        return {"model": "my-model", "messages": MSGS, "max_tokens": 2}
    if endpoint == "completion":
        return {"model": "my-model", "prompt": "Hi", "max_tokens": 2}
    return {"model": "my-model", "input": "Hi", "max_output_tokens": 2}


@pytest.mark.slow
@pytest.mark.parametrize(
    "endpoint, path, sdk_params",
    [
        ("chat", "/v1/chat/completions", "openai.types.chat.completion_create_params"),
        ("completion", "/v1/completions", "openai.types.completion_create_params"),
        ("responses", "/v1/responses", "openai.types.responses.response_create_params"),
    ],
)
def test_every_openai_field_is_honoured_or_refused(vllm_server, vc, endpoint, path, sdk_params):
    import importlib

    mod = importlib.import_module(sdk_params)
    base_cls = mod.ResponseCreateParamsBase if endpoint == "responses" else mod.CompletionCreateParamsBase
    fields = set(base_cls.__annotations__) | {"stream"}
    here = _honoured_here(vllm_server, vc, endpoint)
    unaccounted = []
    for field in sorted(fields):
        if field in here:
            here[field]()
            continue
        if field == "stream":
            continue  # every streaming test
        if field in ELSEWHERE and not (endpoint == "responses" and field in REFUSED_VALUES):
            assert callable(ELSEWHERE[field])
            continue
        if field in REFUSED_VALUES:
            r = post(vllm_server, path, {**_base(endpoint), field: REFUSED_VALUES[field]})
            assert r.status_code == 400 and r.json()["error"]["param"].startswith(field), (field, r.text)
            continue
        unaccounted.append(field)
    assert not unaccounted, f"{endpoint}: fields neither honoured nor refused: {unaccounted}"
    # an explicit null is "unset" for every field
    nulls = {f: None for f in fields if f not in ("model", "messages", "prompt", "input")}
    r = post(vllm_server, path, {**nulls, **_base(endpoint)})
    assert r.status_code == 200, r.text
    assert json.loads(r.text)["usage"]


def test_instructor_and_langchain_request_shapes(vc):
    """What `instructor` (tools mode: a pydantic model's schema, `$defs` and all, as a named
    function) and LangChain's `with_structured_output` (json_schema, strict) send, through the
    official client: the reply validates against the model."""
    pydantic = pytest.importorskip("pydantic")

    strict = pydantic.ConfigDict(extra="forbid")  # additionalProperties: false, as OpenAI's strict mode asks

    class City(pydantic.BaseModel):
        model_config = strict
        name: str = pydantic.Field(max_length=12)

    class Trip(pydantic.BaseModel):
        model_config = strict
        origin: City
        destination: City
        days: int = pydantic.Field(ge=1, le=30)

    schema = Trip.model_json_schema()
    assert "$defs" in schema
    ask = [{"role": "user", "content": "Plan a trip from Paris to Rome for three days."}]
    tool = {"type": "function", "function": {"name": "Trip", "description": "A trip", "parameters": schema}}
    r = chat(
        vc, messages=ask, max_tokens=60, tools=[tool], tool_choice={"type": "function", "function": {"name": "Trip"}}
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "Trip" and r.choices[0].finish_reason == "tool_calls", r.choices[0].message.tool_calls
    Trip.model_validate_json(call.function.arguments)
    rf = {"type": "json_schema", "json_schema": {"name": "Trip", "schema": schema, "strict": True}}
    out = chat(vc, messages=ask, max_tokens=60, response_format=rf)
    Trip.model_validate_json(out.choices[0].message.content)
