/*
 * test_jinja.c — the Jinja interpreter (engine/model/jinja*.c) against
 * transformers' jinja2 environment, and its bounds on hostile templates.
 *
 * 1. tests/chat/jinja_cases.json: ~100 small templates, each exercising one
 *    part of the language (whitespace control, scoping, loops, printing
 *    values as Python does, operators, slices, methods, filters, tests,
 *    Markup, macros, syntax errors), with the output transformers'
 *    _compile_jinja_template gave (tests/chat/jinja_cases.py made it). Where
 *    the reference raised, we must return an error, not text.
 * 2. Hostile templates: each must fail with one line, quickly, without
 *    crashing: endless-looking loops (steps), output and memory bombs,
 *    runaway macro recursion and deep nesting (depth), huge ranges.
 * 3. chat_template.c's preparation of OpenAI messages: tool-call arguments
 *    parsed from JSON strings, a null content as "" (vLLM), other null keys
 *    dropped, content parts joined unless the template loops over them.
 */
#include <jansson.h>

#include "engine/model/chat_template.h"
#include "engine/model/jinja.h"
#include "tests/unit/test.h"

static char *render(const char *tmpl, const json_t *vars, const lg_jinja_limits *lim, lg_err *err)
{
    lg_jinja *t = NULL;
    if (lg_jinja_parse(tmpl, strlen(tmpl), &t, err) != 0)
        return NULL;
    char *out = NULL;
    int rc = lg_jinja_render(t, vars, lim, &out, NULL, err);
    lg_jinja_free(t);
    return rc == 0 ? out : NULL;
}

static void reference_cases(void)
{
    json_error_t je;
    json_t *cases = json_load_file("tests/chat/jinja_cases.json", 0, &je);
    CHECK_MSG(cases && json_array_size(cases) >= 90, "tests/chat/jinja_cases.json: %s", cases ? "too few" : je.text);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *tmpl = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "text");
        lg_err err = {{0}};
        char *got = render(tmpl, json_object_get(c, "vars"), NULL, &err);
        if (want) {
            CHECK_MSG(got && !strcmp(got, json_string_value(want)), "case %zu %s\n  want: %s\n  got:  %s", i, tmpl,
                      json_string_value(want), got ? got : err.msg);
        } else {
            CHECK_MSG(!got && err.msg[0], "case %zu %s: the reference raised (%s) but we rendered '%s'", i, tmpl,
                      json_string_value(json_object_get(c, "reference_error")), got ? got : "");
        }
        free(got);
    }
    json_decref(cases);
}

static void expect_error(const char *tmpl, const char *want, const lg_jinja_limits *lim)
{
    lg_err err = {{0}};
    char *got = render(tmpl, NULL, lim, &err);
    CHECK_MSG(!got && strstr(err.msg, want), "%s: want an error with '%s', got %s", tmpl, want, got ? got : err.msg);
    free(got);
}

static void hostile(void)
{
    expect_error("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}", "steps", NULL);
    expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "chat template", NULL);
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                 "memory", NULL);
    expect_error("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "longer than", NULL);
    expect_error("{{ 'x' * 100000000000 }}", "memory", NULL);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper", NULL);
    expect_error("{{ range(1000000) }}", "Range too big", NULL);
    /* parse nesting: 100,000 '(' and '[' */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', n);
    strcpy(deep + 3 + n, "1 }}");
    expect_error(deep, "nested too deeply", NULL);
    memset(deep + 3, '[', n);
    expect_error(deep, "syntax error", NULL);
    free(deep);
    /* a tighter bound from the caller */
    lg_jinja_limits small = {.max_output = 10};
    expect_error("{{ 'abcdefghijklmnop' }}", "longer than 10", &small);
    /* errors name the problem */
    expect_error("{{ raise_exception('Only user and assistant roles are supported!') }}",
                 "Only user and assistant roles are supported!", NULL);
    expect_error("{{ 'x' | frobnicate }}", "frobnicate", NULL);
    expect_error("{% include 'x.jinja' %}", "include", NULL);
    expect_error("{{ foo.bar }}", "'foo' is undefined", NULL);
}

static void chat_prepare(void)
{
    /* a template that shows what it is given */
    const char *tmpl = "{% for m in messages %}{{ m.role }}:{{ m.content is defined }}:{{ m.content }}"
                       "{% for tc in m.tool_calls or [] %}|{{ tc.function.arguments.city }}|{{ tc.function.arguments|tojson }}"
                       "{% endfor %};{% endfor %}{{ tools|length if tools else 'notools' }}:{{ add_generation_prompt }}:"
                       "{{ enable_thinking }}:{{ bos_token }}:{{ eos_token is defined }}";
    lg_chat_template *t = NULL;
    lg_err err = {{0}};
    CHECK_MSG(lg_chat_template_new(tmpl, NULL, "<s>", NULL, &t, &err) == 0, "%s", err.msg);
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                              "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\","
                              "\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\", \\\"n\\\": 2}\"}}]}]",
                              0, NULL);
    json_t *kw = json_loads("{\"enable_thinking\": false, \"messages\": \"ignored\"}", 0, NULL);
    char *out = NULL;
    CHECK_MSG(lg_chat_template_render(t, msgs, NULL, NULL, kw, false, &out, &err) == 0, "%s", err.msg);
    const char *want = "user:True:a\nb;assistant:True:|Oslo|{\"city\": \"Oslo\", \"n\": 2};notools:False:False:<s>:False";
    CHECK_MSG(out && !strcmp(out, want), "got '%s'\nwant '%s'", out ? out : "", want);
    free(out);
    /* the caller's JSON is untouched */
    const char *args = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(json_array_get(msgs, 1), "tool_calls"), 0), "function"), "arguments"));
    CHECK(args && args[0] == '{');
    /* bad tool-call arguments are an error, not a crash */
    json_t *bad = json_loads("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"w\",\"arguments\":\"{nope\"}}]}]",
                             0, NULL);
    CHECK(lg_chat_template_render(t, bad, NULL, NULL, NULL, true, &out, &err) != 0 && strstr(err.msg, "arguments"));
    /* the role/content wrapper still works */
    lg_chat_msg m[1] = {{"user", "hi"}};
    CHECK(lg_chat_template_apply(t, m, 1, &out, &err) == 0 && !strcmp(out, "user:True:hi;notools:True::<s>:False"));
    free(out);
    json_decref(bad);
    json_decref(kw);
    json_decref(msgs);
    lg_chat_template_free(t);
    /* a template that loops over content gets the parts */
    CHECK(lg_chat_template_new("{% for p in messages[0]['content'] %}[{{ p.text }}]{% endfor %}", NULL, NULL, NULL, &t, &err) == 0);
    msgs = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]", 0, NULL);
    CHECK(lg_chat_template_render(t, msgs, NULL, NULL, NULL, true, &out, &err) == 0 && !strcmp(out, "[a][b]"));
    free(out);
    json_decref(msgs);
    lg_chat_template_free(t);
    /* a template that does not parse fails at load */
    CHECK(lg_chat_template_new("{% if %}", NULL, NULL, NULL, &t, &err) != 0 && strstr(err.msg, "syntax error"));
}

int main(void)
{
    reference_cases();
    hostile();
    chat_prepare();
    TEST_DONE();
}
