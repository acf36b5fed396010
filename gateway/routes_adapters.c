/*
 * routes_adapters.c — the tenant adapter API, for keys with the `adapters`
 * scope, at /v1/adapters and at the tenant's own base URL
 * /t/<tenant>/v1/adapters (tenant_scoped):
 *
 *   POST   /v1/adapters          multipart/form-data: name, config
 *                                (adapter_config.json), weights
 *                                (adapter_model.safetensors); 201 new,
 *                                200 replaced (a new version)
 *   GET    /v1/adapters          this tenant's adapters
 *   GET    /v1/adapters/{name}
 *   DELETE /v1/adapters/{name}
 *
 * The work is adapter_upload.c's (shared with the operator's
 * /admin/v1/tenants/{t}/adapters routes); this file only takes the tenant
 * from the key (lg_app_auth_adapters). Another tenant's adapter is unknown
 * here (404), never forbidden.
 */
#include "gateway/adapter_upload.h"
#include "gateway/upload_quota.h"
#include "gateway/app.h"
#include "gateway/routes.h"

static lg_app_tenant *tenant_of(lg_request *r) { return lg_app_principal_of(r)->tenant; }

static int upload(lg_request *r, void *app) { return lg_adapters_upload(r, app, tenant_of(r)); }
static int list(lg_request *r, void *app) { return lg_adapters_list(r, app, tenant_of(r)); }
static int get(lg_request *r, void *app) { return lg_adapters_get(r, app, tenant_of(r), lg_request_param(r, "name")); }
static int del(lg_request *r, void *app)
{
    return lg_adapters_delete(r, app, tenant_of(r), lg_request_param(r, "name"));
}

int lg_routes_adapters(lg_router *rt, lg_app *app, lg_err *err)
{
    size_t max_upload = (size_t)app->cfg->max_upload_mb << 20;
    lg_route routes[] = {
        {.method = "POST", .pattern = "/v1/adapters", .fn = upload, .user = app, .max_body = max_upload,
         .content_type = "multipart/form-data", .body_required = true, .auth = lg_app_auth_adapters,
         .auth_user = app, .admit_body = lg_upload_quota_admit, .release_body = lg_upload_quota_release,
         .admit_user = app->uploads, .tenant_scoped = true, .name = "adapters.upload"},
        {.method = "GET", .pattern = "/v1/adapters", .fn = list, .user = app, .auth = lg_app_auth_adapters,
         .auth_user = app, .tenant_scoped = true, .name = "adapters.list"},
        {.method = "GET", .pattern = "/v1/adapters/{name}", .fn = get, .user = app, .auth = lg_app_auth_adapters,
         .auth_user = app, .tenant_scoped = true, .name = "adapters.get"},
        {.method = "DELETE", .pattern = "/v1/adapters/{name}", .fn = del, .user = app,
         .auth = lg_app_auth_adapters, .auth_user = app, .tenant_scoped = true, .name = "adapters.delete"},
    };
    return lg_router_add_all(rt, routes, (int)(sizeof routes / sizeof routes[0]), err);
}
