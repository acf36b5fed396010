"""
test_jinja_templates.py — the real chat templates of many model families
(tests/chat/templates, sources in SOURCES.md) rendered by `loragate
chat-template` (our Jinja interpreter, engine/model/jinja*.c) and by
transformers' own rendering code (reference_render.py), compared byte for
byte over a matrix of conversations: with and without a system message,
single and multi-turn, tool definitions, assistant tool calls (arguments sent
as a JSON string, as OpenAI clients send them, and a null content;
transformers gets them as vLLM hands them to the template: arguments parsed,
content ""), tool results, documents, add_generation_prompt on and
off, and template variables (enable_thinking). Where transformers raises
(a template's raise_exception, a type error), we must fail too.

The reference needs a Python with transformers: LG_REF_PYTHON, else this
interpreter if it has transformers, else .venv/clients/bin/python (made by
tests/clients/install.sh). Without one the tests skip.

Run:  LG_BIN=build/loragate .venv/bin/python -m pytest -q tests/chat/test_jinja_templates.py
      .venv/bin/python tests/chat/test_jinja_templates.py   (a per-template table)
"""
import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TEMPLATES = HERE / "templates"
LG_BIN = Path(os.environ.get("LG_BIN", ROOT / "build" / "loragate"))


def ref_python():
    if os.environ.get("LG_REF_PYTHON"):
        return os.environ["LG_REF_PYTHON"]
    if importlib.util.find_spec("transformers") is not None:
        return sys.executable
    p = ROOT / ".venv" / "clients" / "bin" / "python"
    return str(p) if p.exists() else None


# The families the product promises (each must match on every conversation),
# with the special tokens their tokenizers define (None: the tokenizer has none).
LLAMA3 = ("<|begin_of_text|>", "<|eot_id|>")
SPM = ("<s>", "</s>")
FAMILIES = {
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct": LLAMA3,
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B": (None, "<|im_end|>"),
    "Qwen-QwQ-32B": (None, "<|im_end|>"),
    "Qwen3-Coder": (None, "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": SPM,
    "Mistral-Small-3.2-24B-Instruct-2506": SPM,
    "unsloth-mistral-Devstral-Small-2507": SPM,
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "google-gemma-4-31B-it": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "microsoft-phi-4": ("<|endoftext|>", "<|endoftext|>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("<|end_of_text|>", "<|end_of_text|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "meetkai-functionary-medium-v3.2": LLAMA3,
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "llama2-transformers-default": SPM,
    "mistral-v1-with-system": SPM,
}
DEFAULT_TOKENS = SPM

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                       "required": ["query"]},
    },
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Réponds brièvement."}
U1 = {"role": "user", "content": "Hello! What's 2+2?"}
A1 = {"role": "assistant", "content": "2+2 is 4."}
U2 = {"role": "user", "content": "And the weather in Paris? 🌦  \n"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "abc123def", "type": "function",
     "function": {"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather",
          "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"}
A2 = {"role": "assistant", "content": "It is 21 °C and sunny in Paris."}
CALL2 = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "abc123def", "type": "function",
     "function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
    {"id": "xyz987uvw", "type": "function",
     "function": {"name": "search", "arguments": {"query": "Paris \"events\" today", "k": 3}}}]}
RESULT2a = {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "21 C"}
RESULT2b = {"role": "tool", "tool_call_id": "xyz987uvw", "name": "search", "content": "A concert at 8pm."}
THINK = {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nIt is 4."}
DOCS = [{"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Weather", "text": "Spring in Paris is mild."}]

CONVERSATIONS = {
    "user": dict(messages=[U1]),
    "system_user": dict(messages=[SYSTEM, U1]),
    "multi_turn": dict(messages=[U1, A1, U2]),
    "system_multi_turn": dict(messages=[SYSTEM, U1, A1, U2]),
    "ends_with_assistant": dict(messages=[SYSTEM, U1, A1], add_generation_prompt=False),
    "multi_turn_no_gen": dict(messages=[U1, A1, U2], add_generation_prompt=False),
    "tools": dict(messages=[U2], tools=[WEATHER_TOOL, SEARCH_TOOL]),
    "system_tools": dict(messages=[SYSTEM, U2], tools=[WEATHER_TOOL]),
    "tool_call_result": dict(messages=[SYSTEM, U2, CALL, RESULT], tools=[WEATHER_TOOL]),
    "tool_call_answer": dict(messages=[U2, CALL, RESULT, A2, U1], tools=[WEATHER_TOOL]),
    "parallel_calls": dict(messages=[U2, CALL2, RESULT2a, RESULT2b], tools=[WEATHER_TOOL, SEARCH_TOOL]),
    "tool_call_no_tools": dict(messages=[U2, CALL, RESULT]),
    "thinking_history": dict(messages=[U1, THINK, U2]),
    "enable_thinking_false": dict(messages=[SYSTEM, U1], chat_template_kwargs={"enable_thinking": False}),
    "enable_thinking_true": dict(messages=[U1, A1, U2], chat_template_kwargs={"enable_thinking": True}),
    "documents": dict(messages=[U1], documents=DOCS),
    "bad_alternation": dict(messages=[U1, U2]),
    "assistant_first": dict(messages=[A1, U1]),
}

# Random conversations over awkward texts (Unicode whitespace that strip()
# and trim remove, quotes and backslashes that tojson escapes, template and
# special-token syntax that must stay text), seeded so a failure replays.
TEXTS = [
    "Hi", "", " ", "  padded both sides  ", "\nleading newline", "trailing newline\n", "multi\nline\n\ntext",
    "tab\tinside", "Grüße aus Köln — ünïcödé", "日本語のテキスト", "emoji 🦙🚀 non-BMP", "\u3000ideographic\u3000",
    "\xa0nbsp\xa0", "line sep\u2028", "\x1cfile sep\x1f", "\u200bzero width\u200b", "{{ bos_token }}",
    "{% if true %}x{% endif %}", "<|im_start|>system\nfake<|im_end|>", "<|eot_id|>", "[INST] nested [/INST]",
    "quote ' and \" and \\ backslash", "</think>after", "<think>\nhmm\n</think>\n\nanswer", "<tool_call>x</tool_call>",
    "a" * 300, "ctrl \x07\x08\x0c chars", "\r\ncrlf\r",
]
ARGS = [{"location": "Oslo"}, {}, {"query": "naïve \"quoted\" \\ text\n", "k": 10, "f": 0.5, "ok": True, "x": None},
        {"nested": {"list": [1, 2.25, "three", [4]], "empty": {}}}]


def random_conversations(seed=20261128, n=40):
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(TEXTS)})
        for t in range(rng.randint(1, 5)):
            msgs.append({"role": "user", "content": rng.choice(TEXTS)})
            if rng.random() < 0.3:
                args = rng.choice(ARGS)
                msgs.append({"role": "assistant", "content": rng.choice([None, "", rng.choice(TEXTS)]),
                             "tool_calls": [{"id": "abc123def", "type": "function",
                                             "function": {"name": "get_weather", "arguments": args}}]})
                msgs.append({"role": "tool", "tool_call_id": "abc123def", "content": rng.choice(TEXTS)})
            if t < 4 or rng.random() < 0.5:
                msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
        conv = {"messages": msgs, "add_generation_prompt": msgs[-1]["role"] != "assistant" or rng.random() < 0.3}
        if rng.random() < 0.4:
            conv["tools"] = [WEATHER_TOOL, SEARCH_TOOL][: rng.randint(1, 2)]
        if rng.random() < 0.2:
            conv["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
        out.append(conv)
    return out


for _i, _c in enumerate(random_conversations()):
    CONVERSATIONS[f"random_{_i}"] = _c


def ours_form(conv):
    """The conversation as an OpenAI client sends it: tool-call arguments as JSON strings."""
    c = copy.deepcopy(conv)
    for m in c["messages"]:
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
    return c


def run(cmd, lines):
    p = subprocess.run(cmd, input="".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines),
                       capture_output=True, text=True, encoding="utf-8", timeout=600)
    return p


def render_ours(name, tokens, convs):
    args = [str(LG_BIN), "chat-template", "--template-file", str(TEMPLATES / f"{name}.jinja")]
    if tokens[0] is not None:
        args += ["--bos", tokens[0]]
    if tokens[1] is not None:
        args += ["--eos", tokens[1]]
    p = run(args, [ours_form(c) for c in convs])
    if p.returncode != 0:
        return [{"error": "template refused: " + p.stderr.strip()}] * len(convs)
    outs = [json.loads(l) for l in p.stdout.split("\n") if l]
    assert len(outs) == len(convs), p.stderr
    return outs


def vllm_form(conv):
    """The conversation as vLLM hands it to the template: tool-call arguments parsed (they
    are dicts here already) and a null content as ""."""
    c = copy.deepcopy(conv)
    for m in c["messages"]:
        if m.get("content") is None:
            m["content"] = ""
    return c


def render_ref(py, cases):
    p = run([py, str(HERE / "reference_render.py")], cases)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(l) for l in p.stdout.split("\n") if l]


def compare_all(names):
    """{name: [(conv, ref, ours, ok)]} for the given templates, one reference process in all."""
    py = ref_python()
    plan, cases = [], []
    for name in names:
        tokens = FAMILIES.get(name, DEFAULT_TOKENS)
        for cname, conv in CONVERSATIONS.items():
            case = dict(vllm_form(conv), template=str(TEMPLATES / f"{name}.jinja"), bos_token=tokens[0], eos_token=tokens[1])
            plan.append((name, cname))
            cases.append(case)
    refs = render_ref(py, cases)
    ours = {}
    for name in names:
        ours[name] = render_ours(name, FAMILIES.get(name, DEFAULT_TOKENS), list(CONVERSATIONS.values()))
    res = {}
    idx = {n: 0 for n in names}
    for (name, cname), ref in zip(plan, refs):
        got = ours[name][idx[name]]
        idx[name] += 1
        ok = ("error" in ref and "error" in got) or ("text" in ref and got.get("text") == ref["text"])
        res.setdefault(name, []).append((cname, ref, got, ok))
    return res


def all_template_names():
    return sorted(p.stem for p in TEMPLATES.glob("*.jinja"))


if __name__ == "__main__":
    names = sys.argv[1:] or all_template_names()
    res = compare_all(names)
    tot = ok = 0
    for name in names:
        rows = res[name]
        n_ok = sum(r[3] for r in rows)
        n_txt = sum(1 for r in rows if r[3] and "text" in r[1])
        tot += len(rows)
        ok += n_ok
        bad = [r[0] for r in rows if not r[3]]
        print(f"{'OK ' if not bad else 'BAD'} {name:55s} {n_ok}/{len(rows)} (text {n_txt}) {' '.join(bad)}")
    print(f"total {ok}/{tot}")
    sys.exit(0)


import pytest  # noqa: E402

if not LG_BIN.exists():
    pytest.skip(f"loragate binary not found at {LG_BIN} (build it or set LG_BIN)", allow_module_level=True)
if ref_python() is None:
    pytest.skip("no Python with transformers for the reference (set LG_REF_PYTHON or run tests/clients/install.sh)",
                allow_module_level=True)

_RESULTS = {}


def results():
    if not _RESULTS:
        _RESULTS.update(compare_all(all_template_names()))
    return _RESULTS


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_transformers(name):
    rows = results()[name]
    bad = [(c, r, g) for c, r, g, ok in rows if not ok]
    assert not bad, "\n".join(f"{name} / {c}:\n  transformers: {r!r}\n  ours:         {g!r}" for c, r, g in bad[:3])
    # the matrix must exercise the template, not only its errors
    assert sum(1 for _, r, _, _ in rows if "text" in r) >= 5


def test_families_count():
    assert len(FAMILIES) >= 15


def test_every_template_matches_or_is_known():
    """Every fixture, not only the promised families: a mismatch names the template."""
    bad = {n: [c for c, _, _, ok in rows if not ok] for n, rows in results().items()}
    bad = {n: c for n, c in bad.items() if c}
    assert not bad, bad
