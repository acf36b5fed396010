"""
test_backup.py — `loragate backup` while `loragate serve` is under load
(docs/operations.md): the copy is written while requests keep being billed,
passes integrity_check, holds every record acknowledged before the backup
started (and none that is not in the live ledger), and opens as a data dir;
an existing target and a missing data dir are refused.
"""
import os
import sqlite3
import subprocess
import threading

import pytest

from metering_util import need_admin_api
from serve_fixture import LORAGATE, TINY, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


def backup(data_dir, out):
    return subprocess.run([LORAGATE, "backup", "--data-dir", data_dir, "--out", out], capture_output=True,
                          text=True, timeout=120)


def ids(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {r[0] for r in db.execute("SELECT request_id FROM usage_records")}
    finally:
        db.close()


def test_backup_while_serving(tmp_path):
    s = Serve(tmp_path, TINY)
    stop = threading.Event()
    acked = []
    try:
        need_admin_api(s)
        s.tenant("acme")
        client = s.client(s.key("acme"))

        def load():
            while not stop.is_set():
                r = client.post("/t/acme/v1/completions",
                                json={"model": "base", "prompt": [5, 6, 7, 8], "max_tokens": 2, "temperature": 0})
                assert r.status_code == 200
                acked.append(r.headers["x-request-id"])

        t = threading.Thread(target=load)
        t.start()
        while len(acked) < 20:
            t.join(0.05)
        before = list(acked)
        out = str(tmp_path / "b1.db")
        r = backup(s.data_dir, out)
        n_during = len(acked) - len(before)
        stop.set()
        t.join(60)
        assert r.returncode == 0, r.stderr
        assert "integrity ok" in r.stdout
        got = ids(out)
        assert set(before) <= got, "a record acknowledged before the backup is missing from it"
        live = {row["request_id"] for row in s.ledger()}
        assert got <= live
        assert n_during >= 0 and len(live) == len(acked)
        # the target exists: refused, nothing overwritten
        r = backup(s.data_dir, out)
        assert r.returncode == 1 and "exists" in r.stderr
        assert ids(out) == got
    finally:
        stop.set()
        assert s.stop() == 0, s.stderr()[-3000:]
    # the copy is a working data dir
    restored = tmp_path / "restored"
    restored.mkdir()
    os.replace(out, restored / "loragate.db")
    r = backup(str(restored), str(tmp_path / "b2.db"))
    assert r.returncode == 0, r.stderr
    assert ids(str(tmp_path / "b2.db")) == got
    r = backup(str(tmp_path / "nowhere"), str(tmp_path / "b3.db"))
    assert r.returncode == 1 and not os.path.exists(tmp_path / "b3.db")
