"""
test_masks.py — our token masks equal llguidance's, step by step.

For each grammar and each of two vocabularies (SmolLM2's 49k byte-level BPE
and mistral-common's 131k tekken, constrain_ref.py), one constrain_tool
process and one llguidance LLMatcher get the same grammar and the same token
byte strings. A seeded walk computes both masks at every step, asserts they
are equal (bit for bit, EOS included), feeds one allowed token to both, and
after 40 random steps follows the tool's shortest completion to EOS, which
both must allow at the end. Kinds: every corpus JSON schema, JSON mode and
any-JSON-value, regular expressions, Lark grammars and choice lists.

A mismatch names the step, the output so far and the tokens only one side
allows (id and bytes).

The one documented difference: where the grammar forces bytes F (one byte
string must follow), llguidance's compute_bitmask allows only its
"fast-forward" token, the first token of its own tokenization of F, while
ours allows every token consistent with F (any prefix of F, or F and what
may follow it): ours is the language, llguidance's is a tokenization
policy. At those steps our mask is compared with llguidance's parser by
language instead (RefMatcher.forced_language_mask: validate_tokens over the
tokens that are a prefix of F or start with F);
test_forced_bytes_difference pins the difference.

Env: LG_BUILD_DIR (constrain_tool). Runs in about a minute per vocabulary.
"""
import json
import zlib

import pytest

import constrain_ref as cr

CORPUS = cr.corpus()
VOCABS = ["smollm2", "tekken"]

REGEXES = [
    r"[0-9]{3}-[0-9]{4}",
    r"(yes|no|maybe)",
    r"[a-z]+@[a-z]+\.(com|org|net)",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"(a*)*b",
    r"(a|aa)+",
    r"[α-ω]{1,3} [A-Z][a-z]*",
    r"(\d{1,3}\.){3}\d{1,3}",
    r"[^\n]{0,30}\n",
    r"x{3,5}y?",
]

LARK = {
    "arith": """
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]+/
""",
    "sql": """
start: "SELECT " cols " FROM " NAME where?
where: " WHERE " NAME " = " NUMBER
cols: NAME (", " NAME)*
NAME: /[a-z_]+/
NUMBER: /[0-9]+/
""",
    "nested_list": """
start: list
list: "[" (item ("," item)*)? "]"
item: list | WORD
WORD: /[a-z]{1,3}/
""",
    "config_lines": """
start: line+
line: KEY "=" value "\\n"
value: INT | "true" | "false"
KEY: /[a-z]+/
INT: /[0-9]+/
""",
}

CHOICES = [
    ["yes", "no"],
    ["red", "green", "blue", "red-orange"],
    ["日本", "日本語", "🙂", "café"],
    ["positive", "negative", "neutral", "mixed", "pos"],
]

CASES = ([("json_schema", n, json.dumps(s)) for n, s in CORPUS]
         + [("json_object", "json_object", None), ("json_value", "json_value", None)]
         + [("regex", f"regex{i}", r) for i, r in enumerate(REGEXES)]
         + [("lark", n, g) for n, g in LARK.items()]
         + [("choice", f"choice{i}", json.dumps(c, ensure_ascii=False)) for i, c in enumerate(CHOICES)])


def seed_of(*parts):
    return zlib.crc32("/".join(parts).encode())


@pytest.mark.parametrize("vname", VOCABS)
@pytest.mark.parametrize("kind,name,source", CASES, ids=[c[1] for c in CASES])
def test_masks_equal_llguidance(tool_required, vocabs, vname, kind, name, source):
    v, vfile = vocabs(vname)
    ref = cr.RefMatcher(v, kind, source)
    with cr.Tool(kind, source, vocab_file=vfile) as tool:
        out, done = cr.walk(v, tool, ref, seed_of(vname, name))
        assert done
        assert tool.done(), f"tool not done after EOS; output {out!r}"
        assert ref.m.is_stopped()
    if kind == "json_schema":
        cr.validate(json.loads(source), out)
    elif kind == "json_object":
        cr.validate({"type": "object"}, out)
    elif kind == "json_value":
        cr.validate({}, out)


SPACED = ["pyd_invoice", "pyd_filter", "hand_json_rpc", "hand_open_object", "hand_dict_of_strings"]


@pytest.mark.parametrize("name", SPACED)
def test_masks_equal_llguidance_spaced(tool_required, vocabs, name):
    """--ws spaced against llguidance with separators ", " and ": "."""
    v, vfile = vocabs("smollm2")
    src = json.dumps(dict(CORPUS)[name])
    ref = cr.RefMatcher(v, "json_schema", src, ws="spaced")
    with cr.Tool("json_schema", src, vocab_file=vfile, ws="spaced") as tool:
        out, done = cr.walk(v, tool, ref, seed_of("spaced", name))
        assert done


def test_forced_bytes_difference(tool_required, vocabs):
    """At the start of an object whose first key is required, `{"a":` is
    forced: llguidance allows only `{"`; we allow `{` too, and exactly the
    tokens llguidance's parser accepts there."""
    v, vfile = vocabs("smollm2")
    cr.index_bytes(v)
    src = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                      "additionalProperties": False})
    ref = cr.RefMatcher(v, "json_schema", src)
    brace, brace_quote = v.by_bytes[b"{"][0], v.by_bytes[b'{"'][0]
    assert ref.mask() == 1 << brace_quote
    assert ref.m.compute_ff_bytes() == b'{"a":'
    with cr.Tool("json_schema", src, vocab_file=vfile) as tool:
        _, m = tool.mask()
        assert (m >> brace) & 1 and (m >> brace_quote) & 1
        assert m == ref.forced_language_mask()
        assert tool.forced() == b'{"a":'


def test_enough_schemas():
    assert len([c for c in CASES if c[0] == "json_schema"]) >= 50
