"""
test_responses.py — POST /v1/responses, GET and DELETE /v1/responses/{id}
through a real `loragate serve` of the default model, judged by clients we
did not write: the official `openai` SDK (responses.create, .stream with
its event accumulator, .parse with a pydantic text_format) and the OpenAI
Agents SDK (openai-agents) running an agent with a function tool at a
tenant's base URL.

  - string input with instructions; the response object's fields, usage
    and the ledger record (route "responses", the same token counts);
  - the stream's events in OpenAI's order, whose deltas make the final text;
  - text.format json_schema enforced (the SDK parses output_parsed);
  - store and previous_response_id: the stored conversation continues (the
    prompt grows by the earlier turn), GET returns the stored object, DELETE
    forgets it; another tenant's ids are unknown (404), store false stores
    nothing;
  - function tools: a function_call item (tool_choice required), its
    function_call_output sent back, streamed calls' events;
  - the Agents SDK's tool loop ends with a final text answer.
"""
import json
import os

import pytest

from serve_fixture import LORAGATE, smol_server

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": WEATHER, "strict": True}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with smol_server(tmp_path_factory, "responses", tenants=("acme", "globex")) as s:
        yield s


def sdk(s, t="acme"):
    return s.openai(s.keys[t], tenant=t)


def test_create_and_ledger(srv):
    r = sdk(srv).responses.create(model="smollm2", input="Say hello.", instructions="Be brief.", temperature=0,
                                  max_output_tokens=16)
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "smollm2"
    assert r.status in ("completed", "incomplete")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.instructions == "Be brief." and r.max_output_tokens == 16 and r.store is True
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 16 and u.total_tokens == u.input_tokens + u.output_tokens
    rows = [x for x in srv.ledger("route = 'responses'") if x["completion_tokens"] == u.output_tokens]
    assert rows and rows[-1]["prompt_tokens"] == u.input_tokens and rows[-1]["http_status"] == 200


def test_stream_events(srv):
    c = sdk(srv)
    types, deltas, final = [], [], None
    # short on purpose: the terminal event is response.incomplete (max_output_tokens), as OpenAI sends it
    with c.responses.stream(model="smollm2", input="Name a color.", temperature=0, max_output_tokens=12) as st:
        for ev in st:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
            if ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert "".join(deltas) == final.output_text and deltas
    got = c.responses.retrieve(final.id)
    assert got.output_text == final.output_text and got.usage.output_tokens == final.usage.output_tokens


class City(pydantic.BaseModel):
    name: pydantic.constr(max_length=16)
    population: pydantic.conint(ge=0, le=100000000)


def test_parse_text_format(srv):
    r = sdk(srv).responses.parse(model="smollm2", input="Describe a city as JSON.", text_format=City, temperature=0,
                                 max_output_tokens=60)
    assert isinstance(r.output_parsed, City)


def test_store_previous_get_delete(srv):
    c = sdk(srv)
    r1 = c.responses.create(model="smollm2", input="My name is Ada.", temperature=0, max_output_tokens=8)
    r2 = c.responses.create(model="smollm2", input="What is my name?", previous_response_id=r1.id, temperature=0,
                            max_output_tokens=8)
    alone = c.responses.create(model="smollm2", input="What is my name?", temperature=0, max_output_tokens=8,
                               store=False)
    # the earlier turn (its input and output) is in r2's prompt
    assert r2.usage.input_tokens >= alone.usage.input_tokens + r1.usage.output_tokens
    assert r2.usage.input_tokens_details.cached_tokens > 0  # r1's prompt prefix was cached
    assert r2.previous_response_id == r1.id
    got = c.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    # another tenant: unknown, for GET, DELETE and previous_response_id
    g = sdk(srv, "globex")
    with pytest.raises(openai.NotFoundError):
        g.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError):
        g.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        g.responses.create(model="smollm2", input="hi", previous_response_id=r1.id, max_output_tokens=4)
    # store false: nothing to GET
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(alone.id)
    assert alone.store is False
    c.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="smollm2", input="hi", previous_response_id=r1.id, max_output_tokens=4)
    assert c.responses.retrieve(r2.id).id == r2.id


def test_function_call_loop(srv):
    c = sdk(srv)
    r = c.responses.create(model="smollm2", input="What is the weather in Paris?", tools=TOOLS,
                           tool_choice="required", temperature=0, max_output_tokens=60)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    out = c.responses.create(model="smollm2", previous_response_id=r.id, tools=TOOLS, temperature=0,
                             max_output_tokens=20,
                             input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                     "output": json.dumps({"temperature_c": 18})}])
    assert out.output_text and not [o for o in out.output if o.type == "function_call"]
    # the same without the store: the items themselves
    out2 = c.responses.create(model="smollm2", tools=TOOLS, temperature=0, max_output_tokens=20, store=False,
                              input=[{"role": "user", "content": "What is the weather in Paris?"},
                                     calls[0].model_dump(exclude_none=True),
                                     {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C"}])
    assert out2.output_text
    # streamed: the call's events
    types = []
    with c.responses.stream(model="smollm2", input="Weather in Oslo?", tools=TOOLS, temperature=0,
                            max_output_tokens=60, tool_choice={"type": "function", "name": "get_weather"}) as st:
        for ev in st:
            types.append(ev.type)
        final = st.get_final_response()
    assert "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    fc = [o for o in final.output if o.type == "function_call"]
    assert fc and json.loads(fc[0].arguments)["city"]


@pytest.mark.parametrize("body,param", [
    ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0]"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "frobnicate": 1}, "frobnicate"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({}, "input"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "background": True}, "background"),
])
def test_refusals(srv, body, param):
    r = srv.client(srv.keys["acme"]).post("/t/acme/v1/responses", json={"model": "smollm2", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_agents_sdk_function_tool(srv):
    agents = pytest.importorskip("agents")
    import httpx

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        calls.append(city)
        return f"18 degrees and sunny in {city}"

    client = openai.AsyncOpenAI(base_url=f"{srv.url}/t/acme/v1", api_key=srv.keys["acme"], max_retries=0,
                                http_client=httpx.AsyncClient(verify=srv.verify(), timeout=60))
    model = agents.OpenAIResponsesModel(model="smollm2", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Answer with the tool's result.", tools=[get_weather],
                         model=model, model_settings=agents.ModelSettings(tool_choice="required", temperature=0,
                                                                          max_tokens=400))
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert len(calls) == 1 and calls[0]
    assert isinstance(result.final_output, str) and result.final_output


def test_retention_zero_stores_nothing(tmp_path_factory):
    with smol_server(tmp_path_factory, "responses_nostore", args=("--responses-retention", "0")) as s:
        c = sdk(s)
        r = c.responses.create(model="smollm2", input="hi", max_output_tokens=4, temperature=0)
        assert r.store is False
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.create(model="smollm2", input="again", previous_response_id=r.id, max_output_tokens=4)
