"""
constrain_ref.py — the shared pieces of the constrained-decoding tests: the
two vocabularies, the reference engine (llguidance) set up for our output
policy, a client of `constrain_tool`, and the seeded random walk that drives
both and compares their masks token by token.

Vocabularies. Both engines are given the same list of token byte strings and
the same EOS ids, built here from the tokenizer files (never from our C
tokenizer, so the vocabulary itself is outside reference data too):
  smollm2  tests/tokenizer/fixtures/smollm2/tokenizer.json (49,152 tokens,
           GPT-2 byte-level BPE; 17 added special tokens; EOS <|im_end|> = 2
           and <|endoftext|> = 0, both given as EOS to exercise several ids)
  tekken   mistral-common's tekken_240911.json (131,072 ids: 1,000 special
           ids first, then 130,072 tiktoken-style byte tokens; EOS </s> = 2),
           loaded from the installed package (19 MB, not copied here).
The tool reads them as `--vocab FILE` (JSON: base64 bytes or null, eos ids);
llguidance as an LLTokenizer built from the same byte list.

Policy. llguidance's JSON compiler is run with item separator ",", key
separator ":" and whitespace_flexible false: compact JSON, our default
(constrain.h). Regexes use grammar_from_regex, Lark grammars
grammar_from_lark, choice lists the Lark alternation of their JSON-quoted
strings.

Walk. At each step both masks are computed and compared as big integers
(bit i = token i); one allowed token is then chosen with a seeded RNG and fed
to both. After `max_random` random steps the walk is driven to the end along
the tool's shortest completion (the longest allowed token that is a prefix
of it), still comparing every mask; at the end EOS must be allowed by both.
"""
import base64
import bisect
import functools
import json
import os
import random
import re
import select
import subprocess
import importlib.util

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_DIR = os.path.join(HERE, "schemas")
SMOLLM2_TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "smollm2", "tokenizer.json")

# LG_CERR_* (engine/runtime/constrain/constrain.h)
INVALID, UNSUPPORTED, LIMIT, UNSATISFIABLE, INTERNAL = 1, 2, 3, 4, 5

JSON_OPTS = {"item_separator": ",", "key_separator": ":", "whitespace_flexible": False}
JSON_OPTS_SPACED = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


def build_dir():
    d = os.environ.get("LG_BUILD_DIR", "build")
    return d if os.path.isabs(d) else os.path.join(ROOT, d)


def tool_path():
    return os.path.join(build_dir(), "constrain_tool")


def have_tool():
    return os.access(tool_path(), os.X_OK)


# ---- vocabularies ------------------------------------------------------------


def _gpt2_byte_decoder():
    """GPT-2's byte-level alphabet, inverted: printable Latin-1 bytes stand for
    themselves, the other 68 bytes for code points 256.. in byte order."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


class Vocab:
    """tokens[i]: bytes of token i, or None for a special token (never allowed
    unless it is an EOS id). eos: the ids that end generation."""

    def __init__(self, name, tokens, eos):
        self.name, self.tokens, self.eos = name, tokens, list(eos)
        self.n = len(tokens)
        self._path = None

    def write(self, path):
        doc = {"tokens": [None if t is None else base64.b64encode(t).decode() for t in self.tokens],
               "eos": self.eos}
        with open(path, "w") as f:
            json.dump(doc, f)
        self._path = path
        return path

    def describe(self, ids, limit=12):
        out = []
        for i in sorted(ids)[:limit]:
            t = self.tokens[i] if 0 <= i < self.n else None
            out.append(f"{i}:{'<special>' if t is None else repr(t)}")
        more = len(ids) - limit
        return ", ".join(out) + (f" ... (+{more})" if more > 0 else "")


@functools.lru_cache(maxsize=None)
def smollm2_vocab():
    with open(SMOLLM2_TOKENIZER, encoding="utf-8") as f:
        doc = json.load(f)
    vocab = doc["model"]["vocab"]
    dec = _gpt2_byte_decoder()
    n = max(max(vocab.values()), max(a["id"] for a in doc["added_tokens"])) + 1
    tokens = [None] * n
    for s, i in vocab.items():
        tokens[i] = bytes(dec[c] for c in s)
    for a in doc["added_tokens"]:
        tokens[a["id"]] = None if a["special"] else a["content"].encode()
    return Vocab("smollm2", tokens, [2, 0])


def tekken_file():
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = os.path.join(list(spec.submodule_search_locations)[0], "data", "tekken_240911.json")
    return p if os.path.exists(p) else None


@functools.lru_cache(maxsize=None)
def tekken_vocab():
    p = tekken_file()
    if p is None:
        return None
    with open(p, encoding="utf-8") as f:
        doc = json.load(f)
    cfg = doc["config"]
    n_special = cfg["default_num_special_tokens"]
    n = cfg["default_vocab_size"]
    tokens = [None] * n_special
    for row in sorted(doc["vocab"], key=lambda r: r["rank"])[: n - n_special]:
        tokens.append(base64.b64decode(row["token_bytes"]))
    assert len(tokens) == n
    return Vocab("tekken", tokens, [2])


# ---- reference engine ------------------------------------------------------------


class _Wrapper:
    """The TokenizerWrapper shape LLTokenizer takes: token bytes (specials as
    an unmatchable marker), EOS/BOS, special ids, and an encoder (greedy
    longest match; llguidance uses it only for tokenize functions)."""

    def __init__(self, v):
        self.tokens = [b"\xff[special_%d]" % i if t is None else t for i, t in enumerate(v.tokens)]
        self.special_token_ids = [i for i, t in enumerate(v.tokens) if t is None]
        self.eos_token_id = v.eos[0]
        self.bos_token_id = None
        self.is_tokenizer_wrapper = True
        self._index = {t: i for i, t in enumerate(v.tokens) if t is not None}
        self._maxlen = max(len(t) for t in v.tokens if t is not None)

    def __call__(self, s):
        b = s.encode() if isinstance(s, str) else bytes(s)
        out, i = [], 0
        while i < len(b):
            for L in range(min(self._maxlen, len(b) - i), 0, -1):
                t = self._index.get(b[i:i + L])
                if t is not None:
                    out.append(t)
                    i += L
                    break
            else:
                i += 1
        return out


@functools.lru_cache(maxsize=None)
def ll_tokenizer(v):
    import llguidance
    return llguidance.LLTokenizer(_Wrapper(v), n_vocab=v.n, eos_token=list(v.eos))


def ll_grammar(kind, source, ws="compact"):
    """The llguidance grammar for one of our constraint kinds."""
    from llguidance import LLMatcher
    opts = JSON_OPTS if ws == "compact" else JSON_OPTS_SPACED
    if kind == "json_schema":
        return LLMatcher.grammar_from_json_schema(source, overrides=opts)
    if kind == "json_object":
        return LLMatcher.grammar_from_json_schema('{"type":"object"}', overrides=opts)
    if kind == "json_value":
        return LLMatcher.grammar_from_json_schema("{}", overrides=opts)
    if kind == "regex":
        return LLMatcher.grammar_from_regex(source)
    if kind == "lark":
        return LLMatcher.grammar_from_lark(source)
    if kind == "choice":
        items = json.loads(source)
        return LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(x) for x in items))
    raise ValueError(kind)


class RefMatcher:
    def __init__(self, v, kind, source, ws="compact"):
        import llguidance
        self.v = v
        self.m = llguidance.LLMatcher(ll_tokenizer(v), ll_grammar(kind, source, ws), log_level=0)
        if self.m.is_error():
            raise ValueError(self.m.get_error())

    def mask(self):
        if self.m.is_error():
            raise AssertionError("llguidance: " + self.m.get_error())
        return int.from_bytes(self.m.compute_bitmask(), "little") & ((1 << self.v.n) - 1)

    def forced_language_mask(self):
        """llguidance's mask where it forces bytes F, by language, not by its
        fast-forward policy: when exactly one byte string F can follow (and
        its tokenizer gives a token for the start of F) compute_bitmask
        allows only that one token; here instead every token that llguidance's
        parser accepts (validate_tokens) among those that can be: the
        tokens that are a prefix of F or start with F. None when nothing is
        forced."""
        f = self.m.compute_ff_bytes()
        if not f:
            return None
        m = 0
        for i in forced_candidates(self.v, f):
            if self.m.validate_tokens([i]) == 1:
                m |= 1 << i
        return m

    def advance(self, tok):
        ok = self.m.consume_token(tok)
        if not ok:
            raise AssertionError(f"llguidance refused token {tok}: {self.m.get_error()}")


# ---- the tool ------------------------------------------------------------------------


class ToolError(Exception):
    def __init__(self, code, param, message):
        super().__init__(f"error {code} {param}\t{message}")
        self.code, self.param, self.message = code, param, message


def parse_ranges(s):
    """'<count> <ranges>' -> (count, mask int)."""
    count, _, ranges = s.partition(" ")
    m = 0
    if ranges and ranges != "-":
        for part in ranges.split(","):
            a, _, b = part.partition("-")
            a = int(a)
            b = int(b) if b else a
            m |= ((1 << (b - a + 1)) - 1) << a
    return int(count), m


class Tool:
    """One constrain_tool process: compiles on start, then line commands."""

    def __init__(self, kind, source=None, vocab_file=None, tokenizer=None, ws=None, limits=(), timeout=30):
        if not have_tool():
            import pytest
            pytest.skip(f"constrain_tool not built at {tool_path()} (LG_BUILD_DIR)")
        self.timeout = timeout
        self.src_file = None
        args = [tool_path(), "--kind", kind]
        if vocab_file:
            args += ["--vocab", vocab_file]
        else:
            args += ["--tokenizer", tokenizer or SMOLLM2_TOKENIZER]
        if source is not None:
            import tempfile
            fd, self.src_file = tempfile.mkstemp(prefix="lgc-", suffix=".src")
            with os.fdopen(fd, "wb") as f:
                f.write(source.encode() if isinstance(source, str) else source)
            args += ["--source", self.src_file]
        if ws:
            args += ["--ws", ws]
        for l in limits:
            args += ["--limit", l]
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, bufsize=1)
        first = self._readline()
        if first.startswith("error "):
            self.close()
            head, _, msg = first.partition("\t")
            parts = head.split(" ", 2)
            raise ToolError(int(parts[1]), parts[2] if len(parts) > 2 else "-", msg)
        if not first.startswith("ready "):
            err = self.p.stderr.read() if self.p.poll() is not None else ""
            self.close()
            raise AssertionError(f"constrain_tool: unexpected first line {first!r}; stderr {err!r}")
        _, n_rules, n_states, us = first.split()
        self.n_rules, self.n_states, self.compile_us = int(n_rules), int(n_states), int(us)

    def _readline(self):
        r, _, _ = select.select([self.p.stdout], [], [], self.timeout)
        if not r:
            self.p.kill()
            raise AssertionError(f"constrain_tool: no answer within {self.timeout} s")
        line = self.p.stdout.readline()
        if not line:
            rc = self.p.wait(timeout=5)
            raise AssertionError(f"constrain_tool exited ({rc}): {self.p.stderr.read()!r}")
        return line.rstrip("\n")

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self._readline()

    def mask(self):
        return parse_ranges(self.cmd("mask"))

    def timemask(self):
        c, us = self.cmd("timemask").split()
        return int(c), int(us)

    def advance(self, tok):
        return self.cmd(f"advance {tok}")

    def bytes(self, b):
        return self.cmd("bytes " + b.hex())

    def accepting(self):
        return self.cmd("accepting") == "1"

    def done(self):
        return self.cmd("done") == "1"

    def completion(self):
        r = self.cmd("completion")
        return None if r == "none" else bytes.fromhex(r)

    def forced(self):
        r = self.cmd("forced")
        return b"" if r == "-" else bytes.fromhex(r)

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=5)
            except Exception:
                self.p.kill()
                self.p.wait()
        if self.src_file:
            os.unlink(self.src_file)
            self.src_file = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# ---- walks -----------------------------------------------------------------------------


def bits(m):
    """The set bits of an int, ascending."""
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


def pick_random(rng, m, count):
    """A uniformly random set bit of m (count of them)."""
    k = rng.randrange(count)
    # walk 64-bit words to find the k-th bit without listing a 128k set
    base = 0
    while True:
        w = m & 0xFFFFFFFFFFFFFFFF
        c = bin(w).count("1")
        if k < c:
            for i in bits(w):
                if k == 0:
                    return base + i
                k -= 1
        k -= c
        m >>= 64
        base += 64


def pick_along(v, m, target):
    """The longest token of mask m whose bytes are a prefix of target."""
    for L in range(min(len(target), 64), 0, -1):
        for i in v.by_bytes.get(target[:L], ()):
            if (m >> i) & 1:
                return i
    return None


def index_bytes(v):
    if not hasattr(v, "by_bytes"):
        d = {}
        for i, t in enumerate(v.tokens):
            if t is not None:
                d.setdefault(t, []).append(i)
        v.by_bytes = d
    return v


def forced_candidates(v, f):
    """Token ids whose bytes are a nonempty prefix of f or start with f."""
    index_bytes(v)
    if not hasattr(v, "sorted_tokens"):
        v.sorted_tokens = sorted((t, i) for i, t in enumerate(v.tokens) if t is not None)
    out = set()
    for n in range(1, len(f) + 1):
        out.update(v.by_bytes.get(f[:n], ()))
    k = bisect.bisect_left(v.sorted_tokens, (f,))
    while k < len(v.sorted_tokens) and v.sorted_tokens[k][0].startswith(f):
        out.add(v.sorted_tokens[k][1])
        k += 1
    return out


class Mismatch(AssertionError):
    pass


def walk(v, tool, ref, seed, max_random=40, max_steps=400, eos_stop_p=0.3, log=None, stats=None):
    """Compares masks along one seeded path; returns (bytes, reached EOS).
    tool may be None (reference-only: the path is then random steps only and
    may end before EOS). ref may be None (tool-only walk).

    The one documented difference: where llguidance forces bytes, its mask
    is its single fast-forward token; there ours is compared with
    RefMatcher.forced_language_mask (llguidance's parser, token by token).
    stats["forced_steps"] counts those steps."""
    index_bytes(v)
    rng = random.Random(seed)
    eos = set(v.eos)
    out = b""
    for step in range(max_steps):
        tm = rm = None
        if tool is not None:
            tc, tm = tool.mask()
            assert tc == bin(tm).count("1"), f"tool count {tc} != ranges' {bin(tm).count('1')}"
        if ref is not None:
            rm = ref.mask()
        if tm is not None and rm is not None and tm != rm and bin(rm).count("1") == 1:
            lm = ref.forced_language_mask()
            if lm is not None:
                rm = lm
                if stats is not None:
                    stats["forced_steps"] = stats.get("forced_steps", 0) + 1
        if tm is not None and rm is not None and tm != rm:
            only_t, only_r = bits(tm & ~rm), bits(rm & ~tm)
            raise Mismatch(f"{v.name} step {step} after {out!r}: tool-only [{v.describe(only_t)}] "
                           f"llguidance-only [{v.describe(only_r)}]")
        m = tm if tm is not None else rm
        count = bin(m).count("1")
        if count == 0:
            raise AssertionError(f"{v.name} step {step} after {out!r}: empty mask (dead end)")
        eos_allowed = [e for e in v.eos if (m >> e) & 1]
        non_eos = m & ~sum(1 << e for e in eos)
        if eos_allowed and (not non_eos or (step >= max_random) or rng.random() < eos_stop_p):
            tok = eos_allowed[0]
            if tool is not None:
                assert tool.advance(tok) == "ok"
            if ref is not None:
                ref.advance(tok)
            return out, True
        if step < max_random or tool is None:
            if tool is None and step >= max_random:
                return out, False
            tok = pick_random(rng, non_eos, bin(non_eos).count("1"))
        else:
            comp = tool.completion()
            assert comp is not None, f"{v.name}: no completion after {out!r}"
            assert comp, f"{v.name}: empty completion but EOS not allowed after {out!r}"
            tok = pick_along(v, non_eos, comp)
            assert tok is not None, f"{v.name}: no allowed token starts the completion {comp!r} after {out!r}"
        if tool is not None:
            r = tool.advance(tok)
            assert r == "ok", f"tool refused allowed token {tok} ({v.tokens[tok]!r}) after {out!r}: {r}"
        if ref is not None:
            ref.advance(tok)
        out += v.tokens[tok]
        if log is not None:
            log.append(tok)
    raise AssertionError(f"{v.name}: walk did not end within {max_steps} steps: {out[:200]!r}")


# ---- corpus --------------------------------------------------------------------------------


def corpus():
    """[(name, schema dict)] of tests/constrain/schemas/*.json, sorted by name."""
    out = []
    for fn in sorted(os.listdir(SCHEMA_DIR)):
        if fn.endswith(".json"):
            with open(os.path.join(SCHEMA_DIR, fn), encoding="utf-8") as f:
                out.append((fn[:-5], json.load(f)))
    return out


# ---- validation ------------------------------------------------------------------------------


def _relaxed_leap(check):
    """Wraps a date / date-time / time check: February 29 of any year, year
    0000 and second 60 (RFC 3339's leap second) pass. The format regexes,
    llguidance's and ours, check days per month but not leap years, allow
    year 0000 (RFC 3339 does) and second 60 at any minute; the Python
    validators reject all three (documented in test_reference_check.py)."""

    def f(instance):
        if isinstance(instance, str):
            if instance[4:10] == "-02-29" or instance[:5] == "0000-":
                instance = "2000" + instance[4:]
            instance = re.sub(r"(\d\d:\d\d):60", r"\1:59", instance)
        return check(instance)

    return f


def format_checker():
    import jsonschema
    base = jsonschema.Draft202012Validator.FORMAT_CHECKER
    fc = jsonschema.FormatChecker()
    for name, (func, raises) in base.checkers.items():
        if name in ("date", "date-time", "time"):
            func = _relaxed_leap(func)
        fc.checks(name, raises)(func)
    return fc


def validate(schema, text):
    """Parses text (bytes or str) as one JSON value and validates it against
    schema (Draft 2020-12 with formats). Raises on failure."""
    import jsonschema
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-JSON constant {c}")))
    jsonschema.Draft202012Validator(schema, format_checker=format_checker()).validate(value)
    return value


CLOSERS = [b'"', b"}", b"]"]
OPENERS = (b"{", b"[")


def ref_walk_to_end(v, ref, seed, max_random=30, max_steps=3000):
    """A walk on llguidance alone (no tool): random tokens first, then a
    closing heuristic (EOS, else a closing quote / brace / bracket, else a
    random single-byte token that does not open or extend a container).
    Returns (bytes, reached_eos)."""
    index_bytes(v)
    rng = random.Random(seed)
    eos_bits = sum(1 << e for e in v.eos)
    single = {}
    for b in range(256):
        for i in v.by_bytes.get(bytes([b]), ()):
            single.setdefault(bytes([b]), i)
    out = b""
    for step in range(max_steps):
        m = ref.mask()
        if m == 0:
            raise AssertionError(f"{v.name}: llguidance dead end after {out!r}")
        eos = [e for e in v.eos if (m >> e) & 1]
        non_eos = m & ~eos_bits
        if eos and (not non_eos or step >= max_random or rng.random() < 0.3):
            ref.advance(eos[0])
            return out, True
        if step < max_random:
            tok = pick_random(rng, non_eos, bin(non_eos).count("1"))
        else:
            allowed = [(b, i) for b, i in single.items() if (m >> i) & 1]
            pref = [i for b, i in allowed if b in CLOSERS]
            calm = [i for b, i in allowed if b not in OPENERS]
            pool = (pref if pref and rng.random() < 0.6 else None) or calm or [i for _, i in allowed]
            if not pool:
                tok = pick_random(rng, non_eos, bin(non_eos).count("1"))
            else:
                tok = pool[rng.randrange(len(pool))]
        ref.advance(tok)
        out += v.tokens[tok]
    return out, False
