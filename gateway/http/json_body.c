/*
 * json_body.c — see json_body.h.
 */
#include "gateway/http/json_body.h"

#include <string.h>

int lg_json_depth(const char *buf, size_t len, int limit, size_t *offset)
{
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_str = false;
            continue;
        }
        switch (c) {
        case '"': in_str = true; break;
        case '[':
        case '{':
            if (++depth > max) {
                max = depth;
                if (max > limit) {
                    if (offset)
                        *offset = i;
                    return limit + 1;
                }
            }
            break;
        case ']':
        case '}':
            if (depth > 0)
                depth--;
            break;
        }
    }
    return max;
}

json_t *lg_json_parse_object(const char *buf, size_t len, const lg_json_limits *lim, lg_err *err)
{
    size_t max_bytes = lim ? lim->max_bytes : 0;
    int max_depth = lim && lim->max_depth > 0 ? lim->max_depth : LG_JSON_MAX_DEPTH;
    if (buf == NULL || len == 0) {
        lg_fail(err, "the request body is empty: a JSON object is expected");
        return NULL;
    }
    if (max_bytes && len > max_bytes) {
        lg_fail(err, "the request body is %zu bytes, more than the %zu allowed", len, max_bytes);
        return NULL;
    }
    size_t off = 0;
    if (lg_json_depth(buf, len, max_depth, &off) > max_depth) {
        lg_fail(err, "JSON nesting deeper than %d levels in the request body (at byte %zu)", max_depth, off);
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        if (json_error_code(&je) == json_error_duplicate_key)
            lg_fail(err, "duplicate key in the request body's JSON: %s (line %d, column %d)", je.text, je.line,
                    je.column);
        else
            lg_fail(err, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(v)) {
        lg_fail(err, "the request body must be a JSON object, not %s",
                json_is_array(v) ? "an array" : "a scalar");
        json_decref(v);
        return NULL;
    }
    return v;
}
