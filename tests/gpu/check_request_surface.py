"""check_request_surface.py — the request surface on the CUDA backend against
the CPU backend (run on the GPU machine by run_device.sh's `surface` step;
python3's standard library only, plain HTTP on loopback).

Starts `loragate serve` on the tiny golden fixture model with --backend cpu,
then cuda, then cuda with LG_HOST_SAMPLE=1, and sends the same requests to
each:
  - prompt logprobs (vLLM's prompt_logprobs, 300 prompt tokens: more than one
    chunk of prompt-logit rows) and echo + logprobs on /v1/completions;
  - eight seeded sampled completions at once, half with repetition_penalty,
    min_tokens and stop_token_ids (sampled on the host), half plain (sampled
    on the device): the same step carries both kinds.
Checks: CUDA's prompt logprobs within 0.05 of the CPU's (f16 activations
against f32) and the same top token where the CPU's best two are 0.1 apart;
the sampled texts of cuda and cuda + LG_HOST_SAMPLE=1 identical (a seed
gives the same tokens whichever side samples). Prints a table; exit 1 on a
mismatch.

    python3 tests/gpu/check_request_surface.py build-cuda/loragate
    SURFACE_BACKEND=cpu LG_CPU_DEVICE_SAMPLE=1 python3 tests/gpu/check_request_surface.py build/loragate
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests", "golden", "lora_fixtures", "base")
ADMIN = "lg-admin-" + "gpu" * 15


def call(url, path, body=None, key=ADMIN, method=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method or ("POST" if data else "GET"),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def serve(binary, backend, env_extra):
    d = tempfile.mkdtemp()
    env = dict(os.environ, LORAGATE_ADMIN_KEY=ADMIN, **env_extra)
    p = subprocess.Popen([binary, "serve", "--model", MODEL, "--data-dir", d, "--listen", "127.0.0.1:0",
                          "--insecure-http", "--backend", backend, "--access-log", "off", "--pool-mb", "512"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    url = None
    for line in p.stdout:
        m = re.search(r"serving on (\S+)", line)
        if m:
            url = m.group(1)
        if line.startswith("loragate: try:"):
            break
    if not url:
        p.kill()
        raise SystemExit(f"serve --backend {backend} did not start: {p.stderr.read()[-2000:]}")
    assert call(url, "/admin/v1/tenants", {"name": "acme"})[0] in (200, 201)
    st, k = call(url, "/admin/v1/tenants/acme/keys", {"name": "t", "scopes": ["inference"]})
    return p, url, k["key"]


def run(binary, backend, env_extra):
    p, url, key = serve(binary, backend, env_extra)
    out = {}
    try:
        prompt = [(7 * i + 3) % 300 + 3 for i in range(300)]
        st, a = call(url, "/v1/completions", {"model": "base", "prompt": prompt, "max_tokens": 0, "prompt_logprobs": 2},
                     key)
        assert st == 200, a
        out["plp"] = a["choices"][0]["prompt_logprobs"]
        st, b = call(url, "/v1/completions", {"model": "base", "prompt": prompt[:40], "max_tokens": 4, "echo": True,
                                              "logprobs": 3, "temperature": 0}, key)
        assert st == 200, b
        out["echo"] = b["choices"][0]["logprobs"]
        res = [None] * 8

        def one(i):
            body = {"model": "base", "prompt": prompt[i * 10:i * 10 + 20], "max_tokens": 24, "temperature": 0.9,
                    "seed": 100 + i}
            if i % 2:
                body.update(repetition_penalty=1.3, min_tokens=6, stop_token_ids=[11, 12])
            res[i] = call(url, "/v1/completions", body, key)

        ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        for st, r in res:
            assert st == 200, r
        out["sampled"] = [r["choices"][0]["text"] + "|" + r["choices"][0]["finish_reason"] for _, r in res]
    finally:
        p.terminate()
        p.wait(30)
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-cuda", "loragate")
    cpu = run(binary, "cpu", {})
    backend = os.environ.get("SURFACE_BACKEND", "cuda")  # cpu: the script's own check, without a GPU
    cuda = run(binary, backend, {})
    host = run(binary, backend, {"LG_HOST_SAMPLE": "1"})
    bad = 0
    worst, top_miss, n = 0.0, 0, 0
    for pc, pg in zip(cpu["plp"][1:], cuda["plp"][1:]):
        for tok, v in pc.items():
            if tok in pg:
                worst = max(worst, abs(v["logprob"] - pg[tok]["logprob"]))
        best = sorted(pc.values(), key=lambda v: v["rank"])
        if len(best) > 1 and best[0]["logprob"] - best[1]["logprob"] > 0.1:
            n += 1
            top_c = min(pc, key=lambda t: pc[t]["rank"])
            top_g = min(pg, key=lambda t: pg[t]["rank"])
            top_miss += top_c != top_g
    e_c = [x for x in cpu["echo"]["token_logprobs"][1:41]]
    e_g = [x for x in cuda["echo"]["token_logprobs"][1:41]]
    echo_worst = max(abs(a - b) for a, b in zip(e_c, e_g))
    print(f"prompt logprobs, 299 positions: max |cuda - cpu| {worst:.4f}; top token differs at {top_miss} of {n} "
          f"positions where the cpu's best two are > 0.1 apart")
    print(f"echo logprobs, 39 prompt positions: max |cuda - cpu| {echo_worst:.4f}")
    same = sum(a == b for a, b in zip(cuda["sampled"], host["sampled"]))
    print(f"sampled (seeded, repetition_penalty/min_tokens on odd ones): cuda == cuda+LG_HOST_SAMPLE=1 for {same} of 8")
    if worst > 0.05 or echo_worst > 0.05 or top_miss:
        bad = 1
    if same != 8:
        bad = 1
        for a, b in zip(cuda["sampled"], host["sampled"]):
            print("  device:", a, "\n  host:  ", b)
    print("SURFACE OK" if not bad else "SURFACE MISMATCH")
    return bad


if __name__ == "__main__":
    sys.exit(main())
