"""
test_generate_schema.py — constrained generation end to end on the real
default model (SmolLM2-135M-Instruct GGUF) through the command line:
`loragate generate` at temperature 1 with several seeds over the corpus
(every schema with one seed, the first 20 with two more: one --batch run
whose lines carry their own "json_schema"),
`--regex`, `--grammar` (Lark), `--choice` and JSON mode. An output that ends by EOS
(finish_reason "stop") must parse with `json` and validate with
`jsonschema` (regex: fullmatch with Python's `re`; grammar: accepted by
llguidance); an output cut by --max-tokens must still be a prefix the
constraint allows (checked with constrain_tool when it is built).

Skips when `generate --help` does not list --json-schema (and each of the
other flags on its own), or when the model is missing.

Env: LG_BIN (default build/loragate), LG_SMOLLM2_GGUF (default
.models/SmolLM2-135M-Instruct.Q4_1.gguf), LG_BUILD_DIR (constrain_tool for
the prefix check), LG_GEN_MAX_TOKENS (default 160), LG_GEN_SCHEMAS (how many
corpus schemas, default all).
"""
import functools
import json
import os
import re
import subprocess

import pytest

import constrain_ref as cr

ROOT = cr.ROOT
LG_BIN = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))
GGUF = os.environ.get("LG_SMOLLM2_GGUF", os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
MAX_TOKENS = int(os.environ.get("LG_GEN_MAX_TOKENS", "160"))
CORPUS = cr.corpus()
N_SCHEMAS = int(os.environ.get("LG_GEN_SCHEMAS", str(len(CORPUS))))
CASES = [(n, 1) for n, _ in CORPUS[:N_SCHEMAS]] + [(n, s) for n, _ in CORPUS[:min(20, N_SCHEMAS)] for s in (2, 3)]


@functools.lru_cache(maxsize=None)
def help_text():
    if not os.access(LG_BIN, os.X_OK):
        return None
    p = subprocess.run([LG_BIN, "generate", "--help"], capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def need(flag):
    h = help_text()
    if h is None:
        pytest.skip(f"loragate binary not found at {LG_BIN}")
    if not re.search(re.escape(flag) + r"\b", h):
        pytest.skip(f"`loragate generate --help` does not list {flag}")
    if not os.path.exists(GGUF):
        pytest.skip(f"default model not found at {GGUF} (bash deploy/fetch-default-model.sh)")


def metavar(flag):
    """The help's word after the flag (FILE, TEXT, ...)."""
    m = re.search(re.escape(flag) + r"[ =]([A-Z][A-Z_.]*)", help_text() or "")
    return m.group(1) if m else ""


def arg_for(flag, text, tmp_path, suffix):
    """The flag's argument: a file holding text when the help says FILE/PATH."""
    mv = metavar(flag)
    if "FILE" in mv or "PATH" in mv:
        p = tmp_path / f"constraint{suffix}"
        p.write_text(text, encoding="utf-8")
        return str(p)
    return text


def generate(extra, prompt, seed):
    args = [LG_BIN, "generate", "--model", GGUF, "--chat", "--prompt", prompt, "--max-tokens", str(MAX_TOKENS),
            "--temperature", "1", "--seed", str(seed), "--json", *extra]
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}"
    out = json.loads(p.stdout)
    assert out["finish_reason"] in ("stop", "length"), out["finish_reason"]
    return out


def check_prefix(kind, source, text):
    """A cut output is still a prefix the constraint allows (tool, if built)."""
    if not cr.have_tool():
        return
    with cr.Tool(kind, source, tokenizer=cr.SMOLLM2_TOKENIZER) as tool:
        r = tool.bytes(text.encode())
        assert r == "ok", f"cut output {text!r} is not a prefix of the constraint's language: {r}"


@pytest.fixture(scope="module")
def corpus_outputs(tmp_path_factory):
    """Every corpus case in one `generate --batch` run (each line carries its
    own "json_schema"; the lines share batches, so the corpus takes minutes,
    not a process per case). Returns the outputs in case order."""
    need("--json-schema")
    d = tmp_path_factory.mktemp("corpus")
    schemas = dict(CORPUS)
    with open(d / "batch.jsonl", "w") as f:
        for name, seed in CASES:
            src = json.dumps(schemas[name])
            f.write(json.dumps({"prompt": f"Reply with a JSON value for this JSON schema: {src[:400]}\nJSON:",
                                "json_schema": schemas[name], "seed": seed, "temperature": 1.0,
                                "max_tokens": MAX_TOKENS}) + "\n")
    p = subprocess.run([LG_BIN, "generate", "--model", GGUF, "--batch", str(d / "batch.jsonl")], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}"
    outs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert len(outs) == len(CASES)
    return outs


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{n}-{s}" for n, s in CASES])
def test_json_schema(corpus_outputs, i):
    name, _ = CASES[i]
    schema = dict(CORPUS)[name]
    out = corpus_outputs[i]
    assert out["finish_reason"] in ("stop", "length"), out
    text = out["text"]
    if out["finish_reason"] == "stop":
        try:
            cr.validate(schema, text)
        except Exception as e:
            raise AssertionError(f"{text!r} does not validate: {str(e).splitlines()[0]}") from None
    else:
        check_prefix("json_schema", json.dumps(schema), text)


def test_most_corpus_outputs_finish(corpus_outputs):
    """The corpus check is only as strong as the outputs that end: most must."""
    done = sum(o["finish_reason"] == "stop" for o in corpus_outputs)
    assert done >= len(corpus_outputs) // 2, f"only {done} of {len(corpus_outputs)} outputs finished"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_object_mode(seed):
    need("--json-object")
    out = generate(["--json-object"], "Describe a cat as a JSON object.", seed)
    if out["finish_reason"] == "stop":
        assert isinstance(json.loads(out["text"]), dict), out["text"]
    else:
        check_prefix("json_object", None, out["text"])


REGEXES = [r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"[A-Z][a-z]{2,10}( [A-Z][a-z]{2,10}){0,3}\.",
           r"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?"]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("rx", REGEXES)
def test_regex(tmp_path, rx, seed):
    need("--regex")
    out = generate(["--regex", arg_for("--regex", rx, tmp_path, ".re")], "Answer briefly.", seed)
    if out["finish_reason"] == "stop":
        assert re.fullmatch(rx, out["text"]), out["text"]
    else:
        check_prefix("regex", rx, out["text"])


GRAMMARS = {
    "arith": 'start: expr\nexpr: term (("+" | "-") term)*\nterm: NUMBER | "(" expr ")"\nNUMBER: /[0-9]{1,4}/\n',
    "color_list": 'start: "[" color (", " color)* "]"\ncolor: "red" | "green" | "blue"\n',
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("gname", list(GRAMMARS))
def test_grammar(tmp_path, gname, seed):
    need("--grammar")
    g = GRAMMARS[gname]
    out = generate(["--grammar", arg_for("--grammar", g, tmp_path, ".lark")], "Write an example.", seed)
    v = cr.smollm2_vocab()
    if out["finish_reason"] == "stop":
        # llguidance must accept the text as a whole sentence of the grammar
        ref = cr.RefMatcher(v, "lark", g)
        toks = out["tokens"]
        eos = set(v.eos)
        body = [t for t in toks if t not in eos]
        for t in body:
            ref.advance(t)
        assert any((ref.mask() >> e) & 1 for e in v.eos), f"{out['text']!r} is not complete for llguidance"
    else:
        check_prefix("lark", g, out["text"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_choice(seed):
    need("--choice")
    choices = ["positive", "negative", "neutral", "mixed feelings"]
    extra = [a for c in choices for a in ("--choice", c)]
    out = generate(extra, "Is 'I love it' positive or negative?", seed)
    assert out["finish_reason"] == "stop" and out["text"] in choices, out
