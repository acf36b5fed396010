"""
test_tools.py — function calling on /v1/chat/completions through a real
`loragate serve` of the default model, judged by clients we did not write:
the official `openai` SDK (its stream accumulator and its pydantic tool
parsing), LangChain's ChatOpenAI.bind_tools, and `jsonschema`.

  - a tool loop: the model's call (tool_choice "required"), the tool's result
    sent back as a role "tool" message with tool_call_id and the call as the
    assistant's tool_calls, then an answer; streamed and not;
  - a named tool_choice streamed as OpenAI streams it (delta.tool_calls with
    index, id and name first, then argument fragments) and checked by the
    SDK's own stream accumulator; strict pydantic tools parsed by the SDK;
  - parallel_tool_calls false gives one call; the calls always validate
    against the tools' schemas (the grammar engine enforces them, so even a
    135M model writes them);
  - tool_choice "auto" read by the parser a template teaches: a Qwen 2.5
    template (--chat-template FILE, hermes) and Mistral Nemo's (mistral,
    9-character call ids), the output steered into the family's call format
    with a regex (vLLM's structured_outputs) so the auto path is exercised
    end to end, streamed (the call's text is held back, never streamed as
    content) and not; a malformed call comes back as plain text;
  - errors: a template that raises, a tool message without tool_call_id, an
    unknown function named by tool_choice: 400s naming the field, and the
    server keeps serving.
"""
import json
import os

import pytest

from serve_fixture import LORAGATE, ROOT, smol_server

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 20}}, "required": ["tz"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "tools") as s:
        yield s


@pytest.fixture(scope="module")
def srv_qwen(tmp_path_factory):
    tpl = os.path.join(ROOT, "tests", "chat", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
    with smol_server(tmp_path_factory, "tools_qwen", args=("--chat-template", tpl)) as s:
        yield s


@pytest.fixture(scope="module")
def srv_mistral(tmp_path_factory):
    tpl = os.path.join(ROOT, "tests", "chat", "templates", "mistralai-Mistral-Nemo-Instruct-2407.jinja")
    with smol_server(tmp_path_factory, "tools_mistral", args=("--chat-template", tpl)) as s:
        yield s


def sdk(s):
    return s.openai(s.keys["acme"], tenant="acme")


def check_calls(calls):
    assert calls
    for c in calls:
        assert c.type == "function" and c.id
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_tool_loop(srv):
    c = sdk(srv)
    r = c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, tool_choice="required",
                                  temperature=0, max_tokens=80)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    check_calls(ch.message.tool_calls)
    assert ch.message.content is None
    call = ch.message.tool_calls[0]
    msgs = ASK + [ch.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18})}]
    r2 = c.chat.completions.create(model="smollm2", messages=msgs, tools=TOOLS, temperature=0, max_tokens=30)
    ch2 = r2.choices[0]
    assert ch2.finish_reason in ("stop", "length") and ch2.message.tool_calls is None
    assert isinstance(ch2.message.content, str) and ch2.message.content
    # the call and its result reached the prompt
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens
    # streamed: the same loop through the SDK's stream helper
    with c.chat.completions.stream(model="smollm2", messages=ASK, tools=TOOLS, tool_choice="required",
                                   temperature=0, max_tokens=80) as st:
        final = st.get_final_completion()
    fc = final.choices[0]
    assert fc.finish_reason == "tool_calls"
    check_calls(fc.message.tool_calls)
    assert [t.function.arguments for t in fc.message.tool_calls] == [t.function.arguments for t in ch.message.tool_calls]
    with c.chat.completions.stream(model="smollm2", messages=msgs, tools=TOOLS, temperature=0, max_tokens=30) as st:
        final2 = st.get_final_completion()
    assert final2.choices[0].message.content == ch2.message.content


def test_named_choice_streams_fragments(srv):
    c = sdk(srv)
    chunks = list(c.chat.completions.create(
        model="smollm2", messages=ASK, tools=TOOLS, stream=True, temperature=0, max_tokens=80,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    deltas = [ch.choices[0].delta.tool_calls for ch in chunks if ch.choices and ch.choices[0].delta.tool_calls]
    assert len(deltas) >= 3  # the id and name, then fragments
    first = deltas[0][0]
    assert first.index == 0 and first.id and first.function.name == "get_weather" and first.function.arguments == ""
    assert all(d[0].id is None and d[0].function.name is None for d in deltas[1:])
    args = "".join(d[0].function.arguments for d in deltas[1:])
    jsonschema.validate(json.loads(args), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


class GetWeather(pydantic.BaseModel):
    city: pydantic.constr(max_length=20)
    unit: str


def test_strict_pydantic_tool_parsed_by_sdk(srv):
    c = sdk(srv)
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    r = c.chat.completions.parse(model="smollm2", messages=ASK, tools=[tool], temperature=0, max_tokens=80,
                                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = r.choices[0].message.tool_calls[0]
    assert isinstance(call.function.parsed_arguments, GetWeather)


def test_parallel_false_gives_one_call(srv):
    c = sdk(srv)
    for seed in range(3):
        r = c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, tool_choice="required",
                                      parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=80)
        ch = r.choices[0]
        if ch.finish_reason == "length":
            continue
        assert len(ch.message.tool_calls) == 1
        check_calls(ch.message.tool_calls)


def test_auto_without_a_parser_is_text(srv):
    # SmolLM2's template teaches no call format: auto output is plain text
    r = sdk(srv).chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0, max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")


def test_langchain_bind_tools(srv):
    lc = pytest.importorskip("langchain_openai")
    import httpx

    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: str) -> str:
        """Current weather in a city."""
        return "18"

    llm = lc.ChatOpenAI(model="smollm2", base_url=f"{srv.url}/t/acme/v1", api_key=srv.keys["acme"], temperature=0,
                        max_tokens=80, max_retries=0, http_client=httpx.Client(verify=srv.verify(), timeout=60))
    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert len(msg.tool_calls) == 1
    tc = msg.tool_calls[0]
    assert tc["name"] == "get_weather" and isinstance(tc["args"], dict) and set(tc["args"]) == {"city", "unit"}
    assert tc["id"]
    # the result goes back; the answer is text
    from langchain_core.messages import HumanMessage, ToolMessage
    out = llm.bind_tools([get_weather]).invoke([HumanMessage("Weather in Paris?"), msg,
                                                ToolMessage("18 degrees", tool_call_id=tc["id"])])
    assert isinstance(out.content, str) and not out.tool_calls


HERMES_CALL = r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris", "unit": "celsius"\}\}\n</tool_call>'


def test_auto_hermes_template_parser(srv_qwen):
    c = sdk(srv_qwen)
    steer = {"structured_outputs": {"regex": r"Checking\. " + HERMES_CALL}}
    r = c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0, max_tokens=80,
                                  extra_body=steer)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content == "Checking."
    assert ch.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(ch.message.tool_calls[0].function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert ch.message.tool_calls[0].id.startswith("call_")
    chunks = list(c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0,
                                            max_tokens=80, extra_body=steer, stream=True))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "<tool_call" not in content and content.strip() == "Checking."
    tcs = [d for ch in chunks if ch.choices for d in (ch.choices[0].delta.tool_calls or [])]
    assert tcs[0].id and tcs[0].function.name == "get_weather"
    assert json.loads("".join(d.function.arguments or "" for d in tcs)) == {"city": "Paris", "unit": "celsius"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # a call that does not parse is plain text, whole
    bad = {"structured_outputs": {"regex": r'<tool_call>\n\{"name": get_weather\}\n</tool_call>'}}
    for stream in (False, True):
        if stream:
            chunks = list(c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0,
                                                    max_tokens=80, extra_body=bad, stream=True))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert not any(ch.choices[0].delta.tool_calls for ch in chunks if ch.choices)
            reason = chunks[-1].choices[0].finish_reason
        else:
            r = c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0, max_tokens=80,
                                          extra_body=bad)
            text, reason = r.choices[0].message.content, r.choices[0].finish_reason
            assert r.choices[0].message.tool_calls is None
        assert text == '<tool_call>\n{"name": get_weather}\n</tool_call>' and reason == "stop"
    # the earlier call and the tool's result render through the model's template
    msgs = ASK + [ch.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": ch.message.tool_calls[0].id, "content": "18"}]
    r3 = c.chat.completions.create(model="smollm2", messages=msgs, tools=TOOLS, temperature=0, max_tokens=10)
    assert r3.usage.prompt_tokens > r.usage.prompt_tokens


def test_auto_mistral_template_parser(srv_mistral):
    c = sdk(srv_mistral)
    steer = {"structured_outputs": {"regex": r'\[TOOL_CALLS\]\[\{"name": "get_time", "arguments": \{"tz": "UTC"\}\}\]'}}
    r = c.chat.completions.create(model="smollm2", messages=ASK, tools=TOOLS, temperature=0, max_tokens=80,
                                  extra_body=steer)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    call = ch.message.tool_calls[0]
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"tz": "UTC"}
    assert len(call.id) == 9 and call.id.isalnum()  # what Mistral's templates accept back
    msgs = ASK + [ch.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "12:00"}]
    r2 = c.chat.completions.create(model="smollm2", messages=msgs, tools=TOOLS, temperature=0, max_tokens=10)
    assert r2.choices[0].message.content is not None


def test_template_error_is_a_400(srv_mistral):
    h = srv_mistral.client(srv_mistral.keys["acme"])
    # Mistral's template raises when roles do not alternate
    r = h.post("/t/acme/v1/chat/completions", json={"model": "smollm2", "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == "messages" and "alternate" in e["message"]
    assert h.post("/t/acme/v1/chat/completions", json={"model": "smollm2", "messages": ASK,
                                                       "max_tokens": 3}).status_code == 200


@pytest.mark.parametrize("body,param", [
    ({"messages": ASK + [{"role": "tool", "content": "x"}]}, "messages.[1].tool_call_id"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"messages": ASK, "tool_choice": "required"}, "tool_choice"),
    ({"messages": ASK, "tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "response_format"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f"}}]}],
      "tools": TOOLS}, "messages.[0].tool_calls.[0]"),
    ({"messages": ASK, "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
])
def test_refusals_name_the_field(srv, body, param):
    r = srv.client(srv.keys["acme"]).post("/t/acme/v1/chat/completions", json={"model": "smollm2", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_chat_template_file_that_fails_stops_the_start(tmp_path):
    from serve_fixture import SMOLLM2, Serve
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")  # does not parse
    for path in (str(bad), str(tmp_path / "missing.jinja")):
        with pytest.raises(RuntimeError) as e:
            Serve(tmp_path, SMOLLM2, "--chat-template", path, start_timeout=30)
        assert "--chat-template" in str(e.value)
