"""
test_dummy_quantized.py — `loragate bench --load-format dummy --quantization fp8|int4`: dummy weights are made
in the planar layouts directly (engine/model/weights_quantize.c lg_weights_dummy_quantized: a 70B shape's 16-bit
dummy weights would not fit a host), the load log names the scheme and the model runs. (Plumbing for benchmarks; the layouts' numerics are held in test_quant_logits.py.)
"""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LG_BIN = os.path.abspath(os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate")))
MODEL = os.path.join(ROOT, "tests", "golden", "fixtures", "llama_gqa_f32")


def bench(mode):
    p = subprocess.run([LG_BIN, "bench", "--model", MODEL, "--load-format", "dummy", "--backend", "cpu",
                        "--quantization", mode, "--num-seqs", "2", "--prompt-len", "8", "--output-len", "4",
                        "--json", "--no-progress", "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.mark.parametrize("mode", ["fp8", "int4"])
def test_dummy_weights_quantized_in_place(mode):
    if not os.access(LG_BIN, os.X_OK):
        pytest.skip("loragate not built")
    r, err = bench(mode)
    assert f"quantization {mode}" in err and "dummy weights" in err, err
    assert r["output_tok_s"] > 0
