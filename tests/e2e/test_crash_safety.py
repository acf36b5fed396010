"""
test_crash_safety.py — the usage ledger survives what a server meets in
production, against a real `loragate serve` over TLS on 127.0.0.1 (free
ports, bounded waits, every server stopped or killed by the test, every
mount unmounted):

  - kill -9 mid-load, 3 rounds on one data dir with different kill times:
    ~24 threads of the official `openai` SDK send streamed (include_usage)
    and non-streamed requests with varying max_tokens; each thread notes
    what its client saw (x-request-id, and the usage of a completed body or
    of a received usage chunk) and whether that request's record was already
    committed the moment it saw it (a read-only connection: the answer must
    never come before the record). After SIGKILL and a restart on the same data
    dir: every request whose client saw its usage has exactly one ledger
    record with exactly those prompt/cached/completion tokens (status 200),
    no request id is in the ledger twice, PRAGMA integrity_check is "ok",
    records of earlier rounds are all still there, and the restarted server
    serves (its answer's record is in the ledger the moment the answer is).
    Kill times: 1.3-1.7 s, 2.9-3.3 s, and the instant the 30th client sees
    its usage. The default model (SmolLM2) with chat, else the tiny fixture
    with token-id completions.
  - read-only data dir (a read-only tmpfs remount; chmod does not stop root)
    and a read-only database file in a writable dir (a read-only bind mount
    of loragate.db): serve exits 1 with one clear line, no crash.
  - full disk while serving (data dir on a small tmpfs, filled by a filler
    file): the request whose commit fails waits; new requests get 503 with
    Retry-After; /readyz is 503 and names the ledger; the process lives;
    after the filler is removed the waiting request completes, its record
    and those acknowledged before are in the ledger, new requests succeed.

Mounting needs root (CAP_SYS_ADMIN): those parts skip with the reason
otherwise; as non-root the read-only dir uses chmod instead.
"""
import collections
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from serve_fixture import ADMIN_KEY, LORAGATE, SMOLLM2, TINY, Serve

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

SMOL = os.path.exists(SMOLLM2)
MODEL_PATH = SMOLLM2 if SMOL else TINY
MODEL_ARGS = ("--served-model-name", "smollm2") if SMOL else ()
MODEL = "smollm2" if SMOL else "base"
SYSTEM = ("You are a helpful assistant for a bakery that sells sourdough, rye and spelt bread. " * 3).strip()
QUESTIONS = ["Name three breads.", "How long does rye keep?", "What is spelt?", "Suggest a sandwich.",
             "Why does sourdough rise?", "Tell me a short story about a baker."]


def start(tmp_path):
    return Serve(tmp_path, MODEL_PATH, *MODEL_ARGS)


def db_path(s):
    return os.path.join(s.data_dir, "loragate.db")


def integrity(s):
    db = sqlite3.connect(f"file:{db_path(s)}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("PRAGMA integrity_check").fetchall()
    finally:
        db.close()


def usage_tuple(u):
    return (u.prompt_tokens, u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0,
            u.completion_tokens)


def in_ledger(db, rid):
    return db.execute("SELECT COUNT(*) FROM usage_records WHERE request_id = ?", (rid,)).fetchone()[0]


def one_request(client, rng, stream, obs_list, on_usage=None, db=None):
    """One SDK request; appends to obs_list what the client saw, as it sees it,
    and (db given) whether its record was already committed when it saw it."""
    # the tiny model runs ~100x faster: longer answers, so that kills cut some
    max_tokens = rng.choice([1, 2, 3, 5, 8, 12, 16, 24] if SMOL else [1, 4, 32, 256, 1024, 1500])
    if SMOL:
        create = client.chat.completions.with_raw_response.create
        kw = {"messages": [{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": rng.choice(QUESTIONS)}]}
    else:
        create = client.completions.with_raw_response.create
        kw = {"prompt": [rng.randrange(3, 300) for _ in range(rng.randrange(2, 40))]}
    kw.update(model=MODEL, max_tokens=max_tokens, temperature=rng.choice([0, 0.7]))
    if stream:
        kw.update(stream=True, stream_options={"include_usage": True})
    obs = {"rid": None, "stream": stream, "usage": None, "error": None, "max_tokens": max_tokens}
    try:
        raw = create(**kw)
        obs["rid"] = raw.headers.get("x-request-id")  # the header comes first, also for a stream
        obs_list.append(obs)
        if stream:
            for ch in raw.parse():
                if ch.usage is not None:
                    obs["usage"] = usage_tuple(ch.usage)
                    obs["committed"] = db is None or in_ledger(db, obs["rid"])
                    on_usage and on_usage()
        else:
            obs["usage"] = usage_tuple(raw.parse().usage)
            obs["committed"] = db is None or in_ledger(db, obs["rid"])
            on_usage and on_usage()
    except Exception as e:  # the kill: connection reset, refused, incomplete body
        obs["error"] = f"{type(e).__name__}: {e}"[:200]
        if obs["rid"] is None:
            obs_list.append(obs)


def run_load(s, key, n_threads, seconds_before_kill, seed, kill_at_nth_usage=0):
    """Load from n_threads SDK clients, SIGKILL the server after the given time
    (or the moment the nth client sees its usage, while the next commits are
    under way). Returns every observation."""
    obs = []
    stop = threading.Event()
    nth = threading.Event()
    n_usage = [0]
    lock = threading.Lock()

    def on_usage():
        with lock:
            n_usage[0] += 1
            if kill_at_nth_usage and n_usage[0] == kill_at_nth_usage:
                nth.set()

    def worker(i):
        rng = random.Random(seed * 1000 + i)
        client = openai.OpenAI(base_url=f"{s.url}/t/acme/v1", api_key=key, max_retries=0,
                               http_client=httpx.Client(verify=s.verify(), timeout=30))
        db = sqlite3.connect(f"file:{db_path(s)}?mode=ro", uri=True, timeout=10, check_same_thread=False)
        k = 0
        try:
            while not stop.is_set():
                one_request(client, rng, (i + k) % 2 == 0, obs, on_usage, db)
                k += 1
        finally:
            db.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
    for t in threads:
        t.start()
    if kill_at_nth_usage:
        nth.wait(seconds_before_kill)
    else:
        time.sleep(seconds_before_kill)
    os.kill(s.proc.pid, signal.SIGKILL)
    stop.set()
    s.proc.wait(10)
    assert s.proc.returncode == -signal.SIGKILL
    s.stop()
    deadline = time.monotonic() + 20
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a client hung after the server was killed"
    return obs


def check_ledger(s, all_obs, rnd):
    rows = s.ledger()
    count = collections.Counter(r["request_id"] for r in rows)
    dup = [rid for rid, n in count.items() if n > 1]
    assert not dup, f"request ids twice in the ledger: {dup[:5]}"
    by_rid = {r["request_id"]: r for r in rows}
    seen = [o for o in all_obs if o["usage"] is not None]
    rids = [o["rid"] for o in all_obs if o["rid"]]
    assert len(rids) == len(set(rids)), "the server gave two requests one id"
    missing, wrong = [], []
    for o in seen:
        r = by_rid.get(o["rid"])
        if r is None:
            missing.append(o)
        elif (r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"], r["http_status"]) != \
                (*o["usage"], 200):
            wrong.append((o, {k: r[k] for k in ("prompt_tokens", "cached_tokens", "completion_tokens",
                                                 "http_status")}))
    early = [o for o in seen if not o["committed"]]
    assert not early, f"round {rnd}: answers seen before their record was committed: {early[:3]}"
    assert not missing, f"round {rnd}: {len(missing)} requests the client saw complete have no record: {missing[:3]}"
    assert not wrong, f"round {rnd}: records disagree with what the client saw: {wrong[:3]}"
    assert integrity(s) == [("ok",)]
    unseen_billed = sum(1 for o in all_obs if o["usage"] is None and o["rid"] in by_rid)
    return len(rows), len(seen), unseen_billed


def serves_normally(s, key):
    """A plain and a streamed request; each one's record is durable when its answer is."""
    c = s.openai(key, tenant="acme")
    if SMOL:
        kw = {"messages": [{"role": "user", "content": "Say hello."}]}
        create = c.chat.completions.with_raw_response.create
    else:
        kw = {"prompt": [5, 6, 7, 8]}
        create = c.completions.with_raw_response.create
    raw = create(model=MODEL, max_tokens=4, temperature=0, **kw)
    u = usage_tuple(raw.parse().usage)
    rows = s.ledger("request_id = ?", (raw.headers["x-request-id"],))
    assert [(r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"]) for r in rows] == [u]
    raw = create(model=MODEL, max_tokens=4, temperature=0, stream=True, stream_options={"include_usage": True}, **kw)
    chunks = list(raw.parse())
    u = usage_tuple(chunks[-1].usage)
    rows = s.ledger("request_id = ?", (raw.headers["x-request-id"],))
    assert [(r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"]) for r in rows] == [u]


def test_kill_9_mid_load_loses_no_acknowledged_record(tmp_path):
    t_start = time.monotonic()
    s = start(tmp_path)
    try:
        s.tenant("acme")
        key = s.key("acme")
    except BaseException:
        s.stop()
        raise
    all_obs = []
    report = []
    # kill times: early (the first answers still streaming), later, and the
    # instant the 30th client sees its usage (commits of others under way)
    for rnd, (kill_after, nth) in enumerate([(1.3, 0), (2.9, 0), (10, 30)]):
        obs = run_load(s, key, 24, kill_after + random.uniform(0, 0.4), seed=rnd, kill_at_nth_usage=nth)
        all_obs += obs
        s = start(tmp_path)  # same data dir
        try:
            n_rows, n_seen, n_billed_unseen = check_ledger(s, all_obs, rnd)
            serves_normally(s, key)
        except BaseException:
            s.stop()
            raise
        n_round_seen = sum(1 for o in obs if o["usage"] is not None)
        n_cut = sum(1 for o in obs if o["usage"] is None)
        report.append(f"round {rnd}: {len(obs)} requests, {n_round_seen} seen complete, {n_cut} cut by the kill; "
                      f"ledger {n_rows} rows, {n_billed_unseen} billed but not seen by their client so far")
        if not (n_round_seen > 0 or rnd == 0):
            s.stop()  # the server this round started: no listener outlives the test
            raise AssertionError(f"round {rnd}: no request completed before the kill")
    try:
        assert sum(1 for o in all_obs if o["usage"] is not None) >= 10
        assert sum(1 for o in all_obs if o["usage"] is None) >= 3, "the kills cut no request"
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]
    print("\n" + "\n".join(report) + f"\n{time.monotonic() - t_start:.1f} s")


# ---- read-only data dir ---------------------------------------------------------------------

def mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=20)


def umount(path):
    for _ in range(20):
        if subprocess.run(["umount", path], capture_output=True, timeout=20).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"could not unmount {path}")


def need_mount(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    r = mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe))
    if r.returncode != 0:
        pytest.skip(f"mount is not permitted here: {r.stderr.strip()}")
    umount(str(probe))


def serve_fails(data_dir, timeout=60):
    p = subprocess.run([LORAGATE, "serve", "--model", MODEL_PATH, "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                        "--access-log", "off"], env=dict(os.environ, LORAGATE_ADMIN_KEY=ADMIN_KEY),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 1, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])  # not a signal, not 0
    assert "serving on" not in p.stdout
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("loragate serve: loading ")]
    assert len(lines) == 1 and lines[0].startswith("loragate serve: "), p.stderr
    return lines[0]


def prepared_data_dir(root):
    """A data dir a server made (database, TLS files, a tenant), then stopped."""
    s = Serve(root, MODEL_PATH, *MODEL_ARGS)
    try:
        s.tenant("acme")
    finally:
        assert s.stop() == 0, s.stderr()[-2000:]
    return s.data_dir


def test_read_only_data_dir_is_a_clear_error(tmp_path):
    if os.geteuid() != 0:
        data = prepared_data_dir(tmp_path)
        os.chmod(os.path.join(data, "loragate.db"), 0o444)
        os.chmod(data, 0o555)
        try:
            line = serve_fails(data)
        finally:
            os.chmod(data, 0o755)
        assert "not writable" in line, line
        return
    need_mount(tmp_path)
    root = tmp_path / "ro"
    (root / "data").mkdir(parents=True)
    data = str(root / "data")
    assert mount("-t", "tmpfs", "-o", "size=32m,mode=700", "tmpfs", data).returncode == 0
    try:
        prepared_data_dir(root)
        r = mount("-o", "remount,ro", data)
        assert r.returncode == 0, r.stderr
        line = serve_fails(data)
        assert "not writable" in line and "Read-only file system" in line, line
    finally:
        umount(data)


def test_read_only_database_file_is_a_clear_error(tmp_path):
    """The dir is writable but loragate.db is not: SQLite would open it read-only
    without a word, and a server that started would fail at its first write."""
    need_mount(tmp_path)
    data = prepared_data_dir(tmp_path)
    db = os.path.join(data, "loragate.db")
    assert mount("--bind", db, db).returncode == 0
    try:
        r = mount("-o", "remount,bind,ro", db)
        assert r.returncode == 0, r.stderr
        line = serve_fails(data)
        assert "loragate.db" in line and "not writable" in line, line
    finally:
        umount(db)


# ---- full disk ----------------------------------------------------------------------------------

def fill(path):
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 16, 4096, 512):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == 28, e  # ENOSPC


def test_full_disk_gives_503_and_recovers_without_loss(tmp_path):
    need_mount(tmp_path)
    root = tmp_path / "full"
    data = root / "data"
    data.mkdir(parents=True)
    assert mount("-t", "tmpfs", "-o", "size=24m,mode=700", "tmpfs", str(data)).returncode == 0
    try:
        s = Serve(root, MODEL_PATH, *MODEL_ARGS)  # stderr and the access log stay off the tmpfs
        try:
            full_disk_scenario(s)
        finally:
            rc = s.stop()
        assert rc == 0, s.stderr()[-3000:]
    finally:
        umount(str(data))


def test_shutdown_that_loses_records_exits_non_zero(tmp_path):
    """SIGTERM while the disk is full and a record waits: after the drain bound
    the ledger gives the record up (logged in full) and serve exits 1, so a
    supervisor sees the loss."""
    need_mount(tmp_path)
    root = tmp_path / "lost"
    data = root / "data"
    data.mkdir(parents=True)
    assert mount("-t", "tmpfs", "-o", "size=24m,mode=700", "tmpfs", str(data)).returncode == 0
    try:
        s = Serve(root, MODEL_PATH, *MODEL_ARGS, "--drain-timeout", "2")
        try:
            s.tenant("acme")
            key = s.key("acme")
            fill(os.path.join(s.data_dir, "filler"))
            results, threads = {}, []
            plain = s.client()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and plain.get("/readyz").status_code != 503:
                threads.append(request_thread(s, key, results, len(threads)))
                time.sleep(0.3)
            assert plain.get("/readyz").status_code == 503
        finally:
            rc = s.stop(timeout=60)
        assert rc == 1, s.stderr()[-3000:]
        assert "usage records could not be written" in s.stderr()
    finally:
        umount(str(data))


def request_thread(s, key, results, i):
    def run():
        c = s.openai(key, tenant="acme")
        try:
            raw = c.completions.with_raw_response.create(
                model=MODEL, prompt=[5, 6, 7 + i] if not SMOL else f"Bread number {i} is", max_tokens=3)
            results[i] = (raw.headers["x-request-id"], usage_tuple(raw.parse().usage))
        except Exception as e:
            results[i] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def full_disk_scenario(s):
    s.tenant("acme")
    key = s.key("acme")
    c = s.openai(key, tenant="acme")
    acked = {}
    for i in range(4):
        raw = c.completions.with_raw_response.create(model=MODEL, prompt=[5, 6, i + 7] if not SMOL else "Rye is",
                                                     max_tokens=3, stream=i % 2 == 1,
                                                     stream_options={"include_usage": True} if i % 2 else None)
        parsed = raw.parse()
        u = usage_tuple(list(parsed)[-1].usage if i % 2 else parsed.usage)
        acked[raw.headers["x-request-id"]] = u

    filler = os.path.join(s.data_dir, "filler")
    fill(filler)
    plain = s.client()
    # requests until one's commit hits the full disk (the WAL has to grow)
    waiting, results, threads = [], {}, []
    deadline = time.monotonic() + 30
    not_ready = None
    while not_ready is None and time.monotonic() < deadline:
        threads.append(request_thread(s, key, results, len(threads)))
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            r = plain.get("/readyz")
            if r.status_code == 503:
                not_ready = r
                break
            time.sleep(0.05)
    assert not_ready is not None, "the ledger never failed on the full disk"
    assert not_ready.headers.get("retry-after")
    ledger = not_ready.json()["checks"]["ledger"]
    assert ledger["ok"] is False and "full" in ledger["detail"], ledger
    waiting = [i for i in range(len(threads)) if i not in results]
    assert waiting, "no request waits for its record"

    # new requests: 503 with Retry-After, streamed or not, and the process lives
    for stream in (False, True):
        body = {"model": MODEL, "prompt": [5, 6, 7] if not SMOL else "Rye is", "max_tokens": 3, "stream": stream}
        r = s.client(key).post("/t/acme/v1/completions", json=body)
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) > 0
        assert "ledger" in r.json()["error"]["message"]
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2) if SMOL \
            else c.completions.create(model=MODEL, prompt=[5, 6], max_tokens=2)
    assert e.value.status_code == 503
    assert plain.get("/healthz").status_code == 200
    assert s.proc.poll() is None
    assert all(i not in results for i in waiting), "a request was answered although its record is not durable"

    os.remove(filler)
    deadline = time.monotonic() + 20
    while plain.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the ledger did not recover after the disk was freed"
        time.sleep(0.1)
    for t in threads:
        t.join(20)
    assert all(not t.is_alive() for t in threads)
    got = dict(v for v in results.values() if not isinstance(v, Exception))
    # those that waited were answered; one sent as the ledger turned unhealthy may have got a 503
    assert all(not isinstance(results[i], Exception) for i in waiting), results
    assert all(getattr(v, "status_code", None) == 503 for v in results.values() if isinstance(v, Exception)), results
    # the waiting requests completed; every acknowledged record is there, once, with its tokens
    rows = {r["request_id"]: r for r in s.ledger()}
    for rid, u in {**acked, **got}.items():
        r = rows.get(rid)
        assert r is not None, f"acknowledged request {rid} has no record"
        assert (r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"], r["http_status"]) == (*u, 200)
    assert integrity(s) == [("ok",)]
    # and it serves again
    raw = c.completions.with_raw_response.create(model=MODEL, prompt=[5, 6, 7] if not SMOL else "Rye is",
                                                 max_tokens=3)
    assert len(s.ledger("request_id = ?", (raw.headers["x-request-id"],))) == 1
    print(f"\nfull disk: {len(acked)} acknowledged before, {len(threads)} sent while filling "
          f"({len(waiting)} waited for the disk), all billed once")
