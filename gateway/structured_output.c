/*
 * structured_output.c — see structured_output.h.
 */
#include "gateway/structured_output.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KEYS[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                   "guided_choice", "guided_grammar", "guided_decoding_backend",
                                   "guided_whitespace_pattern", NULL};

bool lg_so_is_key(const char *key)
{
    for (const char *const *k = KEYS; *k; k++)
        if (!strcmp(*k, key))
            return true;
    return false;
}

typedef struct ctx {
    char *param, *msg;
    size_t pn, mn;
} ctx;

static int bad(ctx *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(ctx *c, const char *param, const char *fmt, ...)
{
    snprintf(c->param, c->pn, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->mn, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sets spec to (kind, text of v) from `param`; a second request for output structure is refused. */
static int set(ctx *c, lg_so_spec *s, const char *param, lg_ckind kind, const json_t *v)
{
    if (s->present)
        return bad(c, param, "'%s' and '%s' both constrain the output; give one of them.", s->param, param);
    char *text = NULL;
    size_t len = 0;
    if (v && json_is_string(v)) {
        len = json_string_length(v);
        text = malloc(len + 1);
        if (text)
            memcpy(text, json_string_value(v), len + 1);
    } else if (v) {
        text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        len = text ? strlen(text) : 0;
    } else {
        text = calloc(1, 1);
    }
    if (!text)
        return bad(c, param, "out of memory");
    s->present = true;
    s->kind = kind;
    s->src = text;
    s->len = len;
    snprintf(s->param, sizeof s->param, "%s", param);
    return 0;
}

static bool valid_schema_name(const char *n)
{
    size_t l = strlen(n);
    if (l == 0 || l > 64)
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-'))
            return false;
    return true;
}

static int parse_response_format(ctx *c, const json_t *rf, lg_so_spec *s)
{
    if (json_is_null(rf))
        return 0;
    if (!json_is_object(rf))
        return bad(c, "response_format", "Invalid type for 'response_format': expected an object.");
    const json_t *jt = json_object_get(rf, "type");
    if (!jt)
        return bad(c, "response_format.type", "Missing required parameter: 'response_format.type'.");
    const char *type = json_is_string(jt) ? json_string_value(jt) : "";
    const char *key;
    const json_t *v;
    if (!strcmp(type, "text") || !strcmp(type, "json_object")) {
        json_object_foreach((json_t *)rf, key, v)
        {
            if (strcmp(key, "type") != 0)
                return bad(c, "response_format", "Unrecognized argument in 'response_format' of type '%s': %s",
                           type, key);
        }
        return !strcmp(type, "text") ? 0 : set(c, s, "response_format", LG_CK_JSON_OBJECT, NULL);
    }
    if (strcmp(type, "json_schema") != 0)
        return bad(c, "response_format.type",
                   "Invalid value for 'response_format.type': expected one of 'text', 'json_object', "
                   "'json_schema'.");
    json_object_foreach((json_t *)rf, key, v)
    {
        if (strcmp(key, "type") != 0 && strcmp(key, "json_schema") != 0)
            return bad(c, "response_format", "Unrecognized argument in 'response_format' of type 'json_schema': %s",
                       key);
    }
    const json_t *js = json_object_get(rf, "json_schema");
    if (!js)
        return bad(c, "response_format.json_schema", "Missing required parameter: 'response_format.json_schema'.");
    if (!json_is_object(js))
        return bad(c, "response_format.json_schema",
                   "Invalid type for 'response_format.json_schema': expected an object.");
    json_object_foreach((json_t *)js, key, v)
    {
        if (strcmp(key, "name") && strcmp(key, "schema") && strcmp(key, "strict") && strcmp(key, "description"))
            return bad(c, "response_format.json_schema", "Unrecognized argument in 'response_format.json_schema': %s",
                       key);
    }
    const json_t *name = json_object_get(js, "name");
    if (!name)
        return bad(c, "response_format.json_schema.name",
                   "Missing required parameter: 'response_format.json_schema.name'.");
    if (!json_is_string(name) || !valid_schema_name(json_string_value(name)))
        return bad(c, "response_format.json_schema.name",
                   "Invalid 'response_format.json_schema.name': expected 1 to 64 letters, digits, '_' or '-'.");
    const json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return bad(c, "response_format.json_schema.strict",
                   "Invalid type for 'response_format.json_schema.strict': expected a boolean.");
    const json_t *desc = json_object_get(js, "description");
    if (desc && !json_is_string(desc) && !json_is_null(desc))
        return bad(c, "response_format.json_schema.description",
                   "Invalid type for 'response_format.json_schema.description': expected a string.");
    const json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema))
        return set(c, s, "response_format.json_schema", LG_CK_JSON_OBJECT, NULL);
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(c, "response_format.json_schema.schema",
                   "Invalid type for 'response_format.json_schema.schema': expected an object.");
    return set(c, s, "response_format.json_schema.schema", LG_CK_JSON_SCHEMA, schema);
}

/* A JSON schema given as an object or as its text (vLLM takes both). */
static int set_schema(ctx *c, lg_so_spec *s, const char *param, const json_t *v)
{
    if (json_is_string(v)) {
        json_error_t je;
        json_t *parsed = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &je);
        if (!parsed)
            return bad(c, param, "Invalid '%s': not a JSON schema (%s).", param, je.text);
        int rc = json_is_object(parsed) || json_is_boolean(parsed)
                     ? set(c, s, param, LG_CK_JSON_SCHEMA, parsed)
                     : bad(c, param, "Invalid '%s': expected a JSON schema object.", param);
        json_decref(parsed);
        return rc;
    }
    if (!json_is_object(v) && !json_is_boolean(v))
        return bad(c, param, "Invalid type for '%s': expected a JSON schema object.", param);
    return set(c, s, param, LG_CK_JSON_SCHEMA, v);
}

static int set_text(ctx *c, lg_so_spec *s, const char *param, lg_ckind kind, const json_t *v, const char *what)
{
    if (!json_is_string(v) || json_string_length(v) == 0)
        return bad(c, param, "Invalid type for '%s': expected %s as a non-empty string.", param, what);
    return set(c, s, param, kind, v);
}

static int set_choice(ctx *c, lg_so_spec *s, const char *param, const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(c, param, "Invalid type for '%s': expected a non-empty array of strings.", param);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e)) {
            char p[96];
            snprintf(p, sizeof p, "%s[%zu]", param, i);
            return bad(c, p, "Invalid type for '%s': expected a string.", p);
        }
    }
    return set(c, s, param, LG_CK_CHOICE, v);
}

static int parse_structured_outputs(ctx *c, const json_t *so, lg_so_spec *s)
{
    if (json_is_null(so))
        return 0;
    if (!json_is_object(so))
        return bad(c, "structured_outputs", "Invalid type for 'structured_outputs': expected an object.");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)so, key, v)
    {
        char p[96];
        snprintf(p, sizeof p, "structured_outputs.%s", key);
        if (json_is_null(v))
            continue;
        int rc;
        if (!strcmp(key, "json"))
            rc = set_schema(c, s, p, v);
        else if (!strcmp(key, "regex"))
            rc = set_text(c, s, p, LG_CK_REGEX, v, "a regular expression");
        else if (!strcmp(key, "grammar"))
            rc = set_text(c, s, p, LG_CK_LARK, v, "a Lark grammar");
        else if (!strcmp(key, "choice"))
            rc = set_choice(c, s, p, v);
        else if (!strcmp(key, "json_object"))
            rc = json_is_false(v) ? 0
                 : json_is_true(v) ? set(c, s, p, LG_CK_JSON_OBJECT, NULL)
                                   : bad(c, p, "Invalid type for '%s': expected a boolean.", p);
        else if (!strcmp(key, "disable_fallback") || !strcmp(key, "disable_any_whitespace") ||
                 !strcmp(key, "disable_additional_properties"))
            rc = json_is_boolean(v) ? 0 : bad(c, p, "Invalid type for '%s': expected a boolean.", p);
        else
            rc = bad(c, p, "Unsupported parameter: '%s' is not supported by this server.", p);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int lg_so_parse(const json_t *body, lg_so_spec *spec, char *param, size_t pn, char *msg, size_t mn)
{
    memset(spec, 0, sizeof *spec);
    ctx c = {param, msg, pn, mn};
    int rc = 0;
    const json_t *v;
    if ((v = json_object_get(body, "response_format")))
        rc = parse_response_format(&c, v, spec);
    if (rc == 0 && (v = json_object_get(body, "structured_outputs")))
        rc = parse_structured_outputs(&c, v, spec);
    if (rc == 0 && (v = json_object_get(body, "guided_json")) && !json_is_null(v))
        rc = set_schema(&c, spec, "guided_json", v);
    if (rc == 0 && (v = json_object_get(body, "guided_regex")) && !json_is_null(v))
        rc = set_text(&c, spec, "guided_regex", LG_CK_REGEX, v, "a regular expression");
    if (rc == 0 && (v = json_object_get(body, "guided_grammar")) && !json_is_null(v))
        rc = set_text(&c, spec, "guided_grammar", LG_CK_LARK, v, "a Lark grammar");
    if (rc == 0 && (v = json_object_get(body, "guided_choice")) && !json_is_null(v))
        rc = set_choice(&c, spec, "guided_choice", v);
    if (rc == 0 && (v = json_object_get(body, "guided_decoding_backend")) && !json_is_null(v) && !json_is_string(v))
        rc = bad(&c, "guided_decoding_backend", "Invalid type for 'guided_decoding_backend': expected a string.");
    if (rc == 0 && (v = json_object_get(body, "guided_whitespace_pattern")) && !json_is_null(v))
        rc = bad(&c, "guided_whitespace_pattern",
                 "Unsupported parameter: 'guided_whitespace_pattern' is not supported by this server (JSON output "
                 "is compact).");
    if (rc != 0)
        lg_so_spec_dispose(spec);
    return rc;
}

void lg_so_spec_dispose(lg_so_spec *s)
{
    if (!s)
        return;
    free(s->src);
    memset(s, 0, sizeof *s);
}

void lg_so_error_param(const lg_so_spec *s, const lg_cerr *e, char *out, size_t n)
{
    if (e->param[0] == '/')
        snprintf(out, n, "%s#%s", s->param, e->param);
    else if (e->param[0])
        snprintf(out, n, "%s (%s)", s->param, e->param);
    else
        snprintf(out, n, "%s", s->param);
}
