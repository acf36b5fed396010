/*
 * tool_calls_hermes.c — the Hermes format (Hermes 2 Pro / 3, Qwen 2.5,
 * Qwen 3, SmolLM3 and every template that writes <tool_call>):
 *
 *   optional text
 *   <tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 *   <tool_call>...</tool_call>
 *
 * The text before the first call is the content; text after the last call
 * is kept too (appended on its own line). A closing tag may be missing at
 * the very end (the model stopped there); a call whose JSON does not parse,
 * or that has no name or arguments, makes the whole output plain text.
 */
#include "gateway/tool_calls_internal.h"

#include <stdlib.h>
#include <string.h>

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"

static size_t hold(const char *s, size_t n) { return lg_tc_hold_marker(s, n, OPEN); }

static int parse(const char *s, size_t n, lg_tc_result *out)
{
    memset(out, 0, sizeof *out);
    const char *first = lg_tc_find(s, n, OPEN);
    if (!first)
        return 0;
    if (!(out->calls = json_array()))
        return -1;
    size_t i = (size_t)(first - s);
    while (n - i >= strlen(OPEN) && !memcmp(s + i, OPEN, strlen(OPEN))) {
        i += strlen(OPEN);
        json_t *v = lg_tc_json_at(s, n, &i);
        int bad = !v || lg_tc_add_call(out->calls, v) != 0;
        json_decref(v);
        if (bad)
            goto plain;
        lg_tc_skip_ws(s, n, &i);
        if (n - i >= strlen(CLOSE) && !memcmp(s + i, CLOSE, strlen(CLOSE)))
            i += strlen(CLOSE);
        else if (i < n)
            goto plain;
        lg_tc_skip_ws(s, n, &i);
    }
    char *before = lg_tc_trim_dup(s, (size_t)(first - s)), *after = lg_tc_trim_dup(s + i, n - i);
    if (before && after) {
        size_t a = strlen(before), b = strlen(after);
        char *both = realloc(before, a + b + 2);
        if (both) {
            both[a] = '\n';
            memcpy(both + a + 1, after, b + 1);
            before = both;
        }
        free(after);
    } else if (after) {
        before = after;
    }
    out->content = before;
    return 1;
plain:
    lg_tc_result_dispose(out);
    return 0;
}

const lg_tc_parser lg_tc_hermes = {.name = "hermes", .keeps_special = false, .hold = hold, .parse = parse};
