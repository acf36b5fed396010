"""
test_adapter_template.py — an adapter's own chat template, end to end on the
default model (SmolLM2-135M-Instruct, Q4_1 GGUF) with synthetic adapters
(synth_adapter.py).

What it shows, the reference being jinja2 (transformers' environment:
sandboxed, trim_blocks, lstrip_blocks, loopcontrols) rendering the same
template text with the base model's BOS/EOS texts (read from the GGUF by the
`gguf` package):
  - an adapter uploaded with a `chat_template` (chat_template.jinja) renders
    its chat requests with it: /tokenize's chat form with `model` = the
    adapter gives ids whose text (/detokenize) is jinja2's rendering byte for
    byte, and a chat completion on it bills exactly that many prompt tokens
    (and /v1/responses as many input tokens);
  - an adapter imported from a directory with tokenizer_config.json's
    "chat_template" does the same with that template;
  - the base model, and an adapter without a template, keep the base model's
    template (the GGUF's, also compared with jinja2);
  - a template that does not parse is refused with 400 naming the file, for an
    upload and an import, and changes nothing;
  - after a restart the stored templates still apply; a restart with
    `--chat-template FILE` renders every request, the adapters' too, with FILE.
"""
import os

import pytest

from serve_fixture import LORAGATE, SMOLLM2, Serve
from synth_adapter import smollm2_adapter, write_adapter

jinja2 = pytest.importorskip("jinja2")
gguf = pytest.importorskip("gguf")
pytestmark = [
    pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built"),
    pytest.mark.skipif(not os.path.exists(SMOLLM2), reason="default model not downloaded"),
]

SYS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<<SYS>>\n{{ m['content'] }}\n<</SYS>>\n\n"
    "{% else %}[{{ m['role'] | upper }}] {{ m['content'] }}{% if m['role'] == 'assistant' %}{{ eos_token }}"
    "{% endif %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
)
JSON_TEMPLATE = (
    "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}### assistant:\n{% endif %}"
)
FILE_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}<go>"
BROKEN = "{% for m in messages %}{{ m['content'] }"  # unclosed
MESSAGES = [
    {"role": "system", "content": "You answer in haiku."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue, like the sea."},
    {"role": "user", "content": "  And another?  "},
]


def gguf_specials():
    """(bos text, eos text, chat template) of the default model, read by the gguf package."""
    r = gguf.GGUFReader(SMOLLM2)

    def field(name):
        f = r.fields[name]
        return f.parts[f.data[0]]

    tokens = r.fields["tokenizer.ggml.tokens"]

    def tok(i):
        return bytes(tokens.parts[tokens.data[i]]).decode()

    bos = tok(int(field("tokenizer.ggml.bos_token_id")[0]))
    eos = tok(int(field("tokenizer.ggml.eos_token_id")[0]))
    return bos, eos, bytes(field("tokenizer.chat_template")).decode()


def reference(template):
    bos, eos, _ = gguf_specials()
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    return env.from_string(template).render(messages=MESSAGES, add_generation_prompt=True, bos_token=bos,
                                            eos_token=eos)


def start(tmp, *args):
    return Serve(tmp, SMOLLM2, "--served-model-name", "smollm2", *args)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adapter_template")
    s = start(tmp)
    try:
        s.tmp = tmp
        s.tenant("acme")
        s.keys = {"acme": s.key("acme")}
        yield s
    finally:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.stderr()[-3000:]


def upload(srv, name, seed, template=None):
    cfg, w = smollm2_adapter(seed)
    files = {"config": ("adapter_config.json", cfg, "application/json"),
             "weights": ("adapter_model.safetensors", w, "application/octet-stream")}
    if template is not None:
        files["chat_template"] = ("chat_template.jinja", template.encode(), "text/plain")
    with srv.client(srv.keys["acme"]) as c:
        return c.post("/v1/adapters", data={"name": name}, files=files)


def rendered(srv, model):
    """The chat prompt the server renders for `model`: (ids, text)."""
    with srv.client(srv.keys["acme"]) as c:
        r = c.post("/tokenize", json={"model": model, "messages": MESSAGES})
        assert r.status_code == 200, r.text
        ids = r.json()["tokens"]
        d = c.post("/detokenize", json={"model": model, "tokens": ids})
        assert d.status_code == 200, d.text
        return ids, d.json()["prompt"]


def adapter_names(srv):
    with srv.client(srv.keys["acme"]) as c:
        return sorted(a["name"] for a in c.get("/v1/adapters").json()["data"])


def test_uploaded_template_renders_the_adapter_requests(srv):
    r = upload(srv, "sysfmt", 1, SYS_TEMPLATE)
    assert r.status_code == 201, r.text
    ids, text = rendered(srv, "sysfmt")
    want = reference(SYS_TEMPLATE)
    assert "<<SYS>>" in want and text == want
    # the chat route bills exactly those ids
    with srv.client(srv.keys["acme"]) as c:
        out = c.post("/v1/chat/completions", json={"model": "sysfmt", "messages": MESSAGES, "max_tokens": 1,
                                                   "temperature": 0})
        assert out.status_code == 200, out.text
        assert out.json()["usage"]["prompt_tokens"] == len(ids)
        # /v1/responses renders through the same path
        one = [{"role": "user", "content": "Name a colour."}]
        n1 = len(c.post("/tokenize", json={"model": "sysfmt", "messages": one}).json()["tokens"])
        n0 = len(c.post("/tokenize", json={"model": "smollm2", "messages": one}).json()["tokens"])
        resp = c.post("/v1/responses", json={"model": "sysfmt", "input": one, "max_output_tokens": 1, "store": False})
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["input_tokens"] == n1 != n0


def test_base_model_and_plain_adapter_keep_the_base_template(srv):
    _, _, base_template = gguf_specials()
    want = reference(base_template)
    assert rendered(srv, "smollm2")[1] == want
    assert upload(srv, "plain", 2).status_code == 201
    assert rendered(srv, "plain")[1] == want
    assert "<<SYS>>" not in want


def test_imported_tokenizer_config_template(srv, tmp_path):
    import json
    d = tmp_path / "tc"
    write_adapter(str(d), 3)
    (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192, "chat_template": JSON_TEMPLATE}))
    srv.import_adapter("acme", "jsonfmt", str(d))
    assert rendered(srv, "jsonfmt")[1] == reference(JSON_TEMPLATE)


def test_broken_template_is_refused_naming_the_file(srv, tmp_path):
    import json
    before = adapter_names(srv)
    r = upload(srv, "broken", 4, BROKEN)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["code"] == "invalid_adapter" and e["param"] == "chat_template" and "chat_template.jinja" in e["message"]
    d = tmp_path / "broken"
    write_adapter(str(d), 5)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": BROKEN}))
    r = srv.admin.post("/admin/v1/tenants/acme/adapters/import", json={"name": "broken2", "path": str(d)})
    assert r.status_code == 400, r.text
    assert "tokenizer_config.json" in r.json()["error"]["message"]
    (d / "tokenizer_config.json").unlink()
    (d / "chat_template.jinja").write_text(BROKEN)
    r = srv.admin.post("/admin/v1/tenants/acme/adapters/import", json={"name": "broken3", "path": str(d)})
    assert r.status_code == 400 and "chat_template.jinja" in r.json()["error"]["message"], r.text
    assert adapter_names(srv) == before
    assert srv.proc.poll() is None


def test_templates_survive_a_restart_and_chat_template_file_overrides(srv, tmp_path):
    assert srv.stop() == 0, srv.stderr()[-3000:]
    s2 = start(srv.tmp)
    try:
        s2.keys = srv.keys
        assert rendered(s2, "sysfmt")[1] == reference(SYS_TEMPLATE)
        assert rendered(s2, "jsonfmt")[1] == reference(JSON_TEMPLATE)
    finally:
        assert s2.stop() == 0, s2.stderr()[-3000:]
    f = tmp_path / "override.jinja"
    f.write_text(FILE_TEMPLATE)
    s3 = start(srv.tmp, "--chat-template", str(f))
    try:
        s3.keys = srv.keys
        want = reference(FILE_TEMPLATE)
        for model in ("smollm2", "sysfmt", "jsonfmt", "plain"):
            assert rendered(s3, model)[1] == want, model
    finally:
        assert s3.stop() == 0, s3.stderr()[-3000:]
