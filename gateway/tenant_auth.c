/*
 * tenant_auth.c — see tenant_auth.h.
 */
#include "gateway/tenant_auth.h"

#include <stdio.h>
#include <string.h>

lg_key_status lg_tenant_auth_lookup(const lg_tenant_auth *a, const char *secret, size_t len, lg_key_entry *key,
                                    const lg_tenant_obj **tenant)
{
    *tenant = NULL;
    if (!lg_key_cache_find(a->keys, secret, len, key))
        return LG_KEY_UNKNOWN;
    /* by name (a hash lookup), not by id: this runs on every request */
    const lg_tenant_obj *t = lg_tenants_find(a->tenants, key->tenant_name);
    if (!t || t->id != key->tenant_id)
        return LG_KEY_TENANT_GONE;
    *tenant = t;
    return LG_KEY_LIVE;
}

static int auth_key(const lg_auth_in *in, const lg_tenant_auth *a, unsigned scope, lg_auth_result *out)
{
    if (!in->bearer) {
        out->status = 401;
        return -1;
    }
    lg_key_entry k;
    const lg_tenant_obj *t;
    switch (lg_tenant_auth_lookup(a, in->bearer, in->bearer_len, &k, &t)) {
    case LG_KEY_UNKNOWN:
        out->status = 401;
        out->message = "Incorrect API key provided. You can find your API key in your loragate operator's tenant settings.";
        return -1;
    case LG_KEY_TENANT_GONE:
        out->status = 401;
        out->message = "Incorrect API key provided: its tenant no longer exists.";
        return -1;
    case LG_KEY_LIVE: break;
    }
    if (in->tenant_via != LG_TENANT_NONE && in->tenant != t) {
        /* a key of another tenant at this tenant's base URL, or a tenant
         * name that does not exist: the same answer (no name probing) */
        out->status = 401;
        out->message = "Incorrect API key provided for this tenant's endpoint.";
        return -1;
    }
    if (scope && !(k.scopes & scope)) {
        out->status = 403;
        out->message = scope == LG_SCOPE_ADAPTERS
                           ? "You have insufficient permissions for this operation. Missing scope: adapters."
                           : "You have insufficient permissions for this operation. Missing scope: inference.";
        return -1;
    }
    _Static_assert(sizeof(lg_principal) <= LG_PRINCIPAL_MAX, "principal too large");
    lg_principal *p = (lg_principal *)out->principal;
    memset(p, 0, sizeof *p);
    p->tenant = t;
    p->scopes = k.scopes;
    snprintf(p->key_id, sizeof p->key_id, "%s", k.id);
    out->principal_len = sizeof *p;
    out->log[0].key = "tenant";
    snprintf(out->log[0].value, sizeof out->log[0].value, "%s", t->name);
    out->log[1].key = "key_id";
    snprintf(out->log[1].value, sizeof out->log[1].value, "%s", p->key_id);
    return 0;
}

int lg_auth_tenant_inference(const lg_auth_in *in, void *auth, lg_auth_result *out)
{
    return auth_key(in, auth, LG_SCOPE_INFERENCE, out);
}

int lg_auth_tenant_adapters(const lg_auth_in *in, void *auth, lg_auth_result *out)
{
    return auth_key(in, auth, LG_SCOPE_ADAPTERS, out);
}

int lg_auth_tenant_any(const lg_auth_in *in, void *auth, lg_auth_result *out) { return auth_key(in, auth, 0, out); }
