/*
 * tool_calls_granite.c — IBM Granite 3.x / 4.x tool calls:
 *
 *   <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]
 *
 * Text before the marker is the content; the marker is followed by one JSON
 * array of calls and nothing else, or the output is plain text.
 */
#include "gateway/tool_calls_internal.h"

#include <string.h>

#define MARK "<|tool_call|>"

static size_t hold(const char *s, size_t n) { return lg_tc_hold_marker(s, n, MARK); }

static int parse(const char *s, size_t n, lg_tc_result *out)
{
    memset(out, 0, sizeof *out);
    const char *mark = lg_tc_find(s, n, MARK);
    if (!mark)
        return 0;
    size_t i = (size_t)(mark - s) + strlen(MARK);
    json_t *v = lg_tc_json_at(s, n, &i);
    lg_tc_skip_ws(s, n, &i);
    int ok = json_is_array(v) && json_array_size(v) > 0 && i == n && (out->calls = json_array());
    size_t k;
    json_t *it;
    json_array_foreach(v, k, it)
        if (ok && lg_tc_add_call(out->calls, it) != 0)
            ok = 0;
    json_decref(v);
    if (!ok) {
        lg_tc_result_dispose(out);
        return 0;
    }
    out->content = lg_tc_trim_dup(s, (size_t)(mark - s));
    return 1;
}

const lg_tc_parser lg_tc_granite = {.name = "granite", .keeps_special = true, .hold = hold, .parse = parse};
