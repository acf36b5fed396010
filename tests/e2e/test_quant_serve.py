"""
test_quant_serve.py — `loragate serve --dequant-dtype f16 --quantization fp8`
(SmolLM2's GGUF blocks expanded, then quantized to FP8 W8A8; TLS): a greedy
chat completion through the gateway gives the text `loragate generate --chat`
gives with the same options (the same weights and matmuls behind the gateway), GET /v1/models names the base model's quantization, and
/metrics carries loragate_model_quantization_info{quantization="fp8"} in an
exposition promtool accepts. The quantized matmuls' numerics are held to
outside references in tests/quant (checkpoints written by llm-compressor,
GPTQModel and transformers; float64 logits) and tests/unit/engine/backend.
"""
import os
import subprocess

import pytest

from metering_util import metric, scrape_checked
from serve_fixture import LORAGATE, SMOLLM2, generate_json, smol_server

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

TEXT = "Name three colours of the rainbow and say one thing about each."


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "quantfp8", args=("--dequant-dtype", "f16", "--quantization", "fp8", "--pool-mb", "64")) as s:
        yield s


def test_fp8_chat_equals_generate_models_and_metrics(srv):
    client = srv.openai(srv.keys["acme"], tenant="acme")
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": TEXT}],
                                       max_tokens=24, temperature=0)
    want, stderr = generate_json("--chat", "--prompt", TEXT, "--max-tokens", "24", "--dequant-dtype", "f16",
                                 "--quantization", "fp8")
    assert "quantization fp8" in stderr
    assert r.choices[0].message.content == want["text"]
    base = [m for m in client.models.list().data if m.id == "smollm2"]
    assert base and base[0].model_extra.get("quantization") == "fp8", client.models.list()
    m = scrape_checked(srv)
    assert metric(m, "loragate_model_quantization_info", quantization="fp8") == 1


def test_quantization_refused_by_name(tmp_path):
    p = subprocess.run([LORAGATE, "generate", "--model", SMOLLM2, "--prompt", "hi", "--max-tokens", "1",
                        "--quantization", "awq"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--quantization" in p.stderr and "awq" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
