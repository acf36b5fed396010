"""
test_kv_fp8_serve.py — `loragate serve --kv-cache-dtype fp8` (SmolLM2, TLS):
a greedy chat completion gives the text `loragate generate --chat
--kv-cache-dtype fp8` gives (the same e4m3 cache through the gateway), and
/metrics names the cache's dtype (loragate_kv_cache_info{dtype="f8e4m3"})
and the tokens the pool holds (loragate_kv_cache_tokens_capacity = pages x
16) in an exposition promtool accepts. The cache's numerics are held to an
outside reference in tests/golden/test_kv_fp8.py.
"""
import os

import pytest

from metering_util import metric, scrape_checked
from serve_fixture import LORAGATE, generate_json, smol_server

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

TEXT = "Name three colours of the rainbow and say one thing about each."


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "kvfp8", args=("--kv-cache-dtype", "fp8", "--pool-mb", "64")) as s:
        yield s


def test_fp8_chat_equals_generate_and_metrics(srv):
    client = srv.openai(srv.keys["acme"], tenant="acme")
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": TEXT}],
                                       max_tokens=32, temperature=0)
    want, _ = generate_json("--chat", "--prompt", TEXT, "--max-tokens", "32", "--kv-cache-dtype", "fp8")
    assert r.choices[0].message.content == want["text"]
    m = scrape_checked(srv)
    assert metric(m, "loragate_kv_cache_info", dtype="f8e4m3") == 1
    pages = metric(m, "loragate_pool_pages_capacity")
    assert pages and metric(m, "loragate_kv_cache_tokens_capacity") == 16 * pages
