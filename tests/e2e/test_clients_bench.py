"""
test_clients_bench.py — benchmark clients against `loragate serve` on the
default model, over TLS on loopback:

  - guidellm (PyPI, 0.8.1, installed by tests/clients/install.sh into
    .venv/clients; its torch requirement stood in for, see
    tests/clients/shims/torch) runs a short synchronous and a short
    constant-rate benchmark of streamed chat completions. Its requests carry
    stream_options.continuous_usage_stats and ignore_eos; the test reads its
    JSON report: every request succeeded, none errored, time to first token
    and inter-token latency are non-zero, and each request produced exactly
    the 16 output tokens it asked for (ignore_eos honoured; guidellm counts
    them from the streamed usage). Not a speed test.
  - vLLM's benchmark client (vllm bench serve) needs vLLM's engine (and
    torch) installed, so its requests are built here exactly as its OpenAI
    backends build them (completions: repetition_penalty 1.0, logprobs null,
    ignore_eos, stream_options.include_usage; chat: max_completion_tokens,
    ignore_eos) and sent with raw httpx (HTTP/1.1 and HTTP/2) and the
    official openai SDK (extra_body), with continuous_usage_stats: each
    request streams exactly max_tokens tokens, every chunk carries the usage
    so far, and the last usage chunk is what the ledger billed.
"""
import json
import os
import subprocess
import sys

import pytest

from serve_fixture import LORAGATE, smol_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "clients"))
import clients_venv  # noqa: E402

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "bench") as s:
        yield s


def guidellm(srv, tmp_path, name, profile, count):
    bindir = clients_venv.ensure()
    report = tmp_path / f"{name}.json"
    key = srv.keys["acme"]
    args = [os.path.join(bindir, "guidellm"), "run",
            "--backend", f"kind=openai_http,target={srv.url}/t/acme,model=smollm2,api_key={key},verify=true,"
                         "validate_backend=false",
            "--tokenizer", f"kind=huggingface_auto,model={clients_venv.tokenizer_dir(tmp_path)}",
            "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
            "--profile", profile, "--constraint", f"kind=max_requests,count={count}",
            "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    r = subprocess.run(args, env=clients_venv.env(srv.cert, shim=True), capture_output=True, text=True,
                       timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    b = json.load(open(report))["benchmarks"][0]
    m = b["metrics"]
    totals = m["request_totals"]
    assert totals["successful"] == count and totals["errored"] == 0 and totals["incomplete"] == 0, totals
    ttft, itl = m["time_to_first_token_ms"]["successful"], m["inter_token_latency_ms"]["successful"]
    assert ttft["count"] == count and ttft["mean"] > 0 and ttft["min"] > 0
    assert itl["count"] > 0 and itl["mean"] > 0
    out = m["output_token_count"]["successful"]
    assert out["min"] == out["max"] == 16, out  # ignore_eos: every request ran to its 16 tokens
    bodies = [json.loads(q["request_args"])["body"] for q in b["requests"]["successful"]]
    assert all(x["ignore_eos"] is True and x["stream_options"].get("continuous_usage_stats") for x in bodies)
    return b


def test_guidellm_synchronous_and_constant_rate(srv, tmp_path):
    before = len(srv.ledger("route = 'chat.completions'"))
    guidellm(srv, tmp_path, "sync", "kind=synchronous", 4)
    guidellm(srv, tmp_path, "constant", "kind=constant,rate=2", 6)
    rows = srv.ledger("route = 'chat.completions'")[before:]
    assert len(rows) == 10 and all(r["completion_tokens"] == 16 and r["http_status"] == 200 for r in rows)


def stream_events(resp):
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


@pytest.mark.parametrize("http2", [False, True])
def test_vllm_bench_requests_raw(srv, http2):
    """vLLM's benchmark backends' payloads (openai-completions, openai-chat) with continuous usage."""
    key = srv.keys["acme"]
    prompt = "The history of bread begins"
    cmpl = {"model": "smollm2", "prompt": prompt, "repetition_penalty": 1.0, "max_tokens": 24, "logprobs": None,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "ignore_eos": True}
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 24,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "ignore_eos": True}
    with srv.client(key, http2=http2) as c:
        for path, body in (("/t/acme/v1/completions", cmpl), ("/t/acme/v1/chat/completions", chat)):
            with c.stream("POST", path, json=body) as resp:
                assert resp.status_code == 200, resp.read()
                rid = resp.headers["x-request-id"]
                ev = stream_events(resp)
            final = ev[-1]
            assert final["choices"] == [] and final["usage"]["completion_tokens"] == 24
            chunks = ev[:-1]
            assert chunks and all(ch.get("usage") for ch in chunks)  # every chunk: the usage so far
            comp = [ch["usage"]["completion_tokens"] for ch in chunks]
            assert comp == sorted(comp) and comp[-1] == 24
            assert all(ch["usage"]["total_tokens"] == ch["usage"]["prompt_tokens"] + ch["usage"]["completion_tokens"]
                       for ch in chunks)
            assert chunks[-1]["choices"][0]["finish_reason"] == "length"
            row = srv.ledger("request_id = ?", (rid,))[0]
            assert (row["prompt_tokens"], row["completion_tokens"]) == (final["usage"]["prompt_tokens"], 24)
            assert chunks[0]["usage"]["prompt_tokens"] == row["prompt_tokens"]


def test_vllm_bench_requests_openai_sdk(srv):
    c = srv.openai(srv.keys["acme"], tenant="acme")
    n = 0
    last = None
    for ch in c.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=12, stream=True,
                                   temperature=0.0, stream_options={"include_usage": True,
                                                                    "continuous_usage_stats": True},
                                   extra_body={"ignore_eos": True, "repetition_penalty": 1.0}):
        if ch.choices:
            n += 1
            assert ch.usage is not None and ch.usage.completion_tokens >= 1
        last = ch
    assert n >= 12 and last.usage.completion_tokens == 12
    msgs = [{"role": "user", "content": "Say hi"}]
    chunks = list(c.chat.completions.create(model="smollm2", messages=msgs, max_completion_tokens=20, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True},
                                            extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 20
    assert all(ch.usage is not None for ch in chunks)
