/*
 * responses.h — OpenAI's Responses API (POST /v1/responses) on the chat
 * pipeline. routes_responses.c reads a request (input items, instructions,
 * tools, text.format, previous_response_id) into a chat body and an
 * lg_resp; routes_openai.c runs that body like a chat completion and hands
 * the output to the functions below, which shape it as a response object
 * (responses_output.c) or as the Responses stream's events
 * (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta ...,
 * response.output_text.done, response.content_part.done,
 * response.output_item.done, function-call items with
 * response.function_call_arguments.delta/.done, response.completed), and
 * lg_resp_answer stores the response (store: true) before the answer's last
 * bytes go out, so that a client that saw it complete can GET it or chain
 * on it.
 *
 * Ownership: an lg_resp is created by routes_responses.c, owned by the
 * running request from lg_oai_generate_responses on (freed with it), and
 * given to lg_resp_answer at the end, which frees it.
 */
#ifndef LG_GW_RESPONSES_H
#define LG_GW_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/base/common.h"
#include "gateway/http/request.h"
#include "gateway/http/sse.h"
#include "gateway/routes.h"

typedef struct lg_resp {
    char id[64];          /* "resp_..." */
    int64_t tenant_id;
    int64_t created_at;   /* Unix seconds */
    json_t *echo;         /* the request's fields the response object repeats (instructions, tools, ...) */
    json_t *conversation; /* chat messages before the output (previous responses' + this input), without
                           * instructions: what a later previous_response_id continues */
    bool store;
    const lg_openai_deps *d;
    /* streaming */
    char model[256];      /* the model the stream reports */
    lg_sse *sse;
    int seq;              /* sequence_number of the next event */
    int n_items;          /* output items announced */
    bool text_open;       /* a message item is open */
    char msg_id[64];
    lg_strbuf text;       /* its text so far */
} lg_resp;

void lg_resp_free(lg_resp *x); /* NULL: no-op */

/* routes_openai.c: runs a chat body (owned by the caller) whose answer is x's response; takes x.
 * Answers r on every path. [loop] */
int lg_oai_generate_responses(lg_request *r, const lg_openai_deps *d, json_t *chat_body, lg_resp *x);

/* ---- responses_output.c [loop] ---- */

/* response.created and response.in_progress. */
void lg_resp_stream_begin(lg_resp *x, lg_sse *sse, const char *model);
/* Output text (opens the message item and its part on the first call). */
void lg_resp_stream_text(lg_resp *x, const char *s, size_t n);
/* The calls [{id, name, arguments}] as function_call items (the text item is closed first). */
void lg_resp_stream_calls(lg_resp *x, const json_t *calls);
/* The response object: output = a message item with text (when there is text, or no call) and one
 * function_call item per call; status "incomplete" (max_output_tokens) when incomplete. */
json_t *lg_resp_object(const lg_resp *x, const char *model, const char *text, size_t n, const json_t *calls,
                       bool incomplete, int64_t prompt, int64_t cached, int64_t completion);
/* An error ends the stream: an "error" event (code, message), then response.failed. */
void lg_resp_stream_error(lg_resp *x, const char *code, const char *message);
/* The stream's end: the open text item closed, then response.completed (response.incomplete when
 * its status says so) with the response, and the end of the stream. Steals response. */
void lg_resp_stream_end(lg_resp *x, json_t *response);
/* Responses input items -> chat messages, appended to out. 0, or -1 with param and msg (a 400). */
int lg_resp_items_to_messages(const json_t *items, json_t *out, char *param, size_t pn, char *msg, size_t mn);

/* ---- routes_responses.c [loop] ---- */

/* The end of a response: stores it when x->store (then answers), closing the stream with
 * response.completed or answering the object. Takes x and response. */
void lg_resp_answer(lg_request *r, lg_resp *x, json_t *response);

#endif
