/*
 * tool_calls_llama3.c — Llama 3.1 / 3.2 / 3.3's JSON tool calls, as their
 * templates ask for them ("Respond in the format {"name": function name,
 * "parameters": dictionary of argument name and its value}"):
 *
 *   {"name": "get_weather", "parameters": {"city": "Paris"}}
 *   <|python_tag|>{"name": ..., "parameters": ...}; {"name": ..., ...}
 *
 * The output is calls only when it starts (after whitespace) with a JSON
 * object or <|python_tag|> and is nothing but call objects separated by ';'
 * or whitespace; text before <|python_tag|> is the content. A JSON object
 * that is not a call ({"answer": 42}) is plain text, as is anything after
 * the calls. <|python_tag|> is a special token (keeps_special).
 */
#include "gateway/tool_calls_internal.h"

#include <string.h>

#define TAG "<|python_tag|>"

static size_t hold(const char *s, size_t n)
{
    size_t i = 0;
    lg_tc_skip_ws(s, n, &i);
    if (i == n || s[i] == '{')
        return i == n ? 0 : i;
    return lg_tc_hold_marker(s, n, TAG);
}

static int parse(const char *s, size_t n, lg_tc_result *out)
{
    memset(out, 0, sizeof *out);
    size_t i = 0;
    const char *tag = lg_tc_find(s, n, TAG);
    if (tag) {
        out->content = lg_tc_trim_dup(s, (size_t)(tag - s));
        i = (size_t)(tag - s) + strlen(TAG);
    }
    lg_tc_skip_ws(s, n, &i);
    if (i >= n || s[i] != '{')
        goto plain;
    if (!(out->calls = json_array()))
        return lg_tc_result_dispose(out), -1;
    while (i < n) {
        json_t *v = lg_tc_json_at(s, n, &i);
        int bad = !v || lg_tc_add_call(out->calls, v) != 0;
        json_decref(v);
        if (bad)
            goto plain;
        lg_tc_skip_ws(s, n, &i);
        if (i < n && s[i] == ';')
            i++;
        lg_tc_skip_ws(s, n, &i);
        if (i < n && s[i] != '{')
            goto plain;
    }
    return 1;
plain:
    lg_tc_result_dispose(out);
    return 0;
}

const lg_tc_parser lg_tc_llama3_json = {.name = "llama3_json", .keeps_special = true, .hold = hold, .parse = parse};
