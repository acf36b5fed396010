/*
 * routes_openai.c — the OpenAI-compatible API for tenant keys, at /v1/...
 * and at the tenant's own base URL /t/<tenant>/v1/... (router.h):
 *
 *   GET  /v1/models, GET /v1/models/{id}   the base model and this tenant's adapters
 *   POST /v1/chat/completions              messages -> chat template -> engine
 *   POST /v1/completions                   prompt(s) -> engine
 *
 * POST /v1/responses (routes_responses.c) runs through this file too: its
 * request becomes a chat body, and its output is shaped by responses.h.
 *
 * Tools (tool_calls.h): a chat request with tools keeps each choice's text
 * (also when streaming); at the choice's end the text is read as calls
 * (the template's parser for tool_choice auto, the constrained JSON for
 * required / a named function) which become message.tool_calls and
 * finish_reason "tool_calls". Streaming, auto releases as content only what
 * its parser says cannot be a call, a named call streams its argument
 * fragments, and calls go out as delta.tool_calls (id and name first).
 *
 * One HTTP request becomes prompts x n engine requests (choices). Flow:
 *
 *   loop thread                    engine thread                  ledger writer
 *   parse, limits, submit ----->   on_token: post TOKEN
 *   TOKEN: detok, stop strings,    on_finish: post FINISH;
 *     SSE chunk or buffer            the last one builds the
 *   (stop string: cancel STOP)       ledger record -----------> commit (group)
 *   FINISH: flush, finish chunk                                 done: post BILLED,
 *   BILLED: usage chunk + [DONE], <---------------------------- close the stream
 *     or the whole JSON answer
 *
 * The last bytes (the usage chunk, [DONE], or the non-streamed body) go out
 * only once the request's ledger record is durable, so every response a
 * client saw complete is billed exactly once, also across kill -9. A client
 * that leaves cancels its engine requests at once (lg_stream on_cancel);
 * what the engine did is still billed (status 499): the tokens generated,
 * and the prompt as far as it was prefilled, so a request cancelled while
 * it waited in the engine's queue costs nothing (error_type
 * "cancelled_before_prefill"), one cancelled inside a chunked prefill the
 * chunks computed ("cancelled_during_prefill"), and one cancelled after
 * that its whole prompt ("client_disconnected").
 *
 * Usage: the engine's (engine.h lg_usage: prompt tokens prefilled, cached
 * tokens, tokens generated). prompt_tokens counts each prompt once (OpenAI's
 * rule for n > 1), from the choice that prefilled most of it (ties: the
 * lowest index; so normally its first choice), with that choice's cached
 * tokens; completion_tokens sums every choice's sampled tokens. The ledger
 * record, the limits (lg_limits_finish: monthly budget, token buckets) and
 * the metrics get the same numbers.
 *
 * Why the bookkeeping at the finish (cost, limits, metrics, the ledger
 * append) runs on the engine thread: the engine thread is the one thread
 * that sees every choice finish, also after the client left (the stream
 * then delivers nothing more to the loop, and a request cancelled by its
 * client is still billed), so one path serves every request. It is a few
 * in-memory operations (integer money, two short mutexes, a queue append);
 * nothing there blocks or touches the disk.
 *
 * What this file uses is what lg_routes_openai is given (routes.h
 * lg_openai_deps): the served model, the engine, the tenant view (a
 * request's limits and prices), the tenants' adapters, the limits, the
 * metrics and the ledger. The 429 path: the limits decide
 * (lg_limits_admit), this file counts the refusal (metrics) and answers.
 *
 * Tenants reach the engine by id (lg_tenant_key: "t<tenant id>"), never by
 * name: prefix-cache namespaces and fair-share state belong to the tenant
 * row, and a tenant recreated under a deleted one's name shares nothing
 * with it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "db/ledger.h"
#include "engine/model/stop_strings.h"
#include "engine/runtime/dp_router.h"
#include "engine/runtime/engine.h"
#include "gateway/http/sse.h"
#include "gateway/http/stream.h"
#include "gateway/metrics.h"
#include "gateway/openai_request.h"
#include "gateway/rate_limits.h"
#include "gateway/responses.h"
#include "gateway/routes.h"
#include "gateway/served_model.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenant_auth.h"
#include "gateway/tenants.h"
#include "gateway/tool_calls.h"
#include "gateway/unix_time.h"

enum { EV_TOKEN = 1, EV_FINISH = 2, EV_BILLED = 3, EV_PLP = 4 };

typedef struct ev_token {
    int choice;
    int32_t token;
    bool stop_token; /* ends the choice as EOS / a stop token id (lg_token_out.stop_token) */
    float logprob;
    int n_top;
    int32_t top_ids[LG_MAX_TOP_LOGPROBS];
    float top_lp[LG_MAX_TOP_LOGPROBS];
} ev_token;

typedef struct ev_finish {
    int choice;
    lg_finish_reason reason;
    char error[256];
} ev_finish;

/* Scored prompt tokens of one choice (engine.h lg_prompt_logprob), n of them after the header. */
typedef struct ev_plp {
    int choice;
    int n;
    lg_prompt_logprob rows[];
} ev_plp;

typedef struct ev_billed {
    int ledger_status;
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int http_status;
    char error[256];
} ev_billed;

typedef struct job job;
typedef struct prod {
    job *j;
    int choice;
} prod;

/* Shared by the loop (one reference) and the producers (one reference,
 * dropped by the ledger callback). */
struct job {
    atomic_int refs;
    atomic_bool client_gone;
    const lg_openai_deps *d;
    lg_stream *s;
    const lg_tenant_obj *tenant;
    int n_choices, n_per_prompt, submitted;
    int64_t ids[LG_OAI_MAX_N];
    prod p[LG_OAI_MAX_N];
    /* engine thread after submit */
    atomic_int remaining; /* choices not finished, + 1 while submitting */
    int64_t completion_tokens;
    /* per prompt: the usage of the choice that prefilled most of it */
    int best_choice[LG_OAI_MAX_N]; /* -1: none finished */
    int64_t best_prompt[LG_OAI_MAX_N], best_cached[LG_OAI_MAX_N];
    int n_prompts;
    int64_t prompt_len;   /* the prompts' tokens, all of them (set before submit) */
    double t_submit, t_first;
    bool any_error;
    char error[256];
    lg_finish_reason first_reason;
    bool have_reason;
    int64_t est_tokens;
    lg_pricing pricing;
    lg_usage_record rec; /* identity fields filled on the loop before submit */
};

static void job_release(job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) == 1)
        free(j);
}

/* ---- loop-side state ------------------------------------------------------ */

typedef struct choice_st {
    lg_detok *dt;
    lg_stopper *stp;
    bool stop_matched, finished, role_sent;
    bool echoed;       /* completions echo: the prompt's text (and logprobs) went out */
    lg_finish_reason reason;
    lg_strbuf text;
    size_t out_len;    /* bytes of text released so far, echo included (text_offset) */
    int n_tokens;      /* tokens the engine generated (continuous_usage_stats) */
    json_t *lp; /* chat: array of content logprobs; completions: object of arrays */
    /* the prompt's scored tokens (echo with logprobs, prompt_logprobs) */
    lg_prompt_logprob *plp;
    int n_plp, cap_plp;
    /* include_stop_str_in_output: the text given to the stop matcher, and how much of it came out */
    lg_strbuf fed;
    size_t released;
    /* tools (and /v1/responses): text is kept in `text` while streaming too; `sent` bytes of it went out
     * as content; `holding`: a call has started, nothing more goes out as content until the end */
    size_t sent;
    bool holding;
    bool call_started;  /* chat, named tool_choice, streamed: the call's id and name went out */
    char call_id[40];
    json_t *calls;      /* at the end: [{id, name, arguments}] found in the output, or NULL */
    char *content;      /* with calls: the text outside them (NULL: none) */
} choice_st;

/* What a prompt's echo needs on the loop (completions echo): its text, its first token, and where each of
 * its tokens starts in that text. */
typedef struct echo_prompt {
    char *text;
    size_t len;
    int n_tokens;
    int32_t first;
    size_t *off;      /* [n_tokens] (with logprobs) */
} echo_prompt;

typedef struct gen {
    const lg_openai_deps *d;
    job *j;
    lg_oai_kind kind;
    bool stream, include_usage, continuous_usage, logprobs;
    int top_logprobs;
    bool echo, include_stop;
    int min_tokens;
    int prompt_logprobs;  /* vLLM's prompt_logprobs alternatives; -1: not asked */
    int n_per_prompt;
    char *stops[LG_OAI_MAX_STOP];
    int n_stop;
    int n_prompt_tokens[LG_OAI_MAX_PROMPTS];
    echo_prompt *ep;      /* [n_prompts] with echo */
    int n_prompts;
    char model[256];
    char id[64];
    int64_t created;
    lg_sse *sse;
    choice_st *c;
    int n;
    bool cleaned;
    /* tools (tool_calls.h) */
    lg_tc_mode tc_mode;
    const lg_tc_parser *tc_parser;
    char tc_name[LG_TC_NAME_MAX + 1];
    lg_resp *resp;       /* /v1/responses: the response being made (responses.h); NULL for chat */
    bool keep_text;      /* streamed text is kept in c->text too (tools, responses) */
} gen;

static void gen_cleanup(gen *g)
{
    if (g->cleaned)
        return;
    g->cleaned = true;
    for (int i = 0; g->c && i < g->n; i++) {
        lg_detok_free(g->c[i].dt);
        lg_stopper_free(g->c[i].stp);
        free(g->c[i].text.p);
        free(g->c[i].fed.p);
        free(g->c[i].plp);
        json_decref(g->c[i].lp);
        json_decref(g->c[i].calls);
        free(g->c[i].content);
    }
    free(g->c);
    g->c = NULL;
    for (int i = 0; g->ep && i < g->n_prompts; i++) {
        free(g->ep[i].text);
        free(g->ep[i].off);
    }
    free(g->ep);
    g->ep = NULL;
    for (int i = 0; i < g->n_stop; i++)
        free(g->stops[i]);
    g->n_stop = 0;
    lg_resp_free(g->resp);
    g->resp = NULL;
    job_release(g->j);
}

static const char *finish_name(lg_finish_reason r)
{
    switch (r) {
    case LG_FINISH_STOP: return "stop";
    case LG_FINISH_LENGTH: return "length";
    case LG_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}

static json_t *bytes_of(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *token_text(const lg_tokenizer *tok, int32_t id, json_t **bytes)
{
    char *s = NULL;
    size_t n = 0;
    if (!tok || lg_tokenizer_decode_n(tok, &id, 1, false, &s, &n, NULL) != 0) {
        char b[32];
        snprintf(b, sizeof b, "token_id:%d", id);
        if (bytes)
            *bytes = json_null();
        return json_string(b);
    }
    if (bytes)
        *bytes = bytes_of(s, n);
    json_t *t = json_stringn_nocheck(s, n);
    free(s);
    return t;
}

/* A logprob as JSON. JSON has no -inf or NaN (jansson's json_real refuses
 * them, which dropped the key): OpenAI's value for "very unlikely", -9999.0,
 * stands in for any logprob that is not finite. */
static json_t *lp_real(float v) { return json_real(isfinite(v) ? (double)v : -9999.0); }

/* The logprobs entry of one token, in the route's shape. */
static json_t *chat_lp_entry(const lg_tokenizer *tok, const ev_token *t, int top)
{
    json_t *bytes;
    json_t *e = json_object();
    json_object_set_new(e, "token", token_text(tok, t->token, &bytes));
    json_object_set_new(e, "logprob", lp_real(t->logprob));
    json_object_set_new(e, "bytes", bytes);
    json_t *tops = json_array();
    for (int i = 0; i < t->n_top && i < top; i++) {
        json_t *b2, *o = json_object();
        json_object_set_new(o, "token", token_text(tok, t->top_ids[i], &b2));
        json_object_set_new(o, "logprob", lp_real(t->top_lp[i]));
        json_object_set_new(o, "bytes", b2);
        json_array_append_new(tops, o);
    }
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}

static json_t *cmpl_lp_new(void)
{
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* One entry of the legacy completions logprobs: the token, its logprob, the top alternatives and the token
 * itself ("up to logprobs + 1 elements", as OpenAI and vLLM list them), its offset in the text. */
static void cmpl_lp_put(json_t *lp, const lg_tokenizer *tok, int32_t token, float logprob, int n_top,
                        const int32_t *top_ids, const float *top_lp, int top, size_t offset)
{
    json_array_append_new(json_object_get(lp, "tokens"), token_text(tok, token, NULL));
    json_array_append_new(json_object_get(lp, "token_logprobs"), lp_real(logprob));
    json_t *o = json_object();
    for (int i = 0; i < n_top && i < top; i++) {
        json_t *k = token_text(tok, top_ids[i], NULL);
        json_object_set_new(o, json_string_value(k), lp_real(top_lp[i]));
        json_decref(k);
    }
    json_t *k = token_text(tok, token, NULL);
    if (!json_object_get(o, json_string_value(k)))
        json_object_set_new(o, json_string_value(k), lp_real(logprob));
    json_decref(k);
    json_array_append_new(json_object_get(lp, "top_logprobs"), o);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

static void cmpl_lp_add(json_t *lp, const lg_tokenizer *tok, const ev_token *t, int top, size_t offset)
{
    cmpl_lp_put(lp, tok, t->token, t->logprob, t->n_top, t->top_ids, t->top_lp, top, offset);
}

/* The first prompt token of an echo: no logprob (null), no alternatives (null). */
static void cmpl_lp_first(json_t *lp, const lg_tokenizer *tok, int32_t token)
{
    json_array_append_new(json_object_get(lp, "tokens"), token_text(tok, token, NULL));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_null());
    json_array_append_new(json_object_get(lp, "top_logprobs"), json_null());
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer(0));
}

/* vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], each position
 * with its prompt token and the top alternatives (their rank: their place in that list). */
static json_t *vllm_prompt_logprobs(const lg_tokenizer *tok, const choice_st *c, int top)
{
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (int k = 0; k < c->n_plp; k++) {
        const lg_prompt_logprob *p = &c->plp[k];
        json_t *o = json_object();
        char key[16];
        for (int i = 0; i < p->n_top && i < top; i++) {
            snprintf(key, sizeof key, "%d", p->top_ids[i]);
            json_object_set_new(o, key, json_pack("{s:o,s:i,s:o}", "logprob", lp_real(p->top_logprobs[i]), "rank",
                                                  i + 1, "decoded_token", token_text(tok, p->top_ids[i], NULL)));
        }
        snprintf(key, sizeof key, "%d", p->token);
        json_object_set_new(o, key, json_pack("{s:o,s:i,s:o}", "logprob", lp_real(p->logprob), "rank", p->rank,
                                              "decoded_token", token_text(tok, p->token, NULL)));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *chunk_base(gen *g)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:[]}", "id", g->id, "object",
                          g->kind == LG_OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)g->created, "model", g->model, "system_fingerprint", "choices");
    if (g->include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

/* One streamed chunk for choice i: text (may be empty), logprobs, finish reason; with
 * continuous_usage_stats the choice's usage so far (vLLM: its prompt, the tokens it generated). */
static void send_chunk(gen *g, int i, const char *text, size_t n, json_t *lp, const char *finish, bool role)
{
    json_t *o = chunk_base(g);
    if (g->continuous_usage) {
        int64_t pt = g->n_prompt_tokens[i / g->n_per_prompt], ct = g->c[i].n_tokens;
        json_object_set_new(o, "usage", json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)pt,
                                                  "completion_tokens", (json_int_t)ct, "total_tokens",
                                                  (json_int_t)(pt + ct)));
    }
    json_t *ch;
    if (g->kind == LG_OAI_CHAT) {
        json_t *delta = json_object();
        if (role) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
            json_object_set_new(delta, "refusal", json_null());
        } else if (!finish) {
            json_object_set_new(delta, "content", json_stringn_nocheck(text, n));
        }
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", i, "delta", delta, "logprobs",
                       lp ? json_pack("{s:o,s:n}", "content", lp, "refusal") : json_null(), "finish_reason",
                       finish ? json_string(finish) : json_null());
    } else {
        ch = json_pack("{s:s%,s:i,s:o,s:o}", "text", text ? text : "", text ? n : 0, "index", i, "logprobs",
                       lp ? lp : json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    }
    json_array_append_new(json_object_get(o, "choices"), ch);
    lg_sse_send_json(g->sse, o);
}

static json_t *usage_json(int64_t prompt, int64_t cached, int64_t completion)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I,s:I},s:{s:I,s:I,s:I,s:I}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)cached, "audio_tokens", (json_int_t)0,
                     "completion_tokens_details", "reasoning_tokens", (json_int_t)0, "audio_tokens", (json_int_t)0,
                     "accepted_prediction_tokens", (json_int_t)0, "rejected_prediction_tokens", (json_int_t)0);
}

/* Streamed content of choice i: a chat chunk, or a Responses text delta. */
static void out_content(gen *g, int i, const char *s, size_t n, json_t *lp)
{
    if (g->resp) {
        json_decref(lp);
        if (n)
            lg_resp_stream_text(g->resp, s, n);
    } else if (n || lp) {
        send_chunk(g, i, s, n, lp, NULL, false);
    } else {
        json_decref(lp);
    }
}

/* One chat chunk with a tool-call delta for choice i: {index, id, type, function: {name, arguments: ""}}
 * to open call k (id and name given), then {index, function: {arguments}} fragments. */
static void send_tool_delta(gen *g, int i, int k, const char *id, const char *name, const char *args, size_t n)
{
    json_t *o = chunk_base(g);
    json_t *tc = json_pack("{s:i}", "index", k);
    if (id) {
        json_object_set_new(tc, "id", json_string(id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(tc, "function", json_pack("{s:s,s:s}", "name", name, "arguments", ""));
    } else {
        json_object_set_new(tc, "function", json_pack("{s:s%}", "arguments", args, n));
    }
    json_array_append_new(json_object_get(o, "choices"),
                          json_pack("{s:i,s:{s:[o]},s:n,s:n}", "index", i, "delta", "tool_calls", tc, "logprobs",
                                    "finish_reason"));
    lg_sse_send_json(g->sse, o);
}

/* Streamed text of a request with tools: named (chat) streams the call's argument fragments as they come;
 * auto streams what its parser says is plain text and holds back from where a call may start; required
 * holds everything (its array becomes calls at the end). */
static void stream_tool_text(gen *g, int i, const char *s, size_t n, json_t *lp)
{
    choice_st *c = &g->c[i];
    if (g->tc_mode == LG_TC_NAMED && !g->resp) {
        json_decref(lp);
        if (!n)
            return;
        if (!c->call_started) {
            c->call_started = true;
            lg_tc_new_id_for(g->d->model->tool_parser, c->call_id, sizeof c->call_id);
            send_tool_delta(g, i, 0, c->call_id, g->tc_name, NULL, 0);
        }
        send_tool_delta(g, i, 0, NULL, NULL, s, n);
        c->sent = c->text.len;
        return;
    }
    if (g->tc_mode != LG_TC_AUTO || !g->tc_parser) {
        if (g->tc_mode == LG_TC_NONE || (g->tc_mode == LG_TC_AUTO && !g->tc_parser)) {
            out_content(g, i, s, n, lp);
            c->sent = c->text.len;
        } else {
            json_decref(lp);
        }
        return;
    }
    if (c->holding) {
        json_decref(lp);
        return;
    }
    size_t h = g->tc_parser->hold(c->text.p ? c->text.p : "", c->text.len);
    if (h > c->sent) {
        out_content(g, i, c->text.p + c->sent, h - c->sent, lp);
        c->sent = h;
    } else {
        json_decref(lp);
    }
    if (c->text.len - h >= 16) /* more than any partial marker: a call has started */
        c->holding = true;
}

/* Text released for choice i (after detok and stop strings). */
static void emit_text(gen *g, int i, const char *s, size_t n, json_t *lp)
{
    choice_st *c = &g->c[i];
    c->out_len += n;
    if (g->stream && g->keep_text) {
        lg_strbuf_put(&c->text, s, n);
        stream_tool_text(g, i, s, n, lp);
    } else if (g->stream) {
        if (n || lp)
            send_chunk(g, i, s, n, lp, NULL, false);
        else
            json_decref(lp);
    } else {
        lg_strbuf_put(&c->text, s, n);
    }
}

/* Completions echo, once per choice before its first token or its end: the prompt's text and, with
 * logprobs, its tokens' entries (the first without a logprob, each other scored by the engine). */
static void ensure_echo(gen *g, int i)
{
    choice_st *c = &g->c[i];
    if (!g->echo || c->echoed)
        return;
    c->echoed = true;
    const echo_prompt *ep = &g->ep[i / g->n_per_prompt];
    const lg_tokenizer *tok = g->d->model->tok;
    json_t *lp = NULL;
    if (g->logprobs) {
        lp = g->stream ? cmpl_lp_new() : json_incref(c->lp);
        cmpl_lp_first(lp, tok, ep->first);
        for (int k = 0; k < c->n_plp; k++) {
            const lg_prompt_logprob *p = &c->plp[k];
            size_t off = ep->off && p->index < ep->n_tokens ? ep->off[p->index] : ep->len;
            cmpl_lp_put(lp, tok, p->token, p->logprob, p->n_top, p->top_ids, p->top_logprobs, g->top_logprobs, off);
        }
        if (!g->stream) {
            json_decref(lp);
            lp = NULL;
        }
    }
    emit_text(g, i, ep->text ? ep->text : "", ep->len, lp);
}

/* The stop string the matcher just found for choice i (include_stop_str_in_output): the first of the
 * request's stop strings that the text not yet released starts with, as lg_stopper picks it. */
static const char *matched_stop(const gen *g, const choice_st *c)
{
    const char *rest = c->fed.p ? c->fed.p + c->released : "";
    size_t left = c->fed.len - c->released;
    for (int k = 0; k < g->n_stop; k++) {
        size_t l = strlen(g->stops[k]);
        if (l && l <= left && !memcmp(rest, g->stops[k], l))
            return g->stops[k];
    }
    return NULL;
}

/* Text of choice i through its stop strings (from min_tokens on, as vLLM checks them), then out; lp (the
 * token's logprobs, streamed) goes with the first text. A match cancels the engine request (STOP); with
 * include_stop_str_in_output the stop string is released too. */
static void release_text(gen *g, int i, const char *piece, size_t n, json_t *lp)
{
    choice_st *c = &g->c[i];
    if (!c->stp || c->n_tokens <= g->min_tokens) {
        emit_text(g, i, piece, n, lp);
        return;
    }
    if (g->include_stop)
        lg_strbuf_put(&c->fed, piece, n);
    bool matched = false;
    piece = lg_stopper_push(c->stp, piece, n, &n, &matched);
    const char *stop = matched && g->include_stop ? matched_stop(g, c) : NULL;
    c->released += n;
    emit_text(g, i, piece, n, lp);
    if (matched) {
        c->stop_matched = true;
        lg_dp_cancel(g->d->engine, g->j->ids[i], LG_FINISH_STOP);
        if (stop)
            emit_text(g, i, stop, strlen(stop), NULL);
    }
}

static void on_token_ev(gen *g, const ev_token *t)
{
    choice_st *c = &g->c[t->choice];
    if (c->stop_matched || c->finished)
        return;
    ensure_echo(g, t->choice);
    c->n_tokens++;
    /* a stop token (EOS, stop_token_ids) is not part of the text (vLLM, unless include_stop_str_in_output);
     * chat's logprobs.content lists only what the text holds (OpenAI); completions list every sampled
     * token, as vLLM does (lm-eval reads the last entry as the sampled one) */
    const bool hide = t->stop_token && !g->include_stop;
    json_t *lp = NULL;
    if (g->logprobs && !(hide && g->kind == LG_OAI_CHAT)) {
        if (g->kind == LG_OAI_CHAT) {
            json_t *e = chat_lp_entry(g->d->model->tok, t, g->top_logprobs);
            if (g->stream)
                lp = json_pack("[o]", e);
            else
                json_array_append_new(c->lp, e);
        } else {
            if (g->stream) {
                lp = cmpl_lp_new();
                cmpl_lp_add(lp, g->d->model->tok, t, g->top_logprobs, c->out_len);
            } else {
                cmpl_lp_add(c->lp, g->d->model->tok, t, g->top_logprobs, c->out_len);
            }
        }
    }
    size_t n = 0;
    const char *piece = c->dt && !hide ? lg_detok_push(c->dt, t->token, &n) : "";
    release_text(g, t->choice, piece, n, lp);
}

/* The end of choice i's text: the calls in it (tool_calls.h; each gets an id), and when streaming what
 * was held back: the calls as deltas (chat) or items (responses), or the rest as content. */
static void choice_output(gen *g, int i)
{
    choice_st *c = &g->c[i];
    const char *text = c->text.p ? c->text.p : "";
    lg_tc_result res = {0};
    int rc = 0;
    if (g->tc_mode == LG_TC_AUTO && g->tc_parser)
        rc = g->tc_parser->parse(text, c->text.len, &res);
    else if (g->tc_mode == LG_TC_NAMED || g->tc_mode == LG_TC_REQUIRED)
        rc = lg_tc_parse_forced(g->tc_mode, g->tc_name, text, c->text.len, &res);
    if (rc == 1) {
        size_t k;
        json_t *call;
        json_array_foreach(res.calls, k, call)
        {
            char id[40];
            if (k == 0 && c->call_started)
                snprintf(id, sizeof id, "%s", c->call_id);
            else
                lg_tc_new_id_for(g->d->model->tool_parser, id, sizeof id);
            json_object_set_new(call, "id", json_string(id));
        }
        c->calls = res.calls;
        c->content = res.content;
    }
    if (!g->stream || !g->keep_text)
        return;
    if (c->calls) {
        if (g->resp) {
            lg_resp_stream_calls(g->resp, c->calls);
            return;
        }
        size_t k;
        json_t *call;
        json_array_foreach(c->calls, k, call)
        {
            if (k == 0 && c->call_started)
                continue; /* streamed as it came */
            const char *a = json_string_value(json_object_get(call, "arguments"));
            send_tool_delta(g, i, (int)k, json_string_value(json_object_get(call, "id")),
                            json_string_value(json_object_get(call, "name")), NULL, 0);
            send_tool_delta(g, i, (int)k, NULL, NULL, a, strlen(a));
        }
    } else if (!c->call_started && c->text.len > c->sent) {
        out_content(g, i, text + c->sent, c->text.len - c->sent, NULL); /* no call after all: plain text */
        c->sent = c->text.len;
    }
}

static void on_finish_ev(gen *g, const ev_finish *f)
{
    choice_st *c = &g->c[f->choice];
    if (c->finished)
        return;
    if (f->reason != LG_FINISH_ERROR)
        ensure_echo(g, f->choice);
    if (!c->stop_matched) {
        size_t n = 0;
        const char *s = c->dt ? lg_detok_flush(c->dt, &n) : "";
        if (n)
            release_text(g, f->choice, s, n, NULL);
        if (c->stp && !c->stop_matched) {
            s = lg_stopper_flush(c->stp, &n);
            if (n)
                emit_text(g, f->choice, s, n, NULL);
        }
    }
    c->finished = true;
    c->reason = c->stop_matched ? LG_FINISH_STOP : f->reason;
    if (f->reason != LG_FINISH_ERROR)
        choice_output(g, f->choice);
    if (g->stream && f->reason != LG_FINISH_ERROR && !g->resp)
        send_chunk(g, f->choice, NULL, 0, NULL, c->calls && c->reason == LG_FINISH_STOP ? "tool_calls"
                                                                                        : finish_name(c->reason), false);
}

/* Prompt rows of a choice, kept until its echo or the answer. */
static void on_plp_ev(gen *g, const ev_plp *e)
{
    choice_st *c = &g->c[e->choice];
    if (c->finished || e->n <= 0)
        return;
    if (c->n_plp + e->n > c->cap_plp) {
        int cap = c->cap_plp ? c->cap_plp : 64;
        while (cap < c->n_plp + e->n) cap *= 2;
        lg_prompt_logprob *np = realloc(c->plp, (size_t)cap * sizeof *np);
        if (!np)
            return; /* out of memory: the answer lacks these rows */
        c->plp = np;
        c->cap_plp = cap;
    }
    memcpy(c->plp + c->n_plp, e->rows, (size_t)e->n * sizeof *e->rows);
    c->n_plp += e->n;
}

static void respond_error_event(gen *g, lg_request *r, int status, const char *msg)
{
    if (g->stream && g->resp) {
        lg_resp_stream_error(g->resp, status == 503 ? "service_unavailable" : "server_error", msg);
    } else if (g->stream) {
        json_t *e = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", msg, "type",
                              status == 503 ? "service_unavailable" : "server_error", "param", "code");
        lg_sse_send_json(g->sse, e);
        lg_sse_end(g->sse);
    } else {
        lg_respond_error(r, status, NULL, NULL, "%s", msg);
    }
}

static void on_billed_ev(gen *g, lg_request *r, const ev_billed *b)
{
    if (b->http_status >= 400) {
        respond_error_event(g, r, b->http_status, b->error);
        return;
    }
    if (g->resp) { /* one choice (n is 1) */
        choice_st *c = &g->c[0];
        json_t *o = lg_resp_object(g->resp, g->model, c->calls ? c->content : c->text.p,
                                   c->calls ? (c->content ? strlen(c->content) : 0) : c->text.len, c->calls,
                                   c->reason == LG_FINISH_LENGTH, b->prompt_tokens, b->cached_tokens,
                                   b->completion_tokens);
        lg_resp *x = g->resp;
        g->resp = NULL;
        lg_resp_answer(r, x, o);
        return;
    }
    json_t *usage = usage_json(b->prompt_tokens, b->cached_tokens, b->completion_tokens);
    if (g->stream) {
        if (g->include_usage) {
            json_t *o = chunk_base(g);
            json_object_set_new(o, "usage", usage);
            usage = NULL;
            lg_sse_send_json(g->sse, o);
        }
        json_decref(usage);
        lg_sse_done(g->sse);
        return;
    }
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        choice_st *c = &g->c[i];
        json_t *lp = g->logprobs ? (g->kind == LG_OAI_CHAT ? json_pack("{s:O,s:n}", "content", c->lp, "refusal")
                                                          : json_incref(c->lp))
                                 : json_null();
        json_t *ch;
        if (g->kind == LG_OAI_CHAT && c->calls) {
            json_t *tcs = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(c->calls, k, call)
                json_array_append_new(tcs, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(call, "id"),
                                                     "type", "function", "function", "name",
                                                     json_object_get(call, "name"), "arguments",
                                                     json_object_get(call, "arguments")));
            ch = json_pack("{s:i,s:{s:s,s:o,s:n,s:[],s:o},s:o,s:s}", "index", i, "message", "role", "assistant",
                           "content", c->content ? json_string(c->content) : json_null(), "refusal", "annotations",
                           "tool_calls", tcs, "logprobs", lp, "finish_reason",
                           c->reason == LG_FINISH_STOP ? "tool_calls" : finish_name(c->reason));
        } else if (g->kind == LG_OAI_CHAT) {
            ch = json_pack("{s:i,s:{s:s,s:s%,s:n,s:[]},s:o,s:s}", "index", i, "message", "role", "assistant",
                           "content", c->text.p ? c->text.p : "", c->text.len, "refusal", "annotations", "logprobs", lp,
                           "finish_reason", finish_name(c->reason));
        } else {
            ch = json_pack("{s:s%,s:i,s:o,s:s}", "text", c->text.p ? c->text.p : "", c->text.len, "index", i, "logprobs", lp,
                           "finish_reason", finish_name(c->reason));
            if (g->prompt_logprobs >= 0) /* vLLM: per choice */
                json_object_set_new(ch, "prompt_logprobs",
                                    vllm_prompt_logprobs(g->d->model->tok, c, g->prompt_logprobs));
        }
        json_array_append_new(choices, ch);
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:n}", "id", g->id, "object",
                          g->kind == LG_OAI_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)g->created, "model", g->model, "choices", choices, "usage", usage,
                          "system_fingerprint");
    if (g->kind == LG_OAI_CHAT)
        json_object_set_new(o, "service_tier", json_string("default"));
    if (g->kind == LG_OAI_CHAT && g->prompt_logprobs >= 0 && g->n > 0) /* vLLM: one list, the prompt's */
        json_object_set_new(o, "prompt_logprobs", vllm_prompt_logprobs(g->d->model->tok, &g->c[0], g->prompt_logprobs));
    lg_respond_json(r, 200, o);
}

static void on_event(lg_request *r, void *ctx, int kind, const void *data, size_t len)
{
    gen *g = ctx;
    if (g->cleaned)
        return;
    switch (kind) {
    case EV_TOKEN: on_token_ev(g, data); break;
    case EV_FINISH: on_finish_ev(g, data); break;
    case EV_PLP: on_plp_ev(g, data); break;
    case EV_BILLED: {
        const ev_billed *b = data;
        lg_request_log_set(r, "prompt_tokens", json_integer(b->prompt_tokens));
        lg_request_log_set(r, "cached_tokens", json_integer(b->cached_tokens));
        lg_request_log_set(r, "completion_tokens", json_integer(b->completion_tokens));
        on_billed_ev(g, r, b);
        gen_cleanup(g);
        break;
    }
    }
}

static void on_cancel(lg_request *r, void *ctx)
{
    gen *g = ctx;
    if (g->cleaned)
        return;
    job *j = g->j;
    atomic_store(&j->client_gone, true);
    for (int i = 0; i < j->submitted; i++)
        lg_dp_cancel(g->d->engine, j->ids[i], LG_FINISH_CANCELLED);
    gen_cleanup(g);
}

static const lg_stream_handler HANDLER = {on_event, on_cancel};

/* ---- engine side ------------------------------------------------------------ */

static void e_token(void *user, int64_t id, const lg_token_out *t)
{
    prod *p = user;
    if (atomic_load(&p->j->client_gone))
        return;
    ev_token ev = {.choice = p->choice, .token = t->token, .stop_token = t->stop_token, .logprob = t->logprob,
                   .n_top = t->n_top};
    memcpy(ev.top_ids, t->top_ids, sizeof ev.top_ids);
    memcpy(ev.top_lp, t->top_logprobs, sizeof ev.top_lp);
    lg_stream_post(p->j->s, EV_TOKEN, &ev, sizeof ev);
}

/* Scored prompt tokens to the loop (one message per call: at most the model's prompt-logit rows a step). */
static void e_plp(void *user, int64_t id, const lg_prompt_logprob *rows, int n)
{
    (void)id;
    prod *p = user;
    if (atomic_load(&p->j->client_gone) || n <= 0)
        return;
    size_t len = sizeof(ev_plp) + (size_t)n * sizeof *rows;
    ev_plp *e = malloc(len);
    if (!e)
        return;
    e->choice = p->choice;
    e->n = n;
    memcpy(e->rows, rows, (size_t)n * sizeof *rows);
    lg_stream_post(p->j->s, EV_PLP, e, len);
    free(e);
}

static void billed(void *ctx, int status)
{
    job *j = ctx;
    ev_billed b = {.ledger_status = status,
                   .prompt_tokens = j->rec.prompt_tokens,
                   .cached_tokens = j->rec.cached_tokens,
                   .completion_tokens = j->rec.completion_tokens,
                   .http_status = j->rec.http_status == 499 ? 200 : j->rec.http_status};
    snprintf(b.error, sizeof b.error, "%s", j->error);
    if (status != LG_LEDGER_COMMITTED && b.http_status < 400) {
        b.http_status = 503;
        snprintf(b.error, sizeof b.error, "The usage ledger could not record this request; try again later.");
    }
    lg_stream_post(j->s, EV_BILLED, &b, sizeof b);
    lg_stream_close(j->s);
    job_release(j);
}

static int64_t mono_to_ms(const job *j, double t)
{
    return t > 0 ? j->rec.received_at + (int64_t)((t - j->t_submit) * 1000.0 + 0.5) : 0;
}

/* The error_type of a request whose client left: how far its prompts got. */
static const char *disconnect_type(int64_t prefilled, int64_t prompt_len)
{
    if (prefilled == 0)
        return "cancelled_before_prefill"; /* never left the engine's queue: nothing billed for the prompt */
    if (prefilled < prompt_len)
        return "cancelled_during_prefill"; /* billed for the prompt tokens prefilled */
    return "client_disconnected";          /* the whole prompt, and what was generated */
}

/* The usage record of the finished request: tokens (each prompt once),
 * status and reason, times, cost at the tenant's prices. */
static void fill_record(job *j)
{
    lg_usage_record *rec = &j->rec;
    rec->prompt_tokens = rec->cached_tokens = 0;
    for (int i = 0; i < j->n_prompts; i++)
        if (j->best_choice[i] >= 0) {
            rec->prompt_tokens += j->best_prompt[i];
            rec->cached_tokens += j->best_cached[i];
        }
    rec->completion_tokens = j->completion_tokens;
    bool gone = atomic_load(&j->client_gone);
    rec->http_status = j->any_error ? 500 : gone ? 499 : 200;
    snprintf(rec->finish_reason, sizeof rec->finish_reason, "%s",
             gone ? "cancelled" : j->have_reason ? finish_name(j->first_reason) : "");
    snprintf(rec->error_type, sizeof rec->error_type, "%s",
             j->any_error ? "server_error" : gone ? disconnect_type(rec->prompt_tokens, j->prompt_len) : "");
    rec->first_token_at = mono_to_ms(j, j->t_first);
    rec->finished_at = lg_unix_ms();
    lg_err err = {{0}};
    if (lg_money_cost(&j->pricing, rec->prompt_tokens, rec->cached_tokens, rec->completion_tokens, &rec->cost_pico,
                      &err) != 0)
        rec->cost_pico = 0;
}

/* The record's figures to the metrics: latencies and tokens. */
static void observe(const lg_openai_deps *d, const job *j)
{
    const lg_usage_record *rec = &j->rec;
    double e2e = (rec->finished_at - rec->received_at) / 1000.0;
    double ttft = rec->first_token_at ? (rec->first_token_at - rec->received_at) / 1000.0 : -1;
    int64_t per_choice = rec->completion_tokens / j->n_choices; /* n_choices >= 1 */
    double tpot = rec->completion_tokens > 1 && ttft >= 0 ? (e2e - ttft) / (double)(per_choice > 1 ? per_choice - 1 : 1)
                                                          : -1;
    lg_metrics_generation(d->metrics, j->tenant->name, ttft, tpot, e2e, rec->prompt_tokens, rec->cached_tokens,
                          rec->completion_tokens);
}

/* The last choice finished: the record, the limits settle the estimate,
 * the metrics, then the ledger (its commit answers: billed). Engine thread. */
static void finalize(job *j)
{
    const lg_openai_deps *d = j->d;
    lg_usage_record *rec = &j->rec;
    fill_record(j);
    lg_limits_finish(d->limits, j->tenant->id, j->est_tokens, rec->prompt_tokens + rec->completion_tokens);
    observe(d, j);
    lg_err err = {{0}};
    if (lg_ledger_append(d->ledger, rec, billed, j, &err) != 0) {
        fprintf(stderr, "loragate serve: ledger: %s (request %s)\n", err.msg, rec->request_id);
        billed(j, LG_LEDGER_REJECTED);
    }
}

static void e_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    prod *p = user;
    job *j = p->j;
    j->completion_tokens += u->completion_tokens;
    int pi = p->choice / j->n_per_prompt;
    int b = j->best_choice[pi];
    if (b < 0 || u->prompt_tokens > j->best_prompt[pi] || (u->prompt_tokens == j->best_prompt[pi] && p->choice < b)) {
        j->best_choice[pi] = p->choice;
        j->best_prompt[pi] = u->prompt_tokens;
        j->best_cached[pi] = u->cached_tokens;
    }
    if (u->t_first_token > 0 && (j->t_first == 0 || u->t_first_token < j->t_first))
        j->t_first = u->t_first_token;
    if (!j->have_reason) {
        j->have_reason = true;
        j->first_reason = reason;
    }
    if (reason == LG_FINISH_ERROR && !j->any_error) {
        j->any_error = true;
        snprintf(j->error, sizeof j->error, "The engine failed on this request: %s", error ? error : "unknown error");
    }
    ev_finish f = {.choice = p->choice, .reason = reason};
    if (error)
        snprintf(f.error, sizeof f.error, "%s", error);
    if (!atomic_load(&j->client_gone))
        lg_stream_post(j->s, EV_FINISH, &f, sizeof f);
    if (atomic_fetch_sub(&j->remaining, 1) == 1)
        finalize(j);
}

/* ---- the routes ---------------------------------------------------------------- */

static uint64_t seed_counter;

/* A request that never reached the engine but was refused after the parse
 * (adapter gone, engine refused): one ledger record, zero tokens. */
static void record_refusal(const lg_openai_deps *d, job *j, int status, const char *type)
{
    j->rec.http_status = status;
    snprintf(j->rec.error_type, sizeof j->rec.error_type, "%s", type);
    j->rec.finished_at = lg_unix_ms();
    lg_err err = {{0}};
    if (lg_ledger_append(d->ledger, &j->rec, NULL, NULL, &err) != 0)
        fprintf(stderr, "loragate serve: ledger: %s (request %s)\n", err.msg, j->rec.request_id);
}

/* The limits' verdict for this request's estimate: the x-ratelimit-*
 * headers always; a refusal is counted and answered 429. 0: admitted. */
static int admit_limits(const lg_openai_deps *d, lg_request *r, const lg_tenant_obj *t, const lg_tenant_limits *lim,
                        int64_t est)
{
    lg_limits_verdict v;
    int rc = lg_limits_admit(d->limits, t->id, lim, est, &v);
    for (int i = 0; i < v.n_headers; i++)
        lg_request_add_header(r, v.headers[i].name, v.headers[i].value);
    if (rc == 0)
        return 0;
    lg_metrics_limited(d->metrics, t->name, v.reason);
    char ms[32];
    snprintf(ms, sizeof ms, "%" PRId64, v.retry_after_ms);
    lg_request_add_header(r, "retry-after-ms", ms);
    lg_respond_error_ex(r, 429, v.type, v.code, NULL, v.retry_after_s, v.message);
    return -1;
}

/* Whether the request may go to the engine now: the ledger can write, the
 * engine's queue has room, and the tenant's limits admit est tokens (then
 * lg_limits_finish is owed exactly once). Also reads the tenant's prices.
 * Answers r and returns -1 when not. */
static int admit(const lg_openai_deps *d, lg_request *r, const lg_tenant_obj *t, int64_t est, lg_pricing *pricing)
{
    char reason[200];
    if (!lg_ledger_healthy(d->ledger, reason, sizeof reason))
        return lg_respond_unavailable(r, 5, "The usage ledger cannot write right now; try again later."), -1;
    lg_engine_stats es;
    lg_dp_get_stats(d->engine, &es); /* summed over the engines */
    if (es.queued >= d->max_queue)
        return lg_respond_unavailable(r, 1, "The server is overloaded; try again shortly."), -1;
    lg_tenant row;
    if (!lg_tenants_get(d->tenants, t, &row, pricing))
        return 0; /* deleted meanwhile: no limits to hold; auth refuses its keys from now on */
    return admit_limits(d, r, t, &row.limits, est);
}

/* The job's fixed part: who, what, and the ledger record's identity. */
static void job_init(job *j, const lg_openai_deps *d, lg_request *r, const lg_principal *pr, lg_oai_kind kind,
                     const lg_oai_request *q, int64_t est, const lg_pricing *pricing, int64_t received)
{
    atomic_init(&j->refs, 2);
    atomic_init(&j->client_gone, false);
    j->d = d;
    j->tenant = pr->tenant;
    j->n_per_prompt = q->n;
    j->n_choices = q->n_prompts * q->n;
    j->n_prompts = q->n_prompts;
    for (int i = 0; i < q->n_prompts; i++) {
        j->best_choice[i] = -1;
        j->prompt_len += q->n_prompt_tokens[i];
    }
    j->est_tokens = est;
    j->pricing = *pricing;
    lg_usage_record *rec = &j->rec;
    snprintf(rec->request_id, sizeof rec->request_id, "%s", lg_request_id(r));
    rec->tenant_id = pr->tenant->id;
    snprintf(rec->key_id, sizeof rec->key_id, "%s", pr->key_id);
    snprintf(rec->route, sizeof rec->route, "%s", kind == LG_OAI_CHAT ? "chat.completions" : "completions");
    snprintf(rec->model, sizeof rec->model, "%s", q->model);
    if (q->is_adapter) {
        snprintf(rec->adapter_name, sizeof rec->adapter_name, "%s", q->adapter.name);
        snprintf(rec->adapter_digest, sizeof rec->adapter_digest, "%s", q->adapter.version.digest);
    }
    rec->received_at = received;
}

/* Per prompt, what its echo shows: the prompt as given (a text prompt) or its tokens decoded, and with
 * logprobs where each token starts (the byte length of the tokens before it, decoded). */
static void echo_init(gen *g, const lg_tokenizer *tok, const lg_oai_request *q)
{
    g->ep = calloc((size_t)q->n_prompts, sizeof *g->ep);
    if (!g->ep) {
        g->echo = false;
        return;
    }
    for (int i = 0; i < q->n_prompts; i++) {
        echo_prompt *ep = &g->ep[i];
        const int32_t *ids = q->prompts[i];
        const int n = q->n_prompt_tokens[i];
        ep->n_tokens = n;
        ep->first = n > 0 ? ids[0] : 0;
        if (q->prompt_text[i]) {
            ep->text = strdup(q->prompt_text[i]);
        } else if (tok) {
            size_t len = 0;
            if (lg_tokenizer_decode_n(tok, ids, n, q->skip_special_tokens, &ep->text, &len, NULL) != 0)
                ep->text = NULL;
        }
        ep->len = ep->text ? strlen(ep->text) : 0;
        if (!q->logprobs || !tok || !(ep->off = malloc((size_t)(n > 0 ? n : 1) * sizeof *ep->off)))
            continue;
        lg_detok *dt = lg_detok_new(tok, q->skip_special_tokens);
        size_t at = 0;
        for (int k = 0; k < n; k++) {
            ep->off[k] = at < ep->len ? at : ep->len;
            size_t piece = 0;
            if (dt)
                (void)lg_detok_push(dt, ids[k], &piece);
            at += piece;
        }
        lg_detok_free(dt);
    }
}

/* The loop side: the answer's shape and per choice its detokenizer, stop
 * strings and logprobs. */
static void gen_init(gen *g, const lg_openai_deps *d, job *j, lg_request *r, lg_oai_kind kind,
                     const lg_oai_request *q, choice_st *cs)
{
    memset(g, 0, sizeof *g);
    g->d = d;
    g->j = j;
    g->kind = kind;
    g->stream = q->stream;
    g->include_usage = q->include_usage;
    g->continuous_usage = q->continuous_usage;
    g->logprobs = q->logprobs;
    g->top_logprobs = q->top_logprobs;
    g->echo = q->echo;
    g->include_stop = q->include_stop_str_in_output;
    g->min_tokens = q->min_tokens;
    g->prompt_logprobs = q->prompt_logprobs;
    g->n_per_prompt = q->n;
    g->n_prompts = q->n_prompts;
    for (int i = 0; i < q->n_prompts; i++)
        g->n_prompt_tokens[i] = q->n_prompt_tokens[i];
    for (int i = 0; q->include_stop_str_in_output && i < q->n_stop; i++)
        if ((g->stops[g->n_stop] = strdup(q->stop[i])))
            g->n_stop++;
    snprintf(g->model, sizeof g->model, "%s", q->model);
    snprintf(g->id, sizeof g->id, "%s-%s", kind == LG_OAI_CHAT ? "chatcmpl" : "cmpl", lg_request_id(r) + 4);
    g->created = lg_unix_now();
    g->c = cs;
    g->n = j->n_choices;
    g->tc_mode = q->tc.mode;
    g->tc_parser = q->tc_parser;
    snprintf(g->tc_name, sizeof g->tc_name, "%s", q->tc.name);
    const lg_tokenizer *tok = d->model->tok;
    if (q->echo)
        echo_init(g, tok, q);
    for (int i = 0; i < g->n; i++) {
        cs[i].dt = tok ? lg_detok_new(tok, q->skip_special_tokens) : NULL;
        cs[i].stp = q->n_stop ? lg_stopper_new((const char *const *)q->stop, q->n_stop) : NULL;
        if (q->logprobs)
            cs[i].lp = kind == LG_OAI_CHAT ? json_array() : cmpl_lp_new();
    }
}

/* Submits every choice to the engine (j->submitted counts them); returns
 * the index of the first one the engine refused, or -1. */
static int submit_choices(const lg_openai_deps *d, job *j, const lg_oai_request *q, int64_t received, lg_err *err)
{
    uint64_t base_seed = q->has_seed ? (uint64_t)q->seed
                                     : ((uint64_t)received * 0x9E3779B97F4A7C15ull) ^
                                           __atomic_add_fetch(&seed_counter, 0x632BE59BD9B4E019ull, __ATOMIC_RELAXED);
    j->t_submit = lg_now();
    char tenant_key[LG_TENANT_KEY_MAX];
    lg_tenant_key(j->tenant->id, tenant_key);
    atomic_init(&j->remaining, j->n_choices + 1); /* + 1: the submit loop's guard */
    /* every choice scores its prompt when the answer shows it (echo with logprobs, prompt_logprobs) */
    const bool plp = (q->echo && q->logprobs) || q->prompt_logprobs >= 0;
    int plp_top = q->echo && q->logprobs ? q->top_logprobs : 0;
    if (q->prompt_logprobs > plp_top)
        plp_top = q->prompt_logprobs;
    for (int i = 0; i < j->n_choices; i++) {
        j->p[i] = (prod){j, i};
        lg_request_params p = {
            .prompt = q->prompts[i / q->n],
            .n_prompt = q->n_prompt_tokens[i / q->n],
            .max_tokens = q->max_tokens,
            .presence_penalty = q->presence_penalty,
            .frequency_penalty = q->frequency_penalty,
            .repetition_penalty = q->repetition_penalty == 1.0f ? 0.0f : q->repetition_penalty,
            .n_stop_ids = q->n_stop_token_ids,
            .ignore_eos = q->ignore_eos,
            .min_tokens = q->min_tokens,
            .logprobs = q->logprobs,
            .top_logprobs = q->top_logprobs,
            .prompt_logprobs = plp,
            .prompt_top_logprobs = plp_top,
            .prompt_only = q->max_tokens == 0,
            .constraint = q->constraint, /* the engine takes its own reference */
            .adapter_id = q->is_adapter ? q->adapter.engine_id : 0,
            .tenant = tenant_key, /* the id, never the name (names are reused) */
            .cache_salt = q->cache_salt[0] ? q->cache_salt : NULL,
            .cb = {e_token, e_finish, e_plp},
            .user = &j->p[i],
        };
        memcpy(p.stop_ids, q->stop_token_ids, sizeof p.stop_ids);
        lg_sampling_params_default(&p.sampling);
        p.sampling.temperature = q->temperature;
        p.sampling.top_p = q->top_p;
        p.sampling.top_k = q->top_k;
        p.sampling.min_p = q->min_p;
        p.sampling.seed = base_seed + (uint64_t)i;
        if (lg_dp_submit(d->engine, &p, &j->ids[i], err) != 0)
            return i;
        j->submitted = i + 1;
    }
    return -1;
}

static int run(lg_request *r, const lg_openai_deps *d, lg_oai_kind kind, lg_oai_request *qp, int64_t received,
               lg_resp *x);

/* A request whose output follows a grammar: its grammar is compiled (or
 * found in the compile cache) on a worker thread, then it runs. */
typedef struct compile_st {
    const lg_openai_deps *d;
    lg_oai_kind kind;
    int64_t received;
    lg_oai_request q;
    lg_resp *x; /* /v1/responses: the response (taken by run), else NULL */
    int rc;
    char param[160], msg[768];
} compile_st;

static void compile_work(void *arg)
{
    compile_st *c = arg;
    c->rc = lg_oai_request_compile(c->d->model, &c->q, c->param, sizeof c->param, c->msg, sizeof c->msg);
}

static void compile_done(lg_request *r, void *arg)
{
    compile_st *c = arg;
    if (lg_request_h2o(r)) {
        if (c->rc == -1)
            lg_respond_error(r, 400, NULL, c->param, "%s", c->msg);
        else if (c->rc != 0)
            lg_respond_error(r, 500, "server_error", NULL, "%s", c->msg);
        else {
            (void)run(r, c->d, c->kind, &c->q, c->received, c->x); /* run takes x */
            c->x = NULL;
        }
    }
    lg_resp_free(c->x);
    lg_oai_request_dispose(&c->q);
    free(c);
}

/* One HTTP request: parse, admit, then prompts x n engine requests whose
 * events come back to the loop through the stream (HANDLER). */
static int generate_body(lg_request *r, const lg_openai_deps *d, lg_oai_kind kind, json_t *body, lg_resp *x)
{
    const lg_principal *pr = lg_principal_of(r);
    const lg_tenant_obj *t = pr->tenant;
    int64_t received = lg_unix_ms();
    compile_st *c = calloc(1, sizeof *c);
    if (!c) {
        lg_resp_free(x);
        return -1;
    }
    int rc = lg_oai_request_parse(d->model, d->adapters, r, t, kind, body, &c->q);
    if (rc != 0 || !c->q.so.present) { /* answered (a 400), or nothing to compile: run now */
        int ran = rc == 0 ? run(r, d, kind, &c->q, received, x) : (lg_resp_free(x), 0);
        lg_oai_request_dispose(&c->q);
        free(c);
        return ran;
    }
    c->d = d;
    c->kind = kind;
    c->received = received;
    c->x = x;
    if (lg_request_defer(r, compile_work, compile_done, c) != 0) {
        lg_resp_free(c->x);
        lg_oai_request_dispose(&c->q);
        free(c);
        lg_respond_error(r, 503, "server_error", NULL, "The server is shutting down.");
    }
    return 0;
}

static int generate(lg_request *r, const lg_openai_deps *d, lg_oai_kind kind)
{
    json_t *body = lg_request_json(r);
    if (!body)
        return 0;
    int rc = generate_body(r, d, kind, body, NULL);
    json_decref(body);
    return rc;
}

int lg_oai_generate_responses(lg_request *r, const lg_openai_deps *d, json_t *chat_body, lg_resp *x)
{
    return generate_body(r, d, LG_OAI_CHAT, chat_body, x);
}

/* Admits q (limits), then submits its choices; q stays the caller's. */
static int run(lg_request *r, const lg_openai_deps *d, lg_oai_kind kind, lg_oai_request *qp, int64_t received,
               lg_resp *x)
{
    const lg_principal *pr = lg_principal_of(r);
    const lg_tenant_obj *t = pr->tenant;
    lg_request_log_set(r, "model", json_string(qp->model));
    int64_t est = 0;
    for (int i = 0; i < qp->n_prompts; i++)
        est += qp->n_prompt_tokens[i] + (int64_t)qp->n * qp->max_tokens;
    lg_pricing pricing;
    if (admit(d, r, t, est, &pricing) != 0) {
        lg_resp_free(x);
        return 0;
    }

    job *j = calloc(1, sizeof *j);
    gen *g = lg_request_alloc(r, sizeof *g);
    choice_st *cs = calloc((size_t)(qp->n_prompts * qp->n), sizeof *cs);
    if (!j || !g || !cs) {
        free(j);
        free(cs);
        lg_resp_free(x);
        lg_limits_finish(d->limits, t->id, est, 0);
        return -1;
    }
    job_init(j, d, r, pr, kind, qp, est, &pricing, received);
    if (x)
        snprintf(j->rec.route, sizeof j->rec.route, "responses");
    gen_init(g, d, j, r, kind, qp, cs);
    g->resp = x; /* freed with g from here on */
    g->keep_text = x || qp->tc.mode != LG_TC_NONE;
    j->s = lg_stream_open(r, &HANDLER, g);
    if (!j->s) {
        lg_limits_finish(d->limits, t->id, est, 0);
        job_release(j);
        gen_cleanup(g);
        return 0;
    }
    if (g->stream) {
        g->sse = lg_sse_start(r);
        if (g->resp)
            lg_resp_stream_begin(g->resp, g->sse, g->model);
        else if (g->kind == LG_OAI_CHAT)
            for (int i = 0; i < g->n; i++)
                send_chunk(g, i, NULL, 0, NULL, NULL, true);
    }

    lg_err err = {{0}};
    int failed_at = submit_choices(d, j, qp, received, &err);
    if (failed_at == 0) {
        /* nothing reached the engine: answer here; the producers' reference
         * goes with the stream */
        record_refusal(d, j, 404, "model_not_found");
        lg_limits_finish(d->limits, t->id, est, 0);
        lg_stream_close(j->s);
        job_release(j);
        if (g->stream)
            respond_error_event(g, r, 404, err.msg);
        else
            lg_respond_error(r, 404, "model_not_found", "model", "%s", err.msg);
        gen_cleanup(g);
        return 0;
    }
    if (failed_at > 0) {
        /* some choices run: cancel them; finalize answers 500 */
        snprintf(j->error, sizeof j->error, "The engine refused part of this request: %s", err.msg);
        j->any_error = true;
        for (int i = 0; i < failed_at; i++)
            lg_dp_cancel(d->engine, j->ids[i], LG_FINISH_CANCELLED);
    }
    /* drop the guard and the choices never submitted; the last one out finalizes */
    int drop = 1 + (j->n_choices - j->submitted);
    if (atomic_fetch_sub(&j->remaining, drop) == drop)
        finalize(j);
    return 0;
}

static int chat(lg_request *r, void *d) { return generate(r, d, LG_OAI_CHAT); }
static int completions(lg_request *r, void *d) { return generate(r, d, LG_OAI_COMPLETIONS); }

static json_t *model_obj(const lg_served_model *m, const lg_tenant_adapter *a, const char *owner)
{
    if (!a)
        return json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "id", m->id, "object", "model", "created",
                         (json_int_t)m->created_at, "owned_by", "loragate", "quantization", m->quantization,
                         "quantization_description", m->quantization_desc);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "id", a->name, "object", "model", "created",
                     (json_int_t)(a->created_at / 1000), "owned_by", owner, "parent", m->id, "root", m->id);
}

static int models(lg_request *r, void *user)
{
    const lg_openai_deps *d = user;
    const lg_principal *pr = lg_principal_of(r);
    json_t *data = json_array();
    json_array_append_new(data, model_obj(d->model, NULL, NULL));
    lg_tenant_adapter *v = NULL;
    int n = 0;
    if (lg_tenant_adapters_list(d->adapters, pr->tenant->id, &v, &n) == 0)
        for (int i = 0; i < n; i++)
            json_array_append_new(data, model_obj(d->model, &v[i], pr->tenant->name));
    free(v);
    return lg_respond_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static int model_get(lg_request *r, void *user)
{
    const lg_openai_deps *d = user;
    const lg_principal *pr = lg_principal_of(r);
    const char *id = lg_request_param(r, "id");
    if (!strcmp(id, d->model->id))
        return lg_respond_json(r, 200, model_obj(d->model, NULL, NULL));
    lg_tenant_adapter a;
    if (!lg_tenant_adapters_find(d->adapters, pr->tenant->id, id, &a))
        return lg_respond_model_not_found(r, id), 0;
    return lg_respond_json(r, 200, model_obj(d->model, &a, pr->tenant->name));
}

int lg_routes_openai(lg_router *rt, const lg_openai_deps *deps, lg_err *err)
{
    lg_openai_deps *d = malloc(sizeof *d); /* the routes' user, freed with the router */
    if (!d)
        return lg_fail(err, "out of memory");
    *d = *deps;
    lg_route routes[] = {
        {.method = "GET", .pattern = "/v1/models", .fn = models, .user = d, .auth = lg_auth_tenant_inference,
         .auth_user = d->auth, .tenant_scoped = true, .name = "models", .free_user = free},
        {.method = "GET", .pattern = "/v1/models/{id*}", .fn = model_get, .user = d,
         .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true, .name = "model"},
        {.method = "POST", .pattern = "/v1/chat/completions", .fn = chat, .user = d,
         .content_type = "application/json", .body_required = true, .auth = lg_auth_tenant_inference,
         .auth_user = d->auth, .tenant_scoped = true, .name = "chat.completions"},
        {.method = "POST", .pattern = "/v1/completions", .fn = completions, .user = d,
         .content_type = "application/json", .body_required = true, .auth = lg_auth_tenant_inference,
         .auth_user = d->auth, .tenant_scoped = true, .name = "completions"},
    };
    if (lg_router_add(rt, &routes[0], err) != 0) {
        free(d);
        return -1;
    }
    if (lg_router_add_all(rt, routes + 1, (int)(sizeof routes / sizeof routes[0]) - 1, err) != 0)
        return -1;
    return lg_routes_responses(rt, d, err); /* the same handles, the first route's copy */
}
