/*
 * routes_tokenize.c — POST /tokenize and POST /detokenize, with vLLM's
 * request and response shapes, per tenant (at /tokenize, /t/<tenant>/tokenize
 * and by Host, a tenant key with the `inference` scope), so that clients
 * written for vLLM (benchmark clients, evaluation harnesses) count and
 * split tokens with the served model's tokenizer.
 *
 *   POST /tokenize   {"model"?, "prompt": "...", "add_special_tokens"?: true, "return_token_strs"?: false}
 *                    {"model"?, "messages": [...], "add_generation_prompt"?: true, "return_token_strs"?: false}
 *                 -> {"count": n, "max_model_len": context, "tokens": [ids], "token_strs": [...] | null}
 *   POST /detokenize {"model"?, "tokens": [ids]}  -> {"prompt": "..."}
 *
 * `model`, when given, must be the base model's id or one of the tenant's
 * adapters (404 model_not_found otherwise, as for completions); an adapter
 * does not change the tokenizer. The ids are the ones the generation routes
 * run and bill: a prompt is encoded as /v1/completions encodes it
 * (add_special_tokens: the model's BOS where its tokenizer adds one; text
 * that spells a special token stays text), messages are rendered with the
 * chat template (the named adapter's own when it ships one, else the
 * model's) and its generation prompt, as
 * /v1/chat/completions renders them (add_generation_prompt false, or
 * options of vLLM's chat form we do not serve, are refused by name). Unknown fields are refused by name. A model
 * without a tokenizer answers 400. Nothing here blocks: the tokenizer runs
 * on the loop thread, bounded by the route's 4 MiB body.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/http/request.h"
#include "gateway/openai_request.h"
#include "gateway/routes.h"
#include "gateway/served_model.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenant_auth.h"

/* The model a request names, if any, is known to the tenant; *chat: the
 * named adapter's own chat template (a reference; NULL: the model's). 0, or
 * -1 after answering. */
static int check_model(const lg_tokenize_deps *d, lg_request *r, json_t *body, lg_adapter_chat **chat)
{
    *chat = NULL;
    json_t *m = json_object_get(body, "model");
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_string(m)) {
        lg_respond_error(r, 400, "invalid_type", "model", "`model` must be a string.");
        return -1;
    }
    const char *name = json_string_value(m);
    if (!strcmp(name, d->model->id))
        return 0;
    if (lg_tenant_adapters_find_chat(d->adapters, lg_principal_of(r)->tenant->id, name, NULL, chat))
        return 0;
    lg_respond_model_not_found(r, name);
    return -1;
}

/* Refuses fields not in allowed (NULL-terminated), naming the first. */
static int only_fields(lg_request *r, json_t *body, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i]; i++)
            ok = ok || !strcmp(k, allowed[i]);
        if (!ok) {
            lg_respond_error(r, 400, "unknown_parameter", k, "Unrecognized request argument supplied: %s", k);
            return -1;
        }
    }
    return 0;
}

static int opt_bool(lg_request *r, json_t *body, const char *key, bool dflt, bool *out)
{
    json_t *v = json_object_get(body, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        lg_respond_error(r, 400, "invalid_type", key, "`%s` must be a boolean.", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

static int tokenize(lg_request *r, void *user)
{
    const lg_tokenize_deps *d = user;
    static const char *const PROMPT_FIELDS[] = {"model", "prompt", "add_special_tokens", "return_token_strs", NULL};
    static const char *const CHAT_FIELDS[] = {"model", "messages", "add_generation_prompt", "return_token_strs", NULL};
    json_t *body = lg_request_json(r);
    if (!body)
        return 0;
    bool add_special, gen_prompt, strs;
    int32_t *ids = NULL;
    int n = 0;
    lg_adapter_chat *achat = NULL;
    json_t *prompt = json_object_get(body, "prompt"), *msgs = json_object_get(body, "messages");
    bool chat = msgs && !prompt;
    if (only_fields(r, body, chat ? CHAT_FIELDS : PROMPT_FIELDS) != 0 || check_model(d, r, body, &achat) != 0 ||
        opt_bool(r, body, "return_token_strs", false, &strs) != 0)
        goto out;
    if (chat) {
        if (opt_bool(r, body, "add_generation_prompt", true, &gen_prompt) != 0)
            goto out;
        if (!gen_prompt) {
            lg_respond_error(r, 400, "invalid_value", "add_generation_prompt",
                             "Only add_generation_prompt=true is supported: messages are rendered as "
                             "/v1/chat/completions renders them.");
            goto out;
        }
        if (lg_oai_chat_ids(d->model, lg_adapter_chat_template(achat), r, msgs, &ids, &n) != 0)
            goto out;
    } else {
        if (opt_bool(r, body, "add_special_tokens", true, &add_special) != 0)
            goto out;
        if (!json_is_string(prompt)) {
            lg_respond_error(r, 400, prompt ? "invalid_type" : "missing_required_parameter", "prompt",
                             prompt ? "`prompt` must be a string."
                                    : "Missing required parameter: 'prompt' (or 'messages').");
            goto out;
        }
        if (lg_oai_text_ids(d->model, r, prompt, add_special, &ids, &n) != 0)
            goto out;
    }
    json_t *tokens = json_array(), *texts = strs ? json_array() : json_null();
    for (int i = 0; i < n; i++) {
        json_array_append_new(tokens, json_integer(ids[i]));
        if (strs) {
            const char *t = lg_tokenizer_token_text(d->model->tok, ids[i]);
            json_array_append_new(texts, lg_json_string_lossy(t ? t : "", t ? strlen(t) : 0, 1024));
        }
    }
    lg_respond_json(r, 200, json_pack("{s:i,s:i,s:o,s:o}", "count", n, "max_model_len", d->model->max_context, "tokens",
                                      tokens, "token_strs", texts));
out:
    lg_adapter_chat_unref(achat);
    free(ids);
    json_decref(body);
    return 0;
}

static int detokenize(lg_request *r, void *user)
{
    const lg_tokenize_deps *d = user;
    static const char *const FIELDS[] = {"model", "tokens", NULL};
    json_t *body = lg_request_json(r);
    if (!body)
        return 0;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t len = 0;
    lg_err err = {{0}};
    json_t *tokens = json_object_get(body, "tokens");
    lg_adapter_chat *achat = NULL;
    int mrc = only_fields(r, body, FIELDS) != 0 ? -1 : check_model(d, r, body, &achat);
    lg_adapter_chat_unref(achat); /* the tokenizer is the model's either way */
    if (mrc != 0)
        goto out;
    if (!json_is_array(tokens)) {
        lg_respond_error(r, 400, tokens ? "invalid_type" : "missing_required_parameter", "tokens",
                         tokens ? "`tokens` must be an array of token ids." : "Missing required parameter: 'tokens'.");
        goto out;
    }
    if (!d->model->tok) {
        lg_respond_error(r, 400, NULL, "tokens", "The model %s has no tokenizer.", d->model->id);
        goto out;
    }
    size_t n = json_array_size(tokens);
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        lg_respond_error(r, 503, NULL, NULL, "The server is out of memory; please retry.");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(tokens, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= d->model->vocab_size) {
            lg_respond_error(r, 400, "invalid_value", "tokens",
                             "tokens[%zu] is not a token id of this model (0..%d).", i, d->model->vocab_size - 1);
            goto out;
        }
        ids[i] = (int32_t)id;
    }
    if (lg_tokenizer_decode_n(d->model->tok, ids, (int)n, false, &text, &len, &err) != 0) {
        lg_respond_error(r, 400, "invalid_value", "tokens", "%s", err.msg);
        goto out;
    }
    lg_respond_json(r, 200, json_pack("{s:s%}", "prompt", text, len));
out:
    free(text);
    free(ids);
    json_decref(body);
    return 0;
}

int lg_routes_tokenize(lg_router *rt, const lg_tokenize_deps *deps, lg_err *err)
{
    lg_tokenize_deps *d = malloc(sizeof *d); /* the routes' user, freed with the router */
    if (!d)
        return lg_fail(err, "out of memory");
    *d = *deps;
    lg_route routes[] = {
        {.method = "POST", .pattern = "/tokenize", .fn = tokenize, .user = d, .content_type = "application/json",
         .body_required = true, .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true,
         .name = "tokenize", .free_user = free},
        {.method = "POST", .pattern = "/detokenize", .fn = detokenize, .user = d, .content_type = "application/json",
         .body_required = true, .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true,
         .name = "detokenize"},
    };
    if (lg_router_add(rt, &routes[0], err) != 0) {
        free(d);
        return -1;
    }
    return lg_router_add(rt, &routes[1], err);
}
