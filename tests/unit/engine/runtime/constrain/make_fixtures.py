"""
make_fixtures.py — reference data for the constrain/ unit tests, from
outside references: llguidance (the language of JSON Schema number bounds,
regexes, Lark grammars, formats), Python's json module (JSON string
encoding) and jsonschema (schema validity of sample instances).

Run from the repository root:
    .venv/bin/python tests/unit/engine/runtime/constrain/make_fixtures.py
It overwrites fixtures/*.tsv (deterministic). Each line of a fixture is
tab-separated; sources and strings are JSON-encoded so any byte fits:
    languages.tsv   kind \t source \t text \t member(0/1) \t documented_difference(0/1)
    json_quote.tsv  decoded \t encoded        (json.dumps, ensure_ascii False)
    smollm2_tokens.tsv  id \t hex of the token's bytes, or "special"  (llguidance's
                    LLTokenizer.decode_bytes of one id; every 13th id and every special)
"""
import json
import os
import random

import llguidance as llg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
TOK = llg.LLTokenizer(os.path.join(ROOT, "tests", "tokenizer", "fixtures", "smollm2", "tokenizer.json"))
JSON_OPTS = {"item_separator": ",", "key_separator": ":", "whitespace_flexible": False}


def grammar(kind, src):
    if kind == "json_schema":
        return llg.LLMatcher.grammar_from_json_schema(src, overrides=JSON_OPTS)
    if kind == "regex":
        return llg.LLMatcher.grammar_from_regex(src)
    return llg.LLMatcher.grammar_from_lark(src)


def member(g, text):
    m = llg.LLMatcher(TOK, g, log_level=0)
    assert not m.is_error(), m.get_error()
    for t in TOK.tokenize_bytes(text.encode()):
        if not m.consume_token(t):
            return False
    return m.is_accepting()


def number_rows():
    ints = [(-5, 120), (0, 10), (-5, -1), (-5, 0), (0, None), (None, 0), (None, -3), (-3, None), (7, 7),
            (-100, 100), (10, 99), (99, 1000), (123, 4567), (-4567, -123), (1.5, None), (None, 2.5), (1.5, 9.5),
            (-9.5, -1.5), (-9007199254740991, 9007199254740991), (1000, 1000000), (15, None), (999, None)]
    nums = [(-1, 1), (0, None), (None, 0), (-2.5, None), (1.5, 3), (0, 1), (-2.5, 7.25), (0.1, 0.2),
            (None, -1.25), (3.14, None), (100, 1000), (1e-5, None), (-7, -3.5)]
    rows = []
    for integer, bl in ((True, ints), (False, nums)):
        for lo, hi in bl:
            for xl, xh in ((False, False), (True, False), (False, True), (True, True)):
                if (lo is None and xl) or (hi is None and xh) or (lo is not None and lo == hi and (xl or xh)):
                    continue
                s = {"type": "integer" if integer else "number"}
                if lo is not None:
                    s["exclusiveMinimum" if xl else "minimum"] = lo
                if hi is not None:
                    s["exclusiveMaximum" if xh else "maximum"] = hi
                cands = {"0", "-0", "0.0", "-0.0", "00", "01", "1e2", "1.50", "-2.50", "2.0"}
                for b in (lo, hi):
                    if b is None:
                        continue
                    for d in (-1, 0, 1, 0.5, -0.5, 0.01, -0.01, 10, -10):
                        x = b + d
                        if isinstance(x, float) and x == int(x) and abs(x) < 1e15:
                            x = int(x)
                        cands.add(repr(x))
                        if isinstance(x, int):
                            cands.add(f"{x}.5")
                g = grammar("json_schema", json.dumps(s))
                for c in sorted(cands):
                    m = member(g, c)
                    # documented: bounded numbers are judged by value, so a fraction with
                    # trailing zeros or a negative zero may differ from llguidance's
                    doc = (not integer) and (c.startswith("-0") or ("." in c and c.endswith("0")))
                    rows.append(("json_schema", json.dumps(s), c, m, doc))
    return rows


REGEXES = {
    r"[0-9]{3}-[0-9]{4}": ["555-1234", "5551234", "555-123"],
    r"(yes|no|maybe)": ["yes", "no", "maybe", "ye", "yesno"],
    r"(a|aa)+": ["a", "aaaa", "", "ab"],
    r"x{3,5}y?": ["xx", "xxx", "xxxxxy", "xxxxxx", "xxxy"],
    r"[α-ω]{1,3} [A-Z][a-z]*": ["αβ Foo", "α F", "a Foo", "αβγδ F"],
    r"\d+": ["123", "٣٤", "1a", ""],
    r"\w+": ["héllo", "a_b", "a-b", "日本"],
    r"\s": [" ", "\u00a0", "\u2028", "a"],
    r"(?i)straße": ["STRASSE", "Straße", "STRAßE"],
    r"(?i)[a-c]+": ["ABC", "aBc", "abd"],
    r"[^a-z]": ["A", "a", "\n", "é"],
    r".": ["a", "\n", "\r", "日"],
    r"(?s).": ["\n"],
    r"[[:digit:][:upper:]]+": ["A1", "a1"],
    r"a.{2}b": ["a日本b", "axyb", "ab"],
    r"\u00e9|\x41": ["é", "A", "e"],
    r"[\d\s]+": ["1 2", "1\t2", "a"],
    r"(ab|cd){2,3}": ["abcd", "ab", "abcdabcd", "cdcdcd"],
    r"a*?b+?": ["aab", "b", "a"],
    r"[-+]?[0-9]*\.?[0-9]+": ["-1.5", ".5", "1.", "+3"],
}

LARKS = {
    'start: "a" b\nb: "b" | "c" b': ["ab", "acb", "accb", "a", "abc"],
    'start: expr\nexpr: term (("+" | "-") term)*\nterm: NUMBER | "(" expr ")"\nNUMBER: /[0-9]+/':
        ["1+2", "(1+2)-3", "(1", "1++2", "((7))"],
    'start: item+\nitem: WORD ","\nWORD: /[a-z]{1,3}/': ["ab,c,", "abcd,", "ab", ""],
    'start: "x" ~ 2..3': ["x", "xx", "xxx", "xxxx"],
    'start: "a".."c" "!"?': ["a", "c!", "d"],
    'start: "Hi"i': ["hi", "HI", "hI", "ho"],
    '%import common.INT\nstart: INT ("," INT)*': ["1,22,333", "1,", ""],
    'start: [sign] DIGITS\nsign: "-"\nDIGITS: /[0-9]+/': ["-12", "12", "-", "--1"],
}


FORMATS = {
    "date": ["2024-02-29", "2023-02-30", "2024-13-01", "2024-04-31", "2024-1-01", "0000-01-01"],
    "time": ["12:30:00Z", "23:59:60+01:00", "24:00:00Z", "12:30:00", "12:30:00.123z", "12:30:00-23:59"],
    "date-time": ["2024-01-01T00:00:00Z", "2024-01-01t00:00:00+05:30", "2024-01-01 00:00:00Z",
                  "2024-01-01T00:00:00.5-01:00", "2024-01-01T00:00Z"],
    "duration": ["P1Y2M3D", "PT1H", "P1W", "P1Y2W", "PT", "P", "P1DT1H2M3S", "PT1M1H", "P1M"],
    "email": ["a@b.c", "a.b@c", "a..b@c", ".a@b", "a@[1.2.3.4]", "a@-b.c", "a+b@c-d.e", "a@b"],
    "hostname": ["a", "a.b", "a-b.c", "-a.b", "a-.b", "a" * 63, "a" * 64, "a..b", "1.2.3.4"],
    "ipv4": ["1.2.3.4", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "0.0.0.0"],
    "ipv6": ["::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6:7:8:9",
             "1:::2", "fe80::1:2", "1:2:3:4:5:6:7", "::ffff:1:2", "12345::"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
             "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400"],
    "uri": ["http://a.b/c?d#e", "urn:isbn:123", "a:", "http://[::1]:80/", "http://u@h:1/p", "1a:b", "http://a b",
            "mailto:x@y.z", "http://%41/", "http://[v1.x]/"],
}


SCHEMAS = [
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
     ['{}', '{"a":1}', '{"b":"x"}', '{"b":"x","a":1}', '{"a":1,"b":"x"}', '{"a":1,"c":2}', '{"c":2}',
      '{"a":1,"a":2}', '{"a":1,"b":"x","c":[1],"d":{}}', '{"aa":1}', '{"a":1 }']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"],
      "additionalProperties": False}, ['{"b":"x"}', '{"a":1,"b":"x"}', '{"b":"x","a":1}', '{"a":1}', '{}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     ['{"a":1,"b":"x"}', '{"a":1,"b":2}', '{"b":"x","c":"y"}', '{"a":"x"}']),
    ({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3},
     ["[]", "[true]", "[true,false,true]", "[true,false,true,false]", "[true,]", "[ true]"]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, ["[1]", "[1,2]", "[1,2,3,4,5]"]),
    ({"enum": [1, "a", None, {"x": [1, 2.5]}, [True]]}, ['1', '"a"', 'null', '{"x":[1,2.5]}', '[true]', '2']),
    ({"type": ["string", "null"], "maxLength": 2}, ['null', '"ab"', '"abc"', '1']),
    ({"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^x+$"}]}, ['12', '"xx"', '"xy"', '1.5']),
    ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, ['1', 'true', '"a"']),
    ({"$defs": {"t": {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                      "required": ["k"], "additionalProperties": False}}, "$ref": "#/$defs/t"},
     ['{"k":[]}', '{"k":[{"k":[]},{"k":[{"k":[]}]}]}', '{"k":[{}]}']),
    ({"definitions": {"s": {"type": "string", "minLength": 2}}, "type": "array", "items": {"$ref": "#/definitions/s"}},
     ['["ab"]', '["a"]', '[]']),
    ({"type": "string", "pattern": "[0-9]{3}", "maxLength": 4}, ['"123"', '"a123"', '"a1234"', '"12"']),
    ({"type": "string", "minLength": 1, "maxLength": 2}, ['""', '"\\n"', '"\\u00e9x"', '"\u00e9\u00e9"', '"abc"']),
    ({"const": {"a": [1, "b"]}}, ['{"a":[1,"b"]}', '{"a":[1, "b"]}']),
    ({}, ['1', '{"a":[1,null,{"b":"c"}]}', '"x"', '[1,]', '-0.5e-3']),
]


def main():
    rows = number_rows()
    for sch, texts in SCHEMAS:
        src = json.dumps(sch)
        g = grammar("json_schema", src)
        for t in texts:
            rows.append(("json_schema", src, t, member(g, t), False))
    for fmt, texts in FORMATS.items():
        src = json.dumps({"type": "string", "format": fmt})
        g = grammar("json_schema", src)
        for t in texts:
            rows.append(("json_schema", src, json.dumps(t), member(g, json.dumps(t)), False))
    for rx, texts in REGEXES.items():
        g = grammar("regex", rx)
        for t in texts:
            rows.append(("regex", rx, t, member(g, t), False))
    for src, texts in LARKS.items():
        g = grammar("lark", src)
        for t in texts:
            rows.append(("lark", src, t, member(g, t), False))
    with open(os.path.join(HERE, "fixtures", "languages.tsv"), "w", encoding="utf-8") as f:
        for kind, src, text, m, doc in rows:
            f.write(f"{kind}\t{json.dumps(src)}\t{json.dumps(text)}\t{int(m)}\t{int(doc)}\n")
    rng = random.Random(3)
    # no DEL: json.dumps writes it raw, our strings (as llguidance's) need it escaped
    alphabet = ["a", "\"", "\\", "\n", "\t", "\x00", "\x1f", "é", "日", "🙂", "/", " ", "\b", "\f", "\r"]
    with open(os.path.join(HERE, "fixtures", "json_quote.tsv"), "w", encoding="utf-8") as f:
        for _ in range(200):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
            f.write(f"{json.dumps(s)}\t{json.dumps(json.dumps(s, ensure_ascii=False)[1:-1])}\n")
    with open(os.path.join(HERE, "fixtures", "smollm2_tokens.tsv"), "w") as f:
        for i in range(TOK.vocab_size):
            special = TOK.is_special_token(i)
            if special or i % 13 == 0:
                f.write(f"{i}\t{'special' if special else TOK.decode_bytes([i]).hex()}\n")
    print(f"{len(rows)} language rows")


if __name__ == "__main__":
    main()
