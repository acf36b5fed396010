"""The connection guard (gateway/http/conn.c) over real TLS on loopback, against
tests/e2e/gw_test_server.c: request bodies are not read until the route and
the key are known, each route's limit applies while reading, upload
reservations are held and released, HTTP/2 rapid reset ends in GOAWAY, and
tenant names cannot be probed without a key.

Clients: raw TLS sockets (HTTP/1.1 written by hand, so that a head can be
sent without its body and the bytes the server accepted can be counted),
curl, httpx, and the `h2` package (hyper-h2, the HTTP/2 state machine httpx
uses) for frames no high-level client sends on purpose (a HEADERS frame
without its DATA, RST_STREAM storms).
"""
import json
import os
import re
import socket
import ssl
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest

from test_gateway_core import TEST_SERVER, Server

pytestmark = pytest.mark.skipif(not os.path.exists(TEST_SERVER), reason="build/gw_test_server not built")

BIG = 400 << 20  # the probe's 400 MB body
ACME = "Bearer tk-acme"
GLOBEX = "Bearer tk-globex"


@pytest.fixture
def server(tmp_path):
    s = Server(TEST_SERVER, tmp_path, "--tenant-host-suffix", ".api.test", "--access-log",
               str(tmp_path / "access.log"), "--drain-timeout", "5")
    s.access_log = tmp_path / "access.log"
    yield s
    assert s.stop() == 0


def addr(server):
    return "127.0.0.1", int(server.url.rsplit(":", 1)[1])


def tls(server, alpn="http/1.1", timeout=5):
    host, port = addr(server)
    ctx = ssl.create_default_context(cafile=server.cert)
    ctx.set_alpn_protocols([alpn])
    s = ctx.wrap_socket(socket.create_connection((host, port), timeout=timeout), server_hostname=host)
    s.settimeout(timeout)
    return s


def stats(server):
    with server.client() as c:
        return c.get("/test/stats").json()


# ---- HTTP/1.1 by hand -----------------------------------------------------------------------

def head(method, path, headers):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(s, buf=b""):
    """One HTTP/1.1 response (Content-Length framed); returns (status, headers, body, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("connection closed before a response: %r" % buf[:200])
        buf += chunk
    h, _, rest = buf.partition(b"\r\n\r\n")
    lines = h.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if status == 100:
        return status, hdrs, b"", rest
    n = int(hdrs.get("content-length", "0"))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, hdrs, rest[:n], rest[n:]


def push_until_closed(s, limit=64 << 20):
    """Sends body bytes until the server stops taking them; returns how many it took."""
    sent, block = 0, b"x" * 65536
    s.settimeout(3)
    try:
        while sent < limit:
            sent += s.send(block)
    except (OSError, ssl.SSLError):
        pass
    return sent


REFUSED_H1 = [
    # (path, headers, status, code): a 400 MB body the server must not read
    ("/v1/echo", {"Content-Type": "application/json"}, 401, "invalid_api_key"),
    ("/v1/echo", {"Content-Type": "application/json", "Authorization": "Bearer nope"}, 401, "invalid_api_key"),
    ("/t/globex/v1/echo", {"Content-Type": "application/json", "Authorization": ACME}, 401, "invalid_api_key"),
    ("/t/nobody/v1/echo", {"Content-Type": "application/json"}, 401, "invalid_api_key"),
    ("/v1/echo", {"Content-Type": "application/json", "Authorization": "Bearer tk-acme-ro"}, 403, None),
    ("/v1/nope", {"Content-Type": "application/json"}, 404, "unknown_url"),
    ("/v1/echo", {"Content-Type": "text/plain", "Authorization": ACME, "Content-Length": "100"}, 415,
     "unsupported_media_type"),
    ("/v1/echo", {"Content-Type": "application/json", "Authorization": ACME}, 413, "request_too_large"),
    ("/v1/sink", {"Authorization": ACME}, 413, "request_too_large"),
]


@pytest.mark.parametrize("path,headers,status,code", REFUSED_H1)
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_h1_refused_from_its_head(server, path, headers, status, code, framing):
    if framing == "chunked" and status == 413:
        pytest.skip("a chunked body has no declared size to refuse from the head")
    s = tls(server)
    framing_hdr = {"Content-Length": str(BIG)} if framing == "length" else {"Transfer-Encoding": "chunked"}
    if framing == "chunked":
        headers = {k: v for k, v in headers.items() if k != "Content-Length"}
    t0 = time.monotonic()
    s.sendall(head("POST", path, {**framing_hdr, **headers}))  # the head only: no body byte
    st, hdrs, body, _ = read_response(s)
    assert time.monotonic() - t0 < 2
    assert st == status, body
    e = json.loads(body)["error"]
    assert e["code"] == code
    assert hdrs.get("connection") == "close"
    assert "100 continue" not in body.decode().lower()
    # what the client can still push is bounded (lingering close + socket buffers), not 400 MB
    taken = push_until_closed(s)
    s.close()
    assert taken < 48 << 20, taken
    assert stats(server)["dispatched"] == 0
    server.stop()
    lines = [json.loads(x) for x in open(server.access_log)]
    refused = [x for x in lines if x["path"] == path.split("?")[0]]
    assert refused and refused[0]["status"] == status and refused[0]["bytes_in"] == 0
    assert refused[0].get("body_withheld") is True


def test_h1_expect_continue(server):
    # refused: the answer comes instead of "100 Continue"
    s = tls(server)
    s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": "2",
                                         "Expect": "100-continue"}))
    st, hdrs, body, _ = read_response(s)
    assert st == 401 and hdrs.get("connection") == "close"
    s.close()
    # admitted: 100, then the body, then the answer; the connection stays usable
    s = tls(server)
    body = b'{"a":1}'
    s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": str(len(body)),
                                         "Expect": "100-continue", "Authorization": ACME}))
    st, _, _, rest = read_response(s)
    assert st == 100
    s.sendall(body)
    st, hdrs, out, rest = read_response(s, rest)
    assert st == 200 and json.loads(out)["body"] == {"a": 1}
    # next request on the same connection: still guarded (refused from its head)
    s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": str(BIG)}))
    st, hdrs, _, _ = read_response(s, rest)
    assert st == 401 and hdrs.get("connection") == "close"
    s.close()


def test_h1_keep_alive_each_request_guarded(server):
    s = tls(server)
    rest = b""
    for i in range(5):
        body = json.dumps({"i": i}).encode()
        s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": str(len(body)),
                                             "Authorization": ACME}) + body)
        st, hdrs, out, rest = read_response(s, rest)
        assert st == 200 and json.loads(out)["body"] == {"i": i}
        assert hdrs.get("connection") != "close"
        # a body-less request between them
        s.sendall(head("GET", "/healthz", {}))
        st, _, _, rest = read_response(s, rest)
        assert st == 200
    s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": str(BIG)}))
    st, hdrs, _, _ = read_response(s, rest)
    assert st == 401 and hdrs.get("connection") == "close"
    s.close()
    assert stats(server)["dispatched"] == 5


def test_h1_pipelined_request_is_not_read(server):
    s = tls(server)
    s.sendall(head("GET", "/healthz", {}) +
              head("POST", "/v1/echo", {"Content-Type": "application/json", "Content-Length": str(BIG)}))
    st, hdrs, _, rest = read_response(s)
    assert st == 200 and hdrs.get("connection") == "close"
    s.settimeout(3)
    tail = rest
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        tail += chunk
    assert tail == b""  # the second request got no answer: it was never dispatched
    s.close()
    assert stats(server)["dispatched"] == 0


def test_h1_route_limit_applies_while_reading_chunked(server):
    s = tls(server)
    s.sendall(head("POST", "/v1/echo", {"Content-Type": "application/json", "Transfer-Encoding": "chunked",
                                         "Authorization": ACME}))
    chunk = b"a" * 1024
    try:
        for _ in range(64):  # 64 KiB against echo's 4 KiB
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    except OSError:
        pass
    st, hdrs, _, _ = read_response(s)
    assert st == 413
    s.close()
    assert stats(server)["dispatched"] == 0


def test_curl_unauthenticated_large_upload_refused_early(server, tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse
    t0 = time.monotonic()
    out = subprocess.run(["curl", "-sS", "--max-time", "20", "--cacert", server.cert, "--http1.1",
                          "-H", "Content-Type: application/json", "--data-binary", f"@{big}",
                          "-w", "\n%{http_code} %{size_upload}", server.url + "/v1/echo"],
                         capture_output=True, text=True, timeout=30)
    code, uploaded = out.stdout.rsplit("\n", 1)[1].split()
    assert code == "401", out.stdout + out.stderr
    assert int(uploaded) < 48 << 20
    assert time.monotonic() - t0 < 10


def test_unknown_and_existing_tenants_answer_alike(server):
    cases = [{}, {"Authorization": "Bearer nope"}, {"Authorization": GLOBEX}]
    with server.client() as c:
        for h in cases:
            answers = []
            for path, host in (("/t/acme/v1/stream", None), ("/t/nobody/v1/stream", None),
                               ("/v1/stream", "acme.api.test"), ("/v1/stream", "nobody.api.test")):
                hh = dict(h)
                if host:
                    hh["Host"] = host
                r = c.get(path, headers=hh)
                e = r.json()["error"]
                answers.append((r.status_code, e["message"], e["type"], e["code"], r.headers.get("www-authenticate")))
            assert all(a == answers[0] for a in answers), (h, answers)
            assert answers[0][0] == 401


# ---- upload reservations ------------------------------------------------------------------------

def test_upload_admission_holds_and_releases(server):
    a1 = tls(server)
    a1.sendall(head("POST", "/v1/sink", {"Content-Length": str(8 << 20), "Authorization": ACME}))
    a1.sendall(b"x" * (1 << 20))
    deadline = time.monotonic() + 5
    while stats(server)["holds"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(server)["holds"] == 1
    # a second upload of the same tenant is refused from its head
    a2 = tls(server)
    a2.sendall(head("POST", "/v1/sink", {"Content-Length": str(8 << 20), "Authorization": ACME}))
    st, _, body, _ = read_response(a2)
    assert st == 429, body
    a2.close()
    # another tenant is not affected
    g = tls(server)
    g.sendall(head("POST", "/v1/sink", {"Content-Length": str(1 << 20), "Authorization": GLOBEX}) + b"y" * (1 << 20))
    st, _, body, _ = read_response(g)
    assert st == 200 and json.loads(body)["bytes"] == 1 << 20
    g.close()
    # the first one finishes
    a1.sendall(b"x" * (7 << 20))
    st, _, body, _ = read_response(a1)
    assert st == 200 and json.loads(body)["bytes"] == 8 << 20
    a1.close()
    # an upload whose client leaves half-way gives its reservation back
    a3 = tls(server)
    a3.sendall(head("POST", "/v1/sink", {"Content-Length": str(8 << 20), "Authorization": ACME}) + b"x" * 4096)
    time.sleep(0.3)
    a3.close()
    deadline = time.monotonic() + 5
    while stats(server)["holds"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(server)["holds"] == 0


# ---- HTTP/2 -------------------------------------------------------------------------------------

class H2:
    def __init__(self, server):
        self.s = tls(server, alpn="h2")
        assert self.s.selected_alpn_protocol() == "h2"
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.events = []
        self.c.initiate_connection()
        self.flush()

    def flush(self):
        data = self.c.data_to_send()
        if data and "EOF" not in self.events:
            self.s.settimeout(10)
            try:
                self.s.sendall(data)
            except OSError:  # the server closed the connection (after its GOAWAY)
                self.events.append("EOF")

    def pump(self, until, timeout=5):
        deadline = time.monotonic() + timeout
        while not until(self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(self.events[-5:])
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                continue
            if not data:
                self.events.append("EOF")
                break
            self.events += self.c.receive_data(data)
            self.flush()
        return self.events

    def drain(self, timeout):
        """Reads whatever the server sends within timeout (window updates, resets, GOAWAY)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and "EOF" not in self.events:
            self.s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                self.events.append("EOF")
                break
            if not data:
                self.events.append("EOF")
                break
            self.events += self.c.receive_data(data)
            self.flush()

    def request(self, method, path, headers=(), end_stream=True):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [(":method", method), (":path", path), (":scheme", "https"),
                                  (":authority", "127.0.0.1")] + list(headers), end_stream=end_stream)
        self.flush()
        return sid

    def response(self, sid, timeout=5):
        def done(ev):
            return any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and e.stream_id == sid for e in ev) \
                or "EOF" in ev or any(isinstance(e, h2.events.ConnectionTerminated) for e in ev)
        self.pump(done, timeout)
        status, body = None, b""
        for e in self.events:
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                status = int(dict(e.headers)[":status"])
            if isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                body += e.data
                self.c.acknowledge_received_data(e.flow_controlled_length, sid)
        self.flush()
        return status, body


def test_h2_refused_from_its_head_then_connection_still_usable(server):
    h = H2(server)
    sid = h.request("POST", "/v1/echo", [("content-type", "application/json"), ("content-length", str(BIG))],
                    end_stream=False)
    t0 = time.monotonic()
    st, body = h.response(sid)  # before a single DATA byte
    assert time.monotonic() - t0 < 2
    assert st == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    # the client sends some of its body anyway: the server drops it (and asks it to stop)
    sent = 0
    while sent < (4 << 20):
        try:
            if h.c.local_flow_control_window(sid) == 0:
                h.drain(0.2)  # the server credits the connection's window for what it dropped
            n = min(16384, h.c.local_flow_control_window(sid), h.c.max_outbound_frame_size)
            if n == 0:
                break
            h.c.send_data(sid, b"z" * n)
        except h2.exceptions.StreamClosedError:  # the server asked the client to stop (RST_STREAM)
            break
        h.flush()
        sent += n
    h.drain(0.2)
    # the server dropped those bytes, credited the connection's window for them, and asked the client
    # to stop sending (RST_STREAM NO_ERROR, RFC 9113 8.1): the client stopped within its first window
    assert 0 < sent <= 65535
    assert any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == 0 for e in h.events)
    resets = [e for e in h.events if isinstance(e, h2.events.StreamReset) and e.stream_id == sid]
    assert resets and resets[0].error_code == h2.errors.ErrorCodes.NO_ERROR
    # the connection still serves an authenticated request
    sid2 = h.request("POST", "/v1/echo", [("content-type", "application/json"), ("content-length", "7"),
                                          ("authorization", ACME)], end_stream=False)
    h.c.send_data(sid2, b'{"a":1}', end_stream=True)
    h.flush()
    st, body = h.response(sid2)
    assert st == 200 and json.loads(body)["body"] == {"a": 1}
    assert stats(server)["dispatched"] == 1


def test_h2_route_limit_applies_while_reading(server):
    h = H2(server)
    sid = h.request("POST", "/v1/echo", [("content-type", "application/json"), ("authorization", ACME)],
                    end_stream=False)
    for _ in range(8):  # 8 KiB against echo's 4 KiB, no content-length
        h.c.send_data(sid, b" " * 1024)
        h.flush()
    st, body = h.response(sid)
    assert st == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    assert stats(server)["dispatched"] == 0


def test_h2_upload_reset_midway_releases_reservation(server):
    h = H2(server)
    sid = h.request("POST", "/v1/sink", [("content-length", str(8 << 20)), ("authorization", ACME)], end_stream=False)
    h.c.send_data(sid, b"x" * 16384)
    h.flush()
    deadline = time.monotonic() + 5
    while stats(server)["holds"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(server)["holds"] == 1
    h.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    h.flush()
    deadline = time.monotonic() + 5
    while stats(server)["holds"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(server)["holds"] == 0


def test_h2_rapid_reset_gets_goaway(server):
    h = H2(server)
    terminated = None
    sent = 0
    for batch in range(40):
        for _ in range(50):
            try:
                sid = h.request("GET", "/v1/stream?n=1000&delay_ms=100", [("authorization", ACME)])
                h.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                sent += 1
            except Exception:
                break
        h.flush()
        h.drain(0.05)
        terminated = next((e for e in h.events if isinstance(e, h2.events.ConnectionTerminated)), None)
        if terminated or "EOF" in h.events:
            break
    assert terminated is not None, h.events[-5:]
    assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert b"reset" in (terminated.additional_data or b"")
    assert sent < 2000
    # the server dispatched a bounded number of them, and cancelled each
    time.sleep(0.5)
    st = stats(server)
    assert st["dispatched"] <= 150, st
    with server.client(http2=True) as c:  # and keeps serving
        assert c.get("/healthz").status_code == 200


def test_h2_ordinary_cancels_do_not_trip_the_budget(server):
    h = H2(server)
    for i in range(60):
        sid = h.request("GET", "/v1/stream?n=1000&delay_ms=100", [("authorization", ACME)])
        h.pump(lambda ev: any(isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid for e in ev))
        h.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        h.flush()
    sid = h.request("GET", "/healthz")
    st, _ = h.response(sid)
    assert st == 200
    assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in h.events)
