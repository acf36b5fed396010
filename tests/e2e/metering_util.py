"""
metering_util.py — helpers for the metering tests (limits, metrics, usage
views, the usage page): operator calls, a Prometheus text parser, exact
money arithmetic, and a minimal Chrome DevTools Protocol client for
headless Chromium (stdlib only: a tiny WebSocket client, no extra packages).
"""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
import zlib
from decimal import Decimal

import pytest


def need_admin_api(s):
    r = s.admin.get("/admin/v1/tenants")
    if r.status_code == 404:
        pytest.skip("the operator API (routes_admin.c) is not in this build")


def set_limits(s, tenant, **lim):
    r = s.admin.put(f"/admin/v1/tenants/{tenant}/limits", json=lim)
    assert r.status_code == 200, r.text
    return r.json()


def set_pricing(s, tenant, inp, cached, out):
    r = s.admin.put(f"/admin/v1/tenants/{tenant}/pricing",
                    json={"input_per_mtok": inp, "cached_input_per_mtok": cached, "output_per_mtok": out})
    assert r.status_code == 200, r.text
    return r.json()


def micro(text):
    """USD per Mtok text -> integer micro-USD per Mtok (exact)."""
    return int(Decimal(text) * 1000000)


def cost_pico(prices, prompt, cached, completion):
    """The issue's formula at prices (input, cached, output) in micro-USD/Mtok: pico-USD, exact."""
    pin, pc, pout = prices
    return (prompt - cached) * pin + cached * pc + completion * pout


def usd(pico):
    """pico-USD -> the 12-decimal text the server writes."""
    neg = pico < 0
    pico = abs(pico)
    return ("-" if neg else "") + f"{pico // 10**12}.{pico % 10**12:012d}"


# ---- Prometheus text -------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value} and {name: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = dict(_LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return samples, types


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def metric_sum(samples, name, **labels):
    """Sum over every series of name whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def promtool():
    return shutil.which("promtool")


# promtool's linter (exit status 3) flags ':' in metric names, which Prometheus
# reserves for recording rules; vLLM's names (vllm:num_requests_waiting, ...),
# which the Gateway API Inference Extension's endpoint picker reads, have one
# by design. That one finding, on a vllm: name, is no failure; a parse error
# (exit status 1) or any other finding is.
_VLLM_COLON = re.compile(r"^vllm:[a-zA-Z0-9_]+ metric names should not contain ':'$")


def scrape_checked(srv):
    """The server's /metrics, checked by promtool where it is installed, parsed (parse_metrics' samples)."""
    with srv.client() as c:
        text = c.get("/metrics").text
    if promtool():
        rc, out = promtool_check(text)
        assert rc == 0, out
    return parse_metrics(text)[0]


def promtool_check(text):
    p = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    if p.returncode == 3:
        rest = [l for l in out.splitlines() if l.strip() and not _VLLM_COLON.match(l.strip())]
        if not rest:
            return 0, out
    return p.returncode, out


# ---- headless Chromium over the DevTools protocol --------------------------------------

def chromium_binary():
    for b in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(b)
        if p:
            return p
    return None


class _WS:
    """Just enough RFC 6455 for the DevTools socket: text frames, client masking."""

    def __init__(self, url, timeout=60):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = self.s.recv(4096)
            if not c:
                raise RuntimeError("websocket handshake: connection closed")
            buf += c
        head, self.buf = buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError("websocket handshake refused: " + head.decode(errors="replace"))

    def send(self, text):
        data = text.encode()
        n = len(data)
        mask = os.urandom(4)
        if n < 126:
            hdr = bytes([0x81, 0x80 | n])
        elif n < 65536:
            hdr = bytes([0x81, 0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr = bytes([0x81, 0x80 | 127]) + struct.pack(">Q", n)
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            c = self.s.recv(1 << 20)
            if not c:
                raise RuntimeError("websocket closed")
            self.buf += c
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            op = b0 & 0x0F
            if op == 0x8:
                raise RuntimeError("websocket closed by the browser")
            if op in (0x0, 0x1, 0x2):
                msg += payload
                if b0 & 0x80:
                    return msg.decode()

    def close(self):
        self.s.close()


class Chrome:
    """One headless Chromium with its own profile; .call() sends a DevTools command."""

    def __init__(self, workdir, width=1280, height=1800):
        self.profile = tempfile.mkdtemp(dir=str(workdir), prefix="chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self.proc = subprocess.Popen(
            [chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--ignore-certificate-errors", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=self.log, stderr=self.log)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start: " + open(self.log.name, errors="replace").read()[-2000:])
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        targets = []
        while not targets and time.monotonic() < deadline:
            targets = [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
                       if t["type"] == "page"]
            time.sleep(0.1)
        self.ws = _WS(targets[0]["webSocketDebuggerUrl"])
        self.n = 0
        self.events = []

    def call(self, method, **params):
        self.n += 1
        my = self.n
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == my:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def wait_event(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, e in enumerate(self.events):
                if e.get("method") == name:
                    return self.events.pop(i)
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(name)

    def navigate(self, url):
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path, clip=None):
        params = {"format": "png", "captureBeyondViewport": True}
        if clip:
            params["clip"] = dict(clip, scale=1)
        png = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as f:
            f.write(png)
        return png

    def close(self):
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self.log.close()


def png_pixels(png):
    """(width, height, rows of (r, g, b[, a]) bytes) of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(png):
        n = struct.unpack(">I", png[pos:pos + 4])[0]
        kind = png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def count_color(png, rgb, tol=6):
    w, h, bpp, rows = png_pixels(png)
    n = 0
    for row in rows:
        for x in range(0, w * bpp, bpp):
            if abs(row[x] - rgb[0]) <= tol and abs(row[x + 1] - rgb[1]) <= tol and abs(row[x + 2] - rgb[2]) <= tol:
                n += 1
    return n


def tenant_id(s, name):
    """The numeric id of a live tenant (the ledger's tenant_id), read from the database."""
    import sqlite3
    db = sqlite3.connect(f"file:{os.path.join(s.data_dir, 'loragate.db')}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("SELECT id FROM tenants WHERE name = ? AND deleted_at IS NULL", (name,)).fetchone()[0]
    finally:
        db.close()
