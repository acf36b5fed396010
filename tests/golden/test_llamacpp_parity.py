"""
test_llamacpp_parity.py — the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) on the CPU
backend, its weights kept in their blocks, against llama.cpp on the same file.

llama.cpp (llama-cpp-python, built from its PyPI source) runs in its own Python, named by
LG_LLAMACPP_PY (skipped when unset: it is not in tests/requirements.txt, as it compiles
llama.cpp); llamacpp_ref.py gives its prompt ids, last-position logits and greedy path.
For each prompt (short and long, prose, code, a chat turn) loragate runs
    $LG_BIN generate --model <gguf> --prompt-tokens <llama.cpp's ids> --max-tokens 24 --json --logits
and must give:
  - last_logits within relative L2 0.12 and max abs 2.0 of llama.cpp's. Both engines quantize
    activations to 8 bits per block before each matmul, but llama.cpp keeps its KV cache and
    attention products in f16 and we in f32, so the two roundings decorrelate after the first
    layer: measured rel L2 0.007-0.08, max abs 0.5-1.0 with the AVX-512 VNNI and the AVX2 kernels
    (LG_CPU_ISA=2) alike (the f32-expanded weights,
    --dequant-dtype f32, are 0.03-0.05 from llama.cpp too);
  - tokens: llama.cpp's greedy path step by step while its step is clear (top-two logits more
    than 1.0 apart, about the max abs difference above); from the first unclear step on the
    paths may diverge and nothing more is compared. At least 8 of the compared steps in all.
Env: LG_BIN (default <repo>/build/loragate), LG_LLAMACPP_PY, LG_GGUF (default the README's
model under .models/).
"""
import json
import os
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LG_BIN = os.path.abspath(os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate")))
GGUF = os.environ.get("LG_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY = os.environ.get("LG_LLAMACPP_PY")
N_GEN = 24
REL_L2, MAX_ABS, CLEAR = 0.12, 2.0, 1.0

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colors are",
    "import numpy as np\n\nx = np.arange(10)\n",
    " ".join(["The history of the printing press begins in the fifteenth century, when movable type "
              "changed how books were made and read across Europe."] * 12) + " In summary,",
    "Water boils at",
]


@pytest.fixture(scope="module")
def reference():
    if not PY:
        pytest.skip("LG_LLAMACPP_PY (a Python with llama-cpp-python) not set")
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF}")
    p = subprocess.run([PY, os.path.join(HERE, "llamacpp_ref.py"), GGUF, str(N_GEN)], input=json.dumps(PROMPTS),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def ours(ids):
    p = subprocess.run([LG_BIN, "generate", "--model", GGUF, "--prompt-tokens", ",".join(map(str, ids)),
                        "--max-tokens", str(N_GEN), "--json", "--logits", "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_logits_and_greedy_paths_match_llamacpp(reference):
    compared, report = 0, []
    for text, ref in zip(PROMPTS, reference):
        got = ours(ref["ids"])
        a, b = np.array(got["last_logits"]), np.array(ref["last_logits"])
        rel, mx = np.linalg.norm(a - b) / np.linalg.norm(b), np.abs(a - b).max()
        report.append(f"{len(ref['ids'])} tokens: rel L2 {rel:.3f}, max abs {mx:.2f}")
        assert rel < REL_L2 and mx < MAX_ABS, (text[:40], report[-1])
        for i, (want, margin) in enumerate(zip(ref["tokens"], ref["margins"])):
            if margin <= CLEAR:
                break
            assert i < len(got["tokens"]) and got["tokens"][i] == want, (text[:40], i, got["tokens"], ref["tokens"])
            compared += 1
    print("\n".join(report), f"\n{compared} clear greedy steps equal")
    assert compared >= 8
