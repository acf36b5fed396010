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
 * from the key (lg_auth_tenant_adapters). Another tenant's adapter is
 * unknown here (404), never forbidden.
 */
#include <stdlib.h>

#include "gateway/adapter_upload.h"
#include "gateway/routes.h"
#include "gateway/tenant_auth.h"
#include "gateway/upload_quota.h"

static const lg_tenant_obj *tenant_of(lg_request *r) { return lg_principal_of(r)->tenant; }

static int upload(lg_request *r, void *aa) { return lg_adapters_upload(r, aa, tenant_of(r)); }
static int list(lg_request *r, void *aa) { return lg_adapters_list(r, aa, tenant_of(r)); }
static int get(lg_request *r, void *aa) { return lg_adapters_get(r, aa, tenant_of(r), lg_request_param(r, "name")); }
static int del(lg_request *r, void *aa) { return lg_adapters_delete(r, aa, tenant_of(r), lg_request_param(r, "name")); }

int lg_routes_adapters(lg_router *rt, const lg_adapters_deps *d, lg_err *err)
{
    lg_adapter_admin *aa = malloc(sizeof *aa); /* the routes' user, freed with the router */
    if (!aa)
        return lg_fail(err, "out of memory");
    *aa = d->adapters;
    lg_route routes[] = {
        {.method = "POST", .pattern = "/v1/adapters", .fn = upload, .user = aa, .max_body = aa->max_upload,
         .content_type = "multipart/form-data", .body_required = true, .auth = lg_auth_tenant_adapters,
         .auth_user = d->auth, .admit_body = lg_upload_quota_admit, .release_body = lg_upload_quota_release,
         .admit_user = d->uploads, .tenant_scoped = true, .name = "adapters.upload", .free_user = free},
        {.method = "GET", .pattern = "/v1/adapters", .fn = list, .user = aa, .auth = lg_auth_tenant_adapters,
         .auth_user = d->auth, .tenant_scoped = true, .name = "adapters.list"},
        {.method = "GET", .pattern = "/v1/adapters/{name}", .fn = get, .user = aa, .auth = lg_auth_tenant_adapters,
         .auth_user = d->auth, .tenant_scoped = true, .name = "adapters.get"},
        {.method = "DELETE", .pattern = "/v1/adapters/{name}", .fn = del, .user = aa,
         .auth = lg_auth_tenant_adapters, .auth_user = d->auth, .tenant_scoped = true, .name = "adapters.delete"},
    };
    if (lg_router_add(rt, &routes[0], err) != 0) {
        free(aa);
        return -1;
    }
    return lg_router_add_all(rt, routes + 1, (int)(sizeof routes / sizeof routes[0]) - 1, err);
}
