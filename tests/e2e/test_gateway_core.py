"""Gateway core over real TLS on loopback (tests/e2e/gw_test_server.c: the
serve process life with test routes; build/loragate serve for the CLI).

Every server listens on 127.0.0.1 port 0 (the kernel picks a free port), is
stopped by the test (SIGTERM, then SIGKILL after a bound), and every wait is
a bounded loop. Clients: curl (--http1.1 and --http2), Python ssl, httpx
(HTTP/1.1 and HTTP/2), the openai SDK (error objects)."""
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LG_BUILD_DIR", os.path.join(ROOT, "build"))
TEST_SERVER = os.path.join(BUILD, "gw_test_server")
LORAGATE = os.environ.get("LG_BIN", os.path.join(BUILD, "loragate"))
# `loragate serve` loads its model before it listens: the tiny golden fixture model
TINY = os.path.join(ROOT, "tests", "golden", "lora_fixtures", "base")

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.skipif(not os.path.exists(TEST_SERVER), reason="build/gw_test_server not built")


class Server:
    def __init__(self, binary, tmp_path, *args, env=None, data_dir=None):
        self.data_dir = str(data_dir or tmp_path / "data")
        self.stderr_path = tmp_path / f"stderr-{time.monotonic_ns()}.txt"
        cmd = [binary, "serve"] if binary == LORAGATE else [binary]
        cmd += ["--model", TINY if binary == LORAGATE else "/dev/null", "--data-dir", self.data_dir, "--threads", "2"]
        if not any(a == "--listen" for a in args):
            cmd += ["--listen", "127.0.0.1:0"]
        cmd += list(args)
        e = dict(os.environ)
        e.pop("LORAGATE_ADMIN_KEY", None)
        e.update(env or {})
        self.err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=e, text=True)
        self.lines = []
        self.url = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"serving on (\S+)", line)
            if m and not self.url:
                self.url = m.group(1)
            if line.startswith("loragate: try:") or "test routes" in line or "health routes only" in line:
                break
        if not self.url:
            self.stop()
            raise RuntimeError("server did not start: " + "".join(self.lines) + self.stderr())
        self.cert = os.path.join(self.data_dir, "tls", "cert.pem")

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        return open(self.stderr_path, errors="replace").read()

    def stop(self, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.err.close()
        return self.proc.returncode

    def client(self, http2=False, **kw):
        verify = ssl.create_default_context(cafile=self.cert) if self.url.startswith("https") else False
        return httpx.Client(base_url=self.url, verify=verify,
                            http2=http2, timeout=10, **kw)


@pytest.fixture
def server(tmp_path):
    s = Server(TEST_SERVER, tmp_path, "--tenant-host-suffix", ".api.test", "--access-log",
               str(tmp_path / "access.log"), "--drain-timeout", "5")
    yield s
    assert s.stop() == 0


ACME = {"Authorization": "Bearer tk-acme"}


def curl(server, *args):
    out = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", server.cert, *args],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return out.stdout


# ---- TLS, ALPN, protocols ---------------------------------------------------

@pytest.mark.parametrize("proto,flag", [("1.1", "--http1.1"), ("2", "--http2")])
def test_curl_health_both_protocols(server, proto, flag):
    out = curl(server, flag, "-i", "-w", "\n%{http_version}", server.url + "/healthz")
    head, _, rest = out.partition("\n\n")  # text mode: CRLF became LF
    body, _, version = rest.rpartition("\n")
    assert version == proto
    assert json.loads(body) == {"status": "ok"}
    assert re.search(r"(?im)^x-request-id: req_[0-9a-f]{32}\r?$", head)


def test_tls_versions_and_alpn(server):
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = ssl.create_default_context(cafile=server.cert)
        ctx.minimum_version = ctx.maximum_version = version
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
            assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            assert s.selected_alpn_protocol() == "h2"
    ctx = ssl.create_default_context(cafile=server.cert)
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        assert s.selected_alpn_protocol() == "http/1.1"
    # TLS 1.1 is refused (the client may refuse first at its security level: either way no session)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    except (ValueError, ssl.SSLError):
        return
    with socket.create_connection((host, port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            ctx.wrap_socket(raw, server_hostname=host)


# ---- tenants, keys, bodies ---------------------------------------------------

@pytest.mark.parametrize("http2", [False, True])
def test_echo_plain_path_and_host(server, http2):
    with server.client(http2=http2) as c:
        r = c.post("/v1/echo", json={"model": "m", "x": [1, 2]}, headers=ACME)
        assert r.status_code == 200, r.text
        assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        j = r.json()
        assert j["tenant"] == "acme" and j["via"] == "key" and j["body"] == {"model": "m", "x": [1, 2]}
        assert j["request_id"] == r.headers["x-request-id"]
        r = c.post("/t/acme/v1/echo", json={}, headers=ACME)
        assert r.status_code == 200 and r.json()["via"] == "path"
        # a key of another tenant at acme's base URL is not a key there
        r = c.post("/t/acme/v1/echo", json={}, headers={"Authorization": "Bearer tk-globex"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
    # Host routing (HTTP/1.1 Host header; curl below does :authority)
    with server.client() as c:
        r = c.post("/v1/echo", json={}, headers={**ACME, "Host": "ACME.api.test"})
        assert r.status_code == 200 and r.json()["via"] == "host", r.text
        r = c.post("/v1/echo", json={}, headers={**ACME, "Host": "globex.api.test:443"})
        assert r.status_code == 401
        r = c.post("/t/acme/v1/echo", json={}, headers={**ACME, "Host": "globex.api.test"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "tenant_mismatch"
        r = c.get("/healthz", headers={"Host": "nobody.api.test"})  # not tenant-scoped: Host ignored
        assert r.status_code == 200


def test_host_routing_http2_authority(server):
    out = curl(server, "--http2", "-H", "Host: acme.api.test", "-H", "Authorization: Bearer tk-acme",
               "-H", "Content-Type: application/json", "-d", "{}", server.url + "/v1/echo")
    assert json.loads(out)["via"] == "host"


def err_of(r):
    j = r.json()
    assert set(j) == {"error"}
    e = j["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    return e


# (method, path, headers, body, status, type, code, param)
J = {"Content-Type": "application/json"}
ERRORS = [
    ("GET", "/nope", {}, None, 404, "invalid_request_error", "unknown_url", None),
    ("GET", "/v1/echo", ACME, None, 405, "invalid_request_error", "method_not_allowed", None),
    ("DELETE", "/healthz", {}, None, 405, "invalid_request_error", "method_not_allowed", None),
    ("POST", "/v1/echo", J, "{}", 401, "invalid_request_error", "invalid_api_key", None),
    ("POST", "/v1/echo", {**J, "Authorization": "Bearer nope"}, "{}", 401, "invalid_request_error", "invalid_api_key", None),
    ("POST", "/v1/echo", {**J, "Authorization": "Basic dGs6YWNtZQ=="}, "{}", 401, "invalid_request_error", "invalid_api_key", None),
    ("POST", "/v1/echo", {**J, "Authorization": "Bearer tk-acme-ro"}, "{}", 403, "invalid_request_error", None, None),
    ("POST", "/v1/echo", {**J, **ACME}, '{"model":"missing"}', 404, "invalid_request_error", "model_not_found", "model"),
    ("POST", "/v1/echo", {**J, **ACME}, "{", 400, "invalid_request_error", "invalid_json", None),
    ("POST", "/v1/echo", {**J, **ACME}, "[1]", 400, "invalid_request_error", "invalid_json", None),
    ("POST", "/v1/echo", {**J, **ACME}, '{"a":1,"a":2}', 400, "invalid_request_error", "invalid_json", None),
    ("POST", "/v1/echo", {**J, **ACME}, "[" * 100 + "]" * 100, 400, "invalid_request_error", "invalid_json", None),
    ("POST", "/v1/echo", {**J, **ACME}, '{"s":"\\ud800"}', 400, "invalid_request_error", "invalid_json", None),
    ("POST", "/v1/echo", {**J, **ACME}, "", 400, "invalid_request_error", "missing_body", None),
    ("POST", "/v1/echo", {**J, **ACME}, '{"x":"' + "a" * 5000 + '"}', 413, "invalid_request_error", "request_too_large", None),
    ("POST", "/v1/echo", {"Content-Type": "text/plain", **ACME}, "{}", 415, "invalid_request_error", "unsupported_media_type", None),
    ("POST", "/v1/echo", ACME, "{}", 415, "invalid_request_error", "unsupported_media_type", None),
    # an unknown tenant is answered as a key that does not match (no name probing)
    ("POST", "/t/nobody/v1/echo", {**J, **ACME}, "{}", 401, "invalid_request_error", "invalid_api_key", None),
    ("POST", "/t/down/v1/echo", {**J, **ACME}, "{}", 503, "server_error", None, None),
    ("POST", "/t/Bad_Slug/v1/echo", {**J, **ACME}, "{}", 404, "invalid_request_error", "unknown_url", None),
    ("GET", "/t/acme/healthz", {}, None, 404, "invalid_request_error", "unknown_url", None),
    ("GET", "/v1/fail/403", {}, None, 403, "invalid_request_error", None, None),
    ("GET", "/v1/fail/429", {}, None, 429, "requests", "rate_limit_exceeded", None),
    ("GET", "/v1/fail/500", {}, None, 500, "server_error", None, None),
    ("GET", "/v1/fail/503", {}, None, 503, "server_error", None, None),
    ("GET", "/admin/v1/ping", {}, None, 401, "invalid_request_error", "invalid_api_key", None),
    ("GET", "/admin/v1/ping", ACME, None, 401, "invalid_request_error", "invalid_api_key", None),
    ("GET", "/v1/fail/%2e%2e", {}, None, 400, "invalid_request_error", None, "status"),
]


@pytest.mark.parametrize("http2", [False, True])
def test_error_objects(server, http2):
    with server.client(http2=http2) as c:
        for method, path, headers, body, status, etype, code, param in ERRORS:
            r = c.request(method, path, headers=headers, content=body.encode() if body is not None else None)
            assert r.status_code == status, (method, path, r.status_code, r.text)
            assert r.headers["content-type"] == "application/json"
            assert re.fullmatch(r"req_[0-9a-f]{32}", r.headers["x-request-id"])
            e = err_of(r)
            assert (e["type"], e["code"], e["param"]) == (etype, code, param), (path, e)
            if status == 405:
                assert r.headers["allow"]
            if status in (429, 503):
                assert int(r.headers["retry-after"]) >= 1


def test_openai_sdk_reads_our_errors(server):
    openai = pytest.importorskip("openai")
    with httpx.Client(verify=ssl.create_default_context(cafile=server.cert)) as hc:
        client = openai.OpenAI(base_url=server.url + "/t/acme/v1", api_key="tk-acme", http_client=hc, max_retries=0)
        with pytest.raises(openai.NotFoundError) as ei:
            client.models.list()  # not a route of the test server
        assert ei.value.code == "unknown_url" and ei.value.request_id.startswith("req_")
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", http_client=hc, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as ei:
            bad.post("/echo", body={}, cast_to=object)
        assert ei.value.code == "invalid_api_key"
        with pytest.raises(openai.RateLimitError) as ei:
            client.get("/fail/429", cast_to=object)
        assert ei.value.code == "rate_limit_exceeded" and ei.value.type == "requests"
        assert client.post("/echo", body={"model": "m"}, cast_to=object)["tenant"] == "acme"


# ---- streaming and cancellation -----------------------------------------------

def stats(server):
    with server.client() as c:
        return c.get("/test/stats").json()


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return pred()


@pytest.mark.parametrize("http2", [False, True])
def test_sse_stream_complete(server, http2):
    with server.client(http2=http2) as c:
        with c.stream("GET", "/v1/stream?n=50&delay_ms=1", headers=ACME) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert [json.loads(d)["i"] for d in data[:-1]] == list(range(50))


@pytest.mark.parametrize("proto", ["--http1.1", "--http2"])
def test_client_disconnect_cancels(server, proto):
    before = stats(server)
    # curl stops reading after 1 s: the producer would run 100 s
    p = subprocess.run(["curl", "-sS", proto, "--cacert", server.cert, "--max-time", "1", "-H", "Authorization: Bearer tk-acme",
                        server.url + "/v1/stream?n=1000&delay_ms=100"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 28  # timed out, as intended
    assert "data: {\"i\":0}" in p.stdout
    t0 = time.monotonic()
    assert wait_for(lambda: stats(server)["cancels"] == before["cancels"] + 1, 3), stats(server)
    cancel_s = time.monotonic() - t0
    assert cancel_s < 1.0  # HTTP/2 at once; HTTP/1 within the 100 ms probe
    # the producer saw its posts fail and stopped
    assert wait_for(lambda: stats(server)["stopped_early"] == before["stopped_early"] + 1, 3)
    assert wait_for(lambda: stats(server)["active"] == 0, 3)


def test_many_streams_concurrently(server):
    errors = []

    def one(i):
        try:
            with server.client(http2=bool(i % 2)) as c, c.stream("GET", "/v1/stream?n=20", headers=ACME) as r:
                data = [line for line in r.iter_lines() if line.startswith("data: ")]
                if data[-1] != "data: [DONE]" or len(data) != 21:
                    errors.append((i, data[-3:]))
        except Exception as e:  # noqa: BLE001
            errors.append((i, repr(e)))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    [t.start() for t in ts]
    [t.join(30) for t in ts]
    assert not errors


# ---- access log, operator key ---------------------------------------------------

def test_access_log_lines(server, tmp_path):
    with server.client() as c:
        r1 = c.post("/v1/echo", json={"model": "m1", "prompt": "SECRET-PROMPT-TEXT"}, headers=ACME)
        r2 = c.get("/nope?api_key=SECRET-QUERY")
    assert server.stop() == 0
    text = (tmp_path / "access.log").read_text()
    assert "SECRET" not in text and "tk-acme" not in text
    lines = [json.loads(l) for l in text.splitlines()]
    by_id = {l["request_id"]: l for l in lines}
    a = by_id[r1.headers["x-request-id"]]
    assert a["status"] == 200 and a["route"] == "echo" and a["method"] == "POST" and a["path"] == "/v1/echo"
    assert a["key_id"] == "key_acme1" and a["model"] == "m1" and a["http"] == "1.1" and a["tls"] is True
    assert a["bytes_in"] > 0 and a["bytes_out"] > 0 and a["duration_ms"] >= 0 and a["peer"] == "127.0.0.1"
    b = by_id[r2.headers["x-request-id"]]
    assert b["status"] == 404 and b["path"] == "/nope" and b["route"] is None


def test_admin_key_generated_and_checked(server):
    path = os.path.join(server.data_dir, "admin.key")
    assert os.stat(path).st_mode & 0o777 == 0o600
    key = open(path).read().strip()
    assert re.fullmatch(r"lg-admin-[A-Za-z0-9_-]{43}", key)
    assert key not in "".join(server.lines) + server.stderr()
    assert key[:13] not in "".join(server.lines)  # no part of the key
    with server.client() as c:
        assert c.get("/admin/v1/ping", headers={"Authorization": f"Bearer {key}"}).json() == {"pong": "operator"}
        assert c.get("/admin/v1/ping", headers={"Authorization": f"Bearer {key}x"}).status_code == 401


def test_admin_key_env_and_bad_file_mode(tmp_path):
    s = Server(TEST_SERVER, tmp_path, env={"LORAGATE_ADMIN_KEY": "k" * 40})
    try:
        with s.client() as c:
            assert c.get("/admin/v1/ping", headers={"Authorization": "Bearer " + "k" * 40}).status_code == 200
        assert not os.path.exists(os.path.join(s.data_dir, "admin.key"))
        assert "k" * 40 not in "".join(s.lines) + s.stderr()
    finally:
        assert s.stop() == 0
    d = tmp_path / "d2"
    d.mkdir(mode=0o700)
    (d / "admin.key").write_text("x" * 40 + "\n")
    os.chmod(d / "admin.key", 0o644)
    p = subprocess.run([TEST_SERVER, "--model", "/dev/null", "--data-dir", str(d), "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and "chmod 600" in p.stderr


# ---- drain ------------------------------------------------------------------------

def test_sigterm_drains_in_flight(tmp_path):
    s = Server(TEST_SERVER, tmp_path, "--drain-timeout", "10")
    result = {}

    def slow():
        try:
            with s.client() as c:
                r = c.get("/test/slow?ms=1500")
                result["status"], result["body"] = r.status_code, r.json()
        except Exception as e:  # noqa: BLE001
            result["error"] = repr(e)

    t = threading.Thread(target=slow)
    t.start()
    assert wait_for(lambda: stats(s)["slow"] == 1, 5)  # the request is in flight
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    # new connections are refused once the listeners are closed
    port = int(s.url.rsplit(":", 1)[1])
    assert wait_for(lambda: connect_refused(port), 3)
    t.join(10)
    if result != {"status": 200, "body": {"slept_ms": 1500}}:
        s.stop()
        raise AssertionError((result, s.proc.returncode, s.stderr()[-3000:]))
    assert s.proc.wait(10) == 0
    assert time.monotonic() - t0 < 8
    assert "draining" in s.stderr()
    s.stop()


def connect_refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # the connect landed in the backlog just as the listener closed: the
        # kernel resets it; ask again, the next connect sees the closed port
        return False


def test_drain_timeout_bounds_shutdown(tmp_path):
    s = Server(TEST_SERVER, tmp_path, "--drain-timeout", "0.5")
    errs = []

    def stream():
        try:
            with s.client(http2=True) as c, c.stream("GET", "/v1/stream?n=1000&delay_ms=50", headers=ACME) as r:
                for _ in r.iter_lines():
                    pass
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    t = threading.Thread(target=stream)
    t.start()
    assert wait_for(lambda: stats(s)["active"] == 1, 5)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5  # 0.5 s drain + the forced close
    t.join(10)
    assert not t.is_alive()
    s.stop()


# ---- loragate serve: CLI ------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(LORAGATE), reason="build/loragate not built")
class TestServeCli:
    def test_help_lists_flags(self):
        out = subprocess.run([LORAGATE, "serve", "--help"], capture_output=True, text=True, timeout=10).stdout
        for f in ["--model", "--listen", "--data-dir", "--tls-cert", "--tls-key", "--threads", "--backend", "--config",
                  "--served-model-name", "--tenant-host-suffix", "--insecure-http", "--ctx", "--pool-mb",
                  "--max-lora-rank", "--drain-timeout", "--access-log"]:
            assert f in out, f

    @pytest.mark.parametrize("args,msg", [
        (["--listen", "127.0.0.1:0"], "--model"),
        (["--model", "/dev/null", "--backend", "tpu"], "cpu|cuda"),
        (["--model", "/dev/null", "--threads", "0"], "1..256"),
        (["--model", "/dev/null", "--bogus"], "unknown option"),
        (["--model", "/dev/null", "--tls-cert", "x"], "go together"),
        (["--model", "/dev/null", "--tenant-host-suffix", "api.test"], "start with '.'"),
    ])
    def test_usage_errors(self, args, msg):
        p = subprocess.run([LORAGATE, "serve", *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and msg in p.stderr, p.stderr

    def test_config_file(self, tmp_path):
        cfg = tmp_path / "c.json"
        cfg.write_text(json.dumps({"model": "/dev/null", "listen": ["127.0.0.1:0"], "threads": 1, "nope": 1}))
        p = subprocess.run([LORAGATE, "serve", "--config", str(cfg)], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and 'unknown key "nope"' in p.stderr
        cfg.write_text(json.dumps({"model": "/dev/null", "listen": "127.0.0.1:0", "insecure-http": True,
                                   "backend": "cpu", "pool-mb": 64, "drain-timeout": 2.5}))
        s = Server(LORAGATE, tmp_path, "--config", str(cfg))
        try:
            assert s.url.startswith("http://127.0.0.1:")
            with s.client() as c:
                assert c.get("/healthz").json() == {"status": "ok"}
                r = c.get("/readyz")
                assert r.status_code == 200 and r.json()["status"] == "ready", r.text
        finally:
            assert s.stop() == 0

    def test_insecure_http_loopback_only(self, tmp_path):
        for addr in ["0.0.0.0:0", "[::]:0"]:
            p = subprocess.run([LORAGATE, "serve", "--model", TINY, "--data-dir", str(tmp_path / "d"),
                                "--listen", addr, "--insecure-http"], capture_output=True, text=True, timeout=10)
            assert p.returncode == 1 and "loopback" in p.stderr, p.stderr

    def test_tls_serve_and_sigterm(self, tmp_path):
        s = Server(LORAGATE, tmp_path)
        assert s.url.startswith("https://127.0.0.1:")
        assert "self-signed" in s.stderr()
        out = curl(s, "--http2", s.url + "/healthz")
        assert json.loads(out) == {"status": "ok"}
        assert s.stop() == 0
        assert "stopped" in s.stderr()
