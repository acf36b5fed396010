/*
 * responses_output.c — the Responses API's shapes (responses.h): the
 * response object, the stream's events in OpenAI's order, and input items
 * as chat messages.
 *
 * Item ids: the message item is "msg_<24>", a function call's item is
 * "fc_<the call id's 24>" and its call_id the chat call id ("call_<24>"),
 * so the streamed items and the final object name the same things.
 * Every event carries `type` and `sequence_number` (0, 1, ...).
 */
#include "gateway/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/tool_calls.h"

void lg_resp_free(lg_resp *x)
{
    if (!x)
        return;
    json_decref(x->echo);
    json_decref(x->conversation);
    free(x->text.p);
    free(x);
}

static void new_msg_id(char *out, size_t n)
{
    char id[40];
    lg_tc_new_id(id, sizeof id); /* "call_" + 24 */
    snprintf(out, n, "msg_%s", id + 5);
}

static json_t *usage_obj(int64_t prompt, int64_t cached, int64_t completion)
{
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)prompt, "input_tokens_details",
                     "cached_tokens", (json_int_t)cached, "output_tokens", (json_int_t)completion,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)0, "total_tokens",
                     (json_int_t)(prompt + completion));
}

/* The response object without output and usage: status, the request's echo. */
static json_t *base_obj(const lg_resp *x, const char *model, const char *status)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:s,s:[],s:n}", "id", x->id, "object", "response", "created_at",
                          (json_int_t)x->created_at, "status", status, "error", "incomplete_details", "model", model,
                          "output", "usage");
    if (o && x->echo)
        json_object_update(o, x->echo);
    return o;
}

static json_t *text_part(const char *s, size_t n)
{
    return json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", s ? s : "", s ? n : 0, "annotations",
                     "logprobs");
}

static json_t *message_item(const char *id, const char *status, json_t *content)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", content);
}

static json_t *call_item(const json_t *call, const char *status, bool with_args)
{
    const char *cid = json_string_value(json_object_get(call, "id"));
    char fid[48];
    snprintf(fid, sizeof fid, "fc_%s", !cid ? "0" : strncmp(cid, "call_", 5) ? cid : cid + 5);
    return json_pack("{s:s,s:s,s:s,s:O,s:s,s:s}", "id", fid, "type", "function_call", "status", status, "name",
                     json_object_get(call, "name"), "call_id", cid ? cid : "", "arguments",
                     with_args ? json_string_value(json_object_get(call, "arguments")) : "");
}

static void event(lg_resp *x, const char *type, json_t *o)
{
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(x->seq++));
    lg_sse_send_json(x->sse, o);
}

void lg_resp_stream_begin(lg_resp *x, lg_sse *sse, const char *model)
{
    x->sse = sse;
    snprintf(x->model, sizeof x->model, "%s", model);
    if (!sse)
        return;
    event(x, "response.created", json_pack("{s:o}", "response", base_obj(x, model, "in_progress")));
    event(x, "response.in_progress", json_pack("{s:o}", "response", base_obj(x, model, "in_progress")));
}

void lg_resp_stream_text(lg_resp *x, const char *s, size_t n)
{
    if (!x->sse)
        return;
    if (!x->text_open) {
        x->text_open = true;
        new_msg_id(x->msg_id, sizeof x->msg_id);
        event(x, "response.output_item.added",
              json_pack("{s:i,s:o}", "output_index", x->n_items, "item", message_item(x->msg_id, "in_progress", json_array())));
        event(x, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", x->msg_id, "output_index",
                                                          x->n_items, "content_index", 0, "part", text_part("", 0)));
    }
    lg_strbuf_put(&x->text, s, n);
    event(x, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", x->msg_id, "output_index",
                                                     x->n_items, "content_index", 0, "delta", s, n, "logprobs"));
}

static void close_text(lg_resp *x)
{
    if (!x->sse || !x->text_open)
        return;
    const char *t = x->text.p ? x->text.p : "";
    event(x, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", x->msg_id, "output_index",
                                                    x->n_items, "content_index", 0, "text", t, x->text.len, "logprobs"));
    event(x, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", x->msg_id, "output_index",
                                                     x->n_items, "content_index", 0, "part", text_part(t, x->text.len)));
    event(x, "response.output_item.done",
          json_pack("{s:i,s:o}", "output_index", x->n_items, "item",
                    message_item(x->msg_id, "completed", json_pack("[o]", text_part(t, x->text.len)))));
    x->text_open = false;
    x->n_items++;
}

void lg_resp_stream_calls(lg_resp *x, const json_t *calls)
{
    if (!x->sse)
        return;
    close_text(x);
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call)
    {
        json_t *item = call_item(call, "in_progress", false);
        const char *fid = json_string_value(json_object_get(item, "id"));
        char id[48];
        snprintf(id, sizeof id, "%s", fid);
        const char *args = json_string_value(json_object_get(call, "arguments"));
        event(x, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", x->n_items, "item", item));
        event(x, "response.function_call_arguments.delta",
              json_pack("{s:s,s:i,s:s}", "item_id", id, "output_index", x->n_items, "delta", args));
        event(x, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:O,s:s}", "item_id", id, "output_index", x->n_items, "name",
                        json_object_get(call, "name"), "arguments", args));
        event(x, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", x->n_items, "item", call_item(call, "completed", true)));
        x->n_items++;
    }
}

void lg_resp_stream_end(lg_resp *x, json_t *response)
{
    if (!x->sse) {
        json_decref(response);
        return;
    }
    close_text(x);
    const char *st = json_string_value(json_object_get(response, "status"));
    event(x, st && !strcmp(st, "incomplete") ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", response));
    lg_sse_end(x->sse);
}

void lg_resp_stream_error(lg_resp *x, const char *code, const char *message)
{
    if (!x->sse)
        return;
    event(x, "error", json_pack("{s:s,s:s,s:n}", "code", code, "message", message, "param"));
    json_t *o = base_obj(x, x->model, "failed");
    json_object_set_new(o, "error", json_pack("{s:s,s:s}", "code", code, "message", message));
    event(x, "response.failed", json_pack("{s:o}", "response", o));
    lg_sse_end(x->sse);
}

json_t *lg_resp_object(const lg_resp *x, const char *model, const char *text, size_t n, const json_t *calls,
                       bool incomplete, int64_t prompt, int64_t cached, int64_t completion)
{
    json_t *o = base_obj(x, model, incomplete ? "incomplete" : "completed");
    json_t *out = json_object_get(o, "output");
    if (x->sse) { /* streamed: the items as they went out */
        if (x->msg_id[0])
            json_array_append_new(out, message_item(x->msg_id, "completed",
                                                    json_pack("[o]", text_part(x->text.p, x->text.len))));
    } else if ((text && n) || !calls) {
        char id[64];
        new_msg_id(id, sizeof id);
        json_array_append_new(out, message_item(id, "completed", json_pack("[o]", text_part(text, n))));
    }
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call)
        json_array_append_new(out, call_item(call, "completed", true));
    if (incomplete)
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(o, "usage", usage_obj(prompt, cached, completion));
    return o;
}

/* The text of a content given as a string or as parts with text (input_text, output_text, text). -1: a
 * part of another kind. */
static int content_text(const json_t *c, lg_strbuf *b)
{
    if (json_is_string(c)) {
        lg_strbuf_put(b, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return -1;
    size_t k;
    json_t *p;
    json_array_foreach(c, k, p)
    {
        json_t *ty = json_object_get(p, "type"), *t = json_object_get(p, "text");
        const char *s = json_string_value(ty);
        if (!s || (strcmp(s, "input_text") && strcmp(s, "output_text") && strcmp(s, "text")) || !json_is_string(t))
            return -1;
        if (k)
            lg_strbuf_put(b, "\n", 1);
        lg_strbuf_put(b, json_string_value(t), json_string_length(t));
    }
    return 0;
}

#define FAIL(...) (snprintf(param, pn, "input[%zu]", i), snprintf(msg, mn, __VA_ARGS__), -1)

int lg_resp_items_to_messages(const json_t *items, json_t *out, char *param, size_t pn, char *msg, size_t mn)
{
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        if (!json_is_object(it))
            return FAIL("Invalid 'input[%zu]': expected an object.", i);
        const char *ty = json_string_value(json_object_get(it, "type"));
        json_t *role = json_object_get(it, "role");
        if (!ty && json_is_string(role))
            ty = "message";
        if (!ty)
            return FAIL("Missing required parameter: 'input[%zu].type'.", i);
        json_t *last = json_array_size(out) ? json_array_get(out, json_array_size(out) - 1) : NULL;
        if (!strcmp(ty, "message")) {
            const char *r = json_string_value(role);
            if (!r || (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer")))
                return FAIL("Invalid 'input[%zu].role': expected 'user', 'assistant', 'system' or 'developer'.", i);
            lg_strbuf b = {0};
            if (content_text(json_object_get(it, "content"), &b) != 0) {
                free(b.p);
                return FAIL("Invalid 'input[%zu].content': expected a string or text parts (input_text, "
                            "output_text); other content is not supported.", i);
            }
            json_array_append_new(out, json_pack("{s:s,s:s%}", "role", r, "content", b.p ? b.p : "", b.len));
            free(b.p);
        } else if (!strcmp(ty, "function_call")) {
            json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
            if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args))
                return FAIL("Invalid 'input[%zu]': a function_call has string call_id, name and arguments.", i);
            json_t *tc = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function", "name", name,
                                   "arguments", args);
            const char *lr = last ? json_string_value(json_object_get(last, "role")) : NULL;
            if (lr && !strcmp(lr, "assistant")) { /* calls after an assistant message belong to it */
                json_t *a = json_object_get(last, "tool_calls");
                if (!a)
                    json_object_set_new(last, "tool_calls", a = json_array());
                json_array_append_new(a, tc);
            } else {
                json_array_append_new(out, json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls",
                                                     tc));
            }
        } else if (!strcmp(ty, "function_call_output")) {
            json_t *cid = json_object_get(it, "call_id"), *o = json_object_get(it, "output");
            lg_strbuf b = {0};
            if (!json_is_string(cid) || content_text(o, &b) != 0) {
                free(b.p);
                return FAIL("Invalid 'input[%zu]': a function_call_output has a string call_id and a string (or "
                            "text parts) output.", i);
            }
            json_array_append_new(out, json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", cid, "content",
                                                 b.p ? b.p : "", b.len));
            free(b.p);
        } else if (!strcmp(ty, "reasoning")) {
            continue; /* no reasoning items are made here; one given back is not shown to the model */
        } else {
            return FAIL("Invalid value: '%s' for 'input[%zu].type'. Supported values are: 'message', "
                        "'function_call', 'function_call_output' and 'reasoning'.", ty, i);
        }
    }
    return 0;
}
