"""
test_gie_replicas.py — the operator's procedure for several replicas behind
the Gateway API Inference Extension (docs/operations.md), with two real
`loragate serve` processes (the tiny model, TLS, loopback), each with its
own data directory:

  - a replica seeded from another's `loragate backup` and adapter files
    accepts the same tenant keys and serves the same adapters (greedy output
    equal to the first replica's);
  - the same operator calls to each replica keep tenants and adapters the
    same; revoking a seeded key on each refuses it on each (same key id);
  - a key created on one running replica is unknown to the other (the
    documented limit: key secrets are random per store);
  - each replica bills only what it served after the seed.
"""
import os
import shutil
import subprocess

import pytest

from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

ADAPTER = os.path.join(LORA_FIX, "r8_rslora_attn")
OTHER = os.path.join(LORA_FIX, "r1_qv")


def complete(s, key, tenant, model, status=200):
    with s.client(key) as c:
        r = c.post(f"/t/{tenant}/v1/completions",
                   json={"model": model, "prompt": [5, 6, 7, 8, 9], "max_tokens": 6, "temperature": 0})
    assert r.status_code == status, r.text
    return r.json()["choices"][0]["text"] if status == 200 else None


def test_seeded_replicas_share_tenants_keys_adapters(tmp_path):
    if not os.path.exists(TINY):
        pytest.skip("tiny model fixture missing")
    (tmp_path / "r0").mkdir()
    r0 = Serve(tmp_path / "r0", TINY)
    r1 = None
    try:
        # replica 0: tenants, a key, an adapter; one request before the seed
        r0.tenant("acme")
        key = r0.key("acme")
        key_id = r0.admin.get("/admin/v1/tenants/acme/keys").json()["data"][0]["id"]
        r0.import_adapter("acme", "sql", ADAPTER)
        want = complete(r0, key, "acme", "sql")

        # the seed: a backup of the store and the adapter files, laid out as replica 1's data dir
        seed = str(tmp_path / "seed.db")
        p = subprocess.run([LORAGATE, "backup", "--data-dir", r0.data_dir, "--out", seed], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        d1 = tmp_path / "r1" / "data"
        d1.mkdir(parents=True)
        shutil.copy(seed, d1 / "loragate.db")
        os.chmod(d1 / "loragate.db", 0o600)
        shutil.copytree(os.path.join(r0.data_dir, "adapters"), d1 / "adapters")
        r1 = Serve(tmp_path / "r1", TINY)

        # the same key and adapter on replica 1, the same greedy output
        assert complete(r1, key, "acme", "sql") == want
        assert complete(r0, key, "acme", "sql") == want

        # the same operator calls to each: a tenant and its adapter exist on both
        for s in (r0, r1):
            s.tenant("beta")
            s.import_adapter("beta", "chat", OTHER)
        digests = {s.admin.get("/admin/v1/tenants/beta/adapters/chat").json()["digest"] for s in (r0, r1)}
        assert len(digests) == 1

        # a key made on a running replica is that replica's alone
        beta_key = r0.key("beta")
        complete(r0, beta_key, "beta", "chat")
        complete(r1, beta_key, "beta", "chat", status=401)

        # each replica bills what it served: replica 1 has replica 0's pre-seed record and its own one
        assert len(r0.ledger()) == 3 and len(r1.ledger()) == 2
        assert r0.ledger()[0]["request_id"] == r1.ledger()[0]["request_id"]

        # revoking the seeded key on each replica (one id) refuses it everywhere
        for s in (r0, r1):
            assert s.admin.delete(f"/admin/v1/keys/{key_id}").status_code == 200
            complete(s, key, "acme", "sql", status=401)
    finally:
        codes = [r0.stop()] + ([r1.stop()] if r1 else [])
        assert codes == [0] * len(codes), r0.stderr()[-2000:]
