/*
 * routes_usage.c — usage views shaped like OpenAI's usage API
 * (GET /v1/organization/usage/completions), so tools that read it can read
 * ours:
 *
 *   GET /v1/usage         the caller's tenant (any key of it, any scope;
 *                         also at /t/<tenant>/v1/usage)
 *   GET /admin/v1/usage   every tenant (the operator key)
 *
 * Query: start_time (Unix seconds, required), end_time (exclusive; default
 * now), bucket_width 1h|1d (default 1d), group_by (model, api_key_id, and
 * for the operator tenant or its OpenAI name project_id; repeated, as
 * group_by[]=, or comma-separated), limit (buckets per page: default 7 for
 * 1d and 24 for 1h as OpenAI, at most 10000), page (the next_page cursor of
 * the previous answer), format json|csv. Anything else is refused by name
 * (400), so a filter we do not apply is never silently ignored.
 *
 *   {"object":"page","data":[{"object":"bucket","start_time":..,"end_time":..,
 *     "results":[{"object":"organization.usage.completions.result",
 *       "input_tokens":..,"input_cached_tokens":..,"output_tokens":..,
 *       "num_model_requests":..,"model":null|"..","api_key_id":null|"..",
 *       "project_id":null|"<tenant>", "cost":{"value":"0.000123000000","currency":"usd"}}]}],
 *    "has_more":false,"next_page":null}
 *
 * input_tokens includes the cached ones (OpenAI counts so); cost.value is
 * the exact sum in USD with 12 decimals (pico-USD, db/money.h), a string so
 * that no JSON parser rounds it. Dimensions not grouped by are null.
 * format=csv answers the whole range (no paging) as db/usage.h's CSV.
 *
 * Queries read SQLite, so they run on the worker pool (lg_request_defer)
 * with a reader connection opened for the query (WAL: never blocks the
 * ledger writer); the loop thread only parses and answers. The HTML page
 * over the same figures is usage_page.c, registered on its own.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/usage.h"
#include "gateway/form.h"
#include "gateway/http/admin_key.h"
#include "gateway/http/request.h"
#include "gateway/routes.h"
#include "gateway/tenant_auth.h"
#include "gateway/unix_time.h"

/* ---- the query ------------------------------------------------------------------ */

typedef struct uq {
    const char *data_dir;
    bool admin;
    lg_usage_query q;
    bool have_start, have_end, csv;
    int64_t limit; /* 0: the default */
    int64_t page;  /* -1: none */
    /* parse errors */
    char bad_param[64];
    char bad_msg[300];
    /* answer (worker) */
    int status;
    char *body;
    size_t len;
    bool is_csv;
    char err[400];
} uq;

static int parse_int(const char *v, int64_t *out)
{
    if (!*v)
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < 0)
        return -1;
    *out = x;
    return 0;
}

static int add_group(uq *u, const char *v)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!strcmp(tok, "model"))
            u->q.group_by |= LG_USAGE_GROUP_MODEL;
        else if (!strcmp(tok, "api_key_id"))
            u->q.group_by |= LG_USAGE_GROUP_API_KEY;
        else if (u->admin && (!strcmp(tok, "tenant") || !strcmp(tok, "project_id")))
            u->q.group_by |= LG_USAGE_GROUP_TENANT;
        else {
            snprintf(u->bad_msg, sizeof u->bad_msg, "Invalid group_by value '%.40s': expected %s.", tok,
                     u->admin ? "model, api_key_id, tenant or project_id" : "model or api_key_id");
            return -1;
        }
    }
    return 0;
}

static int on_param(void *user, const char *k, const char *v)
{
    uq *u = user;
    int rc = 0;
    if (!strcmp(k, "start_time")) {
        rc = parse_int(v, &u->q.start_time);
        u->have_start = true;
    } else if (!strcmp(k, "end_time")) {
        rc = parse_int(v, &u->q.end_time);
        u->have_end = true;
    } else if (!strcmp(k, "bucket_width")) {
        lg_err e;
        if (lg_store_usage_bucket_width(v, &u->q.bucket_width, &e) != 0) {
            snprintf(u->bad_msg, sizeof u->bad_msg, "Invalid bucket_width '%.20s': expected '1h' or '1d'.", v);
            rc = -1;
        }
    } else if (!strcmp(k, "group_by") || !strcmp(k, "group_by[]")) {
        rc = add_group(u, v);
        if (rc) {
            snprintf(u->bad_param, sizeof u->bad_param, "group_by");
            return -1;
        }
    } else if (!strcmp(k, "limit")) {
        rc = parse_int(v, &u->limit);
        if (!rc && (u->limit < 1 || u->limit > LG_USAGE_MAX_BUCKETS))
            rc = -1;
    } else if (!strcmp(k, "page")) {
        rc = parse_int(v, &u->page);
    } else if (!strcmp(k, "format")) {
        if (!strcmp(v, "csv"))
            u->csv = true;
        else if (strcmp(v, "json")) {
            snprintf(u->bad_msg, sizeof u->bad_msg, "Invalid format '%.20s': expected 'json' or 'csv'.", v);
            rc = -1;
        }
    } else {
        snprintf(u->bad_param, sizeof u->bad_param, "%.60s", k);
        snprintf(u->bad_msg, sizeof u->bad_msg,
                 "Unrecognized request argument supplied: %.60s. Supported: start_time, end_time, bucket_width, "
                 "group_by, limit, page, format.",
                 k);
        return -1;
    }
    if (rc) {
        snprintf(u->bad_param, sizeof u->bad_param, "%.60s", k);
        if (!u->bad_msg[0])
            snprintf(u->bad_msg, sizeof u->bad_msg, "Invalid value for '%.60s'.", k);
    }
    return rc;
}

static json_t *str_or_null(bool grouped, const char *s) { return grouped ? json_string(s) : json_null(); }

static json_t *result_json(const lg_usage_result *res, unsigned g)
{
    char cost[LG_MONEY_USD_BUF];
    lg_money_format_usd(res->cost_pico, cost);
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("organization.usage.completions.result"));
    json_object_set_new(o, "input_tokens", json_integer(res->input_tokens));
    json_object_set_new(o, "input_cached_tokens", json_integer(res->input_cached_tokens));
    json_object_set_new(o, "output_tokens", json_integer(res->output_tokens));
    json_object_set_new(o, "input_audio_tokens", json_integer(0));
    json_object_set_new(o, "output_audio_tokens", json_integer(0));
    json_object_set_new(o, "num_model_requests", json_integer(res->num_model_requests));
    json_object_set_new(o, "model", str_or_null(g & LG_USAGE_GROUP_MODEL, res->model));
    json_object_set_new(o, "api_key_id",
                        (g & LG_USAGE_GROUP_API_KEY) && res->api_key_id[0] ? json_string(res->api_key_id) : json_null());
    json_object_set_new(o, "project_id", str_or_null(g & LG_USAGE_GROUP_TENANT, res->tenant_name));
    if (g & LG_USAGE_GROUP_TENANT) {
        json_object_set_new(o, "tenant", json_string(res->tenant_name));
        json_object_set_new(o, "tenant_id", json_integer(res->tenant_id));
    }
    json_object_set_new(o, "user_id", json_null());
    json_object_set_new(o, "batch", json_null());
    json_object_set_new(o, "cost", json_pack("{s:s,s:s}", "value", cost, "currency", "usd"));
    return o;
}

static void query_work(void *arg)
{
    uq *u = arg;
    lg_err err = {{0}};
    lg_store *rd = NULL;
    if (lg_store_open_reader(u->data_dir, &rd, &err) != 0) {
        u->status = 503;
        snprintf(u->err, sizeof u->err, "The usage store cannot be read right now: %s", err.msg);
        return;
    }
    /* paging: at most `limit` buckets from the (aligned) start */
    int64_t w = u->q.bucket_width;
    int64_t end = u->q.end_time, next = -1;
    if (!u->csv || u->limit) {
        int64_t lim = u->limit ? u->limit : w == LG_USAGE_1D ? 7 : 24;
        int64_t aligned = u->q.start_time / w * w;
        if (end - aligned > lim * w) {
            next = aligned + lim * w;
            u->q.end_time = next;
        }
    }
    lg_usage_report *rep = NULL;
    int rc = lg_store_usage_query(rd, &u->q, &rep, &err);
    lg_store_close(rd);
    if (rc != 0) {
        u->status = rc == LG_STORE_INVALID ? 400 : 500;
        snprintf(u->err, sizeof u->err, "%s", err.msg);
        return;
    }
    if (u->csv) {
        if (lg_usage_report_csv(rep, &u->body, &u->len, &err) != 0) {
            u->status = 500;
            snprintf(u->err, sizeof u->err, "%s", err.msg);
        } else {
            u->status = 200;
            u->is_csv = true;
        }
        lg_usage_report_free(rep);
        return;
    }
    json_t *data = json_array();
    for (int b = 0; b < rep->n_buckets; b++) {
        const lg_usage_bucket *bk = &rep->buckets[b];
        json_t *results = json_array();
        for (int i = 0; i < bk->n_results; i++)
            json_array_append_new(results, result_json(&bk->results[i], rep->group_by));
        json_array_append_new(data, json_pack("{s:s,s:I,s:I,s:o}", "object", "bucket", "start_time",
                                              (json_int_t)bk->start_time, "end_time", (json_int_t)bk->end_time,
                                              "results", results));
    }
    lg_usage_report_free(rep);
    char np[32];
    snprintf(np, sizeof np, "%" PRId64, next);
    json_t *page = json_pack("{s:s,s:o,s:b,s:o}", "object", "page", "data", data, "has_more", next >= 0, "next_page",
                             next >= 0 ? json_string(np) : json_null());
    u->body = page ? json_dumps(page, JSON_COMPACT) : NULL;
    json_decref(page);
    if (!u->body) {
        u->status = 500;
        snprintf(u->err, sizeof u->err, "out of memory while encoding the usage report");
        return;
    }
    u->len = strlen(u->body);
    u->status = 200;
}

static void query_done(lg_request *r, void *arg)
{
    uq *u = arg;
    if (lg_request_h2o(r)) {
        lg_request_add_header(r, "cache-control", "no-store");
        if (u->status == 200 && u->is_csv) {
            lg_request_add_header(r, "content-disposition", "attachment; filename=\"usage.csv\"");
            lg_respond(r, 200, "text/csv; charset=utf-8", u->body, u->len);
        } else if (u->status == 200) {
            lg_respond(r, 200, "application/json", u->body, u->len);
        } else if (u->status == 503) {
            lg_respond_unavailable(r, 5, u->err);
        } else {
            lg_respond_error(r, u->status, NULL, NULL, "%s", u->err);
        }
    }
    free(u->body);
    free(u);
}

static int usage(lg_request *r, const char *data_dir, bool admin)
{
    uq *u = calloc(1, sizeof *u);
    if (!u)
        return -1;
    u->data_dir = data_dir;
    u->admin = admin;
    u->page = -1;
    u->q.bucket_width = LG_USAGE_1D;
    if (!admin) {
        const lg_principal *p = lg_principal_of(r);
        u->q.tenant_id = p->tenant->id;
    }
    size_t qlen;
    const char *qs = lg_form_query(r, &qlen);
    int rc = lg_form_each(qs, qlen, on_param, u);
    if (rc == 0 && !u->have_start) {
        snprintf(u->bad_param, sizeof u->bad_param, "start_time");
        snprintf(u->bad_msg, sizeof u->bad_msg, "Missing required parameter: 'start_time' (Unix seconds).");
        rc = -1;
    }
    if (rc != 0) {
        if (!u->bad_msg[0])
            snprintf(u->bad_msg, sizeof u->bad_msg, "Malformed query string.");
        lg_respond_error(r, 400, NULL, u->bad_param[0] ? u->bad_param : NULL, "%s", u->bad_msg);
        free(u);
        return 0;
    }
    if (u->page >= 0) {
        if (u->page < u->q.start_time / u->q.bucket_width * u->q.bucket_width) {
            lg_respond_error(r, 400, NULL, "page", "Invalid page cursor.");
            free(u);
            return 0;
        }
        u->q.start_time = u->page;
    }
    if (!u->have_end)
        u->q.end_time = lg_unix_now() + 1;
    if (u->q.end_time <= u->q.start_time) {
        lg_respond_error(r, 400, NULL, "end_time", "end_time must be after start_time.");
        free(u);
        return 0;
    }
    if (lg_request_defer(r, query_work, query_done, u) != 0) {
        free(u);
        return lg_respond_unavailable(r, 5, "The server is shutting down."), 0;
    }
    return 0;
}

static int tenant_usage(lg_request *r, void *data_dir) { return usage(r, data_dir, false); }
static int admin_usage(lg_request *r, void *data_dir) { return usage(r, data_dir, true); }

int lg_routes_usage(lg_router *rt, const lg_usage_deps *d, lg_err *err)
{
    void *data_dir = (void *)d->data_dir; /* outlives the router (the serve options) */
    lg_route routes[] = {
        {.method = "GET", .pattern = "/v1/usage", .fn = tenant_usage, .user = data_dir, .auth = lg_auth_tenant_any,
         .auth_user = d->auth, .tenant_scoped = true, .name = "usage"},
        {.method = "GET", .pattern = "/admin/v1/usage", .fn = admin_usage, .user = data_dir, .auth = lg_auth_admin,
         .auth_user = (void *)d->admin_key, .name = "admin_usage"},
    };
    return lg_router_add_all(rt, routes, (int)(sizeof routes / sizeof routes[0]), err);
}
