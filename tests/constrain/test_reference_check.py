"""
test_reference_check.py — the reference side of the constrained-decoding
tests, checked on its own (no constrain_tool needed): the corpus is what
SOURCES.md says, every schema is a valid Draft 2020-12 schema that
llguidance compiles under our compact-JSON policy, and llguidance's own
random complete outputs validate with `jsonschema`. If the reference's
language were not inside the schema, comparing our masks to it would prove
less; this shows it is, except for the documented differences below.

Documented differences between the format regexes (llguidance's, which ours
follow) and the Python format validators, relaxed in
constrain_ref.format_checker and pinned here so that a change shows:
  - dates: days per month are checked, leap years are not ("2023-02-29"
    is accepted; Python's date.fromisoformat refuses it);
  - times: second 60 is accepted at any minute (RFC 3339's leap second;
    rfc3339-validator refuses it);
  - year 0000 is accepted (RFC 3339 allows it; Python's datetime starts at
    year 1).
"""
import json
import re

import jsonschema
import pytest

import constrain_ref as cr

CORPUS = cr.corpus()


def test_corpus_size_and_shapes():
    assert len(CORPUS) >= 100
    text = {name: json.dumps(s) for name, s in CORPUS}
    have = lambda pat: sum(1 for t in text.values() if re.search(pat, t))  # noqa: E731
    assert have(r'"\$ref"') >= 20
    assert have(r'"anyOf"') >= 20
    assert have(r'"enum"') >= 10
    assert have(r'"pattern"') >= 15
    assert have(r'"format"') >= 10
    assert have(r'"(minimum|maximum|exclusiveMinimum|exclusiveMaximum)"') >= 20
    assert have(r'"(minItems|maxItems)"') >= 15
    assert have(r'"\$defs"') >= 15
    recursive = [n for n, s in CORPUS if _recursive(s)]
    assert len(recursive) >= 10, recursive
    assert sum(1 for n in text if n.startswith("pyd_")) >= 50


def _recursive(schema):
    """A $ref that reaches back into its own definition (or "#")."""
    t = json.dumps(schema)
    if '"$ref": "#"' in t:
        return True
    for name, d in (schema.get("$defs") or {}).items():
        if f'"#/$defs/{name}"' in json.dumps(d):
            return True
    defs = schema.get("$defs") or {}
    # mutual recursion: a -> b -> a
    for a, da in defs.items():
        for b in re.findall(r'"#/\$defs/([^"]+)"', json.dumps(da)):
            if b in defs and f'"#/$defs/{a}"' in json.dumps(defs[b]):
                return True
    return False


@pytest.mark.parametrize("name", [n for n, _ in CORPUS])
def test_schema_is_valid_and_llguidance_compiles_it(name):
    from llguidance import LLMatcher
    schema = dict(CORPUS)[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    g = cr.ll_grammar("json_schema", json.dumps(schema))
    err = LLMatcher.validate_grammar(g, cr.ll_tokenizer(cr.smollm2_vocab()))
    assert err == "", err


@pytest.mark.parametrize("name", [n for n, _ in CORPUS])
def test_llguidance_outputs_validate(name):
    """Three seeded llguidance walks per schema reach EOS and validate."""
    schema = dict(CORPUS)[name]
    v = cr.smollm2_vocab()
    for seed in range(3):
        ref = cr.RefMatcher(v, "json_schema", json.dumps(schema))
        out, done = cr.ref_walk_to_end(v, ref, seed)
        assert done, f"seed {seed}: llguidance walk did not end: {out[-120:]!r}"
        cr.validate(schema, out)


def test_compact_policy_is_what_llguidance_enforces():
    """The options we give llguidance really mean compact JSON: no space
    after ':' or ',', none around the value."""
    v = cr.smollm2_vocab()
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a"], "additionalProperties": False}
    ref = cr.RefMatcher(v, "json_schema", json.dumps(schema))
    m = ref.mask()
    space = [i for i, t in enumerate(v.tokens) if t is not None and t.startswith((b" ", b"\n", b"\t"))]
    assert not any((m >> i) & 1 for i in space)
    cr.index_bytes(v)
    for piece in (b'{"', b'a', b'":', b'['):
        tok = v.by_bytes[piece][0]
        assert (ref.mask() >> tok) & 1, piece
        ref.advance(tok)
    m = ref.mask()
    assert not any((m >> i) & 1 for i in space)


@pytest.mark.parametrize("fmt,value", [("date", "2023-02-29"), ("date-time", "2023-02-29T10:00:00Z"),
                                       ("date", "0000-01-01"), ("date-time", "0000-12-31T00:00:00Z"),
                                       ("time", "10:00:60Z"), ("date-time", "2024-01-01T23:59:60+01:00")])
def test_documented_format_differences(fmt, value):
    """The format regexes accept these; the Python validators refuse them;
    constrain_ref.format_checker lets exactly these through."""
    v = cr.smollm2_vocab()
    schema = {"type": "string", "format": fmt}
    ref = cr.RefMatcher(v, "json_schema", json.dumps(schema))
    cr.index_bytes(v)
    for ch in json.dumps(value).encode():
        tok = v.by_bytes[bytes([ch])][0]
        assert (ref.mask() >> tok) & 1, (value, chr(ch))
        ref.advance(tok)
    assert any((ref.mask() >> e) & 1 for e in v.eos)
    strict = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert not strict.is_valid(value), "the Python validator now accepts it: drop the relaxation"
    cr.validate(schema, json.dumps(value))
    with pytest.raises(jsonschema.ValidationError):
        cr.validate(schema, json.dumps(value.replace("-02-29", "-02-30").replace(":60", ":61")
                                       .replace("-01-01", "-01-32").replace("-12-31", "-12-32")))
