"""Responses `store` and `previous_response_id` (issue #51): a follow-up continues the stored
conversation's named KV file instead of computing the history again — the prefill it saves is
measured against the same conversation sent whole — and the files are the user's, retained
within limits."""

from __future__ import annotations

import httpx

from symphony_core.server.openai.store import ResponseStore, StoredResponse
from tests.conftest import OPENAI_TOKEN

AUTH = {"Authorization": f"Bearer {OPENAI_TOKEN}"}
STORY = "Tell me a short story about a lighthouse keeper who finds a message in a bottle. " * 3


def computed_tokens(server) -> float:
    """Tokens the model has computed: those fed to it less those the prefix cache gave K/V for."""
    vals = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        name, _, v = line.partition(" ")
        if name in ("symphony_batch_tokens_total", "symphony_prefix_cache_reused_tokens_total"):
            vals[name] = float(v)
    return vals["symphony_batch_tokens_total"] - vals["symphony_prefix_cache_reused_tokens_total"]


def conversation_files(server) -> dict[str, int]:
    files = httpx.get(server.url + "/v1/kv", headers=AUTH).json()["files"]
    return {f["path"]: f["tokens"] for f in files if "/openai/conversations/" in f["path"]}


def test_previous_response_id_continues_the_stored_kv(openai_server, oc):
    r1 = oc.responses.create(model="symphony", input=STORY, max_output_tokens=24, temperature=0)
    assert r1.store is True
    files = conversation_files(openai_server)
    held = r1.usage.input_tokens + r1.usage.output_tokens - 1  # the last picked token is not written
    assert held in files.values(), (files, r1.usage)

    t0 = computed_tokens(openai_server)
    r2 = oc.responses.create(
        model="symphony",
        input="What was in the message?",
        previous_response_id=r1.id,
        max_output_tokens=4,
        temperature=0,
    )
    t1 = computed_tokens(openai_server)
    assert r2.previous_response_id == r1.id
    reused = r2.usage.input_tokens_details.cached_tokens
    assert reused >= held - 2, (reused, held)  # the whole conversation so far, bar a re-tokenized reply end
    # the same conversation, sent whole (the prefix cache still helps it with the first prompt)
    whole = [
        {"role": "user", "content": STORY},
        {"role": "assistant", "content": r1.output_text},
        {"role": "user", "content": "What was in the message?"},
    ]
    t2 = computed_tokens(openai_server)
    full = oc.responses.create(model="symphony", input=whole, max_output_tokens=4, temperature=0, store=False)
    t3 = computed_tokens(openai_server)
    assert full.usage.input_tokens == r2.usage.input_tokens  # the same prompt
    with_prev, sent_whole = t1 - t0, t3 - t2
    print(
        f"\ntokens the model computed: previous_response_id {with_prev:.0f}, whole conversation {sent_whole:.0f}; "
        f"prompt {r2.usage.input_tokens} tokens, {reused} from the stored file, "
        f"{full.usage.input_tokens_details.cached_tokens} from the prefix cache when sent whole"
    )
    # the reply (and the first prompt's last, partial page) is not computed again
    assert with_prev < sent_whole and sent_whole - with_prev >= r1.usage.output_tokens // 2
    # the file moved on to the newest response; the earlier one still continues (recomputed)
    r3 = oc.responses.create(model="symphony", input="Who found it?", previous_response_id=r1.id, max_output_tokens=2)
    assert r3.usage.input_tokens > r1.usage.input_tokens
    # stored responses can be read back and deleted; deleting frees their file
    assert oc.responses.retrieve(r2.id).output_text == r2.output_text
    before = conversation_files(openai_server)
    oc.responses.delete(r2.id)
    assert len(conversation_files(openai_server)) == len(before) - 1
    r = httpx.post(
        openai_server.url + "/v1/responses",
        json={"model": "symphony", "input": "x", "previous_response_id": r2.id},
        headers=AUTH,
    )
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


def test_store_false_keeps_nothing(openai_server, oc):
    before = conversation_files(openai_server)
    r = oc.responses.create(model="symphony", input="Hi", max_output_tokens=2, store=False)
    assert r.store is False and conversation_files(openai_server) == before
    assert httpx.get(openai_server.url + f"/v1/responses/{r.id}", headers=AUTH).status_code == 404


def test_retention_removes_the_oldest_files_first():
    removed: list[tuple[str, str]] = []
    s = ResponseStore(lambda user, path: removed.append((user, path)), max_files=2, max_stored=3, ttl_s=3600)
    for i in range(4):
        s.put(StoredResponse(f"r{i}", "u", [], {}, 1e12, f"f{i}"))
    assert removed == [("u", "f0"), ("u", "f1")]  # 2 files kept; r0 also left the store (3 kept)
    assert s.get("u", "r0") is None and s.get("u", "r1") is not None and s.take_file("u", "r1") is None
    assert s.take_file("u", "r3") == "f3" and s.take_file("u", "r3") is None  # taken once
    s.put(StoredResponse("old", "v", [], {}, 0.0, "g"))  # past its time
    assert s.get("v", "old") is None and ("v", "g") in removed
    r2 = s.get("u", "r2")
    assert r2 is not None and s.take_file("u", "r2") == "f2"
    s.give_back(r2, "f2")  # a follow-up that is not stored returns the file
    assert s.take_file("u", "r2") == "f2"
    s.delete("u", "r2")
    s.give_back(r2, "f2")  # r2 is gone: its file goes
    assert removed[-1] == ("u", "f2")
