/*
 * tenant_auth.h — tenant API keys: who a bearer token is, and the auth
 * hooks (router.h lg_auth_fn) of the tenant routes.
 *
 * A key is live when the key cache (db/store.h lg_key_cache: the live keys
 * of live tenants, an in-memory snapshot) has it and its tenant is still the
 * live tenant of that name in the tenant view. Both are in memory: a lookup
 * is one SHA-256, a binary search and a hash lookup, on the loop thread.
 *
 * The hooks admit a live key of the addressed tenant (or of any tenant on
 * plain /v1/...) that has the route's scope, and set an lg_principal; they
 * answer 401 for an unknown key, a key of another tenant and a tenant that
 * does not exist alike (no name probing), and 403 for a missing scope.
 */
#ifndef LG_GW_TENANT_AUTH_H
#define LG_GW_TENANT_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "db/store.h"
#include "gateway/http/request.h"
#include "gateway/http/router.h"
#include "gateway/tenants.h"

/* What the hooks read: two handles the serve context owns (app.c). */
typedef struct lg_tenant_auth {
    lg_key_cache *keys;
    lg_tenants *tenants;
} lg_tenant_auth;

typedef enum lg_key_status {
    LG_KEY_LIVE = 0,        /* *key and *tenant set */
    LG_KEY_UNKNOWN = 1,     /* no live key has this secret (revoked, never made) */
    LG_KEY_TENANT_GONE = 2, /* *key set; its tenant is no longer live */
} lg_key_status;

/* Who the secret belongs to. Never blocks. */
lg_key_status lg_tenant_auth_lookup(const lg_tenant_auth *a, const char *secret, size_t len, lg_key_entry *key,
                                    const lg_tenant_obj **tenant);

/* Who called: set by the hooks below (copied into request memory). */
typedef struct lg_principal {
    const lg_tenant_obj *tenant;
    char key_id[LG_KEY_ID_LEN + 1];
    unsigned scopes;
} lg_principal;

static inline const lg_principal *lg_principal_of(const lg_request *r)
{
    return (const lg_principal *)lg_request_principal(r);
}

/* The hooks (user: the lg_tenant_auth). Each also logs "tenant" and "key_id". */
int lg_auth_tenant_inference(const lg_auth_in *in, void *auth, lg_auth_result *out); /* scope inference */
int lg_auth_tenant_adapters(const lg_auth_in *in, void *auth, lg_auth_result *out);  /* scope adapters */
int lg_auth_tenant_any(const lg_auth_in *in, void *auth, lg_auth_result *out);       /* any scope */

#endif
