"""
test_openai_hostile.py — malformed and hostile input to the OpenAI-compatible
routes and the adapter API of a real `loragate serve` (SmolLM2-135M-Instruct,
the default model, so chat has a tokenizer and a template; --ctx 256 so a
modest prompt passes the context), over TLS on 127.0.0.1.

A table of 90-odd cases, each sent as raw HTTP with httpx over HTTP/1.1 and
over HTTP/2 (some also with curl --http1.1 / --http2), each with its expected
status and OpenAI error object (type, param, code). Then:
  - the server still answers a normal request (no crash, the process runs);
  - nothing refused before the engine left a usage ledger record (every
    answer's x-request-id is looked up) or a generation in /metrics.
"""
import json
import os
import shutil
import subprocess

import pytest

from metering_util import metric_sum, parse_metrics
from serve_fixture import LORAGATE, SMOLLM2, Serve
from synth_adapter import smollm2_adapter

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

MODEL = "smol"
CTX = 256
VOCAB = 49152
IRE = "invalid_request_error"
SEEN_IDS = []  # x-request-id of every table answer (none may be billed)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    s = Serve(tmp_path_factory.mktemp("hostile"), SMOLLM2, "--served-model-name", MODEL, "--ctx", str(CTX))
    try:
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta"), "acme_inf": s.key("acme", ["inference"])}
        cfg, w = smollm2_adapter(seed=11)
        with s.client(s.keys["beta"]) as c:
            r = c.post("/v1/adapters", data={"name": "secret"}, files={"config": ("c", cfg), "weights": ("w", w)})
            assert r.status_code == 201, r.text
        with s.client() as c:
            m, _ = parse_metrics(c.get("/metrics").text)
        s.generations_before = metric_sum(m, "loragate_generations_total")
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


# ---- the table ---------------------------------------------------------------------------

C, H = "/v1/completions", "/v1/chat/completions"
JSON = {"content-type": "application/json"}


def cbody(**kw):
    b = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}
    b.update(kw)
    return {k: v for k, v in b.items() if v is not DROP}


def hbody(**kw):
    b = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    b.update(kw)
    return {k: v for k, v in b.items() if v is not DROP}


DROP = object()


def msgs(*m):
    return list(m)


def case(cid, path, body=None, *, raw=None, method="POST", headers=None, key="acme", status=400, type_=IRE,
         param=None, code=None, needle=None):
    """One row: raw bytes or a JSON body; the expected error object."""
    return pytest.param(dict(path=path, body=body, raw=raw, method=method, headers=headers, key=key, status=status,
                             type=type_, param=param, code=code, needle=needle), id=cid)


LONG_TEXT = "hello " * 400                # > 256 tokens of SmolLM2
DEEP = b'{"model":"smol","prompt":' + b"[" * 10000 + b"]" * 10000 + b"}"
DEEP_OBJ = b'{"model":"smol","prompt":[1],"metadata":' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}"

TABLE = [
    # -- JSON itself
    case("bad_json", C, raw=b'{"model": "smol", "prompt": [1,', code="invalid_json", needle="invalid JSON"),
    case("json_array_top", C, raw=b"[1, 2, 3]", code="invalid_json", needle="JSON object"),
    case("json_string_top", H, raw=b'"hello"', code="invalid_json"),
    case("json_null_top", H, raw=b"null", code="invalid_json"),
    case("empty_body", C, raw=b"", code="missing_body"),
    case("nesting_10000_arrays", C, raw=DEEP, code="invalid_json", needle="nesting"),
    case("nesting_100_objects", H, raw=DEEP_OBJ, code="invalid_json", needle="nesting"),
    case("duplicate_keys", C, raw=b'{"model":"smol","prompt":[1],"model":"other"}', code="invalid_json",
         needle="duplicate"),
    case("duplicate_keys_nested", H,
         raw=b'{"model":"smol","messages":[{"role":"user","role":"system","content":"x"}]}', code="invalid_json",
         needle="duplicate"),
    case("trailing_garbage", C, raw=b'{"model":"smol","prompt":[1]} {}', code="invalid_json"),
    case("escaped_nul_in_string", C, raw=b'{"model":"smol","prompt":"a\\u0000b"}', code="invalid_json"),
    case("raw_nul_in_body", H, raw=b'{"model":"smol\x00","messages":[]}', code="invalid_json"),
    case("invalid_utf8", C, raw=b'{"model":"smol","prompt":"\xff\xfe\xc3"}', code="invalid_json"),
    case("lone_surrogate", H, raw=b'{"model":"smol","messages":[{"role":"user","content":"\\ud800"}]}',
         code="invalid_json"),
    case("integer_beyond_int64", C, raw=b'{"model":"smol","prompt":[1],"seed":123456789012345678901234567890}',
         code="invalid_json"),
    case("number_overflow_double", C, raw=b'{"model":"smol","prompt":[1],"temperature":1e999}', code="invalid_json"),
    case("bom_then_json", C, raw=b'\xef\xbb\xbf{"model":"smol","prompt":[1]}', code="invalid_json"),
    # -- transport-level limits
    case("body_over_route_limit", C, raw=b'{"model":"smol","prompt":"' + b"a" * (5 << 20) + b'"}', status=413,
         code="request_too_large"),
    case("content_type_text_plain", C, raw=json.dumps(cbody()).encode(), headers={"content-type": "text/plain"},
         status=415, code="unsupported_media_type"),
    case("content_type_missing", H, raw=json.dumps(hbody()).encode(), headers={}, status=415,
         code="unsupported_media_type"),
    case("content_type_form", H, raw=b"model=smol", headers={"content-type": "application/x-www-form-urlencoded"},
         status=415, code="unsupported_media_type"),
    case("no_authorization", C, cbody(), key=None, status=401, code="invalid_api_key"),
    case("basic_auth", C, cbody(), key=None, headers={"authorization": "Basic YWNtZTpzZWNyZXQ=", **JSON},
         status=401, code="invalid_api_key"),
    case("bearer_empty", H, hbody(), key=None, headers={"authorization": "Bearer", **JSON}, status=401,
         code="invalid_api_key"),
    case("bearer_unknown_key", C, cbody(), key="lg-" + "Q" * 43, status=401, code="invalid_api_key"),
    case("bearer_8k_garbage", C, cbody(), key="lg-" + "~!" * 4000, status=401, code="invalid_api_key"),
    case("other_tenants_key_at_tenant_url", "/t/acme/v1/completions", cbody(), key="beta", status=401,
         code="invalid_api_key"),
    # an unknown tenant answers as a key that does not match it: tenant names cannot be probed
    case("unknown_tenant_url", "/t/nosuch/v1/models", method="GET", status=401, code="invalid_api_key"),
    case("no_inference_scope", C, cbody(), key="beta-adapters-only", status=403, type_=IRE),
    case("get_on_chat", H, method="GET", status=405, code="method_not_allowed"),
    case("put_on_completions", C, cbody(), method="PUT", status=405, code="method_not_allowed"),
    case("delete_models", "/v1/models", method="DELETE", status=405, code="method_not_allowed"),
    case("post_models", "/v1/models", cbody(), method="POST", status=405, code="method_not_allowed"),
    case("unknown_route", "/v1/embeddings", cbody(), status=404, code="unknown_url"),
    # -- model
    case("model_missing", C, cbody(model=DROP), param="model", needle="model"),
    case("model_not_string", H, hbody(model=42), param="model"),
    case("model_empty", C, cbody(model=""), param="model"),
    case("model_4k_chars", C, cbody(model="m" * 4096), param="model"),
    case("model_3mb_string", C, cbody(model="m" * (3 << 20)), param="model"),
    case("model_unknown", C, cbody(model="gpt-4o"), status=404, param="model", code="model_not_found"),
    case("model_other_tenants_adapter", H, hbody(model="secret"), status=404, param="model",
         code="model_not_found"),
    case("model_path_traversal", C, cbody(model="../beta/secret"), status=404, param="model", code="model_not_found"),
    case("retrieve_other_tenants_adapter", "/v1/models/secret", method="GET", status=404, code="model_not_found"),
    # -- unknown and unsupported parameters
    case("unknown_param", C, cbody(frobnicate=1), param="frobnicate", needle="frobnicate"),
    case("tools_bad_function_name", H, hbody(tools=[{"type": "function", "function": {"name": "f f", "parameters": {}}}]),
         param="tools[0].function.name"),
    case("tool_choice", H, hbody(tool_choice="auto"), param="tool_choice"),
    case("response_format_unenforceable", H,
         hbody(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}),
         param="response_format.json_schema.schema#/not"),
    case("functions", H, hbody(functions=[{"name": "f"}]), param="functions"),
    case("logit_bias_nonempty", C, cbody(logit_bias={"50": 100}), param="logit_bias"),
    case("chat_echo_true", H, hbody(echo=True), param="echo"),  # echo is a completions parameter
    case("echo_string", C, cbody(echo="yes"), param="echo"),
    case("best_of_3", C, cbody(best_of=3), param="best_of"),
    case("suffix", C, cbody(suffix="end"), param="suffix"),
    case("audio", H, hbody(audio={"voice": "alloy"}), param="audio"),
    case("chat_param_on_completions", C, cbody(messages=[{"role": "user", "content": "x"}]), param="messages"),
    # -- wrong types / out of range
    case("temperature_3", C, cbody(temperature=3), param="temperature"),
    case("temperature_negative", H, hbody(temperature=-0.1), param="temperature"),
    case("temperature_string", C, cbody(temperature="0.5"), param="temperature"),
    case("temperature_bool", H, hbody(temperature=True), param="temperature"),
    case("top_p_1.5", C, cbody(top_p=1.5), param="top_p"),
    case("top_p_list", H, hbody(top_p=[0.5]), param="top_p"),
    case("n_0", C, cbody(n=0), param="n"),
    case("n_129", H, hbody(n=129), param="n"),
    case("n_float", C, cbody(n=1.5), param="n"),
    case("n_string", H, hbody(n="2"), param="n"),
    case("n_times_prompts", C, cbody(prompt=["a"] * 3, n=64), param="n"),
    case("chat_max_tokens_0", H, hbody(max_tokens=0), param="max_tokens"),  # completions accept 0 (the prompt alone)
    case("max_tokens_negative_cmpl", C, cbody(max_tokens=-1), param="max_tokens"),
    # -- vLLM's extensions: bad values, and those we do not serve, named
    case("top_k_-2", C, cbody(top_k=-2), param="top_k"),
    case("top_k_string", H, hbody(top_k="5"), param="top_k"),
    case("min_p_1.5", H, hbody(min_p=1.5), param="min_p"),
    case("repetition_penalty_0", C, cbody(repetition_penalty=0), param="repetition_penalty"),
    case("repetition_penalty_negative", H, hbody(repetition_penalty=-1), param="repetition_penalty"),
    case("ignore_eos_string", C, cbody(ignore_eos="true"), param="ignore_eos"),
    case("min_tokens_negative", H, hbody(min_tokens=-1), param="min_tokens"),
    case("min_tokens_over_max_tokens", C, cbody(min_tokens=20, max_tokens=4), param="min_tokens"),
    case("stop_token_ids_17", H, hbody(stop_token_ids=list(range(17))), param="stop_token_ids"),
    case("stop_token_ids_out_of_vocab", C, cbody(stop_token_ids=[VOCAB]), param="stop_token_ids"),
    case("stop_token_ids_float", C, cbody(stop_token_ids=[1.5]), param="stop_token_ids"),
    case("skip_special_tokens_int", H, hbody(skip_special_tokens=1), param="skip_special_tokens"),
    case("include_stop_str_string", C, cbody(include_stop_str_in_output="x"), param="include_stop_str_in_output"),
    case("prompt_logprobs_21", C, cbody(prompt_logprobs=21), param="prompt_logprobs"),
    case("prompt_logprobs_whole_vocab", H, hbody(prompt_logprobs=-1), param="prompt_logprobs"),
    case("prompt_logprobs_stream", C, cbody(prompt_logprobs=1, stream=True), param="prompt_logprobs"),
    case("continuous_usage_stats_string", C, cbody(stream=True, stream_options={"continuous_usage_stats": "on"}),
         param="stream_options.continuous_usage_stats"),
    case("use_beam_search", C, cbody(use_beam_search=True), param="use_beam_search", needle="use_beam_search"),
    case("guided_json_not_a_schema", H, hbody(guided_json=5), param="guided_json"),
    case("allowed_token_ids", C, cbody(allowed_token_ids=[1, 2]), param="allowed_token_ids"),
    case("max_tokens_negative", H, hbody(max_tokens=-5), param="max_tokens"),
    case("max_tokens_string", C, cbody(max_tokens="10"), param="max_tokens"),
    case("max_tokens_over_context", C, cbody(max_tokens=CTX), param="max_tokens", code="context_length_exceeded"),
    case("max_tokens_int32_max", C, cbody(max_tokens=2**31 - 1), param="max_tokens", code="context_length_exceeded"),
    case("max_completion_tokens_over_context", H, hbody(max_tokens=DROP, max_completion_tokens=10**6),
         param="max_completion_tokens", code="context_length_exceeded"),
    case("prompt_over_context", C, cbody(prompt=LONG_TEXT), param="prompt", code="context_length_exceeded"),
    case("token_prompt_over_context", C, cbody(prompt=[5] * CTX), param="prompt", code="context_length_exceeded"),
    case("messages_over_context", H, hbody(messages=[{"role": "user", "content": LONG_TEXT}]), param="messages",
         code="context_length_exceeded"),
    case("presence_penalty_3", C, cbody(presence_penalty=3), param="presence_penalty"),
    case("frequency_penalty_-2.5", H, hbody(frequency_penalty=-2.5), param="frequency_penalty"),
    case("frequency_penalty_string", H, hbody(frequency_penalty="high"), param="frequency_penalty"),
    case("seed_float", C, cbody(seed=1.5), param="seed"),
    case("seed_string", H, hbody(seed="7"), param="seed"),
    case("stream_string", C, cbody(stream="true"), param="stream"),
    case("stream_options_without_stream", H, hbody(stream_options={"include_usage": True}), param="stream_options"),
    case("stream_options_bad_type", C, cbody(stream=True, stream_options={"include_usage": "yes"}),
         param="stream_options.include_usage"),
    case("stream_options_unknown", C, cbody(stream=True, stream_options={"frob": 1}), param="stream_options"),
    case("user_int", H, hbody(user=5), param="user"),
    case("cache_salt_too_long", C, cbody(cache_salt="s" * 300), param="cache_salt"),
    case("store_string", H, hbody(store="yes"), param="store"),
    case("metadata_list", H, hbody(metadata=["a"]), param="metadata"),
    case("metadata_non_string_value", H, hbody(metadata={"k": 1}), param="metadata"),
    # -- logprobs
    case("cmpl_logprobs_6", C, cbody(logprobs=6), param="logprobs"),
    case("cmpl_logprobs_bool", C, cbody(logprobs=True), param="logprobs"),
    case("chat_logprobs_int", H, hbody(logprobs=1), param="logprobs"),
    case("top_logprobs_without_logprobs", H, hbody(top_logprobs=2), param="top_logprobs", needle="logprobs"),
    case("top_logprobs_21", H, hbody(logprobs=True, top_logprobs=21), param="top_logprobs"),
    case("top_logprobs_negative", H, hbody(logprobs=True, top_logprobs=-1), param="top_logprobs"),
    # -- stop
    case("stop_5_strings", C, cbody(stop=["a", "b", "c", "d", "e"]), param="stop"),
    case("stop_int", H, hbody(stop=7), param="stop"),
    case("stop_list_of_int", C, cbody(stop=[1]), param="stop"),
    case("stop_2k_bytes", C, cbody(stop="x" * 2000), param="stop", needle="1024"),
    case("stop_list_long_string", H, hbody(stop=["ok", "y" * 1025]), param="stop", needle="1024"),
    # -- messages
    case("messages_missing", H, hbody(messages=DROP), param="messages"),
    case("messages_object", H, hbody(messages={"role": "user", "content": "x"}), param="messages"),
    case("messages_empty", H, hbody(messages=[]), param="messages"),
    case("messages_4097", H, hbody(messages=[{"role": "user", "content": "a"}] * 4097), param="messages",
         needle="4096"),
    case("message_not_object", H, hbody(messages=["hi"]), param="messages.[0].role"),
    case("message_no_role", H, hbody(messages=[{"content": "hi"}]), param="messages.[0].role"),
    case("message_tool_without_call_id", H, hbody(messages=[{"role": "tool", "content": "x"}]),
         param="messages.[0].tool_call_id"),
    case("message_role_bogus", H, hbody(messages=[{"role": "user", "content": "a"}, {"role": "root", "content": "b"}]),
         param="messages.[1].role"),
    case("message_role_int", H, hbody(messages=[{"role": 1, "content": "x"}]), param="messages.[0].role"),
    case("message_content_int", H, hbody(messages=[{"role": "user", "content": 5}]), param="messages.[0].content"),
    case("message_content_object", H, hbody(messages=[{"role": "user", "content": {"text": "x"}}]),
         param="messages.[0].content"),
    case("content_part_image", H, hbody(messages=[{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]),
        param="messages.[0].content", needle="text"),
    case("content_part_input_audio", H, hbody(messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]), param="messages.[0].content"),
    case("content_part_not_object", H, hbody(messages=[{"role": "user", "content": ["text"]}]),
         param="messages.[0].content"),
    case("content_part_text_not_string", H, hbody(messages=[{"role": "user", "content": [{"type": "text",
                                                                                        "text": 3}]}]),
         param="messages.[0].content"),
    case("message_tool_calls", H, hbody(messages=[{"role": "assistant", "content": "x", "tool_calls": []}]),
         param="messages.[0].tool_calls"),
    case("message_name_int", H, hbody(messages=[{"role": "user", "content": "x", "name": 7}]),
         param="messages.[0].name"),
    # -- prompt
    case("prompt_missing", C, cbody(prompt=DROP), param="prompt"),
    case("prompt_null", C, cbody(prompt=None), param="prompt"),
    case("prompt_empty_list", C, cbody(prompt=[]), param="prompt"),
    case("prompt_empty_inner_list", C, cbody(prompt=[[]]), param="prompt"),
    case("prompt_negative_id", C, cbody(prompt=[1, -1, 2]), param="prompt"),
    case("prompt_id_out_of_vocab", C, cbody(prompt=[1, VOCAB]), param="prompt", needle=str(VOCAB)),
    case("prompt_id_2^40", C, cbody(prompt=[2**40]), param="prompt"),
    case("prompt_float_ids", C, cbody(prompt=[1.5, 2.0]), param="prompt"),
    case("prompt_ids_then_string", C, cbody(prompt=[1, "a"]), param="prompt"),
    case("prompt_object", C, cbody(prompt={"text": "a"}), param="prompt"),
    case("prompt_int", C, cbody(prompt=5), param="prompt"),
    case("prompt_65_strings", C, cbody(prompt=["a"] * 65), param="prompt"),
    case("prompt_list_with_null", C, cbody(prompt=["a", None]), param="prompt"),
    case("prompt_empty_string", C, cbody(prompt=""), param="prompt"),
    # -- adapter API
    case("adapter_get_other_tenants", "/v1/adapters/secret", method="GET", status=404, code="adapter_not_found"),
    case("adapter_delete_other_tenants", "/v1/adapters/secret", method="DELETE", status=404,
         code="adapter_not_found"),
    case("adapter_upload_json", "/v1/adapters", {"name": "x"}, status=415, code="unsupported_media_type"),
    case("adapter_upload_no_boundary", "/v1/adapters", raw=b"--x\r\n",
         headers={"content-type": "multipart/form-data"}, status=400),
    case("adapter_put", "/v1/adapters", method="PUT", raw=b"x", headers={"content-type": "text/plain"},
         status=405, code="method_not_allowed"),
    case("adapter_no_scope", "/v1/adapters", method="GET", key="acme_inf", status=403),
    case("adapter_no_auth", "/v1/adapters", method="GET", key=None, status=401, code="invalid_api_key"),
]


def send(srv, c, row):
    key = srv.keys.get(row["key"], row["key"]) if row["key"] else None
    headers = dict(JSON) if row["headers"] is None else dict(row["headers"])
    if key is not None and "authorization" not in headers:
        headers["authorization"] = f"Bearer {key}"
    content = row["raw"] if row["raw"] is not None else (
        json.dumps(row["body"]).encode() if row["body"] is not None else None)
    if content is None:
        headers.pop("content-type", None)
    return c.request(row["method"], row["path"], content=content, headers=headers)


def check(r, row):
    assert r.status_code == row["status"], (r.status_code, r.text[:400])
    assert r.headers["content-type"].startswith("application/json")
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and isinstance(e["message"], str) and e["message"]
    assert e["type"] == row["type"], e
    if row["param"] is not None or row["status"] == 400 and row["code"] in ("invalid_json", "missing_body"):
        assert e["param"] == row["param"], e
    if row["code"] is not None:
        assert e["code"] == row["code"], e
    if row["needle"]:
        assert row["needle"] in e["message"], e
    assert len(e["message"]) <= 4096  # a 3 MiB input is never echoed whole
    assert r.headers.get("x-request-id")
    SEEN_IDS.append(r.headers["x-request-id"])


@pytest.fixture(scope="module")
def clients(srv):
    with srv.client() as c:
        # beta's key without the inference scope, for the 403 row
        r = srv.admin.post("/admin/v1/tenants/beta/keys", json={"name": "ad", "scopes": ["adapters"]})
        srv.keys["beta-adapters-only"] = r.json()["key"]
    cs = {False: srv.client(timeout=60), True: srv.client(http2=True, timeout=60)}
    cs[False].headers.pop("authorization", None)
    cs[True].headers.pop("authorization", None)
    yield cs
    for c in cs.values():
        c.close()


def test_table_is_large_enough():
    assert len(TABLE) >= 40
    assert len({p.id for p in TABLE}) == len(TABLE)


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
@pytest.mark.parametrize("row", TABLE)
def test_hostile_input(srv, clients, row, http2):
    r = send(srv, clients[http2], row)
    assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    check(r, row)


CURL_ROWS = ["bad_json", "nesting_10000_arrays", "duplicate_keys", "no_authorization", "get_on_chat",
             "content_type_text_plain", "model_other_tenants_adapter", "max_tokens_over_context",
             "messages_4097", "content_part_image"]


@pytest.mark.skipif(not shutil.which("curl"), reason="curl not installed")
@pytest.mark.parametrize("flag", ["--http1.1", "--http2"])
@pytest.mark.parametrize("rid", CURL_ROWS)
def test_hostile_input_curl(srv, clients, tmp_path, rid, flag):
    row = next(p.values[0] for p in TABLE if p.id == rid)
    key = srv.keys.get(row["key"], row["key"]) if row["key"] else None
    headers = dict(JSON) if row["headers"] is None else dict(row["headers"])
    if key:
        headers["authorization"] = f"Bearer {key}"
    body = tmp_path / "body"
    body.write_bytes(row["raw"] if row["raw"] is not None else json.dumps(row["body"]).encode()
                     if row["body"] is not None else b"")
    cmd = ["curl", "-sS", flag, "--cacert", srv.cert, "-X", row["method"], "-D", str(tmp_path / "h"),
           "-o", str(tmp_path / "out"), "-w", "%{http_code} %{http_version}"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    if row["method"] != "GET":
        cmd += ["--data-binary", f"@{body}"]
    p = subprocess.run(cmd + [srv.url + row["path"]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    code, ver = p.stdout.split()
    assert ver == ("1.1" if flag == "--http1.1" else "2")

    class R:  # the bits check() reads
        status_code = int(code)
        text = (tmp_path / "out").read_text(errors="replace")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (ln.partition(":") for ln in (tmp_path / "h").read_text().splitlines()[1:] if ":" in ln)}

        def json(self):
            return json.loads(self.text)
    check(R(), row)


def test_server_survives_and_nothing_was_billed(srv):
    assert srv.proc.poll() is None, srv.stderr()[-3000:]
    assert len(SEEN_IDS) >= 2 * len(TABLE), "run the whole module: the table goes first"
    # a normal request still works, over both protocols
    for http2 in (False, True):
        with srv.client(srv.keys["acme"], http2=http2) as c:
            r = c.post(C, json={"model": MODEL, "prompt": "Bread is", "max_tokens": 3, "temperature": 0})
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] >= 1
            r = c.post(H, json=hbody(max_tokens=3, temperature=0))
            assert r.status_code == 200, r.text
    # nothing refused before the engine was billed or generated
    rows = srv.ledger()
    billed = {row["request_id"] for row in rows}
    assert not billed & set(SEEN_IDS)
    assert len(rows) == 4
    with srv.client() as c:
        m, _ = parse_metrics(c.get("/metrics").text)
    assert metric_sum(m, "loragate_generations_total") == srv.generations_before + 4
