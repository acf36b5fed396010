/*
 * test_tool_calls.c — the tool-call parsers (gateway/tool_calls.h) on
 * outputs recorded in the shapes each family's model writes (the formats
 * its chat template teaches, as vLLM's parsers read them), malformed
 * outputs (which must come back as plain text, never as half a call), the
 * streaming hold-back, the choice of a parser from real templates under
 * tests/chat/templates, the forced modes, and the request side (tools,
 * tool_choice, parallel_tool_calls, the forced schemas).
 */
#include "tests/unit/test.h"

#include "gateway/tool_calls.h"

typedef struct rec {
    const char *parser;
    const char *text;
    int want;              /* 1: calls, 0: plain text */
    const char *content;   /* expected content (NULL: none) */
    const char *calls;     /* expected calls as JSON: [{"name", "arguments"}] with arguments compact */
} rec;

static const rec RECORDED[] = {
    /* Hermes 2 Pro / Qwen 2.5: one call, the closing tag, nothing else */
    {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
     1, NULL, "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":\\\"celsius\\\"}\"}]"},
    /* Qwen 3: thinking first, two parallel calls */
    {"hermes", "<think>\nThe user wants both.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>",
     1, "<think>\nThe user wants both.\n</think>",
     "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\":\\\"Europe/Paris\\\"}\"}]"},
    /* stopped before the closing tag (EOS right after the JSON) */
    {"hermes", "Let me check.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}", 1, "Let me check.",
     "[{\"name\":\"lookup\",\"arguments\":\"{}\"}]"},
    /* arguments written as a JSON string */
    {"hermes", "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}</tool_call>", 1, NULL,
     "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}]"},
    /* plain answers and malformed calls: plain text */
    {"hermes", "The weather in Paris is sunny.", 0, NULL, NULL},
    {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", 0, NULL, NULL},
    {"hermes", "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 0, NULL, NULL},
    {"hermes", "<tool_call>\nget_weather(city='Paris')\n</tool_call>", 0, NULL, NULL},
    {"hermes", "<tool_call>{\"name\": \"a b\", \"arguments\": {}}</tool_call>", 0, NULL, NULL},
    {"hermes", "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", 0, NULL, NULL},
    {"hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>", 0, NULL, NULL},
    /* Llama 3.1 / 3.2: a bare JSON call, parameters */
    {"llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}", 1, NULL,
     "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"San Francisco, CA\\\"}\"}]"},
    {"llama3_json", "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
     1, NULL, "[{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"},{\"name\":\"b\",\"arguments\":\"{}\"}]"},
    {"llama3_json", "  \n{\"name\": \"a\", \"arguments\": {\"q\": \"x;y\"}}\n", 1, NULL,
     "[{\"name\":\"a\",\"arguments\":\"{\\\"q\\\":\\\"x;y\\\"}\"}]"},
    {"llama3_json", "{\"answer\": 42}", 0, NULL, NULL},
    {"llama3_json", "Sure! {\"name\": \"a\", \"parameters\": {}}", 0, NULL, NULL},
    {"llama3_json", "{\"name\": \"a\", \"parameters\": {}} and then text", 0, NULL, NULL},
    {"llama3_json", "{\"name\": \"a\", \"parameters\": {\"x\": ", 0, NULL, NULL},
    /* Mistral v0.3 / Nemo: a JSON array */
    {"mistral", "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
     1, NULL, "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},{\"name\":\"get_time\",\"arguments\":\"{}\"}]"},
    /* Mistral Small 3.2 / Devstral: name[ARGS]{...}, repeated; [CALL_ID] skipped */
    {"mistral", "I will check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
     1, "I will check.", "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},{\"name\":\"get_time\",\"arguments\":\"{}\"}]"},
    {"mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": ", 0, NULL, NULL},
    {"mistral", "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}", 0, NULL, NULL},
    {"mistral", "No tools needed: 4.", 0, NULL, NULL},
    /* Granite */
    {"granite", "<|tool_call|>[{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Boston\"}}]", 1, NULL,
     "[{\"name\":\"get_current_weather\",\"arguments\":\"{\\\"location\\\":\\\"Boston\\\"}\"}]"},
    {"granite", "<|tool_call|>{\"name\": \"x\"}", 0, NULL, NULL},
};

static void check_rec(const rec *r, int idx)
{
    const lg_tc_parser *p = lg_tc_parser_find(r->parser);
    CHECK_MSG(p != NULL, "parser %s", r->parser);
    if (!p)
        return;
    lg_tc_result out;
    int rc = p->parse(r->text, strlen(r->text), &out);
    CHECK_MSG(rc == r->want, "#%d %s: rc %d, want %d", idx, r->parser, rc, r->want);
    if (rc != 1 || r->want != 1) {
        CHECK(out.calls == NULL && out.content == NULL);
        lg_tc_result_dispose(&out);
        return;
    }
    CHECK_MSG((r->content == NULL) == (out.content == NULL) && (!r->content || !strcmp(r->content, out.content)),
              "#%d content [%s], want [%s]", idx, out.content ? out.content : "(null)", r->content ? r->content : "(null)");
    json_t *want = json_loads(r->calls, 0, NULL);
    CHECK_MSG(want && json_equal(want, out.calls), "#%d calls %s", idx, json_dumps(out.calls, JSON_COMPACT));
    /* every call's arguments are a JSON object's text */
    size_t k;
    json_t *c;
    json_array_foreach(out.calls, k, c)
    {
        json_t *a = json_loads(json_string_value(json_object_get(c, "arguments")), 0, NULL);
        CHECK(json_is_object(a));
        json_decref(a);
    }
    json_decref(want);
    lg_tc_result_dispose(&out);
}

/* What may be streamed of a prefix: never any byte of a marker. */
static void check_hold(void)
{
    const lg_tc_parser *h = lg_tc_parser_find("hermes"), *l = lg_tc_parser_find("llama3_json"),
                       *m = lg_tc_parser_find("mistral");
    const char *t = "Hello <tool_call>{\"name\"";
    CHECK(h->hold(t, strlen(t)) == 6);
    CHECK(h->hold("Hello <tool_", 12) == 6);
    CHECK(h->hold("Hello <b>", 9) == 9);
    CHECK(h->hold("Hello <", 7) == 6);
    CHECK(l->hold("  {\"name\"", 9) == 2);
    CHECK(l->hold("The answer", 10) == 10);
    CHECK(l->hold("x <|python", 10) == 2);
    CHECK(l->hold("   ", 3) == 0);
    CHECK(m->hold("ok [TOOL_C", 10) == 3);
    CHECK(m->hold("ok [1]", 6) == 6);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* Real templates choose the parser their family's models write. */
static void check_templates(const char *root)
{
    static const struct {
        const char *file, *parser;
    } T[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"},
        {"Qwen-Qwen3-0.6B.jinja", "hermes"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_json"},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3_json"},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"},
        {"ibm-granite-granite-3.3-2B-Instruct.jinja", "granite"},
        {"ibm-granite-granite-4.0.jinja", "hermes"}, /* Granite 4 writes <tool_call> */
        {"Qwen3-Coder.jinja", NULL},
        {"smollm2.jinja", NULL},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/chat/templates/%s", root, T[i].file);
        char *s = slurp(path);
        CHECK_MSG(s != NULL, "%s", path);
        if (!s)
            continue;
        const lg_tc_parser *p = lg_tc_parser_for_template(s);
        CHECK_MSG(T[i].parser ? p && !strcmp(p->name, T[i].parser) : p == NULL, "%s -> %s", T[i].file,
                  p ? p->name : "(none)");
        free(s);
    }
}

/* Every prefix of every recorded output (a stream cut anywhere, max_tokens): the parser answers calls or
 * plain text, never more than the text holds, and hold never passes the end. */
static void check_prefixes(void)
{
    for (size_t i = 0; i < sizeof RECORDED / sizeof RECORDED[0]; i++) {
        const lg_tc_parser *p = lg_tc_parser_find(RECORDED[i].parser);
        size_t n = strlen(RECORDED[i].text);
        for (size_t k = 0; k <= n; k++) {
            char *t = malloc(k + 1); /* exactly k bytes: a read past them is caught by sanitizers */
            memcpy(t, RECORDED[i].text, k);
            lg_tc_result out;
            int rc = p->parse(t, k, &out);
            CHECK(rc == 0 || rc == 1);
            CHECK(p->hold(t, k) <= k);
            if (rc == 1)
                CHECK(json_array_size(out.calls) >= 1);
            lg_tc_result_dispose(&out);
            free(t);
        }
    }
}

static void check_forced(void)
{
    lg_tc_result out;
    const char *args = "{\"city\":\"Paris\"}";
    CHECK(lg_tc_parse_forced(LG_TC_NAMED, "get_weather", args, strlen(args), &out) == 1);
    CHECK(json_array_size(out.calls) == 1 &&
          !strcmp(json_string_value(json_object_get(json_array_get(out.calls, 0), "arguments")), args));
    lg_tc_result_dispose(&out);
    const char *req = "[{\"name\":\"a\",\"parameters\":{\"x\":1}},{\"name\":\"b\",\"parameters\":{}}]";
    CHECK(lg_tc_parse_forced(LG_TC_REQUIRED, NULL, req, strlen(req), &out) == 1 && json_array_size(out.calls) == 2);
    lg_tc_result_dispose(&out);
    /* cut short (max_tokens): plain text */
    CHECK(lg_tc_parse_forced(LG_TC_REQUIRED, NULL, req, 20, &out) == 0 && !out.calls);
    CHECK(lg_tc_parse_forced(LG_TC_NAMED, "f", "[]", 2, &out) == 0);
    char id[32], id2[32];
    lg_tc_new_id(id, sizeof id);
    lg_tc_new_id(id2, sizeof id2);
    CHECK(strlen(id) == 29 && !strncmp(id, "call_", 5) && strcmp(id, id2));
}

static int req(const char *body, lg_tc_request *tr, char *param)
{
    char msg[256];
    json_t *b = json_loads(body, 0, NULL);
    int rc = lg_tc_request_parse(b, tr, param, 96, msg, sizeof msg);
    json_decref(b);
    return rc;
}

static void check_request(void)
{
    lg_tc_request tr;
    char param[96];
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":null,"
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                        "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"noargs\"}}]";
    char b[1024];
    snprintf(b, sizeof b, "{%s}", tools);
    CHECK(req(b, &tr, param) == 0 && tr.mode == LG_TC_AUTO && json_array_size(tr.tools) == 2 && !tr.schema);
    CHECK(!json_object_get(json_object_get(json_array_get(tr.tools, 0), "function"), "description"));
    lg_tc_request_dispose(&tr);
    snprintf(b, sizeof b, "{%s,\"tool_choice\":\"none\"}", tools);
    CHECK(req(b, &tr, param) == 0 && tr.mode == LG_TC_NONE);
    lg_tc_request_dispose(&tr);
    snprintf(b, sizeof b, "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}", tools);
    CHECK(req(b, &tr, param) == 0 && tr.mode == LG_TC_NAMED && !strcmp(tr.name, "get_weather"));
    CHECK(tr.schema && strstr(tr.schema, "\"city\"") && !strstr(tr.schema, "anyOf"));
    lg_tc_request_dispose(&tr);
    snprintf(b, sizeof b, "{%s,\"tool_choice\":\"required\",\"parallel_tool_calls\":false}", tools);
    CHECK(req(b, &tr, param) == 0 && tr.mode == LG_TC_REQUIRED && !tr.parallel);
    json_t *s = tr.schema ? json_loads(tr.schema, 0, NULL) : NULL;
    CHECK(s && json_integer_value(json_object_get(s, "maxItems")) == 1 &&
          json_array_size(json_object_get(json_object_get(s, "items"), "anyOf")) == 2);
    json_decref(s);
    lg_tc_request_dispose(&tr);
    /* refusals name the field */
    snprintf(b, sizeof b, "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", tools);
    CHECK(req(b, &tr, param) == -1 && !strcmp(param, "tool_choice"));
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tool_choice\":\"required\"}", &tr, param) == -1 && !strcmp(param, "tool_choice"));
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tools\":[{\"type\":\"code_interpreter\"}]}", &tr, param) == -1 && !strcmp(param, "tools[0].type"));
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}", &tr, param) == -1 &&
          !strcmp(param, "tools[0].function.name"));
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]}", &tr, param) == -1 &&
          !strcmp(param, "tools[0].function.parameters"));
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tools\":[],\"tool_choice\":\"none\"}", &tr, param) == 0 && tr.mode == LG_TC_NONE);
    lg_tc_request_dispose(&tr);
    CHECK(req("{\"tools\":[],\"tool_choice\":\"auto\"}", &tr, param) == -1 && !strcmp(param, "tool_choice"));
    lg_tc_request_dispose(&tr);
}

int main(int argc, char **argv)
{
    for (size_t i = 0; i < sizeof RECORDED / sizeof RECORDED[0]; i++)
        check_rec(&RECORDED[i], (int)i);
    check_hold();
    check_prefixes();
    check_forced();
    check_request();
    const char *root = getenv("LG_SOURCE_DIR");
    if (!root && argc > 1)
        root = argv[1];
    if (!root)
        root = ".";
    check_templates(root);
    TEST_DONE();
}
