"""
serve_fixture.py — a real `loragate serve` for end-to-end tests: a model,
a fresh data dir, TLS on 127.0.0.1 with a free port (--listen 127.0.0.1:0),
the operator key from the environment, and helpers that use the operator API
to make tenants and keys. Every wait is bounded; stop() sends SIGTERM and
waits for exit 0.
"""
import contextlib
import os
import re
import signal
import sqlite3
import ssl
import subprocess
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LG_BUILD_DIR", os.path.join(ROOT, "build"))
LORAGATE = os.environ.get("LG_BIN", os.path.join(BUILD, "loragate"))
SMOLLM2 = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TINY = os.path.join(ROOT, "tests", "golden", "lora_fixtures", "base")
LORA_FIX = os.path.join(ROOT, "tests", "golden", "lora_fixtures")
ADMIN_KEY = "lg-admin-" + "e2e" * 15


class Serve:
    def __init__(self, tmp_path, model, *args, start_timeout=60, env=None):
        self.data_dir = str(tmp_path / "data")
        self.stderr_path = tmp_path / f"serve-{time.monotonic_ns()}.err"
        cmd = [LORAGATE, "serve", "--model", model, "--data-dir", self.data_dir, "--listen", "127.0.0.1:0",
               "--threads", "2", "--access-log", str(tmp_path / "access.log"), *args]
        if "--drain-timeout" not in args:
            cmd += ["--drain-timeout", "10"]
        env = dict(os.environ, LORAGATE_ADMIN_KEY=ADMIN_KEY, **(env or {}))
        self.err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=env, text=True)
        self.url = None
        deadline = time.monotonic() + start_timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"serving on (\S+)", line)
            if m and not self.url:
                self.url = m.group(1)
            if line.startswith("loragate: try:"):
                break
        if not self.url:
            self.stop()
            raise RuntimeError("serve did not start:\n" + "".join(lines) + self.stderr())
        self.cert = os.path.join(self.data_dir, "tls", "cert.pem")
        self.admin = self.client(ADMIN_KEY)

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        return open(self.stderr_path, errors="replace").read()

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not self.err.closed:
            self.err.close()
        return self.proc.returncode

    def verify(self):
        return ssl.create_default_context(cafile=self.cert)

    def client(self, key=None, http2=False, timeout=60):
        h = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, verify=self.verify(), http2=http2, timeout=timeout, headers=h)

    def openai(self, key, tenant=None, **kw):
        import openai
        base = f"{self.url}/t/{tenant}/v1" if tenant else f"{self.url}/v1"
        return openai.OpenAI(base_url=base, api_key=key, http_client=httpx.Client(verify=self.verify(), timeout=60),
                             max_retries=0, **kw)

    # ---- operator API ----
    def tenant(self, name, **spec):
        r = self.admin.post("/admin/v1/tenants", json={"name": name, **spec})
        assert r.status_code in (200, 201), r.text
        return r.json()

    def key(self, tenant, scopes=("inference", "adapters"), name="test"):
        r = self.admin.post(f"/admin/v1/tenants/{tenant}/keys", json={"name": name, "scopes": list(scopes)})
        assert r.status_code in (200, 201), r.text
        return r.json()["key"]

    def import_adapter(self, tenant, name, path):
        r = self.admin.post(f"/admin/v1/tenants/{tenant}/adapters/import", json={"name": name, "path": path})
        assert r.status_code in (200, 201), r.text
        return r.json()

    def leave_mid_stream(self, key, tenant, content, events, max_tokens=400):
        """Streams a greedy chat completion at the tenant's URL and closes the
        connection after `events` data events; returns the ledger row of the
        request (waited for: the server writes it when it notices)."""
        c = self.client(key)
        with c.stream("POST", f"/t/{tenant}/v1/chat/completions",
                      json={"model": "smollm2", "messages": [{"role": "user", "content": content}],
                            "max_tokens": max_tokens, "temperature": 0, "stream": True}) as resp:
            assert resp.status_code == 200
            rid = resp.headers["x-request-id"]
            n = 0
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    n += 1
                    if n >= events:
                        break
        c.close()
        deadline = time.monotonic() + 15
        rows = []
        while time.monotonic() < deadline and not rows:
            rows = self.ledger("request_id = ?", (rid,))
            time.sleep(0.1)
        assert len(rows) == 1, "no ledger record for the disconnected request"
        return rows[0]

    def ledger(self, where="1=1", args=()):
        """Rows of the usage ledger (read-only connection; WAL lets it read while serving)."""
        db = sqlite3.connect(f"file:{os.path.join(self.data_dir, 'loragate.db')}?mode=ro", uri=True, timeout=10)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(f"SELECT * FROM usage_records WHERE {where} ORDER BY received_at",
                                                 args)]
        finally:
            db.close()


@contextlib.contextmanager
def server(tmp_path_factory, name, model, tenants=("acme",), env=None, args=()):
    """`loragate serve` on `model` (more options in args) with the given
    tenants and a key each (s.keys); stopped, and its exit status checked, on
    leaving."""
    s = Serve(tmp_path_factory.mktemp(name), model, *args, env=env)
    try:
        for t in tenants:
            s.tenant(t)
        s.keys = {t: s.key(t) for t in tenants}
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


@contextlib.contextmanager
def smol_server(tmp_path_factory, name, tenants=("acme",), env=None, args=()):
    """server() on the default model, served as "smollm2". Skips when the model
    is not downloaded."""
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    with server(tmp_path_factory, name, SMOLLM2, tenants, env, ("--served-model-name", "smollm2", *args)) as s:
        yield s


def generate_json(*args, timeout=300):
    """`loragate generate --json` on the default model (2 threads, more options in args): its last JSON line,
    and its stderr."""
    import json
    p = subprocess.run([LORAGATE, "generate", "--model", SMOLLM2, "--threads", "2", "--json", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr
