"""
test_corpus.py — every schema of the corpus (tests/constrain/schemas/,
SOURCES.md) compiles with constrain_tool, and what it lets through is inside
the schema: seeded random walks (uniform over the allowed tokens for 40
steps, then along the tool's shortest completion) end at EOS with text that
`json` parses and `jsonschema` (Draft 2020-12, formats checked; the two
format relaxations of test_reference_check.py) validates.

The compile test uses `--tokenizer` on SmolLM2's tokenizer.json (our own
tokenizer loader and its EOS); the walks use the `--vocab` files of both test
vocabularies, three seeds on SmolLM2's and one on the 131k tekken vocabulary.

Env: LG_BUILD_DIR (constrain_tool).
"""
import json
import zlib

import pytest

import constrain_ref as cr

CORPUS = cr.corpus()
NAMES = [n for n, _ in CORPUS]


@pytest.mark.parametrize("name", NAMES)
def test_compiles(tool_required, name):
    schema = dict(CORPUS)[name]
    with cr.Tool("json_schema", json.dumps(schema), tokenizer=cr.SMOLLM2_TOKENIZER) as tool:
        assert tool.n_rules > 0 and tool.n_states > 0
        count, m = tool.mask()
        assert count > 0, "nothing allowed at the start"


@pytest.mark.parametrize("vname,seed", [("smollm2", 0), ("smollm2", 1), ("smollm2", 2), ("tekken", 0)])
@pytest.mark.parametrize("name", NAMES)
def test_walks_validate(tool_required, vocabs, name, vname, seed):
    schema = dict(CORPUS)[name]
    v, vfile = vocabs(vname)
    with cr.Tool("json_schema", json.dumps(schema), vocab_file=vfile) as tool:
        out, done = cr.walk(v, tool, None, zlib.crc32(f"{name}/{vname}/{seed}".encode()))
        assert done
    try:
        cr.validate(schema, out)
    except Exception as e:
        raise AssertionError(f"output {out!r} does not validate: {str(e).splitlines()[0]}") from None


@pytest.mark.parametrize("ws,sep", [("compact", (",", ":")), ("spaced", (", ", ": "))])
def test_whitespace_policy(tool_required, vocabs, ws, sep):
    """--ws compact / spaced: the output is exactly json.dumps' layout with
    those separators (checked on walks through a nested schema)."""
    schema = dict(CORPUS)["pyd_invoice"]
    v, vfile = vocabs("smollm2")
    for seed in range(3):
        with cr.Tool("json_schema", json.dumps(schema), vocab_file=vfile, ws=ws) as tool:
            out, done = cr.walk(v, tool, None, seed)
        value = cr.validate(schema, out)
        assert _skeleton(out.decode()) == _skeleton(json.dumps(value, separators=sep, ensure_ascii=False)), out


def _skeleton(s):
    """The structural characters outside strings ({}[],: and spaces, quotes):
    equal layouts up to how numbers and string contents are spelled."""
    out, i, in_str = [], 0, False
    while i < len(s):
        c = s[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
                out.append(c)
        elif c == '"':
            in_str = True
            out.append(c)
        elif c in "{}[],: ":
            out.append(c)
        i += 1
    return "".join(out)
