/*
 * tool_calls.c — see tool_calls.h: the parser registry, the choice of a
 * parser from a chat template, the forced modes' output as calls, call ids,
 * and the helpers the format parsers share (tool_calls_internal.h).
 *
 * A template teaches its format in the text it puts around tool calls; the
 * markers below are the ones the families' own templates write (checked
 * against tests/chat/templates). A template that matches none gets no
 * parser: its tool_choice "auto" output is plain text.
 */
#include "gateway/tool_calls_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const lg_tc_parser *const PARSERS[] = {&lg_tc_hermes, &lg_tc_llama3_json, &lg_tc_mistral, &lg_tc_granite, NULL};

void lg_tc_result_dispose(lg_tc_result *r)
{
    free(r->content);
    json_decref(r->calls);
    r->content = NULL;
    r->calls = NULL;
}

const lg_tc_parser *lg_tc_parser_find(const char *name)
{
    for (int i = 0; name && PARSERS[i]; i++)
        if (!strcmp(PARSERS[i]->name, name))
            return PARSERS[i];
    return NULL;
}

const char *lg_tc_parser_names(void) { return "hermes|llama3_json|mistral|granite"; }

const lg_tc_parser *lg_tc_parser_for_template(const char *t)
{
    if (!t)
        return NULL;
    /* Qwen3-Coder and GLM write XML arguments inside <tool_call>: not the JSON hermes reads */
    if (strstr(t, "<function=") || strstr(t, "<arg_key>"))
        return NULL;
    if (strstr(t, "[TOOL_CALLS]"))
        return &lg_tc_mistral;
    if (strstr(t, "<|tool_call|>"))
        return &lg_tc_granite;
    if (strstr(t, "<tool_call>"))
        return &lg_tc_hermes;
    if (strstr(t, "<|python_tag|>") || (strstr(t, "ipython") && strstr(t, "\"parameters\"")))
        return &lg_tc_llama3_json;
    return NULL;
}

int lg_tc_parse_forced(lg_tc_mode mode, const char *name, const char *text, size_t n, lg_tc_result *out)
{
    memset(out, 0, sizeof *out);
    size_t i = 0;
    json_t *v = lg_tc_json_at(text, n, &i);
    lg_tc_skip_ws(text, n, &i);
    int rc = 0;
    if (!v || i != n)
        goto done;
    if (!(out->calls = json_array()))
        return json_decref(v), -1;
    if (mode == LG_TC_NAMED) {
        rc = json_is_object(v) && lg_tc_add_call_parts(out->calls, name, strlen(name), v) == 0;
    } else if (mode == LG_TC_REQUIRED && json_is_array(v) && json_array_size(v) > 0) {
        size_t k;
        json_t *it;
        rc = 1;
        json_array_foreach(v, k, it)
            if (lg_tc_add_call(out->calls, it) != 0)
                rc = 0;
    }
done:
    json_decref(v);
    if (rc != 1)
        lg_tc_result_dispose(out);
    return rc;
}

void lg_tc_new_id(char *out, size_t n)
{
    static const char A[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char b[24];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = (unsigned long long)ts.tv_nsec * 6364136223846793005ull + (unsigned long long)ts.tv_sec;
        for (size_t i = 0; i < sizeof b; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            b[i] = (unsigned char)(x >> 56);
        }
    }
    char id[5 + sizeof b + 1] = "call_";
    for (size_t i = 0; i < sizeof b; i++)
        id[5 + i] = A[b[i] % (sizeof A - 1)];
    id[5 + sizeof b] = 0;
    snprintf(out, n, "%s", id);
}

void lg_tc_new_id_for(const lg_tc_parser *p, char *out, size_t n)
{
    char id[40];
    lg_tc_new_id(id, sizeof id);
    if (p && p->id_len > 0 && p->id_len <= 24)
        snprintf(out, n, "%.*s", p->id_len, id + 5);
    else
        snprintf(out, n, "%s", id);
}

/* ---- shared by the parsers ---- */

void lg_tc_skip_ws(const char *s, size_t n, size_t *i)
{
    while (*i < n && (s[*i] == ' ' || s[*i] == '\n' || s[*i] == '\r' || s[*i] == '\t'))
        (*i)++;
}

json_t *lg_tc_json_at(const char *s, size_t n, size_t *i)
{
    size_t at = *i;
    lg_tc_skip_ws(s, n, &at);
    if (at >= n)
        return NULL;
    json_error_t e;
    json_t *v = json_loadb(s + at, n - at, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &e);
    if (!v)
        return NULL;
    *i = at + (size_t)e.position;
    return v;
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > LG_TC_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

int lg_tc_add_call_parts(json_t *calls, const char *name, size_t name_len, const json_t *args)
{
    if (!name_ok(name, name_len) || !json_is_object(args) || json_array_size(calls) >= LG_TC_MAX_CALLS)
        return -1;
    char *a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!a)
        return -1;
    json_t *c = json_pack("{s:s%,s:s}", "name", name, name_len, "arguments", a);
    free(a);
    return c && json_array_append_new(calls, c) == 0 ? 0 : -1;
}

int lg_tc_add_call(json_t *calls, const json_t *obj)
{
    json_t *name = json_object_get(obj, "name");
    if (!json_is_object(obj) || !json_is_string(name))
        return -1;
    json_t *args = json_object_get(obj, "arguments");
    if (!args)
        args = json_object_get(obj, "parameters");
    if (!args)
        return -1;
    json_t *parsed = NULL;
    if (json_is_string(args)) { /* arguments written as a JSON text */
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        if (!parsed)
            return -1;
        args = parsed;
    }
    int rc = lg_tc_add_call_parts(calls, json_string_value(name), json_string_length(name), args);
    json_decref(parsed);
    return rc;
}

char *lg_tc_trim_dup(const char *s, size_t n)
{
    size_t a = 0;
    lg_tc_skip_ws(s, n, &a);
    while (n > a && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t'))
        n--;
    if (n == a)
        return NULL;
    char *o = malloc(n - a + 1);
    if (o) {
        memcpy(o, s + a, n - a);
        o[n - a] = 0;
    }
    return o;
}

const char *lg_tc_find(const char *s, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == marker[0] && !memcmp(s + i, marker, m))
            return s + i;
    return NULL;
}

size_t lg_tc_hold_marker(const char *s, size_t n, const char *marker)
{
    const char *f = lg_tc_find(s, n, marker);
    if (f)
        return (size_t)(f - s);
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--) /* the longest end of s that begins marker */
        if (k <= n && !memcmp(s + n - k, marker, k))
            return n - k;
    return n;
}
