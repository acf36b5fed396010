"""
clients_venv.py — where the third-party clients of tests/e2e/test_clients_*.py
live (.venv/clients, made by tests/clients/install.sh), and how their
processes are started: offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE), with
the server's self-signed certificate trusted (REQUESTS_CA_BUNDLE,
SSL_CERT_FILE), USE_TORCH=0, and for guidellm the torch stand-in on
PYTHONPATH (tests/clients/shims, see its note). A tokenizer directory for
the default model (the HF tokenizer.json of tests/tokenizer/fixtures/smollm2,
which our tokenizer matches, plus a tokenizer_config.json) is what lm-eval
and guidellm load with transformers.
"""
import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("LG_CLIENTS_VENV", os.path.join(ROOT, ".venv", "clients"))
TASKS = os.path.join(HERE, "tasks")
SHIMS = os.path.join(HERE, "shims")
SMOLLM2_TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "smollm2", "tokenizer.json")


def ensure():
    """Runs install.sh (a no-op once the venv is complete); returns its bin directory, or raises with pip's
    output (the tests fail: the clients are part of what they check)."""
    r = subprocess.run(["bash", os.path.join(HERE, "install.sh")], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("tests/clients/install.sh failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    return os.path.join(VENV, "bin")


def tokenizer_dir(tmp):
    d = os.path.join(str(tmp), "smollm2-tokenizer")
    os.makedirs(d, exist_ok=True)
    shutil.copy(SMOLLM2_TOKENIZER, os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
                   "eos_token": "<|im_end|>", "model_max_length": 8192}, f)
    return d


def env(cert, key=None, shim=False):
    e = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", USE_TORCH="0",
             REQUESTS_CA_BUNDLE=cert, SSL_CERT_FILE=cert, TOKENIZERS_PARALLELISM="false")
    if key:
        e["OPENAI_API_KEY"] = key
    if shim:
        e["PYTHONPATH"] = SHIMS + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e
