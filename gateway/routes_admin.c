/*
 * routes_admin.c — the operator API (auth: the operator key, lg_auth_admin):
 *
 *   POST   /admin/v1/tenants                      {"name", "weight"?, "pricing"?, "limits"?} -> 201
 *   GET    /admin/v1/tenants
 *   GET    /admin/v1/tenants/{t}
 *   PATCH  /admin/v1/tenants/{t}                  {"weight"?, "pricing"?, "limits"?}
 *   DELETE /admin/v1/tenants/{t}                  keys stop at once, adapters removed, cached prefixes purged
 *   POST   /admin/v1/tenants/{t}/keys             {"name"?, "scopes"?} -> the secret, once
 *   GET    /admin/v1/tenants/{t}/keys             no secrets (prefix only)
 *   DELETE /admin/v1/keys/{id}                    revoked from the next request on
 *   PUT    /admin/v1/tenants/{t}/pricing          {"input_per_mtok", "cached_input_per_mtok", "output_per_mtok"}
 *   DELETE /admin/v1/tenants/{t}/pricing          back to the server default
 *   PUT    /admin/v1/tenants/{t}/limits           {"requests_per_minute", "tokens_per_minute",
 *                                                  "concurrent_requests", "monthly_token_budget"}
 *   GET    /admin/v1/pricing, PUT /admin/v1/pricing   the server default
 *   POST   /admin/v1/tenants/{t}/adapters         multipart (as POST /v1/adapters)
 *   POST   /admin/v1/tenants/{t}/adapters/import  {"name", "path"}: a directory on the server
 *   GET    /admin/v1/tenants/{t}/adapters, GET/DELETE /admin/v1/tenants/{t}/adapters/{name}
 *
 * Reads answer from the in-memory views (the tenant view, the tenants'
 * adapters) on the loop thread, except key listings (the store, on a
 * worker). Every write runs on the worker pool with the store's writer
 * handle (job.h), then refreshes the views the loops read through the serve
 * context (app.h), the one thing this family is given whole:
 * lg_app_reload_tenants after tenant, pricing and limit changes (it also
 * refreshes the key cache), lg_app_reload_keys after key changes, so a
 * revoked key or a deleted tenant's key fails from the next request on, on
 * every thread; lg_app_forget_tenant after a tenant's deletion.
 *
 * Partial updates: fields a PUT/PATCH leaves out keep their value; a limit
 * set to null is unlimited. Prices are USD per million tokens with at most
 * 6 decimals, as a JSON string ("0.15", read exactly) or a number (accepted
 * when it is exactly the double of some 6-decimal value); answers give them
 * as exact decimal strings.
 *
 * Bodies: application/json; curl -d's default Content-Type
 * (application/x-www-form-urlencoded) is read as JSON too, so the
 * copy-paste commands `serve` prints work as typed. Unknown fields are a 400
 * naming them.
 */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/adapter_upload.h"
#include "gateway/app.h"
#include "gateway/http/admin_key.h"
#include "gateway/job.h"
#include "gateway/routes.h"
#include "gateway/store_writer.h"
#include "gateway/tenants.h"
#include "gateway/upload_quota.h"

/* ---- JSON answers -------------------------------------------------------------- */

static json_t *price_json(int64_t micro)
{
    char b[LG_MONEY_PRICE_BUF];
    lg_money_format_price(micro, b);
    return json_string(b);
}

static json_t *pricing_json(const lg_pricing *p, const char *source)
{
    json_t *o = json_pack("{s:o,s:o,s:o}", "input_per_mtok", price_json(p->input), "cached_input_per_mtok",
                          price_json(p->cached_input), "output_per_mtok", price_json(p->output));
    if (source)
        json_object_set_new(o, "source", json_string(source));
    return o;
}

static json_t *limit_json(int64_t v) { return v == LG_UNLIMITED ? json_null() : json_integer((json_int_t)v); }

static json_t *tenant_json(const lg_tenant *t, const lg_pricing *effective)
{
    json_t *limits = json_pack("{s:o,s:o,s:o,s:o}", "requests_per_minute", limit_json(t->limits.rpm),
                               "tokens_per_minute", limit_json(t->limits.tpm), "concurrent_requests",
                               limit_json(t->limits.concurrent), "monthly_token_budget",
                               limit_json(t->limits.monthly_tokens));
    char base[LG_STORE_NAME_MAX + 8];
    snprintf(base, sizeof base, "/t/%s/v1", t->name);
    return json_pack("{s:s,s:s,s:s,s:I,s:i,s:o,s:o,s:s}", "id", t->name, "object", "tenant", "name", t->name,
                     "created_at", (json_int_t)(t->created_at / 1000), "weight", (int)t->weight, "pricing",
                     pricing_json(effective, t->has_pricing ? "tenant" : "default"), "limits", limits, "base_path",
                     base);
}

static json_t *scopes_json(unsigned scopes)
{
    json_t *a = json_array();
    if (scopes & LG_SCOPE_INFERENCE)
        json_array_append_new(a, json_string("inference"));
    if (scopes & LG_SCOPE_ADAPTERS)
        json_array_append_new(a, json_string("adapters"));
    return a;
}

static json_t *key_json(const lg_api_key *k)
{
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:s}", "id", k->id, "object", "api_key", "name", k->name,
                          "scopes", scopes_json(k->scopes), "prefix", k->prefix, "created_at",
                          (json_int_t)(k->created_at / 1000), "tenant", k->tenant_name);
    if (k->revoked_at)
        json_object_set_new(o, "revoked_at", json_integer((json_int_t)(k->revoked_at / 1000)));
    return o;
}

/* ---- request parsing (loop) ---------------------------------------------------------- */

/* Every parse function answers r and returns -1 on a bad value. */

static int unknown_fields(lg_request *r, json_t *o, const char *const *allowed, const char *where)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(k, allowed[i]);
        if (!ok) {
            lg_respond_error(r, 400, "unknown_parameter", k, "Unrecognized %s field: `%s`.", where, k);
            return -1;
        }
    }
    return 0;
}

static int parse_price(lg_request *r, json_t *v, const char *param, int64_t *out)
{
    lg_err err = {{0}};
    int rc;
    if (json_is_string(v))
        rc = lg_money_price_parse(json_string_value(v), json_string_length(v), out, &err);
    else if (json_is_integer(v))
        rc = json_integer_value(v) < 0 ? lg_fail(&err, "negative price")
                                       : lg_money_price_from_double((double)json_integer_value(v), out, &err);
    else if (json_is_real(v))
        rc = lg_money_price_from_double(json_real_value(v), out, &err);
    else
        rc = lg_fail(&err, "expected a price in USD per million tokens, as a string (\"0.15\") or a number");
    if (rc != 0) {
        lg_respond_error(r, 400, "invalid_value", param, "Invalid `%s`: %s", param, err.msg);
        return -1;
    }
    return 0;
}

typedef struct pricing_in {
    bool set;         /* a pricing object was given */
    bool clear;       /* back to the server default */
    bool has[3];
    int64_t val[3];   /* input, cached_input, output */
} pricing_in;

static const char *const price_fields[] = {"input_per_mtok", "cached_input_per_mtok", "output_per_mtok", NULL};

static int parse_pricing(lg_request *r, json_t *o, pricing_in *p)
{
    if (unknown_fields(r, o, price_fields, "pricing") != 0)
        return -1;
    p->set = true;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(o, price_fields[i]);
        if (!v)
            continue;
        if (parse_price(r, v, price_fields[i], &p->val[i]) != 0)
            return -1;
        p->has[i] = true;
    }
    return 0;
}

static void pricing_apply(const pricing_in *p, lg_pricing *x)
{
    int64_t *f[3] = {&x->input, &x->cached_input, &x->output};
    for (int i = 0; i < 3; i++)
        if (p->has[i])
            *f[i] = p->val[i];
}

typedef struct limits_in {
    bool has[4];
    int64_t val[4]; /* rpm, tpm, concurrent, monthly */
} limits_in;

static const char *const limit_fields[] = {"requests_per_minute", "tokens_per_minute", "concurrent_requests",
                                           "monthly_token_budget", NULL};

static int parse_limits(lg_request *r, json_t *o, limits_in *l)
{
    if (unknown_fields(r, o, limit_fields, "limits") != 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(o, limit_fields[i]);
        if (!v)
            continue;
        if (json_is_null(v))
            l->val[i] = LG_UNLIMITED;
        else if (json_is_integer(v) && json_integer_value(v) >= 0)
            l->val[i] = json_integer_value(v);
        else {
            lg_respond_error(r, 400, "invalid_value", limit_fields[i],
                             "`%s` must be a non-negative integer, or null for no limit.", limit_fields[i]);
            return -1;
        }
        l->has[i] = true;
    }
    return 0;
}

static void limits_apply(const limits_in *l, lg_tenant_limits *x)
{
    int64_t *f[4] = {&x->rpm, &x->tpm, &x->concurrent, &x->monthly_tokens};
    for (int i = 0; i < 4; i++)
        if (l->has[i])
            *f[i] = l->val[i];
}

#define LG_MAX_WEIGHT 1000000

static int parse_weight(lg_request *r, json_t *v, int32_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > LG_MAX_WEIGHT) {
        lg_respond_error(r, 400, "invalid_value", "weight", "`weight` must be an integer from 1 to %d.",
                         LG_MAX_WEIGHT);
        return -1;
    }
    *out = (int32_t)json_integer_value(v);
    return 0;
}

/* The operator's {t}: a live tenant, or a 404 answered. */
static const lg_tenant_obj *tenant_param(lg_request *r, const lg_admin_deps *c)
{
    const char *slug = lg_request_param(r, "t");
    const lg_tenant_obj *t = slug ? lg_tenants_find(c->tenants, slug) : NULL;
    if (!t) {
        lg_respond_error(r, 404, "tenant_not_found", NULL, "Unknown tenant '%s'.", slug ? slug : "");
        return NULL;
    }
    return t;
}

/* ---- tenants -------------------------------------------------------------------------- */

typedef struct tenant_job {
    lg_job j;
    lg_app *app;
    char name[LG_STORE_NAME_MAX];
    int64_t tenant_id;
    enum { TJ_CREATE, TJ_UPDATE, TJ_DELETE } op;
    bool has_weight;
    int32_t weight;
    pricing_in pricing;
    limits_in limits;
} tenant_job;

static json_t *tenant_json_from_store(lg_store *st, const lg_tenant *t)
{
    lg_pricing eff;
    lg_err err = {{0}};
    if (t->has_pricing)
        eff = t->pricing;
    else if (lg_store_default_pricing_get(st, &eff, &err) != 0)
        memset(&eff, 0, sizeof eff);
    return tenant_json(t, &eff);
}

static void tenant_work(lg_job *jb)
{
    tenant_job *tj = (tenant_job *)jb;
    lg_app *app = tj->app;
    lg_err err = {{0}};
    lg_store *st = lg_store_writer_acquire(lg_app_store(app));
    lg_tenant row;
    int rc = 0;
    if (tj->op == TJ_DELETE) {
        /* the id of the row this deletes (the store is ours until released:
         * nobody deletes and recreates the name in between) */
        rc = lg_store_tenant_get(st, tj->name, &row, &err);
        if (rc == 0)
            rc = lg_store_tenant_delete(st, tj->name, &err);
        if (rc == 0) {
            tj->tenant_id = row.id;
            lg_err e2 = {{0}};
            if (lg_app_reload_tenants(app, st, &e2) != 0) /* the store changed: say so, still */
                fprintf(stderr, "loragate serve: reloading tenants: %s\n", e2.msg);
            /* committed: its cached prompt prefixes and its adapters go now */
            lg_app_forget_tenant(app, row.id, tj->name);
            jb->status = 200;
            jb->body = json_pack("{s:s,s:s,s:b}", "id", tj->name, "object", "tenant", "deleted", 1);
        }
    } else {
        lg_tenant_spec spec = lg_tenant_spec_init(tj->name);
        if (tj->op == TJ_UPDATE) {
            rc = lg_store_tenant_get(st, tj->name, &row, &err);
            if (rc == 0) {
                spec.weight = row.weight;
                spec.has_pricing = row.has_pricing;
                spec.pricing = row.pricing;
                spec.limits = row.limits;
            }
        }
        if (rc == 0 && tj->pricing.set && !tj->pricing.clear && !spec.has_pricing) {
            /* fields left out start from the server default */
            rc = lg_store_default_pricing_get(st, &spec.pricing, &err);
            spec.has_pricing = true;
        }
        if (rc == 0) {
            if (tj->has_weight)
                spec.weight = tj->weight;
            if (tj->pricing.clear)
                spec.has_pricing = false;
            else if (tj->pricing.set)
                pricing_apply(&tj->pricing, &spec.pricing);
            limits_apply(&tj->limits, &spec.limits);
            rc = tj->op == TJ_CREATE ? lg_store_tenant_create(st, &spec, &row, &err)
                                     : lg_store_tenant_update(st, tj->name, &spec, &row, &err);
        }
        if (rc == 0) {
            lg_err e2 = {{0}};
            if (lg_app_reload_tenants(app, st, &e2) != 0)
                rc = lg_job_fail(jb, 500, "store_error", NULL,
                                 "The change was saved but the server's view of tenants could not be refreshed: %s",
                                 e2.msg);
            else {
                jb->status = tj->op == TJ_CREATE ? 201 : 200;
                jb->body = tenant_json_from_store(st, &row);
            }
            rc = 0;
        }
    }
    lg_store_writer_release(lg_app_store(app));
    if (rc == LG_STORE_NOT_FOUND)
        lg_job_fail(jb, 404, "tenant_not_found", NULL, "Unknown tenant '%s'.", tj->name);
    else if (rc == LG_STORE_CONFLICT)
        lg_job_fail(jb, 409, "tenant_exists", "name", "A tenant named '%s' already exists.", tj->name);
    else if (rc != 0)
        lg_job_fail_store(jb, rc, "tenant_not_found", "tenant_exists", NULL, &err);
}

static tenant_job *tenant_job_new(lg_request *r, const lg_admin_deps *c, int op, const char *name)
{
    tenant_job *tj = calloc(1, sizeof *tj);
    if (!tj) {
        lg_respond_error(r, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    tj->app = c->app;
    tj->j.work = tenant_work;
    tj->op = op;
    snprintf(tj->name, sizeof tj->name, "%s", name);
    return tj;
}

/* weight / pricing / limits of a create or PATCH body into tj; answers on error */
static int parse_tenant_fields(lg_request *r, json_t *body, tenant_job *tj)
{
    json_t *v;
    if ((v = json_object_get(body, "weight")) && parse_weight(r, v, &tj->weight) != 0)
        return -1;
    tj->has_weight = v != NULL;
    if ((v = json_object_get(body, "pricing"))) {
        if (json_is_null(v))
            tj->pricing.set = tj->pricing.clear = true;
        else if (!json_is_object(v))
            return lg_respond_error(r, 400, "invalid_type", "pricing",
                                    "`pricing` must be an object (input_per_mtok, cached_input_per_mtok, "
                                    "output_per_mtok) or null."),
                   -1;
        else if (parse_pricing(r, v, &tj->pricing) != 0)
            return -1;
    }
    if ((v = json_object_get(body, "limits"))) {
        if (!json_is_object(v))
            return lg_respond_error(r, 400, "invalid_type", "limits",
                                    "`limits` must be an object (requests_per_minute, tokens_per_minute, "
                                    "concurrent_requests, monthly_token_budget)."),
                   -1;
        if (parse_limits(r, v, &tj->limits) != 0)
            return -1;
    }
    return 0;
}

static int tenant_create(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    json_t *body = lg_admin_json_body(r);
    if (!body)
        return 0;
    static const char *const allowed[] = {"name", "weight", "pricing", "limits", NULL};
    tenant_job *tj = NULL;
    lg_err err = {{0}};
    json_t *jn = json_object_get(body, "name");
    if (unknown_fields(r, body, allowed, "request") != 0)
        goto out;
    if (!json_is_string(jn)) {
        lg_respond_error(r, 400, jn ? "invalid_type" : "missing_required_parameter", "name",
                         "`name` must be a string: the tenant's slug, as in /t/<name>/v1.");
        goto out;
    }
    /* the router's slug rule (what /t/<name>/ and <name>.<suffix> accept),
     * which the store's check repeats */
    if (strlen(json_string_value(jn)) != json_string_length(jn) ||
        !lg_tenant_slug_valid(json_string_value(jn), json_string_length(jn)) ||
        lg_store_check_tenant_name(json_string_value(jn), &err) != 0) {
        lg_respond_error(r, 400, "invalid_value", "name", "Invalid tenant name '%.80s': %s.",
                         json_string_value(jn), LG_STORE_TENANT_NAME_RULE);
        goto out;
    }
    if (!(tj = tenant_job_new(r, c, TJ_CREATE, json_string_value(jn))))
        goto out;
    if (parse_tenant_fields(r, body, tj) != 0) {
        free(tj);
        goto out;
    }
    json_decref(body);
    return lg_job_run(r, &tj->j);
out:
    json_decref(body);
    return 0;
}

/* PATCH / PUT of a tenant's settings: the body through `parse` (which
 * answers on error) into an update job, then the job runs. */
static int tenant_update(lg_request *r, const lg_admin_deps *c, int (*parse)(lg_request *, json_t *, tenant_job *))
{
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    json_t *body = lg_admin_json_body(r);
    if (!body)
        return 0;
    tenant_job *tj = tenant_job_new(r, c, TJ_UPDATE, t->name);
    if (tj && parse(r, body, tj) == 0) {
        json_decref(body);
        return lg_job_run(r, &tj->j);
    }
    free(tj);
    json_decref(body);
    return 0;
}

static int parse_patch(lg_request *r, json_t *body, tenant_job *tj)
{
    static const char *const allowed[] = {"weight", "pricing", "limits", NULL};
    if (unknown_fields(r, body, allowed, "request") != 0)
        return -1;
    return parse_tenant_fields(r, body, tj);
}
static int parse_pricing_job(lg_request *r, json_t *body, tenant_job *tj) { return parse_pricing(r, body, &tj->pricing); }
static int parse_limits_job(lg_request *r, json_t *body, tenant_job *tj) { return parse_limits(r, body, &tj->limits); }

static int tenant_patch(lg_request *r, void *user) { return tenant_update(r, user, parse_patch); }
static int tenant_pricing_put(lg_request *r, void *user) { return tenant_update(r, user, parse_pricing_job); }
static int tenant_limits_put(lg_request *r, void *user) { return tenant_update(r, user, parse_limits_job); }

static int tenant_pricing_delete(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    tenant_job *tj = tenant_job_new(r, c, TJ_UPDATE, t->name);
    if (!tj)
        return 0;
    tj->pricing.set = tj->pricing.clear = true;
    return lg_job_run(r, &tj->j);
}

static int tenant_delete(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    tenant_job *tj = tenant_job_new(r, c, TJ_DELETE, t->name);
    if (!tj)
        return 0;
    tj->tenant_id = t->id;
    return lg_job_run(r, &tj->j);
}

static int tenant_get(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    lg_tenant row;
    lg_pricing eff;
    if (!lg_tenants_get(c->tenants, t, &row, &eff))
        return lg_respond_error(r, 404, "tenant_not_found", NULL, "Unknown tenant '%s'.", t->name), 0;
    return lg_respond_json(r, 200, tenant_json(&row, &eff)), 0;
}

static int tenant_list(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    lg_tenant_copy *v = NULL;
    int n = 0;
    if (lg_tenants_list(c->tenants, &v, &n) != 0)
        return lg_respond_error(r, 500, NULL, NULL, "out of memory"), 0;
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(data, tenant_json(&v[i].row, &v[i].pricing));
    free(v);
    return lg_respond_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data)), 0;
}

/* ---- default pricing ---------------------------------------------------------------------- */

typedef struct pricing_job {
    lg_job j;
    lg_app *app;
    bool write;
    pricing_in p;
} pricing_job;

static void pricing_work(lg_job *jb)
{
    pricing_job *pj = (pricing_job *)jb;
    lg_err err = {{0}};
    lg_pricing p;
    lg_store *st = lg_store_writer_acquire(lg_app_store(pj->app));
    int rc = lg_store_default_pricing_get(st, &p, &err);
    if (rc == 0 && pj->write) {
        pricing_apply(&pj->p, &p);
        rc = lg_store_default_pricing_set(st, &p, &err);
        if (rc == 0 && lg_app_reload_tenants(pj->app, st, &err) != 0)
            rc = LG_STORE_ERROR;
    }
    lg_store_writer_release(lg_app_store(pj->app));
    if (rc != 0) {
        lg_job_fail_store(jb, rc, "not_found", "conflict", NULL, &err);
        return;
    }
    jb->status = 200;
    jb->body = pricing_json(&p, NULL);
    json_object_set_new(jb->body, "object", json_string("pricing"));
}

static int pricing_job_start(lg_request *r, const lg_admin_deps *c, bool write)
{
    pricing_job *pj = calloc(1, sizeof *pj);
    if (!pj)
        return lg_respond_error(r, 500, NULL, NULL, "out of memory"), 0;
    pj->app = c->app;
    pj->j.work = pricing_work;
    pj->write = write;
    if (write) {
        json_t *body = lg_admin_json_body(r);
        if (!body || parse_pricing(r, body, &pj->p) != 0) {
            json_decref(body);
            free(pj);
            return 0;
        }
        json_decref(body);
    }
    return lg_job_run(r, &pj->j);
}

static int pricing_get(lg_request *r, void *c) { return pricing_job_start(r, c, false); }
static int pricing_put(lg_request *r, void *c) { return pricing_job_start(r, c, true); }

/* ---- keys ------------------------------------------------------------------------------------- */

typedef struct key_job {
    lg_job j;
    lg_app *app;
    enum { KJ_CREATE, KJ_LIST, KJ_REVOKE } op;
    char tenant[LG_STORE_NAME_MAX];
    char name[LG_STORE_NAME_MAX];
    char id[64];
    unsigned scopes;
    bool include_revoked;
} key_job;

static void key_work(lg_job *jb)
{
    key_job *kj = (key_job *)jb;
    lg_app *app = kj->app;
    lg_err err = {{0}};
    lg_store *st = lg_store_writer_acquire(lg_app_store(app));
    int rc = 0;
    if (kj->op == KJ_CREATE) {
        lg_api_key k;
        char secret[LG_KEY_SECRET_LEN + 1];
        rc = lg_store_key_create(st, kj->tenant, kj->name, kj->scopes, &k, secret, &err);
        if (rc == 0) {
            lg_err e2 = {{0}};
            if (lg_app_reload_keys(app, st, &e2) != 0) {
                /* a key nobody can use: revoke it rather than hand it out */
                lg_store_key_revoke(st, k.id, NULL);
                lg_job_fail(jb, 500, "store_error", NULL, "The key cache could not be refreshed: %s", e2.msg);
            } else {
                jb->status = 201;
                jb->body = key_json(&k);
                json_object_set_new(jb->body, "key", json_string(secret));
            }
            OPENSSL_cleanse(secret, sizeof secret);
        }
    } else if (kj->op == KJ_LIST) {
        lg_api_key *v = NULL;
        int n = 0;
        rc = lg_store_key_list(st, kj->tenant, kj->include_revoked, &v, &n, &err);
        if (rc == 0) {
            json_t *data = json_array();
            for (int i = 0; i < n; i++)
                json_array_append_new(data, key_json(&v[i]));
            free(v);
            jb->status = 200;
            jb->body = json_pack("{s:s,s:o}", "object", "list", "data", data);
        }
    } else {
        rc = lg_store_key_revoke(st, kj->id, &err);
        if (rc == 0) {
            lg_err e2 = {{0}};
            if (lg_app_reload_keys(app, st, &e2) != 0)
                lg_job_fail(jb, 500, "store_error", NULL,
                            "The key is revoked in the store but the key cache could not be refreshed: %s", e2.msg);
            else {
                jb->status = 200;
                jb->body = json_pack("{s:s,s:s,s:b}", "id", kj->id, "object", "api_key", "deleted", 1);
            }
        }
    }
    lg_store_writer_release(lg_app_store(app));
    if (rc == LG_STORE_NOT_FOUND && kj->op == KJ_REVOKE)
        lg_job_fail(jb, 404, "key_not_found", NULL, "No live key with id '%s'.", kj->id);
    else if (rc == LG_STORE_NOT_FOUND)
        lg_job_fail(jb, 404, "tenant_not_found", NULL, "Unknown tenant '%s'.", kj->tenant);
    else if (rc != 0)
        lg_job_fail_store(jb, rc, "not_found", "conflict", kj->op == KJ_CREATE ? "name" : NULL, &err);
}

static key_job *key_job_new(lg_request *r, const lg_admin_deps *c, int op)
{
    key_job *kj = calloc(1, sizeof *kj);
    if (!kj) {
        lg_respond_error(r, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    kj->app = c->app;
    kj->j.work = key_work;
    kj->op = op;
    return kj;
}

static int key_create(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    json_t *body = lg_admin_json_body(r);
    if (!body)
        return 0;
    static const char *const allowed[] = {"name", "scopes", NULL};
    key_job *kj = NULL;
    json_t *jn = json_object_get(body, "name"), *js = json_object_get(body, "scopes");
    unsigned scopes = 0;
    if (unknown_fields(r, body, allowed, "request") != 0)
        goto out;
    if (jn && !json_is_null(jn) &&
        (!json_is_string(jn) || json_string_length(jn) >= LG_STORE_NAME_MAX ||
         strlen(json_string_value(jn)) != json_string_length(jn))) {
        lg_respond_error(r, 400, "invalid_value", "name", "`name` must be a string of at most %d bytes.",
                         LG_STORE_NAME_MAX - 1);
        goto out;
    }
    if (!js || json_is_null(js)) {
        scopes = LG_SCOPE_INFERENCE;
    } else if (!json_is_array(js) || json_array_size(js) == 0) {
        lg_respond_error(r, 400, "invalid_value", "scopes",
                         "`scopes` must be a non-empty array of \"inference\" and/or \"adapters\".");
        goto out;
    } else {
        size_t i;
        json_t *s;
        json_array_foreach(js, i, s)
        {
            unsigned bit = !json_is_string(s)                            ? 0
                           : !strcmp(json_string_value(s), "inference") ? LG_SCOPE_INFERENCE
                           : !strcmp(json_string_value(s), "adapters")  ? LG_SCOPE_ADAPTERS
                                                                         : 0;
            if (!bit || (scopes & bit)) {
                lg_respond_error(r, 400, "invalid_value", "scopes",
                                 bit ? "`scopes` lists a scope twice."
                                     : "Unknown scope in `scopes`: expected \"inference\" and/or \"adapters\".");
                goto out;
            }
            scopes |= bit;
        }
    }
    if (!(kj = key_job_new(r, c, KJ_CREATE)))
        goto out;
    snprintf(kj->tenant, sizeof kj->tenant, "%s", t->name);
    snprintf(kj->name, sizeof kj->name, "%s", json_is_string(jn) ? json_string_value(jn) : "");
    kj->scopes = scopes;
    json_decref(body);
    return lg_job_run(r, &kj->j);
out:
    json_decref(body);
    return 0;
}

static int key_list(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    if (!t)
        return 0;
    char q[16];
    int ql = lg_request_query(r, "include_revoked", q, sizeof q);
    key_job *kj = key_job_new(r, c, KJ_LIST);
    if (!kj)
        return 0;
    snprintf(kj->tenant, sizeof kj->tenant, "%s", t->name);
    kj->include_revoked = ql > 0 && (!strcmp(q, "true") || !strcmp(q, "1"));
    return lg_job_run(r, &kj->j);
}

static int key_revoke(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const char *id = lg_request_param(r, "id");
    if (!id || strlen(id) != LG_KEY_ID_LEN)
        return lg_respond_error(r, 404, "key_not_found", NULL, "No live key with id '%.64s'.", id ? id : ""), 0;
    key_job *kj = key_job_new(r, c, KJ_REVOKE);
    if (!kj)
        return 0;
    snprintf(kj->id, sizeof kj->id, "%s", id);
    return lg_job_run(r, &kj->j);
}

/* ---- adapters on behalf of a tenant ----------------------------------------------------------- */

static int adapters_upload(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    return t ? lg_adapters_upload(r, &c->adapters, t) : 0;
}
static int adapters_import(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    return t ? lg_adapters_import(r, &c->adapters, t) : 0;
}
static int adapters_list(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    return t ? lg_adapters_list(r, &c->adapters, t) : 0;
}
static int adapters_get(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    return t ? lg_adapters_get(r, &c->adapters, t, lg_request_param(r, "name")) : 0;
}
static int adapters_delete(lg_request *r, void *user)
{
    const lg_admin_deps *c = user;
    const lg_tenant_obj *t = tenant_param(r, c);
    return t ? lg_adapters_delete(r, &c->adapters, t, lg_request_param(r, "name")) : 0;
}

int lg_routes_admin(lg_router *rt, const lg_admin_deps *deps, lg_err *err)
{
    if (!deps->admin_key)
        return lg_fail(err, "the operator API needs the operator key");
    lg_admin_deps *c = malloc(sizeof *c); /* the routes' user, freed with the router */
    if (!c)
        return lg_fail(err, "out of memory");
    *c = *deps;
    void *key = (void *)c->admin_key;
#define ADMIN(m, p, f, n) {.method = m, .pattern = p, .fn = f, .user = c, .auth = lg_auth_admin, .auth_user = key, .name = n}
#define ADMIN_BODY(m, p, f, n)                                                                                      \
    {.method = m, .pattern = p, .fn = f, .user = c, .body_required = true, .auth = lg_auth_admin,                   \
     .auth_user = key, .name = n}
    lg_route routes[] = {
        {.method = "POST", .pattern = "/admin/v1/tenants", .fn = tenant_create, .user = c, .body_required = true,
         .auth = lg_auth_admin, .auth_user = key, .name = "admin.tenants.create", .free_user = free},
        ADMIN("GET", "/admin/v1/tenants", tenant_list, "admin.tenants.list"),
        ADMIN("GET", "/admin/v1/tenants/{t}", tenant_get, "admin.tenants.get"),
        ADMIN_BODY("PATCH", "/admin/v1/tenants/{t}", tenant_patch, "admin.tenants.update"),
        ADMIN("DELETE", "/admin/v1/tenants/{t}", tenant_delete, "admin.tenants.delete"),
        ADMIN_BODY("POST", "/admin/v1/tenants/{t}/keys", key_create, "admin.keys.create"),
        ADMIN("GET", "/admin/v1/tenants/{t}/keys", key_list, "admin.keys.list"),
        ADMIN("DELETE", "/admin/v1/keys/{id}", key_revoke, "admin.keys.revoke"),
        ADMIN_BODY("PUT", "/admin/v1/tenants/{t}/pricing", tenant_pricing_put, "admin.tenants.pricing.set"),
        ADMIN("DELETE", "/admin/v1/tenants/{t}/pricing", tenant_pricing_delete, "admin.tenants.pricing.reset"),
        ADMIN_BODY("PUT", "/admin/v1/tenants/{t}/limits", tenant_limits_put, "admin.tenants.limits.set"),
        ADMIN("GET", "/admin/v1/pricing", pricing_get, "admin.pricing.get"),
        ADMIN_BODY("PUT", "/admin/v1/pricing", pricing_put, "admin.pricing.set"),
        {.method = "POST", .pattern = "/admin/v1/tenants/{t}/adapters", .fn = adapters_upload, .user = c,
         .max_body = c->adapters.max_upload, .content_type = "multipart/form-data", .body_required = true,
         .auth = lg_auth_admin, .auth_user = key, .admit_body = lg_upload_quota_admit,
         .release_body = lg_upload_quota_release, .admit_user = c->uploads, .name = "admin.adapters.upload"},
        ADMIN_BODY("POST", "/admin/v1/tenants/{t}/adapters/import", adapters_import, "admin.adapters.import"),
        ADMIN("GET", "/admin/v1/tenants/{t}/adapters", adapters_list, "admin.adapters.list"),
        ADMIN("GET", "/admin/v1/tenants/{t}/adapters/{name}", adapters_get, "admin.adapters.get"),
        ADMIN("DELETE", "/admin/v1/tenants/{t}/adapters/{name}", adapters_delete, "admin.adapters.delete"),
    };
#undef ADMIN
#undef ADMIN_BODY
    if (lg_router_add(rt, &routes[0], err) != 0) {
        free(c);
        return -1;
    }
    return lg_router_add_all(rt, routes + 1, (int)(sizeof routes / sizeof routes[0]) - 1, err);
}
