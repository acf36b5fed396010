"""
reference_render.py — the outside reference for tests/chat: renders chat
templates with Hugging Face transformers' own code, the way
tokenizer.apply_chat_template(..., tokenize=False) does it:
`_normalize_chat_messages` (drops None-valued keys) and then
`render_jinja_template` with the special tokens and the caller's kwargs as
template variables.

It runs in whichever Python has transformers (the test suite's own venv does
not; tests/clients' venv does), as a filter:
  stdin:  one JSON object per line: {"template": PATH, "bos_token"?, "eos_token"?,
          "messages": [...], "tools"?, "documents"?, "chat_template_kwargs"?,
          "add_generation_prompt"?}
  stdout: one JSON object per line: {"text": ...} or {"error": "<type>: <message>"}
"""
import json
import logging
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
logging.disable(logging.WARNING)

from transformers.utils import chat_template_utils as ctu  # noqa: E402


def render(case, templates):
    path = case["template"]
    if path not in templates:
        with open(path, encoding="utf-8") as f:
            templates[path] = f.read()
    kwargs = {}
    for k in ("bos_token", "eos_token"):
        if case.get(k) is not None:
            kwargs[k] = case[k]
    kwargs.update(case.get("chat_template_kwargs") or {})
    messages = ctu._normalize_chat_messages(case["messages"])
    out, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=case.get("tools"),
        documents=case.get("documents"),
        chat_template=templates[path],
        add_generation_prompt=case.get("add_generation_prompt", True),
        **kwargs,
    )
    return out[0]


def main():
    templates = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        try:
            res = {"text": render(case, templates)}
        except Exception as e:  # TemplateError, UndefinedError, TypeError, ...
            res = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
