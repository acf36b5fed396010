"""
test_clients_eval.py — lm-eval (EleutherAI's lm-evaluation-harness, PyPI
`lm-eval`, its `local-completions` model) run unchanged against `loragate
serve` on the default model, over TLS on loopback, on two tasks defined
from local files (tests/clients/tasks: a multiple-choice task, whose
loglikelihood requests are /v1/completions with echo + logprobs and
max_tokens 1, and a generate_until task; no network: the data are JSONL
files, the tokenizer is the model's HF tokenizer.json, installed by
tests/clients/install.sh into .venv/clients).

What must hold: lm-eval runs to the end and writes its results; every
loglikelihood it read equals, within 2e-3, the sum over the continuation's
tokens of the log-softmax of our own CLI's logits (`loragate generate
--batch --logits`, the logits at each prefix's last position, in float64
here) for the tokens lm-eval sent (its own split of context and
continuation, reproduced with the same tokenizer.json); the generate_until
answers are the server's greedy completions cut at the task's stop strings.
"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from serve_fixture import LORAGATE, SMOLLM2, smol_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "clients"))
import clients_venv  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "lmeval") as s:
        yield s


def encode_pair(tok, context, continuation):
    """lm-eval's TemplateAPI._encode_pair with the huggingface backend (no special tokens)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok.encode(context + continuation, add_special_tokens=False).ids
    ctx = tok.encode(context, add_special_tokens=False).ids
    return ctx, whole[len(ctx):]


def cli_loglikelihoods(tmp_path, pairs):
    """Per (context ids, continuation ids): sum of log-softmax(CLI logits at the position before each
    continuation token)[that token], float64."""
    lines, index = [], []
    for i, (ctx, cont) in enumerate(pairs):
        full = ctx + cont
        for k in range(len(ctx), len(full)):
            lines.append({"prompt_tokens": full[:k], "max_tokens": 1})
            index.append((i, full[k]))
    batch = tmp_path / "prefixes.jsonl"
    batch.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([LORAGATE, "generate", "--model", SMOLLM2, "--batch", str(batch), "--logits", "--json",
                        "--threads", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    outs = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(outs) == len(lines)
    ll = [0.0] * len(pairs)
    for (i, tok), o in zip(index, outs):
        lg = np.asarray(o["last_logits"], dtype=np.float64)
        m = lg.max()
        ll[i] += lg[tok] - (m + np.log(np.exp(lg - m).sum()))
    return ll


def test_lm_eval_local_completions(srv, tmp_path):
    bindir = clients_venv.ensure()
    tokdir = clients_venv.tokenizer_dir(tmp_path)
    out = tmp_path / "lm_eval_out"
    key = srv.keys["acme"]
    args = [os.path.join(bindir, "lm_eval"), "--model", "local-completions", "--model_args",
            f"base_url={srv.url}/t/acme/v1/completions,model=smollm2,tokenizer={tokdir},"
            "tokenizer_backend=huggingface,num_concurrent=1,max_retries=1",
            "--tasks", "loragate_mc,loragate_gen", "--include_path", clients_venv.TASKS,
            "--output_path", str(out), "--log_samples"]
    env = clients_venv.env(srv.cert, key)
    env["HF_DATASETS_CACHE"] = str(tmp_path / "hf_datasets")
    r = subprocess.run(args, cwd=clients_venv.TASKS, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    results = json.load(open(glob.glob(str(out / "*" / "results_*.json"))[0]))["results"]
    assert results["loragate_mc"]["sample_len"] == 5 and "acc,none" in results["loragate_mc"]
    assert results["loragate_gen"]["sample_len"] == 3 and "exact_match,none" in results["loragate_gen"]

    # the loglikelihoods lm-eval read, against our CLI's logits for the same tokens
    tok = tokenizers.Tokenizer.from_file(clients_venv.SMOLLM2_TOKENIZER)
    pairs, got = [], []
    for line in open(glob.glob(str(out / "*" / "samples_loragate_mc_*.jsonl"))[0]):
        s = json.loads(line)
        for k in sorted(s["arguments"], key=lambda a: int(a.split("_")[-1])):
            a = s["arguments"][k]
            pairs.append(encode_pair(tok, a["arg_0"], a["arg_1"]))
        got += [float(resp[0][0]) for resp in s["resps"]]
    assert len(pairs) == len(got) == 17
    want = cli_loglikelihoods(tmp_path, pairs)
    worst = max(abs(a - b) for a, b in zip(got, want))
    assert worst < 2e-3, list(zip(got, want))
    # the answers are ranked as the logits rank them: lm-eval's acc is the argmax of those sums
    assert 0.0 <= results["loragate_mc"]["acc,none"] <= 1.0

    # generate_until: the greedy completion of each question, cut at the first stop string
    c = srv.client(key)
    for line in open(glob.glob(str(out / "*" / "samples_loragate_gen_*.jsonl"))[0]):
        s = json.loads(line)
        ctx = s["arguments"]["gen_args_0"]["arg_0"]
        r2 = c.post("/t/acme/v1/completions", json={"model": "smollm2", "prompt": ctx, "max_tokens": 16,
                                                     "temperature": 0})
        text = r2.json()["choices"][0]["text"]
        for stop in ("\n", "Q:"):
            text = text.split(stop)[0]
        assert s["resps"][0][0] == text, (s["resps"], text)
