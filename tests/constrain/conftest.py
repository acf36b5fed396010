"""
conftest.py — fixtures of the constrained-decoding tests: the two test
vocabularies written once per run as `constrain_tool --vocab` files, and
the llguidance tokenizers built from the same byte lists.

Env: LG_BUILD_DIR (default build) holds constrain_tool; tests that need the
tool skip when it is not built there. The 131k vocabulary comes from the
installed mistral-common package (tests/requirements.txt); tests that need
it skip when it is missing.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import constrain_ref as cr  # noqa: E402


@pytest.fixture(scope="session")
def vocab_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("constrain_vocab")


def _vocab(name):
    if name == "smollm2":
        return cr.smollm2_vocab()
    v = cr.tekken_vocab()
    if v is None:
        pytest.skip("mistral-common (tekken_240911.json) is not installed")
    return v


@pytest.fixture(scope="session")
def vocabs(vocab_dir):
    """name -> (Vocab, path of its --vocab file); built lazily."""
    cache = {}

    def get(name):
        if name not in cache:
            v = _vocab(name)
            cache[name] = (v, v.write(str(vocab_dir / f"{name}.json")))
        return cache[name]

    return get


@pytest.fixture
def tool_required():
    if not cr.have_tool():
        pytest.skip(f"constrain_tool not built at {cr.tool_path()} (set LG_BUILD_DIR)")
