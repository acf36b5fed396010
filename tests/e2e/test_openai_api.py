"""
test_openai_api.py — the OpenAI-compatible API of `loragate serve`, driven by
the official `openai` Python SDK over real TLS on loopback.

Outside references:
  - the tiny fixture model with PEFT adapters (tests/golden/lora_fixtures):
    /v1/completions with token-id prompts, greedy, must reproduce HF/peft's
    greedy tokens and its first-token log-probability (log-softmax of the
    committed float64 logits), per adapter, through the tenant's own URL;
  - SmolLM2-135M-Instruct (the default model): streamed and non-streamed chat
    agree token for token; the usage chunk, cached tokens and the ledger
    record agree exactly; a client that leaves mid-stream is billed (499).
Isolation: another tenant neither lists nor uses an adapter (404), a key of
another tenant is refused at this tenant's URL (401), a key without the
inference scope gets 403; unsupported parameters are 400s that name them.
"""
import json
import math
import os

import numpy as np
import pytest

from lora_reference import REF, check_greedy, ref_case
from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve, smol_server

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

ADAPTERS = ["r8_rslora_attn", "r16_all_linear"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("tiny"), TINY, "--max-lora-rank", "16")
    try:
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta"), "acme_adapters_only": s.key("acme", ["adapters"])}
        for a in ADAPTERS:
            s.import_adapter("acme", a, os.path.join(LORA_FIX, REF["adapters"][a]["dir"]))
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def test_models_lists_base_and_own_adapters_only(tiny):
    acme = tiny.openai(tiny.keys["acme"], tenant="acme")
    ids = [m.id for m in acme.models.list().data]
    assert ids[0] == "base" and sorted(ids[1:]) == sorted(ADAPTERS)
    m = acme.models.retrieve(ADAPTERS[0])
    assert m.owned_by == "acme" and m.model_extra.get("parent") == "base"
    beta = tiny.openai(tiny.keys["beta"], tenant="beta")
    assert [m.id for m in beta.models.list().data] == ["base"]
    with pytest.raises(openai.NotFoundError):
        beta.models.retrieve(ADAPTERS[0])


@pytest.mark.parametrize("adapter", [None] + ADAPTERS)
def test_completions_match_hf_peft(tiny, adapter):
    c = ref_case(adapter, 1)
    client = tiny.openai(tiny.keys["acme"], tenant="acme")
    r = client.completions.create(model=adapter or "base", prompt=c["ids"], max_tokens=REF["n_greedy"],
                                  temperature=0, logprobs=2)
    ch = r.choices[0]
    got = [int(t.split(":")[1]) for t in ch.logprobs.tokens]
    check_greedy(got, ch.logprobs.token_logprobs[0], c)
    assert r.usage.prompt_tokens == len(c["ids"]) and r.usage.completion_tokens == len(got)
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_isolation_between_tenants(tiny):
    beta = tiny.openai(tiny.keys["beta"], tenant="beta")
    with pytest.raises(openai.NotFoundError) as e:
        beta.completions.create(model=ADAPTERS[0], prompt=[5, 6, 7], max_tokens=2)
    assert e.value.body["code"] == "model_not_found"
    # beta's key at acme's URL
    wrong = tiny.openai(tiny.keys["beta"], tenant="acme")
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    # a key without the inference scope
    no_inf = tiny.openai(tiny.keys["acme_adapters_only"], tenant="acme")
    with pytest.raises(openai.PermissionDeniedError):
        no_inf.completions.create(model="base", prompt=[5, 6, 7], max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        tiny.openai("lg-" + "x" * 43, tenant="acme").models.list()


@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_unsupported_parameters_are_named(tiny, extra, param):
    r = tiny.client(tiny.keys["acme"]).post("/t/acme/v1/completions",
                                            json={"model": "base", "prompt": [5, 6], **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and param in err["message"] and err["type"] == "invalid_request_error"


def test_bad_values(tiny):
    c = tiny.client(tiny.keys["acme"])
    for body, param in [({"model": "base", "prompt": [5], "temperature": 3}, "temperature"),
                        ({"model": "base", "prompt": [5], "n": 0}, "n"),
                        ({"model": "base", "prompt": [5], "max_tokens": 100000}, "max_tokens"),
                        ({"model": "base", "prompt": [999999]}, "prompt"),
                        ({"model": "base"}, "prompt")]:
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)
    r = c.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


# ---- the default model: text, chat, streaming, cached tokens, the ledger ----

@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    with smol_server(tmp_path_factory, "smol") as s:
        yield s


SYSTEM = ("You are a helpful assistant for a bakery. " * 12).strip()


def test_chat_stream_equals_non_stream_and_usage_matches_ledger(smol):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three breads."}]
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant" and text
    assert r.choices[0].finish_reason in ("stop", "length")
    chunks = list(c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=24, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == r.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    u = chunks[-1].usage
    assert u.prompt_tokens == r.usage.prompt_tokens and u.completion_tokens == r.usage.completion_tokens
    # the second identical prompt reuses the system prompt's full pages
    assert u.prompt_tokens_details.cached_tokens > 0
    assert u.prompt_tokens_details.cached_tokens == (u.prompt_tokens - 1) // 16 * 16
    rows = smol.ledger("route = 'chat.completions'")
    assert len(rows) >= 2
    last = rows[-1]
    assert (last["prompt_tokens"], last["cached_tokens"], last["completion_tokens"], last["http_status"]) == \
        (u.prompt_tokens, u.prompt_tokens_details.cached_tokens, u.completion_tokens, 200)


def test_stop_strings_n_and_seed(smol):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    r = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=30, temperature=0, stop=[" 8"])
    assert r.choices[0].finish_reason == "stop" and "8" not in r.choices[0].text and "7" in r.choices[0].text
    r = c.completions.create(model="smollm2", prompt=["The sky is", "Bread is"], n=2, max_tokens=5,
                             temperature=0.8, seed=7)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2, 3]
    r2 = c.completions.create(model="smollm2", prompt=["The sky is", "Bread is"], n=2, max_tokens=5,
                              temperature=0.8, seed=7)
    assert [ch.text for ch in r.choices] == [ch.text for ch in r2.choices]


def test_client_disconnect_mid_stream_is_billed(smol):
    row = smol.leave_mid_stream(smol.keys["acme"], "acme", "Tell a long story.", events=5)
    assert row["http_status"] == 499 and 4 <= row["completion_tokens"] < 400


def test_text_too_long_for_any_tokenization_is_refused_before_tokenizing(smol):
    # 3 MB can never fit the 4096-token context (no token covers more than the
    # vocabulary's longest entry): refused from its length, without running the
    # tokenizer on the loop thread
    c = smol.client(smol.keys["acme"])
    r = c.post("/t/acme/v1/completions", json={"model": "smollm2", "prompt": "bread " * 500_000, "max_tokens": 1})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["code"] == "context_length_exceeded" and e["param"] == "prompt" and "bytes long" in e["message"]
    r = c.post("/t/acme/v1/chat/completions", json={"model": "smollm2", "max_tokens": 1,
                                                    "messages": [{"role": "user", "content": "rye " * 800_000}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
