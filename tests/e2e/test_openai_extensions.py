"""
test_openai_extensions.py — what clients written for vLLM and evaluation
harnesses send, against a real `loragate serve` over TLS on loopback:

  - echo and prompt logprobs on /v1/completions (OpenAI's legacy shape: the
    text starts with the prompt, logprobs cover the prompt tokens, the first
    one null) and vLLM's prompt_logprobs (a list per choice, null first, then
    {token id: {logprob, rank, decoded_token}}; on chat, one list at the top
    level). Outside reference: the tiny fixture model's float64 numpy forward
    (tests/golden/np_llama.py, checked against HF transformers at 1e-15): the
    served prompt logprobs equal log-softmax of its logits at every position;
  - max_tokens 0 with echo (the prompt alone, finish_reason "length", no
    completion tokens, the prompt billed);
  - the prefix cache: a request that scores its prompt recomputes a cached
    prefix (cached_tokens 0) and returns the same logprobs;
  - vLLM's sampling and output extensions on both routes (top_k, min_p,
    repetition_penalty, ignore_eos, min_tokens, stop_token_ids,
    skip_special_tokens, include_stop_str_in_output) with vLLM's meaning,
    and the same seed giving the same output on the host-sampling path and
    with the CPU backend's device-sampling slot (LG_CPU_DEVICE_SAMPLE=1);
  - the stop token: a greedy chat completion that ends on <|im_end|> lists
    exactly the tokens of its text in logprobs.content (streamed or not).
"""
import json
import math
import os
import sys

import numpy as np
import pytest

from serve_fixture import LORAGATE, TINY, Serve, smol_server

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden"))
import np_llama  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
SMOL_TOKENIZER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tokenizer", "fixtures",
                              "smollm2", "tokenizer.json")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("tiny_ext"), TINY)
    try:
        s.tenant("acme")
        s.keys = {"acme": s.key("acme")}
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


@pytest.fixture(scope="module")
def oracle():
    cfg = json.load(open(os.path.join(TINY, "config.json")))
    W = np_llama.read_safetensors(os.path.join(TINY, "model.safetensors"))

    def logprobs(ids):
        lg = np_llama.forward(cfg, W, ids)
        m = lg.max(axis=-1, keepdims=True)
        return lg - (m + np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)))
    return logprobs


PROMPT = [int(x) for x in np.random.default_rng(5).integers(3, 300, size=45)]


def test_echo_and_prompt_logprobs_match_float64_reference(tiny, oracle):
    lp = oracle(PROMPT)  # [T, V]: row q scores token q + 1
    want = [float(lp[q, PROMPT[q + 1]]) for q in range(len(PROMPT) - 1)]
    c = tiny.client(tiny.keys["acme"])
    r = c.post("/t/acme/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 2, "echo": True,
                                                "logprobs": 3, "temperature": 0, "prompt_logprobs": 4})
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    L = ch["logprobs"]
    assert len(L["tokens"]) == len(PROMPT) + 2 and L["token_logprobs"][0] is None and L["top_logprobs"][0] is None
    got = L["token_logprobs"][1:len(PROMPT)]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4
    assert L["text_offset"] == sorted(L["text_offset"]) and L["text_offset"][0] == 0
    for q in range(len(PROMPT) - 1):  # the alternatives: the 3 best of the reference row, and the token itself
        top = L["top_logprobs"][q + 1]
        assert len(top) in (3, 4) and max(top.values()) == pytest.approx(float(lp[q].max()), abs=1e-4)
    P = ch["prompt_logprobs"]
    assert len(P) == len(PROMPT) and P[0] is None
    for q in range(len(PROMPT) - 1):
        e = P[q + 1]
        tok = PROMPT[q + 1]
        assert str(tok) in e and e[str(tok)]["logprob"] == pytest.approx(want[q], abs=1e-4)
        assert e[str(tok)]["rank"] == 1 + int((lp[q] > lp[q, tok] + 1e-9).sum())
        best = sorted(range(lp.shape[1]), key=lambda i: -lp[q, i])[:4]
        ranked = {int(k): v for k, v in e.items() if v["rank"] <= 4 and int(k) != tok or int(k) in best}
        assert set(best) <= set(int(k) for k in e), (q, best, list(e))
        assert all(ranked[i]["logprob"] == pytest.approx(float(lp[q, i]), abs=1e-4) for i in best)
    assert r.json()["usage"]["completion_tokens"] == 2 and r.json()["usage"]["prompt_tokens"] == len(PROMPT)


def test_echo_max_tokens_0_and_the_prefix_cache(tiny, oracle):
    lp = oracle(PROMPT)
    want = [float(lp[q, PROMPT[q + 1]]) for q in range(len(PROMPT) - 1)]
    c = tiny.client(tiny.keys["acme"])
    # warm the cache with the prompt (cached_tokens > 0 for a plain request)
    r = c.post("/t/acme/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 1})
    r = c.post("/t/acme/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    # a request that scores its prompt recomputes it: not cached, same values
    r = c.post("/t/acme/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 0, "echo": True,
                                                "logprobs": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    ch = body["choices"][0]
    assert ch["finish_reason"] == "length" and len(ch["logprobs"]["tokens"]) == len(PROMPT)
    assert max(abs(a - b) for a, b in zip(ch["logprobs"]["token_logprobs"][1:], want)) < 1e-4
    u = body["usage"]
    assert (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"]) == \
        (len(PROMPT), 0, 0)
    # echo without logprobs keeps the cache
    r = c.post("/t/acme/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 0, "echo": True})
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert r.json()["choices"][0]["logprobs"] is None


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    with smol_server(tmp_path_factory, "smol_ext") as s:
        yield s


def test_echo_text_and_streamed_echo(smol):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    r = c.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=3, echo=True,
                             logprobs=1, temperature=0)
    ch = r.choices[0]
    assert ch.text.startswith("The capital of France is") and len(ch.text) > len("The capital of France is")
    assert ch.logprobs.tokens[0] == "The" and ch.logprobs.token_logprobs[0] is None
    assert "".join(ch.logprobs.tokens) == ch.text
    assert [ch.text[o:o + len(t)] for o, t in zip(ch.logprobs.text_offset, ch.logprobs.tokens)] == ch.logprobs.tokens
    chunks = list(c.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=3, echo=True,
                                       logprobs=1, temperature=0, stream=True))
    assert "".join(x.choices[0].text for x in chunks if x.choices) == ch.text
    streamed = [lp for x in chunks if x.choices and x.choices[0].logprobs for lp in x.choices[0].logprobs.token_logprobs]
    assert streamed[0] is None and streamed[1:] == pytest.approx(ch.logprobs.token_logprobs[1:], abs=1e-6)
    # chat: vLLM's prompt_logprobs at the top level
    r = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                  temperature=0, extra_body={"prompt_logprobs": 1})
    P = r.model_extra["prompt_logprobs"]
    assert P[0] is None and len(P) == r.usage.prompt_tokens and all(len(e) in (1, 2) for e in P[1:])


def test_stop_token_not_in_chat_logprobs(smol):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    msgs = [{"role": "user", "content": "Say hi"}]
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0, logprobs=True)
    ch = r.choices[0]
    assert ch.finish_reason == "stop"  # ends on <|im_end|>
    toks = [e.token for e in ch.logprobs.content]
    assert "<|im_end|>" not in toks and "".join(toks) == ch.message.content
    assert r.usage.completion_tokens == len(toks) + 1  # the stop token is billed, not listed
    chunks = list(c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0,
                                            logprobs=True, stream=True))
    st = [e.token for x in chunks if x.choices and x.choices[0].logprobs for e in x.choices[0].logprobs.content]
    assert st == toks
    # with include_stop_str_in_output and skip_special_tokens false, vLLM shows it: text and logprobs
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0, logprobs=True,
                                  extra_body={"include_stop_str_in_output": True, "skip_special_tokens": False})
    assert r.choices[0].message.content.endswith("<|im_end|>")
    assert r.choices[0].logprobs.content[-1].token == "<|im_end|>"


def test_vllm_sampling_extensions(smol):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    msgs = [{"role": "user", "content": "Say hi"}]
    base = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0)
    n_natural = base.usage.completion_tokens
    assert base.choices[0].finish_reason == "stop" and n_natural < 60
    # ignore_eos runs to max_tokens; min_tokens runs at least that far
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=n_natural + 10, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == n_natural + 10
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0,
                                  extra_body={"min_tokens": n_natural + 5})
    assert r.usage.completion_tokens >= n_natural + 5
    # stop_token_ids: the id of a token greedy decoding produces stops there (the token not shown);
    # <|im_end|> (id 2) as a stop id with ignore_eos ends the chat where EOS would have
    cm = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0, logprobs=0)
    text, words = cm.choices[0].text, cm.choices[0].logprobs.tokens
    k = next(i for i, t in enumerate(words) if i >= 2 and t not in words[:i])
    tok = tokenizers.Tokenizer.from_file(SMOL_TOKENIZER)
    ids = tok.encode(words[k], add_special_tokens=False).ids
    assert len(ids) == 1
    r = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0,
                             extra_body={"stop_token_ids": ids})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == "".join(words[:k])
    r = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0,
                             extra_body={"stop_token_ids": ids, "include_stop_str_in_output": True})
    assert r.choices[0].text == "".join(words[:k + 1])
    r = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=60, temperature=0,
                                  extra_body={"ignore_eos": True, "stop_token_ids": [2]})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == base.choices[0].message.content
    # include_stop_str_in_output with a stop string
    r = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=30, temperature=0, stop=[" 8"],
                             extra_body={"include_stop_str_in_output": True})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text.endswith(" 8")
    # top_k, min_p, repetition_penalty: accepted, and a seed fixes the output
    kw = dict(model="smollm2", prompt="Bread is", max_tokens=12, temperature=1.0, seed=3,
              extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.3})
    a = c.completions.create(**kw).choices[0].text
    assert c.completions.create(**kw).choices[0].text == a
    g0 = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0).choices[0].text
    g1 = c.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0,
                              extra_body={"repetition_penalty": 2.0}).choices[0].text
    assert g0 != g1  # the penalty changes a repetitive greedy continuation


def test_vllm_parameters_refused_or_checked(smol):
    c = smol.client(smol.keys["acme"])
    cases = [
        ({"top_k": -2}, "top_k"), ({"min_p": 1.5}, "min_p"), ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_tokens": 50, "max_tokens": 10}, "min_tokens"), ({"stop_token_ids": list(range(17))}, "stop_token_ids"),
        ({"stop_token_ids": [10 ** 6]}, "stop_token_ids"), ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"), ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"prompt_logprobs": 2, "stream": True}, "prompt_logprobs"),
        ({"use_beam_search": True}, "use_beam_search"), ({"guided_json": 5}, "guided_json"),
        ({"prompt": [5] * 1100, "echo": True, "logprobs": 1, "n": 64}, "echo"),
    ]
    for extra, param in cases:
        body = {"model": "smollm2", "prompt": "Hi", "max_tokens": 2, **extra}
        r = c.post("/t/acme/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (extra, r.text[:300])
    r = c.post("/t/acme/v1/chat/completions", json={"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
                                                     "echo": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_same_seed_same_tokens_with_device_sampling(smol, tmp_path_factory):
    """Rows with repetition_penalty or min_tokens are sampled on the host even where the backend samples:
    the CPU backend's sampling slot (LG_CPU_DEVICE_SAMPLE=1) gives the same tokens as host sampling."""
    bodies = [
        {"prompt": "Bread is", "max_tokens": 16, "temperature": 0.9, "seed": 11, "repetition_penalty": 1.4},
        {"prompt": "Bread is", "max_tokens": 16, "temperature": 0.9, "seed": 12, "min_tokens": 8, "top_k": 30},
        {"prompt": "Bread is", "max_tokens": 4, "temperature": 0, "echo": True, "logprobs": 2,
         "repetition_penalty": 1.2},
    ]

    def run(s):
        c = s.client(s.keys["acme"])
        out = []
        for b in bodies:
            r = c.post("/t/acme/v1/completions", json={"model": "smollm2", **b})
            assert r.status_code == 200, r.text
            ch = r.json()["choices"][0]
            out.append((ch["text"], (ch["logprobs"] or {}).get("token_logprobs")))
        return out
    host = run(smol)
    with smol_server(tmp_path_factory, "smol_dev", env={"LG_CPU_DEVICE_SAMPLE": "1"}) as d:
        dev = run(d)
    for (ht, hl), (dt, dl) in zip(host, dev):
        assert ht == dt
        if hl:
            assert hl[0] is None and dl[0] is None
            assert hl[1:] == pytest.approx(dl[1:], abs=2e-4)
