/*
 * openai_request.c — see openai_request.h. Parameter names, ranges and
 * error wording follow OpenAI's API reference for /v1/chat/completions and
 * /v1/completions.
 *
 * lg_oai_request_parse runs one function per concern, in a fixed order
 * (which error a client sees first depends on it): the body's keys, the
 * model, sampling, streaming, stop strings and stop tokens, output options,
 * logprobs (and echo, prompt_logprobs), the fields accepted and ignored, the
 * cache salt, the prompts (chat template or prompt list, then
 * tokenization), max_tokens against the context, and last what depends on
 * it (min_tokens, the scored prompt tokens). Each answers r with a 400
 * naming the parameter and returns -1 on a bad value.
 *
 * vLLM's extensions keep vLLM's meaning (its protocol.py / SamplingParams):
 * top_k -1 or 0 is off; repetition_penalty > 0 (1 off); min_tokens <=
 * max_tokens; stop_token_ids at most LG_MAX_STOP_IDS; prompt_logprobs
 * 0..20 and not with stream (as vLLM refuses it); continuous_usage_stats
 * counts only with include_usage.
 */
#include "gateway/openai_request.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What we honour; everything else OpenAI defines is named in UNSUPPORTED. */
static const char *const CHAT_KEYS[] = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                        "top_p", "n", "stop", "seed", "stream", "stream_options", "logprobs",
                                        "top_logprobs", "presence_penalty", "frequency_penalty", "user",
                                        "cache_salt", "store", "metadata", "tools", "tool_choice",
                                        "parallel_tool_calls", "documents", "chat_template_kwargs", NULL};
static const char *const COMPLETION_KEYS[] = {"model", "prompt", "max_tokens", "temperature", "top_p", "n",
                                              "stop", "seed", "stream", "stream_options", "logprobs",
                                              "presence_penalty", "frequency_penalty", "user", "cache_salt",
                                              "echo", "best_of", "suffix", "logit_bias", NULL};
/* vLLM's sampling and output extensions, honoured on both routes */
static const char *const VLLM_KEYS[] = {"top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens",
                                        "stop_token_ids", "skip_special_tokens", "include_stop_str_in_output",
                                        "prompt_logprobs", NULL};
/* echo is supported on /v1/completions (OpenAI's), not on chat (vLLM's chat echo means something else) */
static const char *const UNSUPPORTED[] = {"functions", "function_call", "logit_bias", "audio", "modalities", "prediction",
                                          "reasoning_effort", "web_search_options", "service_tier", "echo",
                                          "best_of", "suffix", "verbosity", "prompt_cache_key",
                                          "safety_identifier", NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return true;
    return false;
}

#define BAD(param, ...) (lg_respond_error(r, 400, NULL, param, __VA_ARGS__), -1)

/* Input limits beyond the body size (4 MiB) and JSON depth (json_body.h):
 * a request with more messages than this, or a longer stop string, is a 400
 * before the chat template or the stop matcher ever sees it (OpenAI caps
 * neither publicly; these are far above any real use). */
#define LG_OAI_MAX_MESSAGES 4096
#define LG_OAI_MAX_STOP_BYTES 1024

static int get_number(lg_request *r, json_t *body, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return BAD(key, "Invalid type for '%s': expected a number, but got %s instead.", key,
                   json_is_string(v) ? "a string" : "another type");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return BAD(key, "Invalid '%s': %g is out of range; expected a value between %g and %g.", key, x, lo, hi);
    *out = x;
    return 1;
}

static int get_int(lg_request *r, json_t *body, const char *key, long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return BAD(key, "Invalid type for '%s': expected an integer.", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(key, "Invalid '%s': integer %lld is out of range; expected a value between %lld and %lld.", key, x,
                   lo, hi);
    *out = x;
    return 1;
}

static int get_bool(lg_request *r, json_t *body, const char *key, bool *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return BAD(key, "Invalid type for '%s': expected a boolean.", key);
    *out = json_is_true(v);
    return 1;
}

/* Text of a chat message's content: a string, or an array of text parts. */
static int message_text(lg_request *r, json_t *content, int i, char **out)
{
    char param[64];
    snprintf(param, sizeof param, "messages.[%d].content", i);
    if (json_is_string(content)) {
        *out = strdup(json_string_value(content));
        return *out ? 0 : BAD(param, "out of memory");
    }
    if (!content || json_is_null(content)) {
        *out = strdup("");
        return 0;
    }
    if (!json_is_array(content))
        return BAD(param, "Invalid type for '%s': expected a string or an array of content parts.", param);
    size_t cap = 1, len = 0, k;
    json_t *part;
    json_array_foreach(content, k, part)
    {
        json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx))
            return BAD(param, "Invalid content part in '%s': only parts of type 'text' are supported.", param);
        cap += json_string_length(tx);
    }
    char *s = malloc(cap);
    if (!s)
        return BAD(param, "out of memory");
    json_array_foreach(content, k, part)
    {
        json_t *tx = json_object_get(part, "text");
        memcpy(s + len, json_string_value(tx), json_string_length(tx));
        len += json_string_length(tx);
    }
    s[len] = 0;
    *out = s;
    return 0;
}

/* Text so long that it cannot fit the context whatever it encodes to (every
 * token covers at most m->max_token_bytes bytes) is refused before the
 * tokenizer runs: tokenizing runs on the loop thread, and this bounds its
 * work to about context x max_token_bytes bytes per prompt. */
static int too_long(const lg_served_model *m, lg_request *r, const char *param, size_t bytes)
{
    size_t per_token = (size_t)(m->max_token_bytes > 0 ? m->max_token_bytes : 1);
    size_t cap = (size_t)m->max_context * per_token;
    if (bytes <= cap)
        return 0;
    lg_respond_error(r, 400, "context_length_exceeded", param,
                     "This model's maximum context length is %d tokens. However, your %s is %zu bytes long, "
                     "which is at least %zu tokens. Please reduce the length of the %s.",
                     m->max_context, param, bytes, bytes / per_token, param);
    return -1;
}

#define MSG_PARAM(buf, i, key) snprintf(buf, sizeof buf, "messages.[%zu].%s", (size_t)(i), key)

/* An assistant message's tool_calls: [{id, type: "function", function: {name, arguments: JSON text}}]. */
static int check_tool_calls(lg_request *r, json_t *tc, size_t i)
{
    char p[96];
    MSG_PARAM(p, i, "tool_calls");
    if (!json_is_array(tc))
        return BAD(p, "Invalid type for '%s': expected an array of tool calls.", p);
    if (json_array_size(tc) == 0) /* OpenAI's rule */
        return BAD(p, "Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty "
                      "array instead.", p);
    size_t k;
    json_t *c;
    json_array_foreach(tc, k, c)
    {
        json_t *fn = json_object_get(c, "function"), *id = json_object_get(c, "id"), *ty = json_object_get(c, "type");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        snprintf(p, sizeof p, "messages.[%zu].tool_calls.[%zu]", i, k);
        if (!json_is_object(c) || !json_is_string(id) || !json_is_object(fn) || !json_is_string(name) ||
            !json_is_string(args))
            return BAD(p, "Invalid '%s': expected {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                          "\"arguments\"}} with string values.", p);
        if (ty && !json_is_null(ty) && (!json_is_string(ty) || strcmp(json_string_value(ty), "function")))
            return BAD(p, "Invalid '%s.type': only 'function' tool calls are supported.", p);
    }
    return 0;
}

/* Message i checked, and appended to out as the chat template gets it
 * (developer is system; the rest as given: content as a string, text parts
 * or null, name, an assistant's tool_calls, a tool message's tool_call_id). */
static int chat_message(lg_request *r, json_t *m, size_t i, json_t *out)
{
    char param[96];
    MSG_PARAM(param, i, "role");
    json_t *role = json_object_get(m, "role");
    if (!json_is_object(m) || !json_is_string(role))
        return BAD(param, "Missing required parameter: '%s'.", param);
    const char *ro = json_string_value(role);
    bool assistant = !strcmp(ro, "assistant"), tool = !strcmp(ro, "tool");
    if (strcmp(ro, "system") && strcmp(ro, "developer") && strcmp(ro, "user") && !assistant && !tool)
        return BAD(param, "Invalid value: '%s'. Supported values are: 'system', 'developer', 'user', 'assistant' "
                          "and 'tool'.", ro);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        MSG_PARAM(param, i, k);
        /* an assistant message as the SDKs send back what we answered: annotations (dropped), audio and
         * function_call null */
        bool known = !strcmp(k, "role") || !strcmp(k, "content") || !strcmp(k, "name") ||
                     (assistant && (!strcmp(k, "tool_calls") || !strcmp(k, "refusal") ||
                                    !strcmp(k, "reasoning_content") || !strcmp(k, "reasoning") ||
                                    !strcmp(k, "annotations") ||
                                    ((!strcmp(k, "audio") || !strcmp(k, "function_call")) && json_is_null(v)))) ||
                     (tool && !strcmp(k, "tool_call_id"));
        if (!known)
            return BAD(param, "Unsupported parameter: '%s' is not supported by this server.", param);
        if ((!strcmp(k, "name") || !strcmp(k, "tool_call_id") || !strcmp(k, "reasoning_content") ||
             !strcmp(k, "reasoning") || !strcmp(k, "refusal")) &&
            !json_is_string(v) && !json_is_null(v))
            return BAD(param, "Invalid type for '%s': expected a string.", param);
    }
    if (tool && !json_is_string(json_object_get(m, "tool_call_id"))) {
        MSG_PARAM(param, i, "tool_call_id");
        return BAD(param, "Missing required parameter: '%s'.", param);
    }
    json_t *tc = json_object_get(m, "tool_calls");
    if (tc && !json_is_null(tc) && check_tool_calls(r, tc, i) != 0)
        return -1;
    char *text = NULL; /* the content's shape is checked here; the template gets it as given */
    if (message_text(r, json_object_get(m, "content"), (int)i, &text) != 0)
        return -1;
    free(text);
    json_t *c = json_copy(m);
    if (!c)
        return BAD(NULL, "out of memory");
    if (!strcmp(ro, "developer"))
        json_object_set_new(c, "role", json_string("system"));
    json_object_del(c, "annotations");
    json_t *content = json_object_get(m, "content");
    if (!content || json_is_null(content)) /* templates read content; "" is as false as none */
        json_object_set_new(c, "content", json_string(""));
    json_array_append_new(out, c);
    return 0;
}

/* messages (+ tools, documents, chat_template_kwargs: NULL for none) ->
 * the chat template (tmpl: an adapter's own; NULL: the model's) -> token
 * ids (*ids malloc'd). */
static int chat_render_ids(const lg_served_model *mdl, const lg_chat_template *tmpl, lg_request *r, json_t *msgs,
                           const json_t *tools, const json_t *documents, const json_t *kwargs, int32_t **ids,
                           int *n_ids)
{
    if (!tmpl)
        tmpl = mdl->chat;
    if (!msgs)
        return BAD("messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "Invalid 'messages': expected a non-empty array of messages.");
    if (json_array_size(msgs) > LG_OAI_MAX_MESSAGES)
        return BAD("messages", "Invalid 'messages': at most %d messages per request.", LG_OAI_MAX_MESSAGES);
    if (!tmpl || !mdl->tok)
        return BAD("messages", "The model %s has no chat template; use /v1/completions.", mdl->id);
    json_t *conv = json_array();
    int rc = conv ? 0 : BAD(NULL, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
        if (rc == 0)
            rc = chat_message(r, m, i, conv);
    char *text = NULL;
    lg_err err = {{0}};
    if (rc == 0 && lg_chat_template_render(tmpl, conv, tools, documents, kwargs, true, &text, &err) != 0)
        rc = BAD("messages", "Invalid 'messages': %s", err.msg);
    json_decref(conv);
    if (rc == 0 && too_long(mdl, r, "messages", strlen(text)) != 0)
        rc = -1;
    if (rc == 0 && lg_tokenizer_encode(mdl->tok, text, strlen(text), false, true, ids, n_ids, &err) != 0)
        rc = BAD("messages", "Invalid 'messages': %s", err.msg);
    free(text);
    return rc;
}

int lg_oai_chat_ids(const lg_served_model *mdl, const lg_chat_template *tmpl, lg_request *r, json_t *msgs,
                    int32_t **ids, int *n_ids)
{
    return chat_render_ids(mdl, tmpl, r, msgs, NULL, NULL, NULL, ids, n_ids);
}

/* tools / tool_choice / parallel_tool_calls (tool_calls.h), documents and
 * chat_template_kwargs (vLLM's: extra template variables), then the
 * rendered conversation. */
static int chat_prompt(const lg_served_model *mdl, lg_request *r, json_t *body, lg_oai_request *q)
{
    char param[96], msg[512];
    if (lg_tc_request_parse(body, &q->tc, param, sizeof param, msg, sizeof msg) != 0)
        return BAD(param, "%s", msg);
    json_t *docs = json_object_get(body, "documents"), *kw = json_object_get(body, "chat_template_kwargs");
    if (docs && !json_is_null(docs) && !json_is_array(docs))
        return BAD("documents", "Invalid type for 'documents': expected an array of objects.");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return BAD("chat_template_kwargs", "Invalid type for 'chat_template_kwargs': expected an object.");
    const char *reserved[] = {"messages", "tools", "documents", "add_generation_prompt", NULL};
    for (int k = 0; json_is_object(kw) && reserved[k]; k++)
        if (json_object_get(kw, reserved[k]))
            return BAD("chat_template_kwargs", "Invalid 'chat_template_kwargs': '%s' is set by the request itself.",
                       reserved[k]);
    if (q->tc.mode == LG_TC_AUTO && mdl->tool_parser) {
        q->tc_parser = mdl->tool_parser;
        if (q->tc_parser->keeps_special) /* its markers are special tokens: the parser must see them */
            q->skip_special_tokens = false;
    }
    if (chat_render_ids(mdl, lg_adapter_chat_template(q->chat), r, json_object_get(body, "messages"), q->tc.tools,
                        json_is_array(docs) ? docs : NULL, json_is_object(kw) ? kw : NULL, &q->prompts[0],
                        &q->n_prompt_tokens[0]) != 0)
        return -1;
    q->n_prompts = 1;
    return 0;
}

/* A text prompt -> token ids, as /v1/completions encodes it (the model's
 * BOS when it adds one, special tokens' text as text). */
int lg_oai_text_ids(const lg_served_model *m, lg_request *r, json_t *s, bool add_special, int32_t **ids, int *n)
{
    if (!m->tok)
        return BAD("prompt", "The model %s has no tokenizer; give the prompt as token ids.", m->id);
    if (too_long(m, r, "prompt", json_string_length(s)) != 0)
        return -1;
    lg_err err = {{0}};
    if (lg_tokenizer_encode(m->tok, json_string_value(s), json_string_length(s),
                            add_special && lg_tokenizer_add_bos(m->tok), false, ids, n, &err) != 0)
        return BAD("prompt", "Invalid 'prompt': %s", err.msg);
    return 0;
}

static int encode_text(const lg_served_model *m, lg_request *r, json_t *s, int32_t **ids, int *n)
{
    return lg_oai_text_ids(m, r, s, true, ids, n);
}

static int token_list(const lg_served_model *m, lg_request *r, json_t *a, int32_t **ids, int *n)
{
    int vocab = m->vocab_size;
    size_t k;
    json_t *v;
    *ids = malloc((json_array_size(a) + 1) * sizeof **ids);
    if (!*ids)
        return BAD("prompt", "out of memory");
    json_array_foreach(a, k, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
            return BAD("prompt", "Invalid 'prompt': token ids must be integers in [0, %d).", vocab);
        (*ids)[k] = (int32_t)json_integer_value(v);
    }
    *n = (int)json_array_size(a);
    return 0;
}

/* prompt: a string, token ids, or a list of either -> token ids per prompt. */
static int completion_prompts(const lg_served_model *m, lg_request *r, json_t *body, lg_oai_request *q)
{
    json_t *p = json_object_get(body, "prompt");
    if (!p || json_is_null(p))
        return BAD("prompt", "Missing required parameter: 'prompt'.");
    if (json_is_string(p)) {
        q->n_prompts = 1;
        if (!(q->prompt_text[0] = strndup(json_string_value(p), json_string_length(p))))
            return BAD("prompt", "out of memory");
        return encode_text(m, r, p, &q->prompts[0], &q->n_prompt_tokens[0]);
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return BAD("prompt", "Invalid 'prompt': expected a string, an array of strings, an array of token ids or an "
                             "array of token-id arrays.");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        q->n_prompts = 1;
        return token_list(m, r, p, &q->prompts[0], &q->n_prompt_tokens[0]);
    }
    if (json_array_size(p) > LG_OAI_MAX_PROMPTS)
        return BAD("prompt", "Invalid 'prompt': at most %d prompts per request.", LG_OAI_MAX_PROMPTS);
    size_t k;
    json_t *v;
    json_array_foreach(p, k, v)
    {
        int rc;
        if (json_is_string(v) && !(q->prompt_text[k] = strndup(json_string_value(v), json_string_length(v))))
            rc = BAD("prompt", "out of memory");
        else if (json_is_string(v))
            rc = encode_text(m, r, v, &q->prompts[k], &q->n_prompt_tokens[k]);
        else if (json_is_array(v) && json_array_size(v) > 0)
            rc = token_list(m, r, v, &q->prompts[k], &q->n_prompt_tokens[k]);
        else
            rc = BAD("prompt", "Invalid 'prompt': element %zu is neither a string nor a non-empty token-id array.", k);
        q->n_prompts = (int)k + 1;
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- the parameters ---------------------------------------------------------------- */

/* Every key is known; OpenAI's parameters we do not support are refused by
 * name, unless given their harmless default. */
static int check_keys(lg_request *r, lg_oai_kind kind, json_t *body)
{
    const char *const *known = kind == LG_OAI_CHAT ? CHAT_KEYS : COMPLETION_KEYS;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (in_list(VLLM_KEYS, key) || lg_so_is_key(key) || (kind == LG_OAI_COMPLETIONS && !strcmp(key, "echo")))
            continue;
        if (in_list(UNSUPPORTED, key)) {
            /* harmless defaults are accepted: echo=false, best_of=1/n, empty logit_bias, suffix null */
            bool harmless = json_is_null(v) || (!strcmp(key, "echo") && json_is_false(v)) ||
                            (!strcmp(key, "best_of") && json_is_integer(v) && json_integer_value(v) == 1) ||
                            (!strcmp(key, "logit_bias") && json_is_object(v) && json_object_size(v) == 0) ||
                            (!strcmp(key, "service_tier") && json_is_string(v) &&
                             (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default")));
            if (!harmless)
                return BAD(key, "Unsupported parameter: '%s' is not supported by this server.", key);
            continue;
        }
        if (!in_list(known, key))
            return BAD(key, "Unrecognized request argument supplied: %s", key);
    }
    return 0;
}

/* model: the base model's id, or one of the tenant's adapters (a copy). */
static int parse_model(const lg_served_model *m, lg_tenant_adapters *adapters, lg_request *r,
                       const lg_tenant_obj *t, json_t *body, lg_oai_request *q)
{
    json_t *jm = json_object_get(body, "model");
    if (!jm)
        return BAD("model", "Missing required parameter: 'model'.");
    if (!json_is_string(jm) || json_string_length(jm) == 0 || json_string_length(jm) >= sizeof q->model)
        return BAD("model", "Invalid 'model': expected the id of a model (GET /v1/models).");
    snprintf(q->model, sizeof q->model, "%s", json_string_value(jm));
    if (strcmp(q->model, m->id) != 0) {
        if (!lg_tenant_adapters_find_chat(adapters, t->id, q->model, &q->adapter, &q->chat)) {
            lg_respond_model_not_found(r, q->model);
            return -1;
        }
        q->is_adapter = true;
    }
    return 0;
}

/* n, temperature, top_p, presence and frequency penalties, seed. */
static int parse_sampling(lg_request *r, json_t *body, lg_oai_request *q)
{
    long long ll;
    double d;
    int g;
    if ((g = get_int(r, body, "n", 1, LG_OAI_MAX_N, &ll)) < 0)
        return -1;
    if (g)
        q->n = (int)ll;
    if ((g = get_number(r, body, "temperature", 0, 2, &d)) < 0)
        return -1;
    if (g)
        q->temperature = (float)d;
    if ((g = get_number(r, body, "top_p", 0, 1, &d)) < 0)
        return -1;
    if (g)
        q->top_p = (float)d;
    if (g && d == 0)
        q->temperature = 0; /* top_p 0 keeps only the most likely token */
    if ((g = get_number(r, body, "presence_penalty", -2, 2, &d)) < 0)
        return -1;
    if (g)
        q->presence_penalty = (float)d;
    if ((g = get_number(r, body, "frequency_penalty", -2, 2, &d)) < 0)
        return -1;
    if (g)
        q->frequency_penalty = (float)d;
    if ((g = get_int(r, body, "seed", INT64_MIN, INT64_MAX, &ll)) < 0)
        return -1;
    if (g) {
        q->has_seed = true;
        q->seed = ll;
    }
    /* vLLM: top_k -1 (or 0) is off, else >= 1 */
    if ((g = get_int(r, body, "top_k", -1, INT32_MAX, &ll)) < 0)
        return -1;
    if (g)
        q->top_k = ll > 0 ? (int)ll : 0;
    if ((g = get_number(r, body, "min_p", 0, 1, &d)) < 0)
        return -1;
    if (g)
        q->min_p = (float)d;
    if ((g = get_number(r, body, "repetition_penalty", -HUGE_VAL, HUGE_VAL, &d)) < 0)
        return -1;
    if (g) {
        if (!(d > 0) || !isfinite(d))
            return BAD("repetition_penalty", "Invalid 'repetition_penalty': %g; it must be greater than zero "
                                             "(1 is no penalty).", d);
        q->repetition_penalty = (float)d;
    }
    return 0;
}

/* stream, stream_options (include_usage; include_obfuscation accepted). */
static int parse_stream(lg_request *r, json_t *body, lg_oai_request *q)
{
    if (get_bool(r, body, "stream", &q->stream) < 0)
        return -1;
    json_t *so = json_object_get(body, "stream_options");
    if (!so || json_is_null(so))
        return 0;
    if (!q->stream)
        return BAD("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
    if (!json_is_object(so))
        return BAD("stream_options", "Invalid type for 'stream_options': expected an object.");
    const char *key;
    json_t *v;
    json_object_foreach(so, key, v)
    {
        if (!strcmp(key, "include_usage")) {
            if (!json_is_boolean(v))
                return BAD("stream_options.include_usage", "Invalid type for 'stream_options.include_usage': "
                                                           "expected a boolean.");
            q->include_usage = json_is_true(v);
        } else if (!strcmp(key, "continuous_usage_stats")) { /* vLLM: usage in every chunk (with include_usage) */
            if (!json_is_boolean(v))
                return BAD("stream_options.continuous_usage_stats",
                           "Invalid type for 'stream_options.continuous_usage_stats': expected a boolean.");
            q->continuous_usage = json_is_true(v);
        } else if (strcmp(key, "include_obfuscation")) {
            return BAD("stream_options", "Unrecognized stream option: %s", key);
        }
    }
    if (!q->include_usage)
        q->continuous_usage = false;
    return 0;
}

/* stop: a string or up to LG_OAI_MAX_STOP strings. */
static int parse_stop(lg_request *r, json_t *body, lg_oai_request *q)
{
    json_t *st = json_object_get(body, "stop");
    if (!st || json_is_null(st))
        return 0;
    if (json_is_string(st)) {
        if (json_string_length(st) > LG_OAI_MAX_STOP_BYTES)
            return BAD("stop", "Invalid 'stop': a stop string may be at most %d bytes.", LG_OAI_MAX_STOP_BYTES);
        q->stop[q->n_stop++] = strdup(json_string_value(st));
        return 0;
    }
    if (!json_is_array(st) || json_array_size(st) > LG_OAI_MAX_STOP)
        return BAD("stop", "Invalid 'stop': expected a string or an array of up to 4 strings.");
    size_t k;
    json_t *v;
    json_array_foreach(st, k, v)
    {
        if (!json_is_string(v))
            return BAD("stop", "Invalid 'stop': expected a string or an array of up to 4 strings.");
        if (json_string_length(v) > LG_OAI_MAX_STOP_BYTES)
            return BAD("stop", "Invalid 'stop': a stop string may be at most %d bytes.", LG_OAI_MAX_STOP_BYTES);
        q->stop[q->n_stop++] = strdup(json_string_value(v));
    }
    return 0;
}

/* vLLM's stop_token_ids (up to LG_MAX_STOP_IDS ids of the vocabulary), ignore_eos, min_tokens (checked
 * against max_tokens later), skip_special_tokens, include_stop_str_in_output. */
static int parse_vllm_output(const lg_served_model *m, lg_request *r, json_t *body, lg_oai_request *q)
{
    json_t *ids = json_object_get(body, "stop_token_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids) || json_array_size(ids) > LG_MAX_STOP_IDS)
            return BAD("stop_token_ids", "Invalid 'stop_token_ids': expected an array of at most %d token ids.",
                       LG_MAX_STOP_IDS);
        size_t k;
        json_t *v;
        json_array_foreach(ids, k, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->vocab_size)
                return BAD("stop_token_ids", "Invalid 'stop_token_ids': token ids must be integers in [0, %d).",
                           m->vocab_size);
            q->stop_token_ids[q->n_stop_token_ids++] = (int32_t)json_integer_value(v);
        }
    }
    long long ll;
    int g;
    if ((g = get_int(r, body, "min_tokens", 0, INT32_MAX, &ll)) < 0)
        return -1;
    if (g)
        q->min_tokens = (int)ll;
    if (get_bool(r, body, "ignore_eos", &q->ignore_eos) < 0 ||
        get_bool(r, body, "skip_special_tokens", &q->skip_special_tokens) < 0 ||
        get_bool(r, body, "include_stop_str_in_output", &q->include_stop_str_in_output) < 0)
        return -1;
    return 0;
}

/* chat: logprobs (bool) + top_logprobs; completions: logprobs (0..5 alternatives) and echo; both: vLLM's
 * prompt_logprobs (0..20 alternatives, not with stream, as vLLM). */
static int parse_logprobs(lg_request *r, lg_oai_kind kind, json_t *body, lg_oai_request *q)
{
    long long ll;
    int g;
    if (kind == LG_OAI_CHAT) {
        if (get_bool(r, body, "logprobs", &q->logprobs) < 0)
            return -1;
        if ((g = get_int(r, body, "top_logprobs", 0, LG_MAX_TOP_LOGPROBS, &ll)) < 0)
            return -1;
        if (g) {
            if (!q->logprobs)
                return BAD("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
            q->top_logprobs = (int)ll;
        }
        return 0;
    }
    if ((g = get_int(r, body, "logprobs", 0, 5, &ll)) < 0)
        return -1;
    if (g) {
        q->logprobs = true;
        q->top_logprobs = (int)ll;
    }
    return get_bool(r, body, "echo", &q->echo) < 0 ? -1 : 0;
}

static int parse_prompt_logprobs(lg_request *r, json_t *body, lg_oai_request *q)
{
    json_t *v = json_object_get(body, "prompt_logprobs");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return BAD("prompt_logprobs", "Invalid type for 'prompt_logprobs': expected an integer.");
    long long ll = json_integer_value(v);
    if (ll < 0 || ll > LG_OAI_MAX_PROMPT_LOGPROBS)
        return BAD("prompt_logprobs", "Invalid 'prompt_logprobs': %lld; this server returns 0 to %d alternatives "
                                      "per prompt token (-1, the whole vocabulary, is not supported).",
                   ll, LG_OAI_MAX_PROMPT_LOGPROBS);
    if (q->stream && ll > 0)
        return BAD("prompt_logprobs", "'prompt_logprobs' are not available when 'stream' is true.");
    if (!q->stream)
        q->prompt_logprobs = (int)ll;
    return 0;
}

/* user, store, metadata: accepted for compatibility and ignored, but only
 * with OpenAI's types. */
static int check_ignored(lg_request *r, json_t *body)
{
    json_t *u = json_object_get(body, "user");
    if (u && !json_is_null(u) && !json_is_string(u)) /* accepted, not stored */
        return BAD("user", "Invalid type for 'user': expected a string.");
    bool store_flag;
    if (get_bool(r, body, "store", &store_flag) < 0)
        return -1;
    json_t *meta = json_object_get(body, "metadata");
    if (!meta || json_is_null(meta))
        return 0;
    if (!json_is_object(meta) || json_object_size(meta) > 16)
        return BAD("metadata", "Invalid 'metadata': expected an object of at most 16 string values.");
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (!json_is_string(v) || strlen(key) > 64 || json_string_length(v) > 512)
            return BAD("metadata", "Invalid 'metadata': keys are strings of at most 64 characters and values "
                                   "strings of at most 512.");
    }
    return 0;
}

/* cache_salt: the prefix cache's isolation within the tenant. */
static int parse_cache_salt(lg_request *r, json_t *body, lg_oai_request *q)
{
    json_t *salt = json_object_get(body, "cache_salt");
    if (!salt || json_is_null(salt))
        return 0;
    if (!json_is_string(salt) || json_string_length(salt) > LG_MAX_CACHE_SALT)
        return BAD("cache_salt", "Invalid 'cache_salt': expected a string of at most %d bytes.", LG_MAX_CACHE_SALT);
    snprintf(q->cache_salt, sizeof q->cache_salt, "%s", json_string_value(salt));
    return 0;
}

/* The prompts as token ids, and prompts x n within LG_OAI_MAX_N. */
static int parse_prompts(const lg_served_model *m, lg_request *r, lg_oai_kind kind, json_t *body, lg_oai_request *q)
{
    if ((kind == LG_OAI_CHAT ? chat_prompt(m, r, body, q) : completion_prompts(m, r, body, q)) != 0)
        return -1;
    if ((long long)q->n_prompts * q->n > LG_OAI_MAX_N)
        return BAD("n", "Invalid 'n': at most %d choices per request (prompts x n).", LG_OAI_MAX_N);
    return 0;
}

/* max_tokens (chat: or max_completion_tokens) against the context, with
 * OpenAI's context_length_exceeded wording; the default fills what the
 * longest prompt leaves, up to --default-max-tokens. */
static int resolve_max_tokens(const lg_served_model *m, lg_request *r, lg_oai_kind kind, json_t *body,
                              lg_oai_request *q)
{
    const char *mt_key = "max_tokens";
    long long ll;
    int g;
    /* completions: max_tokens 0 computes the prompt alone (with echo: its text and logprobs) */
    if ((g = get_int(r, body, "max_tokens", kind == LG_OAI_COMPLETIONS ? 0 : 1, INT32_MAX, &ll)) < 0)
        return -1;
    if (kind == LG_OAI_CHAT) {
        long long l2;
        int g2 = get_int(r, body, "max_completion_tokens", 1, INT32_MAX, &l2);
        if (g2 < 0)
            return -1;
        if (g2) {
            g = 1;
            ll = l2;
            mt_key = "max_completion_tokens";
        }
    }
    const char *what = kind == LG_OAI_CHAT ? "messages" : "prompt";
    int longest = 0;
    for (int i = 0; i < q->n_prompts; i++) {
        if (q->n_prompt_tokens[i] == 0)
            return BAD(what, "Invalid prompt: it encodes to no tokens.");
        if (q->n_prompt_tokens[i] > longest)
            longest = q->n_prompt_tokens[i];
    }
    int ctx = m->max_context;
    if (longest >= ctx) {
        lg_respond_error(r, 400, "context_length_exceeded", what,
                         "This model's maximum context length is %d tokens. However, your %s resulted in %d tokens. "
                         "Please reduce the length of the %s.", ctx, what, longest, what);
        return -1;
    }
    if (g) {
        if (ll + longest > ctx) {
            lg_respond_error(r, 400, "context_length_exceeded", mt_key,
                             "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                             "(%d in the prompt, %lld for the completion). Please reduce the prompt or the "
                             "completion length.", ctx, ll + longest, longest, ll);
            return -1;
        }
        q->max_tokens = (int)ll;
    } else {
        q->max_tokens = m->default_max_tokens;
        if (q->max_tokens > ctx - longest)
            q->max_tokens = ctx - longest;
    }
    if (q->min_tokens > q->max_tokens)
        return BAD("min_tokens", "Invalid 'min_tokens': %d is more than max_tokens (%d).", q->min_tokens,
                   q->max_tokens);
    return 0;
}

/* Prompt tokens whose logprobs the answer carries (every choice scores its prompt), within
 * LG_OAI_MAX_SCORED_PROMPT_TOKENS. */
static int check_scored(lg_request *r, lg_oai_request *q)
{
    if (!(q->echo && q->logprobs) && q->prompt_logprobs < 0)
        return 0;
    long long tot = 0;
    for (int i = 0; i < q->n_prompts; i++)
        tot += (long long)q->n_prompt_tokens[i] * q->n;
    if (tot > LG_OAI_MAX_SCORED_PROMPT_TOKENS)
        return BAD(q->prompt_logprobs >= 0 ? "prompt_logprobs" : "echo",
                   "Invalid request: prompt logprobs for %lld prompt tokens (prompts x n); at most %d per request.",
                   tot, LG_OAI_MAX_SCORED_PROMPT_TOKENS);
    return 0;
}

/* response_format, structured_outputs, guided_* (structured_output.h): the grammar's source; it is
 * compiled by the route (lg_oai_request_compile), off the loop thread. */
static int parse_structure(const lg_served_model *m, lg_request *r, const json_t *body, lg_oai_request *q)
{
    char param[96], msg[512];
    if (lg_so_parse(body, &q->so, param, sizeof param, msg, sizeof msg) != 0)
        return BAD(param, "%s", msg);
    if (q->so.present && !m->cvocab)
        return BAD(q->so.param, "Structured output ('%s') is not available: the model has no usable tokenizer.",
                   q->so.param);
    return 0;
}

int lg_oai_request_compile(const lg_served_model *m, lg_oai_request *q, char *param, size_t pn, char *msg,
                           size_t mn)
{
    if (!q->so.present || q->constraint)
        return 0;
    lg_copts o = {.kind = q->so.kind, .whitespace = LG_CWS_COMPACT, .limits = m->climits};
    lg_cerr ce = {0};
    if (lg_ccache_get(m->ccache, m->cvocab, &o, q->so.src, q->so.len, &q->constraint, &ce) == 0)
        return 0;
    q->constraint = NULL;
    lg_so_error_param(&q->so, &ce, param, pn);
    const char *what = q->so.kind == LG_CK_REGEX ? "regular expression"
                       : q->so.kind == LG_CK_LARK ? "grammar"
                       : q->so.kind == LG_CK_CHOICE ? "choice list"
                                                    : "JSON schema";
    snprintf(msg, mn, "Invalid '%s': the %s cannot be enforced: %s", q->so.param, what, ce.msg);
    return ce.code == LG_CERR_INTERNAL ? -2 : -1;
}

/* tool_choice "required" or a named function: the output is constrained to
 * the calls' schema (tool_calls.h), through the same grammar engine as
 * response_format, which it cannot be combined with. */
static int parse_forced_tools(const lg_served_model *m, lg_request *r, lg_oai_request *q)
{
    if (q->tc.mode != LG_TC_NAMED && q->tc.mode != LG_TC_REQUIRED)
        return 0;
    if (q->so.present)
        return BAD(q->so.param, "Invalid '%s': it cannot be combined with tool_choice '%s'.", q->so.param,
                   q->tc.mode == LG_TC_NAMED ? "function" : "required");
    if (!m->cvocab)
        return BAD("tool_choice", "tool_choice '%s' is not available: the model has no usable tokenizer.",
                   q->tc.mode == LG_TC_NAMED ? "function" : "required");
    q->so.present = true;
    q->so.kind = LG_CK_JSON_SCHEMA;
    q->so.len = strlen(q->tc.schema);
    if (!(q->so.src = strdup(q->tc.schema)))
        return BAD(NULL, "out of memory");
    snprintf(q->so.param, sizeof q->so.param, "tool_choice");
    return 0;
}

int lg_oai_request_parse(const lg_served_model *m, lg_tenant_adapters *adapters, lg_request *r,
                         const lg_tenant_obj *t, lg_oai_kind kind, json_t *body, lg_oai_request *q)
{
    memset(q, 0, sizeof *q);
    q->kind = kind;
    q->n = 1;
    q->temperature = 1.0f;
    q->top_p = 1.0f;
    q->repetition_penalty = 1.0f;
    q->skip_special_tokens = true;
    q->prompt_logprobs = -1;
    if (check_keys(r, kind, body) != 0 || parse_model(m, adapters, r, t, body, q) != 0 ||
        parse_sampling(r, body, q) != 0 || parse_stream(r, body, q) != 0 || parse_stop(r, body, q) != 0 ||
        parse_vllm_output(m, r, body, q) != 0 || parse_logprobs(r, kind, body, q) != 0 ||
        parse_prompt_logprobs(r, body, q) != 0 || check_ignored(r, body) != 0 ||
        parse_cache_salt(r, body, q) != 0 || parse_prompts(m, r, kind, body, q) != 0 ||
        resolve_max_tokens(m, r, kind, body, q) != 0 || check_scored(r, q) != 0 || parse_structure(m, r, body, q) != 0 ||
        parse_forced_tools(m, r, q) != 0)
        return -1;
    return 0;
}

void lg_oai_request_dispose(lg_oai_request *q)
{
    for (int i = 0; i < LG_OAI_MAX_PROMPTS; i++) {
        free(q->prompts[i]);
        free(q->prompt_text[i]);
    }
    for (int i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    lg_so_spec_dispose(&q->so);
    lg_tc_request_dispose(&q->tc);
    lg_constraint_unref(q->constraint);
    lg_adapter_chat_unref(q->chat);
    memset(q, 0, sizeof *q);
}
