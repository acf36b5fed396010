"""
test_speculative_serve.py — `loragate serve --speculative ngram` (SmolLM2, TLS):
a chat completion that copies its input gives the text `loragate generate
--chat` gives without speculation (greedy), bills the tokens it emitted,
and /metrics shows proposals and acceptances (loragate_spec_*) in an
exposition promtool accepts.
"""
import os

import pytest

from metering_util import metric, scrape_checked
from serve_fixture import LORAGATE, generate_json, smol_server

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

TEXT = ("Repeat the following text exactly, word for word.\n\nThe quick brown fox jumps over the lazy dog. "
        "The dog does not move; it sleeps in the afternoon sun while the fox runs back into the forest.")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "spec", args=("--speculative", "ngram")) as s:
        yield s


def test_speculative_chat_equals_generate_and_counts(srv):
    client = srv.openai(srv.keys["acme"], tenant="acme")
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": TEXT}],
                                       max_tokens=40, temperature=0)
    want, _ = generate_json("--chat", "--prompt", TEXT, "--max-tokens", "40")
    assert r.choices[0].message.content == want["text"]
    assert r.usage.completion_tokens == len(want["tokens"])
    m = scrape_checked(srv)
    proposed = metric(m, "loragate_spec_proposed_tokens_total")
    accepted = metric(m, "loragate_spec_accepted_tokens_total")
    assert proposed > 0 and 0 < accepted <= proposed
    assert metric(m, "loragate_spec_verify_rows_total") > 0
    assert abs(metric(m, "loragate_spec_acceptance_ratio") - accepted / proposed) < 1e-9
