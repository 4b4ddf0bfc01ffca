"""The request bodies of the OpenAI-compatible endpoints as pydantic models, the way vLLM's protocol
module declares them: every field the OpenAI API defines for chat completions, completions and
responses is declared here, typed, and either honoured (params.py, messages.py, tools.py read it)
or refused with a 400 that names it (`REFUSED`, `refuse`). A field the API does not define is a
422 naming it. An explicit `null` means the field is unset, everywhere: `as_body` drops them.

vLLM's own sampling extensions that Symphony honours are declared beside the OpenAI ones
(`top_k`, `min_p`, `repetition_penalty`, `ignore_eos`, `skip_special_tokens`,
`spaces_between_special_tokens`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from ..validate import BadRequest, jtype

Num = StrictInt | StrictFloat


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictStr
    stream: StrictBool | None = None
    stream_options: dict | None = None
    temperature: Num | None = None
    top_p: Num | None = None
    user: StrictStr | None = None
    safety_identifier: StrictStr | None = None
    service_tier: StrictStr | None = None
    prompt_cache_key: StrictStr | None = None
    prompt_cache_retention: Any = None
    prompt_cache_options: Any = None
    moderation: Any = None
    metadata: dict | None = None
    store: StrictBool | None = None
    # vLLM's extensions
    top_k: StrictInt | None = None
    min_p: Num | None = None
    repetition_penalty: Num | None = None
    skip_special_tokens: StrictBool | None = None
    spaces_between_special_tokens: StrictBool | None = None


class _Sampled(_Body):
    """What chat completions and completions share."""

    n: StrictInt | None = None
    stop: StrictStr | list | None = None
    seed: StrictInt | None = None
    presence_penalty: Num | None = None
    frequency_penalty: Num | None = None
    logit_bias: dict[str, Num] | None = None
    max_tokens: StrictInt | None = None
    ignore_eos: StrictBool | None = None


class ChatRequest(_Sampled):
    messages: list
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    response_format: dict | None = None
    tools: list | None = None
    tool_choice: StrictStr | dict | None = None
    parallel_tool_calls: StrictBool | None = None
    audio: dict | None = None
    modalities: list[StrictStr] | None = None
    prediction: dict | None = None
    reasoning_effort: StrictStr | None = None
    verbosity: StrictStr | None = None
    web_search_options: dict | None = None
    functions: list | None = None
    function_call: StrictStr | dict | None = None


class CompletionRequest(_Sampled):
    prompt: StrictStr | list
    logprobs: StrictInt | None = None
    echo: StrictBool | None = None
    suffix: StrictStr | None = None
    best_of: StrictInt | None = None


class ResponsesRequest(_Body):
    input: StrictStr | list
    instructions: StrictStr | None = None
    max_output_tokens: StrictInt | None = None
    text: dict | None = None
    previous_response_id: StrictStr | None = None
    tools: list | None = None
    tool_choice: StrictStr | dict | None = None
    parallel_tool_calls: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    background: StrictBool | None = None
    conversation: StrictStr | dict | None = None
    include: list | None = None
    max_tool_calls: StrictInt | None = None
    prompt: dict | None = None
    reasoning: dict | None = None
    truncation: StrictStr | None = None
    access_programs: Any = None
    background_options: Any = None
    context_management: Any = None
    image: Any = None


# field -> (the values that ask for nothing, why anything else is refused)
REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "prompt_cache_key": ((), "the prefix cache is automatic (per user); there is no key to route by"),
    "prompt_cache_retention": ((), "the prefix cache keeps prompts while pages are free; no retention is promised"),
    "prompt_cache_options": ((), "the prefix cache is automatic (per user) and has no options"),
    "moderation": ((), "there is no moderation model"),
    "service_tier": (("auto", "default"), "there is one service tier"),
    "audio": ((), "this model reads and writes text only"),
    "modalities": ((["text"],), "this model writes text only"),
    "prediction": ((), "predicted outputs are not implemented"),
    "reasoning_effort": ((), "this model does not reason in a separate channel"),
    "reasoning": ((), "this model does not reason in a separate channel"),
    "verbosity": ((), "this model has no verbosity control"),
    "web_search_options": ((), "there is no web search"),
    "functions": ((), "the deprecated `functions` are not supported; use `tools`"),
    "function_call": ((), "the deprecated `function_call` is not supported; use `tool_choice`"),
    "suffix": (("",), "this model has no fill-in-the-middle"),
    "best_of": ((1,), "best_of > 1 is not supported (use n)"),
}
_RESPONSES_ONLY_REFUSED = {
    "background": ((False,), "background responses are not supported; stream instead"),
    "conversation": ((), "conversations are not stored; use previous_response_id"),
    "include": (([],), "no extra output items can be included"),
    "max_tool_calls": ((), "the Responses API here calls no built-in tools"),
    "prompt": ((), "stored prompt templates are not supported"),
    "truncation": (("disabled",), "a prompt past the context is refused, never truncated"),
    "access_programs": ((), "not supported"),
    "background_options": ((), "background responses are not supported"),
    "context_management": ((), "a prompt past the context is refused, never compacted"),
    "image": ((), "this model reads and writes text only"),
}
_CHAT_ONLY_REFUSED = {
    "store": ((False,), "chat completions are not stored; the Responses API stores (store: true)"),
    "metadata": (({},), "metadata is kept with stored objects only; chat completions are not stored"),
}


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        elif part in ("str", "list", "dict", "int", "float", "bool") or "[" in str(part) or "-" in str(part):
            break  # pydantic's name of a union member, not a field
        else:
            out += f".{part}"
    return out


def parse(cls: type[_Body], body: Any, where: str) -> _Body:
    """`body` checked against `cls`: an unknown field or a wrong type is a 422 naming the field;
    then a refused field asking for something is a 400 naming it."""
    if not isinstance(body, dict):
        raise BadRequest(422, f"{where}: the body must be a JSON object, got {jtype(body)}")
    try:
        req = cls.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        field = _where(err["loc"])
        if err["type"] == "extra_forbidden":
            msg = f"{where}: unknown field {field!r} (not an OpenAI API field Symphony knows)"
        elif err["type"] == "missing":
            msg = f"{where}: missing required field {field!r}"
        else:
            got = jtype(err.get("input"))
            msg = f"{where}: field {field!r} has the wrong type ({got}): {err['msg']}"
        raise BadRequest(422, msg, param=field) from None
    refuse(req)
    return req


def refuse(req: _Body) -> None:
    table = {
        **REFUSED,
        **(_CHAT_ONLY_REFUSED if isinstance(req, ChatRequest) else {}),
        **(_RESPONSES_ONLY_REFUSED if isinstance(req, ResponsesRequest) else {}),
    }
    for name, (harmless, why) in table.items():
        v = getattr(req, name, None)
        if v is not None and v not in harmless:
            raise BadRequest(400, f"{name} is not supported: {why}", param=name)


def as_body(req: _Body) -> dict:
    """The request as a dict without its unset and null fields."""
    return req.model_dump(exclude_none=True)


Endpoint = Literal["chat", "completion", "responses"]
MODELS: dict[str, type[_Body]] = {"chat": ChatRequest, "completion": CompletionRequest, "responses": ResponsesRequest}
