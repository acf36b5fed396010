"""
test_decode_bursts.py — `loragate serve` while the engine decodes in bursts
(engine.c burst_next: the next decode step enqueued before the previous
step's tokens are read). The CPU backend runs that path with
LG_CPU_DEVICE_SAMPLE=1 (its `sample` slot). What a client sees must not
change: a request that arrives during a long stream ends the burst, joins
the batch and gets the answer it gets alone; the long stream's text is the
one it has alone; a client that leaves mid-burst is billed for what it was
sent (499), and the server goes on serving; /metrics counts the chained
steps, and `--decode-bursts off` has none. Outside references: the openai
SDK over real TLS on loopback, the ledger's SQLite file, and the same
requests answered one at a time.
"""
import threading
import time

import pytest

from metering_util import metric, parse_metrics
from serve_fixture import smol_server

LONG = "Tell a long story about a dragon who bakes bread."
SHORT = "The capital of France is"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "bursts", env={"LG_CPU_DEVICE_SAMPLE": "1", "LG_BURST": "1"}) as s:
        yield s


def test_arrival_during_a_burst_gets_its_own_answer(srv):
    c = srv.openai(srv.keys["acme"], tenant="acme")
    alone_short = c.completions.create(model="smollm2", prompt=SHORT, max_tokens=12, temperature=0)
    alone_long = c.completions.create(model="smollm2", prompt=LONG, max_tokens=200, temperature=0,
                                      seed=11)
    streamed, started = [], threading.Event()
    usage = {}

    def run_long():
        for ch in c.completions.create(model="smollm2", prompt=LONG, max_tokens=200, temperature=0, seed=11,
                                       stream=True, stream_options={"include_usage": True}):
            if ch.choices:
                streamed.append(ch.choices[0].text)
                if len(streamed) >= 10:
                    started.set()
            if ch.usage:
                usage["u"] = ch.usage
        started.set()

    t = threading.Thread(target=run_long)
    t.start()
    assert started.wait(60)
    joined = c.completions.create(model="smollm2", prompt=SHORT, max_tokens=12, temperature=0)
    t.join(120)
    assert not t.is_alive()
    assert joined.choices[0].text == alone_short.choices[0].text
    assert joined.usage.completion_tokens == alone_short.usage.completion_tokens
    assert "".join(streamed) == alone_long.choices[0].text
    assert usage["u"].completion_tokens == alone_long.usage.completion_tokens


def test_client_leaving_mid_burst_is_billed_and_serving_goes_on(srv):
    row = srv.leave_mid_stream(srv.keys["acme"], "acme", LONG, events=8)
    assert row["http_status"] == 499 and 7 <= row["completion_tokens"] < 400
    o = srv.openai(srv.keys["acme"], tenant="acme")
    r = o.completions.create(model="smollm2", prompt=SHORT, max_tokens=5, temperature=0)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def decode_steps(s, at_least):
    """(decode steps, chained ones) from /metrics, once the engine has
    published at least `at_least` decode steps (it publishes after steps)."""
    deadline = time.monotonic() + 10
    while True:
        with s.client() as c:
            samples, _ = parse_metrics(c.get("/metrics").text)
        steps = metric(samples, "loragate_engine_decode_steps_total")
        if steps >= at_least or time.monotonic() > deadline:
            return steps, metric(samples, "loragate_engine_chained_decode_steps_total")
        time.sleep(0.05)


COUNT = "1, 2, 3, 4, 5, 6,"


def test_metrics_count_chained_steps_and_the_switch_turns_them_off(srv, tmp_path_factory):
    steps0, chained0 = decode_steps(srv, 0)
    r = srv.openai(srv.keys["acme"], tenant="acme").completions.create(model="smollm2", prompt=COUNT, max_tokens=40,
                                                                         temperature=0)
    assert r.usage.completion_tokens == 40
    steps, chained = decode_steps(srv, steps0 + 39)
    assert steps >= steps0 + 39 and chained - chained0 >= 30, (steps0, chained0, steps, chained)
    with smol_server(tmp_path_factory, "stepwise", env={"LG_CPU_DEVICE_SAMPLE": "1", "LG_BURST": "1"},
                     args=("--decode-bursts", "off")) as off:
        r = off.openai(off.keys["acme"], tenant="acme").completions.create(model="smollm2", prompt=COUNT,
                                                                           max_tokens=40, temperature=0)
        assert r.usage.completion_tokens == 40
        steps, chained = decode_steps(off, 39)
        assert steps == 39 and chained == 0
