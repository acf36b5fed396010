"""
test_hostile.py — grammars a client can send to hurt or confuse the server:
invalid and unsatisfiable schemas, keywords we do not enforce, regexes that
are catastrophic for backtracking engines or blow up automata, huge enums,
deep $ref chains, $ref cycles, 10,000-deep nesting. Each one gets one line,
`error <code> <param>\\t<message>` (exit status 2), with the expected
LG_CERR_* code and `param` (a JSON pointer into the schema, "offset N" into
a regex, "line L" of a grammar, "choices/N"), or, for the regexes that only
backtracking engines fear, `ready` and working masks. The 30 s bound is only
there so that a hang fails instead of blocking the suite; it is not a timing
assertion (speed is tests/bench/constrain_masks.py's).

Env: LG_BUILD_DIR (constrain_tool).
"""
import json
import random
import re

import pytest

import constrain_ref as cr
from constrain_ref import INVALID, LIMIT, UNSATISFIABLE, UNSUPPORTED

# (id, kind, source, code, param regex)
ROWS = []


def row(id_, kind, source, code, param):
    if not isinstance(source, str) and source is not None:
        source = json.dumps(source)
    ROWS.append((id_, kind, source, code, param))


def obj(props, **kw):
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False, **kw}


# ---- invalid / unsatisfiable schemas ----
row("json_syntax", "json_schema", '{"type": "object",', INVALID, r"offset 18")
row("json_trailing", "json_schema", '{"type": "object"} x', INVALID, r"offset 20")
row("schema_not_object", "json_schema", "[1, 2]", INVALID, r"-")
row("unknown_type", "json_schema", {"type": "strin"}, INVALID, r"/type")
row("type_not_string", "json_schema", obj({"x": {"type": 7}}), INVALID, r"/properties/x/type")
row("properties_not_object", "json_schema", {"type": "object", "properties": []}, INVALID, r"/properties")
row("minimum_not_number", "json_schema", obj({"n": {"type": "integer", "minimum": "a"}}), INVALID,
    r"/properties/n/minimum")
row("ref_missing", "json_schema", obj({"a": {"$ref": "#/$defs/nope"}}), INVALID, r"/properties/a/\$ref")
row("bad_pattern", "json_schema", obj({"s": {"type": "string", "pattern": "(ab"}}), INVALID,
    r"/properties/s/pattern offset 0")
row("min_gt_max", "json_schema", obj({"n": {"type": "integer", "minimum": 5, "maximum": 1}}), UNSATISFIABLE,
    r"/properties/n")
row("minlen_gt_maxlen", "json_schema", obj({"s": {"type": "string", "minLength": 5, "maxLength": 2}}),
    UNSATISFIABLE, r"/properties/s")
row("minitems_gt_maxitems", "json_schema", obj({"a": {"type": "array", "minItems": 3, "maxItems": 1}}),
    UNSATISFIABLE, r"/properties/a")
row("empty_enum", "json_schema", obj({"e": {"enum": []}}), UNSATISFIABLE, r"/properties/e/enum")
row("required_false", "json_schema", obj({"x": False}), UNSATISFIABLE, r"/properties/x")
row("recursive_required_no_base", "json_schema",
    {"$defs": {"n": obj({"next": {"$ref": "#/$defs/n"}})}, "$ref": "#/$defs/n"}, UNSATISFIABLE, r"-")

# ---- valid keywords we do not enforce: refused by name ----
row("not", "json_schema", obj({"x": {"not": {"type": "string"}}}), UNSUPPORTED, r"/properties/x/not")
row("if_then", "json_schema", {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
    UNSUPPORTED, r"/if")
row("pattern_properties", "json_schema", {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
    UNSUPPORTED, r"/patternProperties")
row("nested_pattern_properties", "json_schema",
    obj({"m": {"type": "object", "patternProperties": {"^x": {}}}}), UNSUPPORTED, r"/properties/m/patternProperties")
row("contains", "json_schema", obj({"a": {"type": "array", "contains": {"const": 1}}}), UNSUPPORTED,
    r"/properties/a/contains")
row("property_names", "json_schema", {"type": "object", "propertyNames": {"maxLength": 3}}, UNSUPPORTED,
    r"/propertyNames")
row("dependent_required", "json_schema", {"type": "object", "dependentRequired": {"a": ["b"]}}, UNSUPPORTED,
    r"/dependentRequired")
row("unevaluated_properties", "json_schema", {"type": "object", "unevaluatedProperties": False}, UNSUPPORTED,
    r"/unevaluatedProperties")
row("remote_ref", "json_schema", obj({"a": {"$ref": "https://example.com/s.json"}}), UNSUPPORTED,
    r"/properties/a/\$ref")
row("unknown_format", "json_schema", obj({"c": {"type": "string", "format": "credit-card"}}), UNSUPPORTED,
    r"/properties/c/format")
row("prefix_items", "json_schema",
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
    UNSUPPORTED, r"/prefixItems")
row("allof_two", "json_schema",
    {"allOf": [obj({"a": {"type": "integer"}}), {"properties": {"a": {"minimum": 0}}}]}, UNSUPPORTED, r"/allOf")
row("unique_items", "json_schema", obj({"a": {"type": "array", "uniqueItems": True}}), UNSUPPORTED,
    r"/properties/a/uniqueItems")
row("multiple_of", "json_schema", obj({"n": {"type": "integer", "multipleOf": 5}}), UNSUPPORTED,
    r"/properties/n/multipleOf")
row("pattern_lookahead", "json_schema", obj({"p": {"type": "string", "pattern": "^(?=a)ab$"}}), UNSUPPORTED,
    r"/properties/p/pattern offset 1")

# ---- regexes ----
row("rx_unbalanced", "regex", "(ab", INVALID, r"offset 0")
row("rx_range_order", "regex", "[z-a]", INVALID, r"offset 1")
row("rx_nothing_to_repeat", "regex", "*a", INVALID, r"offset 0")
row("rx_bad_bounds", "regex", "a{3,2}", INVALID, r"offset 1")
row("rx_multiple_repeat", "regex", "a{1000}{1000}", INVALID, r"offset 7")
row("rx_lookahead", "regex", "(?=a)b", UNSUPPORTED, r"offset 0")
row("rx_backref", "regex", "(a)\\1", UNSUPPORTED, r"offset 3")
row("rx_word_boundary", "regex", "\\bword\\b", UNSUPPORTED, r"offset 0")
row("rx_huge_repeat", "regex", "(a{1000}){1000}", LIMIT, r"-")
row("rx_huge_class_repeat", "regex", "[a-z]{1,1000000}", LIMIT, r"-")
row("rx_dfa_blowup", "regex", ".*a.{24}", LIMIT, r"-")
row("rx_deep_groups", "regex", "(" * 10000 + "a" + ")" * 10000, LIMIT, r"offset 64")

# ---- size and depth ----
_rng = random.Random(7)
_words = sorted({"".join(_rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)) for _ in range(110000)})[:100000]
# 100k values in 800 KB (under max_source_bytes): refused by the automaton bound, not by size
row("enum_100k", "json_schema", obj({"e": {"enum": _words}}), LIMIT, r"-")
row("enum_source_too_big", "json_schema", {"enum": [w + "xyz" for w in _words] + ["pad" * 30000]}, LIMIT, r"-")
_chain = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(20000)}
_chain["d20000"] = {"type": "string"}
row("ref_self_cycle", "json_schema", {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, INVALID,
    r"/\$defs/a/\$ref")
row("ref_two_cycle", "json_schema", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                     "$ref": "#/$defs/a"}, INVALID, r"/\$defs/a/\$ref")
row("root_self_ref", "json_schema", {"$ref": "#"}, INVALID, r"/\$ref")
# built as text: json.dumps recurses once per level
_deep = '{"type":"array","items":' * 10000 + '{"type":"string"}' + "}" * 10000
row("nesting_10k", "json_schema", _deep, LIMIT, r"offset \d+")
row("json_text_nesting_10k", "json_schema", "[" * 10000 + "]" * 10000, LIMIT, r"offset \d+")
_deep_anyof = '{"anyOf":[' * 10000 + '{"type":"integer"}' + ',{"type":"null"}]}' * 10000
row("anyof_nesting_10k", "json_schema", _deep_anyof, LIMIT, r"offset \d+")
row("lark_deep_parens", "lark", "start: " + "(" * 10000 + '"a"' + ")" * 10000, LIMIT, r"line 1")
row("source_too_big", "regex", "a" * (2 << 20), LIMIT, r"-")

# ---- Lark and choice lists ----
row("lark_undefined_rule", "lark", "start: foo\n", INVALID, r"line 1")
row("lark_syntax", "lark", 'start: "a" |\nfoo: ::\n', INVALID, r"line 2")
row("lark_no_start", "lark", 'foo: "a"\n', INVALID, r"-")
row("choice_not_array", "choice", '{"a": 1}', INVALID, r"-")
row("choice_not_string", "choice", '["a", 2]', INVALID, r"choices/1")
row("choice_empty", "choice", "[]", UNSATISFIABLE, r"-")


@pytest.mark.parametrize("id_,kind,source,code,param", ROWS, ids=[r[0] for r in ROWS])
def test_refused(tool_required, vocabs, id_, kind, source, code, param):
    _, vfile = vocabs("smollm2")
    with pytest.raises(cr.ToolError) as ei:
        with cr.Tool(kind, source, vocab_file=vfile, timeout=30):
            pass
    e = ei.value
    assert (e.code, bool(re.fullmatch(param, e.param))) == (code, True), \
        f"got error {e.code} {e.param!r}: {e.message}; want {code} matching {param!r}"
    assert e.message and "\n" not in e.message


@pytest.mark.parametrize("rx,run", [("(a*)*b", b"a"), ("(a|aa)+$", b"a"), ("(x+x+)+y", b"x"), ("(a|a)*c", b"a"),
                                    ("(.*){12}z", b"q")])
def test_backtracking_bombs_compile_and_match(tool_required, vocabs, rx, run):
    """Exponential for backtracking matchers, small automata for us: they
    compile, a long run of the repeated byte is matched (no blow-up while
    matching either), and a walk agrees with llguidance."""
    v, vfile = vocabs("smollm2")
    with cr.Tool("regex", rx, vocab_file=vfile, timeout=30) as tool:
        assert tool.bytes(run * 5000) == "ok"
        assert tool.cmd("rollback 1") == "ok"
        out, done = cr.walk(v, tool, cr.RefMatcher(v, "regex", rx), 11)
        assert done


def test_limit_flag_is_honoured(tool_required, vocabs):
    """--limit reaches lg_climits: a schema 5 objects deep under max_depth=3."""
    _, vfile = vocabs("smollm2")
    s = {"type": "integer"}
    for _ in range(5):
        s = obj({"x": s})
    with cr.Tool("json_schema", json.dumps(s), vocab_file=vfile):
        pass
    with pytest.raises(cr.ToolError) as ei:
        with cr.Tool("json_schema", json.dumps(s), vocab_file=vfile, limits=["max_depth=3"]):
            pass
    assert ei.value.code == LIMIT, str(ei.value)


def test_ref_chain_refused_by_ref_limit(tool_required, vocabs):
    """A 20,000-link $ref chain (d0 -> d1 -> ... -> string, 0.8 MB) is
    refused by max_ref_expansions (10000), and the message names the limit's
    value; not by running out max_compile_ms first."""
    _, vfile = vocabs("smollm2")
    with pytest.raises(cr.ToolError) as ei:
        with cr.Tool("json_schema", json.dumps({"$defs": _chain, "$ref": "#/$defs/d0"}), vocab_file=vfile):
            pass
    e = ei.value
    assert e.code == LIMIT and "max_ref_expansions" in e.message and "10000" in e.message, str(e)
    assert re.fullmatch(r"/\$defs/d\d+/\$ref", e.param), e.param


@pytest.mark.parametrize("depth", [100, 172, 173, 1000])
def test_deep_satisfiable_nesting_is_never_unsatisfiable(tool_required, vocabs, depth):
    """Arrays of arrays, minItems 1 at every level, `depth` levels: the
    schema has instances (depth '[' then "" then depth ']'), so it either
    compiles, and then its shortest completion validates, or is refused by a
    limit (code 3); never "matches nothing"."""
    _, vfile = vocabs("smollm2")
    src = '{"type":"array","minItems":1,"items":' * depth + '{"type":"string"}' + "}" * depth
    try:
        with cr.Tool("json_schema", src, vocab_file=vfile) as tool:
            comp = tool.completion()
            assert comp is not None
            assert comp == b"[" * depth + b'""' + b"]" * depth
            assert tool.bytes(comp) == "ok" and tool.accepting()
    except cr.ToolError as e:
        assert e.code == LIMIT, f"depth {depth}: {e}"


def test_choice_of_100k_strings(tool_required, vocabs):
    """100,000 choices compile (one automaton) and walks end on one of them
    (llguidance 1.9.1 crashes on this one, so no mask comparison)."""
    v, vfile = vocabs("smollm2")
    words = set(_words)
    for seed in range(2):
        with cr.Tool("choice", json.dumps(_words), vocab_file=vfile, timeout=30) as tool:
            out, done = cr.walk(v, tool, None, seed)
            assert done and out.decode() in words, out
