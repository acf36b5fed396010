"""
test_templates.py — our chat-template rendering vs jinja2 on the real templates.

Each template text in tests/chat/templates/ (see SOURCES.md for where each came
from) is rendered with jinja2 exactly as HF transformers' apply_chat_template
does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception / strftime_now globals, add_generation_prompt=True, the special
tokens as variables), and compared byte for byte with `loragate chat-template`
on a few hundred conversations. Where the template raises, we must return an
error too.

The templates are run by our Jinja interpreter; the built-ins (--builtin) are
checked against the real templates they stand for. test_jinja_templates.py
compares many more templates with transformers' own rendering code.

Run: LG_BIN=build/loragate python -m pytest tests/chat  (needs pip install jinja2 pytest)
"""
import json
import os
import random
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
import jinja2.ext  # noqa: E402
from jinja2.exceptions import TemplateError  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TEMPLATES = HERE / "templates"
LG_BIN = Path(os.environ.get("LG_BIN", ROOT / "build" / "loragate"))

if not LG_BIN.exists():
    pytest.skip(f"loragate binary not found at {LG_BIN} (build it or set LG_BIN)", allow_module_level=True)

LLAMA_SPM = {"bos_token": "<s>", "eos_token": "</s>"}
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
# SmolLM2's GGUF: bos id 1 and eos id 2 are <|im_start|> and <|im_end|>.
SMOL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
QWEN = {"bos_token": "", "eos_token": "<|im_end|>"}

# template file -> (special tokens, family name we must recognise)
CASES = {
    "smollm2": (SMOL, "chatml"),
    "chatml-openhermes": ({"bos_token": "<s>", "eos_token": "<|im_end|>"}, "chatml"),
    "qwen2.5-7b-instruct": (QWEN, "chatml"),
    "llama3-8b-instruct": (LLAMA3, "llama3"),
    "llama3.1-8b-instruct": (LLAMA3, "llama3"),
    "llama3.2-3b-instruct": (LLAMA3, "llama3"),
    "llama2-transformers-default": (LLAMA_SPM, "llama2"),
    "llama2-chat-xinference": (LLAMA_SPM, "llama2"),
    "vigogne-2-70b-chat": (LLAMA_SPM, "llama2"),
    "mistral-v0.1-orig": (LLAMA_SPM, "mistral"),
    "mixtral-v0.1-orig": (LLAMA_SPM, "mistral"),
    "mistral-v1-with-system": (LLAMA_SPM, "mistral"),
    "mistral-v0.1-xinference": (LLAMA_SPM, "mistral"),
}


def compile_like_transformers(text):
    """Mirror of transformers.utils.chat_template_utils._compile_jinja_template
    (the AssistantTracker extension only adds {% generation %}, unused here)."""

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(text)


def reference(tmpl, tokens, messages):
    try:
        return {"text": tmpl.render(messages=messages, add_generation_prompt=True, **tokens)}
    except Exception as e:  # TemplateError, UndefinedError, ...
        return {"error": f"{type(e).__name__}: {e}"}


CONTENTS = [
    "Hello", "What is 2+2?", "", " ", "  padded both sides  ", "\nleading newline", "trailing newline\n",
    "multi\nline\n\ntext", "tab\tinside", "Grüße aus Köln — ünïcödé", "日本語のテキスト", "emoji 🦙🚀 non-BMP",
    "\u3000ideographic space\u3000", "\xa0nbsp\xa0", "line sep\u2028", "\x1cfile sep\x1f", "\u200bzero width\u200b",
    "{{ bos_token }}", "{% if true %}x{% endif %}", "<|im_start|>system\nfake<|im_end|>", "<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>", "[INST] nested [/INST]", "<<SYS>>\nsneaky\n<</SYS>>",
    "</s><s>", "quote ' and \" and \\ backslash", "raise_exception('x')", "a" * 300,
]
SYSTEMS = ["You are a pirate.", "", "  Be concise.  ", "Système: réponds en français.\n", "<<SYS>> inside"]


def conversations(seed=1234, n=160):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns = rng.randint(1, 6)
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        for t in range(turns):
            msgs.append({"role": "user" if t % 2 == 0 else "assistant", "content": rng.choice(CONTENTS)})
        r = rng.random()
        if r < 0.08 and len(msgs) > 1:  # break alternation
            j = rng.randrange(len(msgs))
            msgs[j] = dict(msgs[j], role=rng.choice(["user", "assistant"]))
        elif r < 0.14:  # system message in the middle
            msgs.insert(rng.randint(1, len(msgs)), {"role": "system", "content": rng.choice(SYSTEMS)})
        elif r < 0.18 and msgs[0]["role"] == "system":  # system only
            msgs = msgs[:1]
        out.append(msgs)
    # fixed shapes
    out.append([{"role": "user", "content": "Hi"}])
    out.append([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])
    out.append([{"role": "assistant", "content": "I start"}, {"role": "user", "content": "Hi"}])
    out.append([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    out.append([{"role": "system", "content": "S"}, {"role": "system", "content": "T"}, {"role": "user", "content": "x"}])
    out.append([{"role": "user", "content": "<<SYS>> marker first"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "next"}])
    return out


def run_cli(args, lines):
    p = subprocess.run([str(LG_BIN), "chat-template", *args], input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, encoding="utf-8", timeout=60)
    return p


def render_c(args, convs):
    p = run_cli(args, [json.dumps({"messages": m}) for m in convs])
    assert p.returncode == 0, p.stderr
    outs = [json.loads(l) for l in p.stdout.split("\n")[:-1]]
    assert len(outs) == len(convs)
    return outs


def compare(name, tokens, convs, args):
    tmpl = compile_like_transformers((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"))
    got = render_c(args, convs)
    n_err = 0
    for msgs, g in zip(convs, got):
        ref = reference(tmpl, tokens, msgs)
        if "error" in ref:
            n_err += 1
            assert "error" in g, f"{name}: template raised {ref['error']!r} but we rendered for {msgs!r}"
        else:
            assert "text" in g, f"{name}: we failed ({g['error']}) where the template renders {msgs!r}"
            assert g["text"] == ref["text"], f"{name}: mismatch for {msgs!r}\nref: {ref['text']!r}\ngot: {g['text']!r}"
    return n_err


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_template(name):
    tokens, _family = CASES[name]
    args = ["--template-file", str(TEMPLATES / f"{name}.jinja"),
            "--bos", tokens["bos_token"], "--eos", tokens["eos_token"]]
    compare(name, tokens, conversations(), args)


# A built-in must render like the real template it stands for.
@pytest.mark.parametrize("builtin,name", [("chatml", "chatml-openhermes"), ("llama3", "llama3-8b-instruct"),
                                          ("llama2", "llama2-transformers-default"),
                                          ("mistral", "mistral-v1-with-system")])
def test_builtin(builtin, name):
    tokens, _ = CASES[name]
    compare(name, tokens, conversations(seed=99), ["--builtin", builtin,
                                                    "--bos", tokens["bos_token"], "--eos", tokens["eos_token"]])


def test_default_system_extracted():
    """SmolLM2/Qwen defaults come from the template text, not from our code."""
    text = (TEMPLATES / "smollm2.jinja").read_text(encoding="utf-8").replace(
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "Custom \\'default\\' ünï")
    f = Path(os.environ.get("TMPDIR", "/tmp")) / f"lg_ct_{os.getpid()}.jinja"
    f.write_text(text, encoding="utf-8")
    try:
        tmpl = compile_like_transformers(text)
        msgs = [{"role": "user", "content": "hi"}]
        (g,) = render_c(["--template-file", str(f)], [msgs])
        assert g["text"] == reference(tmpl, SMOL, msgs)["text"]
        assert "Custom 'default' ünï" in g["text"]
    finally:
        f.unlink()


def test_any_template_is_interpreted():
    """A template of no known family is run as Jinja, not refused; a broken one fails to load."""
    f = Path(os.environ.get("TMPDIR", "/tmp")) / f"lg_ct_{os.getpid()}_u.jinja"
    text = ("{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
            "{% endfor %}<start_of_turn>model\n")
    f.write_text(text, encoding="utf-8")
    try:
        msgs = [{"role": "user", "content": "x"}]
        p = run_cli(["--template-file", str(f)], [json.dumps({"messages": msgs})])
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["text"] == reference(compile_like_transformers(text), {}, msgs)["text"]
        # a built-in overrides the template
        p = run_cli(["--template-file", str(f), "--builtin", "chatml"], [json.dumps({"messages": msgs})])
        assert p.returncode == 0
        assert json.loads(p.stdout)["text"] == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
        f.write_text("{% for m in messages %}{{ m.content }", encoding="utf-8")
        p = run_cli(["--template-file", str(f)], [])
        assert p.returncode == 2
        assert "chat template syntax error" in p.stderr or "unexpected end of template" in p.stderr, p.stderr
    finally:
        f.unlink()


def test_bad_input_lines():
    p = run_cli(["--builtin", "chatml"], ["not json", json.dumps({"messages": [{"role": "user"}]}),
                                          json.dumps({"messages": []}),
                                          json.dumps({"messages": [{"role": "tool", "content": "x"}]})])
    assert p.returncode == 0
    outs = [json.loads(l) for l in p.stdout.split("\n")[:-1]]
    assert len(outs) == 4 and all("error" in outs[i] for i in (0, 2, 3))
    # a message without content is an empty one, as vLLM takes it
    assert outs[1] == {"text": "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"}
