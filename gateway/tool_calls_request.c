/*
 * tool_calls_request.c — a chat request's tools, tool_choice and
 * parallel_tool_calls (OpenAI's shapes and error wording), and the JSON
 * schema a forced call's output is constrained to (tool_calls.h):
 *
 *   NAMED     the function's `parameters` (an object schema; {} when none)
 *   REQUIRED  {"type": "array", "minItems": 1, ["maxItems": 1,]
 *              "items": {"anyOf": [{"type": "object", "properties":
 *                 {"name": {"const": f}, "parameters": <f's parameters>},
 *                 "required": ["name", "parameters"],
 *                 "additionalProperties": false}, ...]}}
 *
 * which is what vLLM constrains the same tool_choice values to, so even a
 * small model writes calls that parse. `strict` is accepted and recorded in
 * the tools the template sees; with tool_choice "auto" the output is not
 * constrained (the model may answer in text).
 */
#include "gateway/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(p, ...) (snprintf(param, pn, "%s", p), snprintf(msg, mn, __VA_ARGS__), -1)

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > LG_TC_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return false;
    return true;
}

static int parse_tools(const json_t *tools, lg_tc_request *tr, char *param, size_t pn, char *msg, size_t mn)
{
    if (!json_is_array(tools))
        return FAIL("tools", "Invalid type for 'tools': expected an array of tools.");
    if (json_array_size(tools) > LG_TC_MAX_TOOLS)
        return FAIL("tools", "Invalid 'tools': array too long. Expected an array with maximum length %d.",
                    LG_TC_MAX_TOOLS);
    size_t i;
    json_t *t;
    char p[64];
    json_array_foreach(tools, i, t)
    {
        json_t *ty = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        snprintf(p, sizeof p, "tools[%zu].type", i);
        if (!json_is_object(t) || !json_is_string(ty))
            return FAIL(p, "Missing required parameter: '%s'.", p);
        if (strcmp(json_string_value(ty), "function"))
            return FAIL(p, "Invalid value: '%s'. Supported values are: 'function'.", json_string_value(ty));
        snprintf(p, sizeof p, "tools[%zu].function", i);
        if (!json_is_object(fn))
            return FAIL(p, "Missing required parameter: '%s'.", p);
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters"),
               *desc = json_object_get(fn, "description"), *strict = json_object_get(fn, "strict");
        snprintf(p, sizeof p, "tools[%zu].function.name", i);
        if (!json_is_string(name))
            return FAIL(p, "Missing required parameter: '%s'.", p);
        if (!valid_name(json_string_value(name)))
            return FAIL(p, "Invalid '%s': string does not match pattern. Expected a string that matches the "
                           "pattern '^[a-zA-Z0-9_-]{1,64}$'.", p);
        for (size_t k = 0; k < i; k++) {
            json_t *o = json_object_get(json_object_get(json_array_get(tools, k), "function"), "name");
            if (json_equal(o, name))
                return FAIL(p, "Invalid 'tools': the function name '%s' appears twice.", json_string_value(name));
        }
        snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return FAIL(p, "Invalid type for '%s': expected an object (a JSON schema).", p);
        snprintf(p, sizeof p, "tools[%zu].function.description", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return FAIL(p, "Invalid type for '%s': expected a string.", p);
        snprintf(p, sizeof p, "tools[%zu].function.strict", i);
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return FAIL(p, "Invalid type for '%s': expected a boolean.", p);
    }
    /* the template sees the tools as given, without null members */
    tr->tools = json_array();
    json_array_foreach(tools, i, t)
    {
        json_t *fn = json_object(), *src = json_object_get(t, "function");
        const char *k;
        json_t *v;
        json_object_foreach(src, k, v)
            if (!json_is_null(v))
                json_object_set(fn, k, v);
        json_array_append_new(tr->tools, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return 0;
}

static const json_t *tool_params(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *fn = json_object_get(t, "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name))
            return json_object_get(fn, "parameters");
    }
    return NULL;
}

static json_t *params_schema(const json_t *p)
{
    return p ? json_deep_copy(p) : json_pack("{s:s,s:{}}", "type", "object", "properties");
}

static char *forced_schema(const lg_tc_request *tr)
{
    json_t *s;
    if (tr->mode == LG_TC_NAMED) {
        s = params_schema(tool_params(tr->tools, tr->name));
    } else {
        json_t *any = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tr->tools, i, t)
        {
            json_t *fn = json_object_get(t, "function");
            json_array_append_new(
                any, json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const",
                               json_object_get(fn, "name"), "parameters",
                               params_schema(json_object_get(fn, "parameters")), "required", "name", "parameters",
                               "additionalProperties", 0));
        }
        s = json_pack("{s:s,s:i,s:{s:o}}", "type", "array", "minItems", 1, "items", "anyOf", any);
        if (s && !tr->parallel)
            json_object_set_new(s, "maxItems", json_integer(1));
    }
    char *out = s ? json_dumps(s, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(s);
    return out;
}

int lg_tc_request_parse(const json_t *body, lg_tc_request *tr, char *param, size_t pn, char *msg, size_t mn)
{
    memset(tr, 0, sizeof *tr);
    tr->parallel = true;
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice"),
           *par = json_object_get(body, "parallel_tool_calls");
    if (tools && json_is_null(tools))
        tools = NULL;
    if (tools && parse_tools(tools, tr, param, pn, msg, mn) != 0)
        return -1;
    if (tools && json_array_size(tools) == 0) {
        json_decref(tr->tools);
        tr->tools = NULL;
    }
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return FAIL("parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.");
        tr->parallel = json_is_true(par);
    }
    tr->mode = tr->tools ? LG_TC_AUTO : LG_TC_NONE;
    if (!choice || json_is_null(choice))
        return 0;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "none"))
            tr->mode = LG_TC_NONE;
        else if (!strcmp(c, "auto"))
            ;
        else if (!strcmp(c, "required"))
            tr->mode = LG_TC_REQUIRED;
        else
            return FAIL("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto' and 'required'.",
                        c);
        if (strcmp(c, "none") && !tr->tools) /* OpenAI's rule; "none" without tools changes nothing */
            return FAIL("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when "
                                       "'tools' are specified.");
    } else if (json_is_object(choice)) {
        json_t *ty = json_object_get(choice, "type"), *fn = json_object_get(choice, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_string(name))
            return FAIL("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                                       "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
        if (!tr->tools)
            return FAIL("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when "
                                       "'tools' are specified.");
        bool found = false;
        size_t i;
        json_t *t;
        json_array_foreach(tr->tools, i, t)
            found |= json_equal(json_object_get(json_object_get(t, "function"), "name"), name);
        if (!found)
            return FAIL("tool_choice", "Invalid 'tool_choice': function '%s' is not among the 'tools'.",
                        json_string_value(name));
        tr->mode = LG_TC_NAMED;
        snprintf(tr->name, sizeof tr->name, "%s", json_string_value(name));
    } else {
        return FAIL("tool_choice", "Invalid type for 'tool_choice': expected a string or an object.");
    }
    if (tr->mode == LG_TC_NAMED || tr->mode == LG_TC_REQUIRED) {
        if (!(tr->schema = forced_schema(tr)))
            return FAIL("tool_choice", "out of memory");
    }
    return 0;
}

void lg_tc_request_dispose(lg_tc_request *tr)
{
    json_decref(tr->tools);
    free(tr->schema);
    memset(tr, 0, sizeof *tr);
}
