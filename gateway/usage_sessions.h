/*
 * usage_sessions.h — sign-in sessions of the usage page (usage_page.c):
 * who may see which figures, by cookie.
 *
 * Sign-in. The key travels once, in a POST body, never in a URL. Sessions
 * are kept in memory (lost on restart: sign in again): a random 256-bit id
 * maps to "operator" or to the tenant key it was opened with; the cookie
 * holds only the id ("__Host-lg_usage", HttpOnly, Secure, SameSite=Strict,
 * Path=/; without TLS, on a loopback-only --insecure-http server,
 * "lg_usage" without Secure). Every view looks the key up again
 * (tenant_auth.h), so a revoked key or a deleted tenant ends its sessions
 * at once. Sessions last 8 hours; at most 4096 exist (the oldest goes
 * first).
 *
 * Threads: any loop thread; one mutex over a fixed table (a scan of 4096
 * slots per view: microseconds, and views are rare).
 */
#ifndef LG_GW_USAGE_SESSIONS_H
#define LG_GW_USAGE_SESSIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "gateway/http/admin_key.h"
#include "gateway/http/request.h"
#include "gateway/http/serve.h"
#include "gateway/tenant_auth.h"

#define LG_USAGE_SID_HEX 64
#define LG_USAGE_SESSION_SECONDS (8 * 3600)

typedef struct lg_usage_sessions lg_usage_sessions;

/* admin: the operator key (NULL: no operator sign-in); auth: tenant keys;
 * env: whether the server speaks TLS (read at request time: the server is
 * made after the routes). All must outlive the sessions. */
int lg_usage_sessions_create(const lg_admin_key *admin, const lg_tenant_auth *auth, const lg_serve_env *env,
                             lg_usage_sessions **out, lg_err *err);
void lg_usage_sessions_free(lg_usage_sessions *s); /* NULL: no-op; wipes the table */

typedef enum lg_sign_in {
    LG_SIGN_IN_OPERATOR = 0, /* the operator key */
    LG_SIGN_IN_TENANT = 1,   /* a live tenant key */
    LG_SIGN_IN_REFUSED = 2,  /* no such key */
    LG_SIGN_IN_FAILED = 3,   /* no session could be made (randomness) */
} lg_sign_in;

/* Opens a session for this key. On success sid is the new session's id and
 * who what the access log may name: "operator" or the key's public id. */
lg_sign_in lg_usage_sign_in(lg_usage_sessions *s, const char *key, size_t len, char sid[LG_USAGE_SID_HEX + 1],
                            char who[LG_KEY_ID_LEN + 1]);
/* Ends the session of r's cookie, if any. */
void lg_usage_sign_out(lg_usage_sessions *s, lg_request *r);

/* Set-Cookie for sid (max_age 0 with sid "": clears it). [loop] */
void lg_usage_set_cookie(lg_usage_sessions *s, lg_request *r, const char *sid, int max_age);

/* Who r's session is now. */
typedef struct lg_usage_viewer {
    bool op;
    int64_t tenant_id;
    char tenant[LG_STORE_NAME_MAX];
    char key_id[LG_KEY_ID_LEN + 1];
    const lg_tenant_obj *t; /* NULL for the operator */
} lg_usage_viewer;
/* false: not signed in (no cookie, no such session, expired, or its key no
 * longer live: a revoked key's session is dropped). [loop] */
bool lg_usage_viewer_of(lg_usage_sessions *s, lg_request *r, lg_usage_viewer *v);

#endif
