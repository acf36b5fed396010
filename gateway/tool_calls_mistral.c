/*
 * tool_calls_mistral.c — Mistral's tool calls, both of the forms its
 * tokenizer versions write after the [TOOL_CALLS] special token:
 *
 *   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]
 *       (Mistral 7B v0.3, Mixtral 8x22B, Nemo: a JSON array)
 *   [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]other[ARGS]{}
 *       (Small 3.2, Ministral 3, Devstral, Magistral: name, then arguments;
 *       [CALL_ID]id between them in some versions, skipped)
 *
 * Text before the first [TOOL_CALLS] is the content. Anything that does not
 * read as calls makes the whole output plain text. keeps_special: the
 * markers are special tokens.
 */
#include "gateway/tool_calls_internal.h"

#include <string.h>

#define MARK "[TOOL_CALLS]"
#define ARGS "[ARGS]"
#define CALL_ID "[CALL_ID]"

static size_t hold(const char *s, size_t n) { return lg_tc_hold_marker(s, n, MARK); }

static bool at(const char *s, size_t n, size_t i, const char *m)
{
    size_t l = strlen(m);
    return n - i >= l && !memcmp(s + i, m, l);
}

static int parse(const char *s, size_t n, lg_tc_result *out)
{
    memset(out, 0, sizeof *out);
    const char *mark = lg_tc_find(s, n, MARK);
    if (!mark)
        return 0;
    if (!(out->calls = json_array()))
        return -1;
    out->content = lg_tc_trim_dup(s, (size_t)(mark - s));
    size_t i = (size_t)(mark - s) + strlen(MARK);
    lg_tc_skip_ws(s, n, &i);
    if (i < n && s[i] == '[') { /* a JSON array of calls */
        json_t *v = lg_tc_json_at(s, n, &i);
        size_t k;
        json_t *it;
        int bad = !json_is_array(v) || json_array_size(v) == 0;
        json_array_foreach(v, k, it)
            bad |= lg_tc_add_call(out->calls, it) != 0;
        json_decref(v);
        lg_tc_skip_ws(s, n, &i);
        if (bad || i != n)
            goto plain;
        return 1;
    }
    for (;;) { /* name[ARGS]{...}, repeated after [TOOL_CALLS] */
        size_t name_at = i;
        while (i < n && !at(s, n, i, ARGS) && !at(s, n, i, CALL_ID))
            i++;
        size_t name_len = i - name_at;
        if (at(s, n, i, CALL_ID)) {
            i += strlen(CALL_ID);
            while (i < n && !at(s, n, i, ARGS))
                i++;
        }
        if (!at(s, n, i, ARGS))
            goto plain;
        i += strlen(ARGS);
        json_t *v = lg_tc_json_at(s, n, &i);
        int bad = !v || lg_tc_add_call_parts(out->calls, s + name_at, name_len, v) != 0;
        json_decref(v);
        if (bad)
            goto plain;
        lg_tc_skip_ws(s, n, &i);
        if (i == n)
            return 1;
        if (!at(s, n, i, MARK))
            goto plain;
        i += strlen(MARK);
        lg_tc_skip_ws(s, n, &i);
    }
plain:
    lg_tc_result_dispose(out);
    return 0;
}

const lg_tc_parser lg_tc_mistral = {.name = "mistral", .keeps_special = true, .id_len = 9, .hold = hold, .parse = parse};
