/*
 * openai_request.h — an OpenAI chat/completions request body, checked and
 * turned into what the engine runs: prompts (token ids), sampling, stop
 * strings, logprobs, n. Every parameter OpenAI defines is either honoured
 * or refused with a 400 naming it; unknown parameters are refused as
 * OpenAI refuses them ("Unrecognized request argument supplied: x").
 *
 * Chat requests may carry tools (tool_calls.h): the model's own chat
 * template renders them with the messages (tool results as role "tool"
 * messages with tool_call_id, earlier calls as an assistant's tool_calls),
 * documents and chat_template_kwargs (vLLM's extra template variables).
 *
 * vLLM's request extensions that clients written for vLLM send (lm-eval,
 * guidellm, vLLM's benchmark client) are honoured with vLLM's meaning on
 * both routes: top_k, min_p, repetition_penalty, ignore_eos, min_tokens,
 * stop_token_ids, skip_special_tokens, include_stop_str_in_output,
 * prompt_logprobs, stream_options.continuous_usage_stats; and on
 * /v1/completions OpenAI's echo (with max_tokens 0 allowed).
 */
#ifndef LG_GW_OPENAI_REQUEST_H
#define LG_GW_OPENAI_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/runtime/engine.h"
#include "gateway/http/request.h"
#include "gateway/served_model.h"
#include "gateway/structured_output.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenants.h"
#include "gateway/tool_calls.h"

#define LG_OAI_MAX_N 128
#define LG_OAI_MAX_PROMPTS 64
#define LG_OAI_MAX_STOP 4
/* Prompt tokens scored per request (echo with logprobs, prompt_logprobs),
 * summed over its choices: bounds what the answer holds per prompt token
 * (up to 21 logprobs each). */
#define LG_OAI_MAX_SCORED_PROMPT_TOKENS 65536
/* The most alternatives prompt_logprobs may ask for (vLLM's max_logprobs). */
#define LG_OAI_MAX_PROMPT_LOGPROBS 20

typedef enum lg_oai_kind { LG_OAI_CHAT = 0, LG_OAI_COMPLETIONS = 1 } lg_oai_kind;

typedef struct lg_oai_request {
    lg_oai_kind kind;
    char model[256];
    bool is_adapter;
    lg_tenant_adapter adapter;    /* when is_adapter: a copy taken at parse time */
    lg_adapter_chat *chat;        /* that adapter's own chat template (a reference), NULL: the model's */
    int n_prompts;                /* completions: a list of prompts; chat: 1 */
    int32_t *prompts[LG_OAI_MAX_PROMPTS];
    int n_prompt_tokens[LG_OAI_MAX_PROMPTS];
    char *prompt_text[LG_OAI_MAX_PROMPTS]; /* completions: a text prompt as given (echo); NULL for token ids */
    int n;                        /* choices per prompt */
    int max_tokens;               /* resolved (>= 1; 0 only on completions: the prompt alone) */
    float temperature, top_p, presence_penalty, frequency_penalty;
    int top_k;                    /* 0: off (vLLM's -1 too) */
    float min_p;                  /* 0: off */
    float repetition_penalty;     /* 1: off */
    bool ignore_eos;
    int min_tokens;
    int32_t stop_token_ids[LG_MAX_STOP_IDS];
    int n_stop_token_ids;
    bool skip_special_tokens;     /* default true (vLLM) */
    bool include_stop_str_in_output;
    bool echo;                    /* completions: the prompt starts the text (and its logprobs) */
    int prompt_logprobs;          /* vLLM's prompt_logprobs: alternatives, -1: not asked */
    bool has_seed;
    int64_t seed;
    char *stop[LG_OAI_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool continuous_usage;        /* stream_options.continuous_usage_stats with include_usage: usage in every chunk */
    bool logprobs;                /* chat: logprobs=true; completions: logprobs given */
    int top_logprobs;             /* chat top_logprobs, completions logprobs */
    char cache_salt[LG_MAX_CACHE_SALT + 1];
    lg_so_spec so;                /* what the output must follow (structured_output.h); so.present: something */
    lg_constraint *constraint;    /* so compiled (lg_oai_request_compile); NULL before, or when none */
    /* chat: tools, tool_choice, parallel_tool_calls (tool_calls.h); a forced call (named, required) is
     * also so (its JSON schema, param "tool_choice") */
    lg_tc_request tc;
    const lg_tc_parser *tc_parser; /* tc.mode AUTO: how calls are read from the output; NULL: plain text */
} lg_oai_request;

/* Parses body for tenant t against the served model (tokenizer, template,
 * context) and the tenant's adapters (the `model` it names). On failure
 * answers r (400 / 404 model) and returns -1; either way the caller frees
 * q with lg_oai_request_dispose. [loop] */
int lg_oai_request_parse(const lg_served_model *m, lg_tenant_adapters *adapters, lg_request *r,
                         const lg_tenant_obj *t, lg_oai_kind kind, json_t *body, lg_oai_request *q);
void lg_oai_request_dispose(lg_oai_request *q);

/* Compiles q->so into q->constraint through the served model's compile
 * cache: a cache hit is a lookup, a miss compiles on the calling thread
 * under the model's limits (--grammar-*, at most --grammar-compile-ms), so
 * call it off the loop thread. 0 (also when nothing is asked); -1: the
 * grammar cannot be enforced (a 400: param and msg filled); -2: out of
 * memory (a 500). [any] */
int lg_oai_request_compile(const lg_served_model *m, lg_oai_request *q, char *param, size_t pn, char *msg,
                           size_t mn);

/* What the two routes do to their prompts, for /tokenize (routes_tokenize.c):
 * a text prompt encoded as /v1/completions encodes it (add_special: the
 * model's BOS when its tokenizer adds one; special tokens' text stays
 * text), and chat messages rendered by the model's template (or tmpl, an
 * adapter's own, when not NULL) with the generation prompt, as
 * /v1/chat/completions renders them. *ids malloc'd.
 * On failure they answer r (400, naming the parameter) and return -1. [loop] */
int lg_oai_text_ids(const lg_served_model *m, lg_request *r, json_t *prompt, bool add_special, int32_t **ids, int *n);
int lg_oai_chat_ids(const lg_served_model *m, const lg_chat_template *tmpl, lg_request *r, json_t *messages,
                    int32_t **ids, int *n);

#endif
