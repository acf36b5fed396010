"""
test_hardening_small.py — small hardening items, against a real
`loragate serve` over TLS on 127.0.0.1 (tiny fixture model):

  - a multipart field that must be text (the adapter's name, its config)
    with a NUL byte is refused with a 400 naming the field, and the adapter
    it would have cut the name to ("secret-b\\0" -> "secret-b") is untouched;
  - tenant names that no URL could reach ("bad-", "-bad", "UPPER", ...) are
    refused with a 400 that states the rule; a name that is accepted is
    routable at /t/<name>/v1;
  - under umask 022, a data directory loragate creates is 0700 and
    loragate.db, -wal, -shm, admin.key and tls/key.pem are 0600;
  - an existing data directory open to others is warned about, not changed;
    leftovers of a previous process in DATA_DIR/tmp (upload-*, put-*,
    h2o.b.*) are removed at start, other names stay;
  - the start-up lines say where the operator key is, never any part of it.
"""
import os
import re
import signal
import ssl
import subprocess
import time

import httpx
import pytest

from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


def err_of(r, status, code=None, param=None):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"} and e["message"]
    if code is not None:
        assert e["code"] == code, e
    if param is not None:
        assert e["param"] == param, e
    return e


def fixture_files(name):
    d = os.path.join(LORA_FIX, name)
    with open(os.path.join(d, "adapter_config.json"), "rb") as f:
        cfg = f.read()
    with open(os.path.join(d, "adapter_model.safetensors"), "rb") as f:
        w = f.read()
    return cfg, w


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("hardening"), TINY, "--max-lora-rank", "32")
    try:
        s.tenant("acme")
        s.keys = {"acme": s.key("acme")}
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


# ---- NUL bytes in text fields ---------------------------------------------------

def upload(srv, name, cfg, w):
    files = {"name": (None, name), "config": ("adapter_config.json", cfg, "application/json"),
             "weights": ("adapter_model.safetensors", w, "application/octet-stream")}
    with srv.client(srv.keys["acme"]) as c:
        return c.post("/v1/adapters", files=files)


def adapters(srv):
    with srv.client(srv.keys["acme"]) as c:
        r = c.get("/v1/adapters")
        assert r.status_code == 200, r.text
        return {a["name"]: a for a in r.json()["data"]}


def tmp_entries(srv):
    t = os.path.join(srv.data_dir, "tmp")
    return sorted(os.listdir(t)) if os.path.isdir(t) else []


def test_nul_in_text_fields_refused(srv):
    cfg, w = fixture_files("r8_rslora_attn")
    r = upload(srv, b"secret-b", cfg, w)
    assert r.status_code == 201, r.text
    before = adapters(srv)["secret-b"]
    cfg2, w2 = fixture_files("r4_patterns")
    # "secret-b\0" would have replaced secret-b; "a\0b" would have made "a"
    for name in (b"secret-b\x00", b"a\x00b", b"\x00", b"secret-b\x00-evil"):
        e = err_of(upload(srv, name, cfg2, w2), 400, "invalid_value", "name")
        assert "NUL" in e["message"], e
    # the config is text too (JSON has no raw NUL)
    err_of(upload(srv, b"fresh", cfg2 + b"\x00", w2), 400, "invalid_value", "config")
    err_of(upload(srv, b"fresh", b"\x00" + cfg2, w2), 400, "invalid_value", "config")
    after = adapters(srv)
    assert after["secret-b"] == before  # same version, digest, time
    assert set(after) == {"secret-b"}
    assert tmp_entries(srv) == []  # the refused uploads left nothing


# ---- tenant names ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bad-", "-bad", "-", "UPPER", "Acme", "a_b", "a.b", "a b", "x" * 64,
                                  "ok-", "é"])
def test_unroutable_tenant_names_refused(srv, name):
    e = err_of(srv.admin.post("/admin/v1/tenants", json={"name": name}), 400, "invalid_value", "name")
    assert "starting and ending with a letter or digit" in e["message"], e
    assert "1 to 63" in e["message"], e
    names = {t["name"] for t in srv.admin.get("/admin/v1/tenants").json()["data"]}
    assert name not in names


def test_tenant_name_nul_refused(srv):
    r = srv.admin.post("/admin/v1/tenants", content=b'{"name":"ok\\u0000x"}',
                       headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("name", ["ok-1", "9", "a--b", "y" * 63])
def test_valid_tenant_names_are_routable(srv, name):
    srv.tenant(name)
    k = srv.key(name)
    with srv.client(k) as c:
        r = c.get(f"/t/{name}/v1/models")
        assert r.status_code == 200, r.text


# ---- a server started by hand (umask, its output) ----------------------------------------

class Proc:
    """`loragate serve` with the umask set in the child and its stdout and
    stderr kept in files; the operator key from env (None: generated)."""

    def __init__(self, tmp_path, data_dir, admin_key=None, umask=0o022):
        self.out_path, self.err_path = tmp_path / "serve.out", tmp_path / "serve.err"
        env = dict(os.environ)
        env.pop("LORAGATE_ADMIN_KEY", None)
        if admin_key:
            env["LORAGATE_ADMIN_KEY"] = admin_key
        cmd = [LORAGATE, "serve", "--model", TINY, "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
               "--threads", "2", "--access-log", "off", "--drain-timeout", "10"]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=lambda: os.umask(umask))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            if "docs/api.md" in self.out():  # the banner's last line: everything is printed
                break
            time.sleep(0.05)
        m = re.search(r"serving on (\S+)", self.out())
        if not m or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("serve did not start:\n" + self.out() + self.err())
        self.url = m.group(1)
        self.cert = os.path.join(str(data_dir), "tls", "cert.pem")

    def out(self):
        return open(self.out_path, errors="replace").read()

    def err(self):
        return open(self.err_path, errors="replace").read()

    def client(self, key=None):
        h = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=self.cert), timeout=30,
                            headers=h)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def mode(path):
    return os.lstat(path).st_mode & 0o7777


def test_modes_under_umask_022_and_banner_without_key(tmp_path):
    data = tmp_path / "data"  # loragate creates it
    s = Proc(tmp_path, data)
    try:
        key_path = data / "admin.key"
        key = key_path.read_text().strip()
        with s.client(key) as c:
            assert c.post("/admin/v1/tenants", json={"name": "acme"}).status_code == 201
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (os.path.exists(data / "loragate.db-wal")
                                                   and os.path.exists(data / "loragate.db-shm")):
            time.sleep(0.05)
        assert mode(data) == 0o700, oct(mode(data))
        for f in ("loragate.db", "loragate.db-wal", "loragate.db-shm", "admin.key", "tls/key.pem"):
            assert mode(data / f) == 0o600, (f, oct(mode(data / f)))
        assert mode(data / "tmp") == 0o700
        # the start-up lines: where the key is, no part of it
        text = s.out() + s.err()
        assert str(key_path) in text, text
        assert key not in text and key[:13] not in text, text
        secret = key[len("lg-admin-"):]
        parts = [secret[i:i + 6] for i in range(len(secret) - 5)]
        assert not [p for p in parts if p in text], text
    finally:
        assert s.stop() == 0, s.err()[-3000:]


def test_banner_with_key_from_env(tmp_path):
    key = "lg-admin-" + "Zq7Xw3Vb" * 6
    s = Proc(tmp_path, tmp_path / "data", admin_key=key)
    try:
        with s.client(key) as c:
            assert c.get("/admin/v1/tenants").status_code == 200
        text = s.out() + s.err()
        assert "$LORAGATE_ADMIN_KEY" in text
        assert "Zq7X" not in text and key[:13] not in text, text
        assert not os.path.exists(tmp_path / "data" / "admin.key")
    finally:
        assert s.stop() == 0, s.err()[-3000:]


def test_open_data_dir_warned_and_stale_tmp_removed(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)  # the operator's directory, open to others
    t = data / "tmp"
    t.mkdir(mode=0o700)
    (t / "upload-x").mkdir()  # a crashed upload
    (t / "upload-x" / "adapter_model.safetensors").write_bytes(b"half an upload")
    (t / "upload-f1").write_bytes(b"x")
    (t / "put-y").mkdir()
    (t / "put-y" / "adapter_config.json").write_text("{}")
    (t / "h2o.b.AbCdEf").write_bytes(b"spilled body")
    (t / "keep-me").write_text("not ours")
    (t / "notes").mkdir()
    s = Proc(tmp_path, data, admin_key="lg-admin-" + "k" * 40)
    try:
        assert sorted(os.listdir(t)) == ["keep-me", "notes"]
        err = s.err()
        removed = [l for l in err.splitlines() if "leftover" in l]
        assert len(removed) == 1 and "removed 4 " in removed[0], err
        warned = [l for l in err.splitlines() if "warning" in l and str(data) in l]
        assert len(warned) == 1 and "0755" in warned[0], err
        assert mode(data) == 0o755  # not ours to change
        for f in ("loragate.db", "loragate.db-wal", "loragate.db-shm"):
            assert mode(data / f) == 0o600, (f, oct(mode(data / f)))
    finally:
        assert s.stop() == 0, s.err()[-3000:]
    # a clean restart: nothing removed, nothing said about it
    os.chmod(data, 0o700)
    s = Proc(tmp_path, data, admin_key="lg-admin-" + "k" * 40)
    try:
        assert "leftover" not in s.err() and "warning" not in s.err(), s.err()
    finally:
        assert s.stop() == 0, s.err()[-3000:]
