/*
 * routes_responses.c — OpenAI's Responses API for tenant keys (responses.h):
 *
 *   POST   /v1/responses        input -> a chat body -> the chat pipeline
 *   GET    /v1/responses/{id}   a stored response
 *   DELETE /v1/responses/{id}   forgets it
 *
 * A request is read on the loop thread into a chat completion body:
 * `instructions` become the first (system) message, `input` (a string, or
 * items: messages, function_call, function_call_output; reasoning items are
 * skipped) the messages after the stored conversation of
 * previous_response_id, `tools` (type function, flat as the Responses API
 * writes them) and `tool_choice` the chat ones, `text.format` the
 * response_format (json_schema through structured_output.h),
 * max_output_tokens max_tokens. The chat pipeline runs it (billed in the
 * ledger as route "responses", cached tokens included) and hands the output
 * back (responses.h). previous_response_id is looked up on a worker (a
 * reader connection) before that.
 *
 * Storing (store, default true, when --responses-retention is not 0): the
 * response object and the conversation through its output are written
 * with the store's writer on a worker before the answer's last bytes (the
 * object, or response.completed) go out, so a client that saw a response
 * complete can always GET it or continue from it. Every lookup names the
 * tenant: another tenant's ids are 404 exactly as unknown ones.
 *
 * Not supported (400 naming the field): built-in tools (web_search,
 * file_search, ...), non-text input (images, files), background mode,
 * conversation objects, item references.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/responses.h"
#include "db/store.h"
#include "gateway/http/request.h"
#include "gateway/responses.h"
#include "gateway/routes.h"
#include "gateway/store_writer.h"
#include "gateway/tenant_auth.h"
#include "gateway/tenants.h"
#include "gateway/tool_calls.h"
#include "gateway/unix_time.h"

#define BAD(param, ...) (lg_respond_error(r, 400, NULL, param, __VA_ARGS__), -1)

static const char *const KEYS[] = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                                   "text", "max_output_tokens", "temperature", "top_p", "stream", "store",
                                   "previous_response_id", "metadata", "user", "truncation", "reasoning", "include",
                                   "service_tier", "background", "prompt_cache_key", "safety_identifier",
                                   "stream_options", "seed", NULL};

static bool known(const char *k)
{
    for (int i = 0; KEYS[i]; i++)
        if (!strcmp(KEYS[i], k))
            return true;
    return false;
}

/* ---- the request ---- */

static int check_keys(lg_request *r, json_t *b)
{
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v)
    {
        if (!known(k))
            return BAD(k, "Unrecognized request argument supplied: %s", k);
    }
    json_t *bg = json_object_get(b, "background");
    if (bg && !json_is_null(bg) && !json_is_false(bg))
        return BAD("background", "Unsupported parameter: 'background' is not supported by this server.");
    json_t *tr = json_object_get(b, "truncation");
    if (tr && !json_is_null(tr) &&
        (!json_is_string(tr) || (strcmp(json_string_value(tr), "disabled") && strcmp(json_string_value(tr), "auto"))))
        return BAD("truncation", "Invalid value for 'truncation': expected 'auto' or 'disabled'.");
    json_t *re = json_object_get(b, "reasoning");
    if (re && !json_is_null(re) && !json_is_object(re))
        return BAD("reasoning", "Invalid type for 'reasoning': expected an object.");
    json_t *in = json_object_get(b, "include");
    if (in && !json_is_null(in) && !json_is_array(in))
        return BAD("include", "Invalid type for 'include': expected an array of strings.");
    json_t *m = json_object_get(b, "model");
    if (!json_is_string(m))
        return BAD("model", "Missing required parameter: 'model'.");
    json_t *input = json_object_get(b, "input");
    if (!input || json_is_null(input))
        return BAD("input", "Missing required parameter: 'input'.");
    if (!json_is_string(input) && !json_is_array(input))
        return BAD("input", "Invalid type for 'input': expected a string or an array of input items.");
    json_t *ins = json_object_get(b, "instructions");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        return BAD("instructions", "Invalid type for 'instructions': expected a string.");
    json_t *prev = json_object_get(b, "previous_response_id");
    if (prev && !json_is_null(prev) && (!json_is_string(prev) || json_string_length(prev) > 100))
        return BAD("previous_response_id", "Invalid type for 'previous_response_id': expected a response id.");
    json_t *mot = json_object_get(b, "max_output_tokens");
    if (mot && !json_is_null(mot) && (!json_is_integer(mot) || json_integer_value(mot) < 1))
        return BAD("max_output_tokens", "Invalid 'max_output_tokens': expected an integer of at least 1.");
    json_t *st = json_object_get(b, "store");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return BAD("store", "Invalid type for 'store': expected a boolean.");
    return 0;
}

/* Responses tools ({type: "function", name, description, parameters, strict}) -> chat tools. */
static int chat_tools(lg_request *r, json_t *tools, json_t **out)
{
    *out = NULL;
    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools))
        return BAD("tools", "Invalid type for 'tools': expected an array of tools.");
    json_t *a = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        char p[48];
        snprintf(p, sizeof p, "tools[%zu].type", i);
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!ty || strcmp(ty, "function")) {
            json_decref(a);
            return BAD(p, "Invalid value: '%s'. Supported values are: 'function' (built-in tools are not available "
                          "on this server).", ty ? ty : "");
        }
        json_t *fn = json_object();
        const char *keys[] = {"name", "description", "parameters", "strict", NULL};
        for (int k = 0; keys[k]; k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (v && !json_is_null(v))
                json_object_set(fn, keys[k], v);
        }
        json_array_append_new(a, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    *out = a;
    return 0;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "name"} -> the chat shape. */
static int chat_tool_choice(lg_request *r, json_t *tc, json_t **out)
{
    *out = NULL;
    if (!tc || json_is_null(tc))
        return 0;
    if (json_is_string(tc)) {
        *out = json_incref(tc);
        return 0;
    }
    const char *ty = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !ty || strcmp(ty, "function") || !json_is_string(name))
        return BAD("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or {\"type\": "
                                  "\"function\", \"name\": ...}.");
    *out = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    return 0;
}

/* text.format -> response_format. */
static int chat_format(lg_request *r, json_t *text, json_t **out)
{
    *out = NULL;
    if (!text || json_is_null(text))
        return 0;
    json_t *f = json_object_get(text, "format");
    if (!json_is_object(text))
        return BAD("text", "Invalid type for 'text': expected an object.");
    if (!f || json_is_null(f))
        return 0;
    const char *ty = json_string_value(json_object_get(f, "type"));
    if (!ty)
        return BAD("text.format.type", "Missing required parameter: 'text.format.type'.");
    if (!strcmp(ty, "text"))
        return 0;
    if (!strcmp(ty, "json_object")) {
        *out = json_pack("{s:s}", "type", "json_object");
        return 0;
    }
    if (strcmp(ty, "json_schema"))
        return BAD("text.format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_object' and "
                                       "'json_schema'.", ty);
    json_t *js = json_object();
    const char *keys[] = {"name", "schema", "strict", "description", NULL};
    for (int k = 0; keys[k]; k++) {
        json_t *v = json_object_get(f, keys[k]);
        if (v && !json_is_null(v))
            json_object_set(js, keys[k], v);
    }
    *out = json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js);
    return 0;
}

/* The fields the response object repeats, with OpenAI's defaults. */
static json_t *echo_of(json_t *b, bool store)
{
    json_t *e = json_object();
    const char *keys[] = {"instructions", "max_output_tokens", "previous_response_id", "temperature", "top_p",
                          "tool_choice", "tools", "parallel_tool_calls", "text", "metadata", "user", "truncation",
                          "reasoning", NULL};
    for (int k = 0; keys[k]; k++) {
        json_t *v = json_object_get(b, keys[k]);
        json_object_set_new(e, keys[k], v ? json_deep_copy(v) : json_null());
    }
#define DEF(k, v)                                     \
    if (json_is_null(json_object_get(e, k)))          \
        json_object_set_new(e, k, v);
    DEF("temperature", json_real(1.0));
    DEF("top_p", json_real(1.0));
    DEF("tool_choice", json_string("auto"));
    DEF("tools", json_array());
    DEF("parallel_tool_calls", json_true());
    DEF("text", json_pack("{s:{s:s}}", "format", "type", "text"));
    DEF("metadata", json_object());
    DEF("truncation", json_string("disabled"));
    DEF("reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
#undef DEF
    json_object_set_new(e, "store", json_boolean(store));
    return e;
}

/* What a POST carries between the loop and the previous response's lookup. */
typedef struct post_st {
    const lg_openai_deps *d;
    json_t *body;
    lg_resp *x;
    char prev[128];
    int64_t tenant_id;
    int rc;              /* lookup: 0 found, LG_STORE_NOT_FOUND, other: error */
    char *conversation;  /* the previous conversation (JSON) */
    char err[256];
} post_st;

static void post_free(post_st *p)
{
    json_decref(p->body);
    lg_resp_free(p->x);
    free(p->conversation);
    free(p);
}

/* The chat body of p (the conversation before this input in prev, may be NULL), then the run. */
static void start(lg_request *r, post_st *p, json_t *prev)
{
    json_t *b = p->body;
    json_t *conv = prev ? json_incref(prev) : json_array();
    json_t *input = json_object_get(b, "input");
    char param[96], msg[512];
    if (json_is_string(input)) {
        json_array_append_new(conv, json_pack("{s:s,s:O}", "role", "user", "content", input));
    } else if (lg_resp_items_to_messages(input, conv, param, sizeof param, msg, sizeof msg) != 0) {
        json_decref(conv);
        lg_respond_error(r, 400, NULL, param, "%s", msg);
        return;
    }
    json_t *tools = NULL, *tc = NULL, *rf = NULL;
    if (chat_tools(r, json_object_get(b, "tools"), &tools) != 0 ||
        chat_tool_choice(r, json_object_get(b, "tool_choice"), &tc) != 0 ||
        chat_format(r, json_object_get(b, "text"), &rf) != 0) {
        json_decref(conv);
        json_decref(tools);
        json_decref(tc);
        return;
    }
    json_t *msgs = json_array();
    json_t *ins = json_object_get(b, "instructions");
    if (json_is_string(ins))
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    json_array_extend(msgs, conv);
    json_t *cb = json_pack("{s:O,s:o}", "model", json_object_get(b, "model"), "messages", msgs);
    const char *same[] = {"temperature", "top_p", "parallel_tool_calls", "stream", "seed", NULL};
    for (int k = 0; same[k]; k++) {
        json_t *v = json_object_get(b, same[k]);
        if (v && !json_is_null(v))
            json_object_set(cb, same[k], v);
    }
    json_t *mot = json_object_get(b, "max_output_tokens");
    if (mot && !json_is_null(mot))
        json_object_set(cb, "max_tokens", mot);
    if (tools)
        json_object_set_new(cb, "tools", tools);
    if (tc)
        json_object_set_new(cb, "tool_choice", tc);
    if (rf)
        json_object_set_new(cb, "response_format", rf);
    lg_resp *x = p->x;
    p->x = NULL;
    x->conversation = conv;
    (void)lg_oai_generate_responses(r, p->d, cb, x);
    json_decref(cb);
}

static void lookup_prev(void *arg)
{
    post_st *p = arg;
    lg_store *rd = NULL;
    lg_err err = {{0}};
    if (lg_store_open_reader(p->d->data_dir, &rd, &err) != 0) {
        p->rc = LG_STORE_ERROR;
        snprintf(p->err, sizeof p->err, "%s", err.msg);
        return;
    }
    p->rc = lg_store_response_get(rd, p->prev, p->tenant_id, lg_unix_ms(), NULL, &p->conversation, &err);
    snprintf(p->err, sizeof p->err, "%s", err.msg);
    lg_store_close(rd);
}

static void lookup_done(lg_request *r, void *arg)
{
    post_st *p = arg;
    if (lg_request_h2o(r)) {
        json_t *conv = p->rc == 0 ? json_loads(p->conversation, 0, NULL) : NULL;
        if (p->rc == LG_STORE_NOT_FOUND || (p->rc == 0 && !json_is_array(conv)))
            lg_respond_error(r, 404, "previous_response_not_found", "previous_response_id",
                             "Previous response with id '%s' not found.", p->prev);
        else if (p->rc != 0)
            lg_respond_error(r, 500, "server_error", NULL, "The response store failed: %s", p->err);
        else
            start(r, p, conv);
        json_decref(conv);
    }
    post_free(p);
}

static int create(lg_request *r, void *user)
{
    const lg_openai_deps *d = user;
    const lg_principal *pr = lg_principal_of(r);
    json_t *body = lg_request_json(r);
    if (!body)
        return 0;
    if (check_keys(r, body) != 0) {
        json_decref(body);
        return 0;
    }
    post_st *p = calloc(1, sizeof *p);
    lg_resp *x = calloc(1, sizeof *x);
    if (!p || !x) {
        free(p);
        free(x);
        json_decref(body);
        return -1;
    }
    p->d = d;
    p->body = body;
    p->x = x;
    p->tenant_id = pr->tenant->id;
    json_t *st = json_object_get(body, "store");
    x->store = d->responses_retention_h > 0 && !json_is_false(st);
    x->d = d;
    x->tenant_id = pr->tenant->id;
    x->created_at = lg_unix_now();
    snprintf(x->id, sizeof x->id, "resp_%s", lg_request_id(r) + 4);
    x->echo = echo_of(body, x->store);
    json_t *prev = json_object_get(body, "previous_response_id");
    if (!json_is_string(prev)) {
        start(r, p, NULL);
        post_free(p);
        return 0;
    }
    snprintf(p->prev, sizeof p->prev, "%s", json_string_value(prev));
    if (lg_request_defer(r, lookup_prev, lookup_done, p) != 0) {
        post_free(p);
        lg_respond_error(r, 503, "server_error", NULL, "The server is shutting down.");
    }
    return 0;
}

/* ---- the end of a response: store, then answer ---- */

typedef struct store_st {
    lg_resp *x;
    json_t *response;
    char *response_json, *conversation_json;
    int rc;
    char err[256];
} store_st;

static void answer(lg_request *r, lg_resp *x, json_t *response)
{
    if (!lg_request_h2o(r)) {
        json_decref(response);
        return;
    }
    if (x->sse)
        lg_resp_stream_end(x, response);
    else
        lg_respond_json(r, 200, response);
}

static void store_work(void *arg)
{
    store_st *s = arg;
    const lg_openai_deps *d = s->x->d;
    lg_store *st = lg_store_writer_acquire(d->store);
    lg_err err = {{0}};
    int64_t now = lg_unix_ms();
    s->rc = lg_store_response_put(st, s->x->id, s->x->tenant_id, s->x->created_at * 1000,
                                  now + (int64_t)d->responses_retention_h * 3600 * 1000, s->response_json,
                                  s->conversation_json, now, &err);
    lg_store_writer_release(d->store);
    snprintf(s->err, sizeof s->err, "%s", err.msg);
}

static void store_done(lg_request *r, void *arg)
{
    store_st *s = arg;
    if (s->rc != 0)
        fprintf(stderr, "loragate serve: response store: %s (%s)\n", s->err, s->x->id);
    answer(r, s->x, s->response);
    lg_resp_free(s->x);
    free(s->response_json);
    free(s->conversation_json);
    free(s);
}

void lg_resp_answer(lg_request *r, lg_resp *x, json_t *response)
{
    if (!x->store) {
        answer(r, x, response);
        lg_resp_free(x);
        return;
    }
    /* what a later previous_response_id continues: the conversation, then this output as messages */
    json_t *conv = json_deep_copy(x->conversation ? x->conversation : json_array());
    char param[96], msg[256];
    (void)lg_resp_items_to_messages(json_object_get(response, "output"), conv, param, sizeof param, msg, sizeof msg);
    store_st *s = calloc(1, sizeof *s);
    if (s) {
        s->x = x;
        s->response = response;
        s->response_json = json_dumps(response, JSON_COMPACT | JSON_PRESERVE_ORDER);
        s->conversation_json = json_dumps(conv, JSON_COMPACT);
    }
    json_decref(conv);
    if (!s || !s->response_json || !s->conversation_json || lg_request_defer(r, store_work, store_done, s) != 0) {
        if (s) {
            free(s->response_json);
            free(s->conversation_json);
            free(s);
        }
        answer(r, x, response);
        lg_resp_free(x);
    }
}

/* ---- GET and DELETE ---- */

typedef struct id_st {
    const lg_openai_deps *d;
    char id[128];
    int64_t tenant_id;
    bool del;
    int rc;
    char *json;
    char err[256];
} id_st;

static void id_work(void *arg)
{
    id_st *q = arg;
    lg_err err = {{0}};
    if (q->del) {
        lg_store *st = lg_store_writer_acquire(q->d->store);
        q->rc = lg_store_response_delete(st, q->id, q->tenant_id, lg_unix_ms(), &err);
        lg_store_writer_release(q->d->store);
    } else {
        lg_store *rd = NULL;
        if (lg_store_open_reader(q->d->data_dir, &rd, &err) != 0)
            q->rc = LG_STORE_ERROR;
        else
            q->rc = lg_store_response_get(rd, q->id, q->tenant_id, lg_unix_ms(), &q->json, NULL, &err);
        lg_store_close(rd);
    }
    snprintf(q->err, sizeof q->err, "%s", err.msg);
}

static void id_done(lg_request *r, void *arg)
{
    id_st *q = arg;
    if (lg_request_h2o(r)) {
        json_t *o = q->json ? json_loads(q->json, 0, NULL) : NULL;
        if (q->rc == LG_STORE_NOT_FOUND || (q->rc == 0 && !q->del && !o))
            lg_respond_error(r, 404, NULL, NULL, "Response with id '%s' not found.", q->id);
        else if (q->rc != 0)
            lg_respond_error(r, 500, "server_error", NULL, "The response store failed: %s", q->err);
        else if (q->del)
            lg_respond_json(r, 200, json_pack("{s:s,s:s,s:b}", "id", q->id, "object", "response", "deleted", 1)), o = NULL;
        else
            lg_respond_json(r, 200, o), o = NULL;
        json_decref(o);
    }
    free(q->json);
    free(q);
}

static int by_id(lg_request *r, const lg_openai_deps *d, bool del)
{
    const char *id = lg_request_param(r, "id");
    if (!id || strlen(id) >= 128)
        return lg_respond_error(r, 404, NULL, NULL, "Response with id '%s' not found.", id ? id : ""), 0;
    id_st *q = calloc(1, sizeof *q);
    if (!q)
        return -1;
    q->d = d;
    q->del = del;
    q->tenant_id = lg_principal_of(r)->tenant->id;
    snprintf(q->id, sizeof q->id, "%s", id);
    if (lg_request_defer(r, id_work, id_done, q) != 0) {
        free(q);
        lg_respond_error(r, 503, "server_error", NULL, "The server is shutting down.");
    }
    return 0;
}

static int get_one(lg_request *r, void *user) { return by_id(r, user, false); }
static int delete_one(lg_request *r, void *user) { return by_id(r, user, true); }

int lg_routes_responses(lg_router *rt, const lg_openai_deps *d, lg_err *err)
{
    lg_route routes[] = {
        {.method = "POST", .pattern = "/v1/responses", .fn = create, .user = (void *)d,
         .content_type = "application/json", .body_required = true, .auth = lg_auth_tenant_inference,
         .auth_user = d->auth, .tenant_scoped = true, .name = "responses"},
        {.method = "GET", .pattern = "/v1/responses/{id}", .fn = get_one, .user = (void *)d,
         .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true, .name = "responses.get"},
        {.method = "DELETE", .pattern = "/v1/responses/{id}", .fn = delete_one, .user = (void *)d,
         .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true, .name = "responses.delete"},
    };
    return lg_router_add_all(rt, routes, (int)(sizeof routes / sizeof routes[0]), err);
}
