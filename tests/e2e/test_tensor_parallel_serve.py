"""
test_tensor_parallel_serve.py — `loragate serve --tensor-parallel-size 2` end
to end on the CPU backend (two CPU ranks in one group: engine/model/model_tp.c),
driven by the official `openai` SDK over real TLS on loopback.

Outside reference: the tiny fixture model and its PEFT adapters
(tests/golden/lora_fixtures, HF transformers + peft in float64): greedy
completions through a tenant's URL reproduce HF/peft's greedy tokens and
first-token log-probability, per adapter, with the adapters imported and
uploaded (multipart) while the server runs: an adapter that arrives at run
time reaches every rank before the first request that uses it. A repeated
prompt reports cached tokens (one page table over the ranks).
"""
import os

import numpy as np
import pytest

from lora_reference import REF, check_greedy, ref_case
from serve_fixture import LORA_FIX, LORAGATE, TINY, server

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

ADAPTERS = ["r8_rslora_attn", "r16_all_linear", "r64_mlp"]


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    with server(tmp_path_factory, "tp2", TINY, args=("--max-lora-rank", "64", "--tensor-parallel-size", "2")) as s:
        yield s


def _check_reference(srv, adapter, prompt=1):
    c = ref_case(adapter, prompt)
    if c is None:
        pytest.skip(f"no reference case for {adapter} prompt {prompt}")
    client = srv.openai(srv.keys["acme"], tenant="acme")
    r = client.completions.create(model=adapter or "base", prompt=c["ids"], max_tokens=REF["n_greedy"],
                                  temperature=0, logprobs=2)
    ch = r.choices[0]
    check_greedy([int(t.split(":")[1]) for t in ch.logprobs.tokens], ch.logprobs.token_logprobs[0], c)
    return r


def test_base_matches_hf(tp2):
    _check_reference(tp2, None)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapter_imported_at_run_time_matches_peft(tp2, adapter):
    tp2.import_adapter("acme", adapter, os.path.join(LORA_FIX, REF["adapters"][adapter]["dir"]))
    _check_reference(tp2, adapter)


def test_uploaded_adapter_and_prefix_cache(tp2):
    """A multipart upload while serving, then the same prompt twice: the second is served from the cache."""
    d = os.path.join(LORA_FIX, "r1_qv")
    files = {"config": ("adapter_config.json", open(os.path.join(d, "adapter_config.json"), "rb").read(),
                        "application/json"),
             "weights": ("adapter_model.safetensors", open(os.path.join(d, "adapter_model.safetensors"), "rb").read(),
                         "application/octet-stream")}
    with tp2.client(tp2.keys["acme"]) as c:
        r = c.post("/v1/adapters", data={"name": "up1"}, files=files)
        assert r.status_code in (200, 201), r.text
    client = tp2.openai(tp2.keys["acme"], tenant="acme")
    prompt = [int(x) for x in np.random.default_rng(3).integers(3, 300, size=70)]
    a = client.completions.create(model="up1", prompt=prompt, max_tokens=6, temperature=0)
    b = client.completions.create(model="up1", prompt=prompt, max_tokens=6, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    assert b.usage.prompt_tokens_details.cached_tokens >= 64
