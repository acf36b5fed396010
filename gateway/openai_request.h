/*
 * openai_request.h — an OpenAI chat/completions request body, checked and
 * turned into what the engine runs: prompts (token ids), sampling, stop
 * strings, logprobs, n. Every parameter OpenAI defines is either honoured
 * or refused with a 400 naming it; unknown parameters are refused as
 * OpenAI refuses them ("Unrecognized request argument supplied: x").
 */
#ifndef LG_GW_OPENAI_REQUEST_H
#define LG_GW_OPENAI_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/runtime/engine.h"
#include "gateway/http/request.h"
#include "gateway/served_model.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenants.h"

#define LG_OAI_MAX_N 128
#define LG_OAI_MAX_PROMPTS 64
#define LG_OAI_MAX_STOP 4

typedef enum lg_oai_kind { LG_OAI_CHAT = 0, LG_OAI_COMPLETIONS = 1 } lg_oai_kind;

typedef struct lg_oai_request {
    lg_oai_kind kind;
    char model[256];
    bool is_adapter;
    lg_tenant_adapter adapter;    /* when is_adapter: a copy taken at parse time */
    int n_prompts;                /* completions: a list of prompts; chat: 1 */
    int32_t *prompts[LG_OAI_MAX_PROMPTS];
    int n_prompt_tokens[LG_OAI_MAX_PROMPTS];
    int n;                        /* choices per prompt */
    int max_tokens;               /* resolved (>= 1) */
    float temperature, top_p, presence_penalty, frequency_penalty;
    bool has_seed;
    int64_t seed;
    char *stop[LG_OAI_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool logprobs;                /* chat: logprobs=true; completions: logprobs given */
    int top_logprobs;             /* chat top_logprobs, completions logprobs */
    char cache_salt[LG_MAX_CACHE_SALT + 1];
} lg_oai_request;

/* Parses body for tenant t against the served model (tokenizer, template,
 * context) and the tenant's adapters (the `model` it names). On failure
 * answers r (400 / 404 model) and returns -1; either way the caller frees
 * q with lg_oai_request_dispose. [loop] */
int lg_oai_request_parse(const lg_served_model *m, lg_tenant_adapters *adapters, lg_request *r,
                         const lg_tenant_obj *t, lg_oai_kind kind, json_t *body, lg_oai_request *q);
void lg_oai_request_dispose(lg_oai_request *q);

#endif
