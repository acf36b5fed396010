/*
 * usage_sessions.c — see usage_sessions.h. A fixed table of MAX_SESSIONS
 * slots under one mutex; a free slot has an empty id; expired slots are
 * wiped as they are met.
 */
#include "gateway/usage_sessions.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "gateway/http/server.h"
#include "gateway/unix_time.h"

#define MAX_SESSIONS 4096
#define SID_HEX LG_USAGE_SID_HEX

typedef struct session {
    char id[SID_HEX + 1]; /* "" : free */
    bool op;
    char secret[LG_KEY_SECRET_LEN + 1];
    int64_t expires, created;
} session;

struct lg_usage_sessions {
    const lg_admin_key *admin;
    const lg_tenant_auth *auth;
    const lg_serve_env *env;
    pthread_mutex_t mu;
    session *s; /* MAX_SESSIONS */
};

int lg_usage_sessions_create(const lg_admin_key *admin, const lg_tenant_auth *auth, const lg_serve_env *env,
                             lg_usage_sessions **out, lg_err *err)
{
    lg_usage_sessions *s = calloc(1, sizeof *s);
    if (!s || !(s->s = calloc(MAX_SESSIONS, sizeof *s->s))) {
        free(s);
        return lg_fail(err, "out of memory");
    }
    s->admin = admin;
    s->auth = auth;
    s->env = env;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void lg_usage_sessions_free(lg_usage_sessions *s)
{
    if (!s)
        return;
    OPENSSL_cleanse(s->s, sizeof *s->s * MAX_SESSIONS);
    free(s->s);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- the table ------------------------------------------------------------ */

static bool random_hex(char *out, size_t nbytes)
{
    unsigned char b[64];
    if (nbytes > sizeof b || RAND_bytes(b, (int)nbytes) != 1)
        return false;
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return true;
}

/* A copy of the live session with this id. */
static bool session_find(lg_usage_sessions *c, const char *sid, session *out)
{
    int64_t now = lg_unix_now();
    bool found = false;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < MAX_SESSIONS; i++) {
        session *s = &c->s[i];
        if (!s->id[0])
            continue;
        if (s->expires <= now) {
            OPENSSL_cleanse(s, sizeof *s);
            continue;
        }
        if (!found && CRYPTO_memcmp(s->id, sid, SID_HEX) == 0) {
            *out = *s;
            found = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static bool session_new(lg_usage_sessions *c, bool op, const char *secret, char sid[SID_HEX + 1])
{
    if (!random_hex(sid, SID_HEX / 2))
        return false;
    int64_t now = lg_unix_now();
    pthread_mutex_lock(&c->mu);
    int slot = 0;
    for (int i = 0; i < MAX_SESSIONS; i++) {
        if (!c->s[i].id[0] || c->s[i].expires <= now) {
            slot = i;
            break;
        }
        if (c->s[i].created < c->s[slot].created)
            slot = i; /* full: the oldest goes */
    }
    session *s = &c->s[slot];
    memset(s, 0, sizeof *s);
    memcpy(s->id, sid, SID_HEX + 1);
    s->op = op;
    if (secret)
        snprintf(s->secret, sizeof s->secret, "%s", secret);
    s->created = now;
    s->expires = now + LG_USAGE_SESSION_SECONDS;
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void session_drop(lg_usage_sessions *c, const char *sid)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (c->s[i].id[0] && CRYPTO_memcmp(c->s[i].id, sid, SID_HEX) == 0)
            OPENSSL_cleanse(&c->s[i], sizeof c->s[i]);
    pthread_mutex_unlock(&c->mu);
}

/* ---- the cookie ----------------------------------------------------------- */

static bool server_tls(const lg_usage_sessions *c)
{
    return !(c->env && c->env->server) || lg_server_is_tls(c->env->server);
}

static const char *cookie_name(const lg_usage_sessions *c) { return server_tls(c) ? "__Host-lg_usage" : "lg_usage"; }

/* The session id from the Cookie header(s) (HTTP/2 may split them). */
static bool cookie_sid(const lg_usage_sessions *c, lg_request *r, char sid[SID_HEX + 1])
{
    h2o_req_t *req = lg_request_h2o(r);
    if (!req)
        return false;
    const char *name = cookie_name(c);
    size_t nl = strlen(name);
    for (ssize_t i = -1; (i = h2o_find_header(&req->headers, H2O_TOKEN_COOKIE, i)) != -1;) {
        h2o_iovec_t v = req->headers.entries[i].value;
        const char *p = v.base, *end = v.base + v.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == ';'))
                p++;
            const char *semi = memchr(p, ';', (size_t)(end - p));
            const char *ce = semi ? semi : end;
            if ((size_t)(ce - p) == nl + 1 + SID_HEX && !memcmp(p, name, nl) && p[nl] == '=') {
                memcpy(sid, p + nl + 1, SID_HEX);
                sid[SID_HEX] = 0;
                return true;
            }
            p = ce;
        }
    }
    return false;
}

void lg_usage_set_cookie(lg_usage_sessions *s, lg_request *r, const char *sid, int max_age)
{
    char v[256];
    snprintf(v, sizeof v, "%s=%s; Path=/; HttpOnly;%s SameSite=Strict; Max-Age=%d", cookie_name(s), sid,
             server_tls(s) ? " Secure;" : "", max_age);
    lg_request_add_header(r, "set-cookie", v);
}

/* ---- signing in and out --------------------------------------------------- */

lg_sign_in lg_usage_sign_in(lg_usage_sessions *s, const char *key, size_t len, char sid[SID_HEX + 1],
                            char who[LG_KEY_ID_LEN + 1])
{
    bool op = s->admin && lg_admin_key_matches(s->admin, key, len);
    lg_key_entry k;
    const lg_tenant_obj *t;
    /* a key whose tenant just went still opens a session; its first view ends it */
    bool tenant = !op && lg_tenant_auth_lookup(s->auth, key, len, &k, &t) != LG_KEY_UNKNOWN;
    if (!op && !tenant)
        return LG_SIGN_IN_REFUSED;
    if (!session_new(s, op, op ? NULL : key, sid))
        return LG_SIGN_IN_FAILED;
    snprintf(who, LG_KEY_ID_LEN + 1, "%s", op ? "operator" : k.id);
    return op ? LG_SIGN_IN_OPERATOR : LG_SIGN_IN_TENANT;
}

void lg_usage_sign_out(lg_usage_sessions *s, lg_request *r)
{
    char sid[SID_HEX + 1];
    if (cookie_sid(s, r, sid))
        session_drop(s, sid);
}

bool lg_usage_viewer_of(lg_usage_sessions *s, lg_request *r, lg_usage_viewer *v)
{
    memset(v, 0, sizeof *v);
    char sid[SID_HEX + 1];
    session ses;
    if (!cookie_sid(s, r, sid) || !session_find(s, sid, &ses))
        return false;
    if (ses.op) {
        v->op = true;
        return true;
    }
    lg_key_entry k;
    const lg_tenant_obj *t;
    lg_key_status st = lg_tenant_auth_lookup(s->auth, ses.secret, strlen(ses.secret), &k, &t);
    OPENSSL_cleanse(&ses, sizeof ses);
    if (st == LG_KEY_UNKNOWN) {
        session_drop(s, sid); /* revoked */
        return false;
    }
    if (st != LG_KEY_LIVE)
        return false;
    v->t = t;
    v->tenant_id = k.tenant_id;
    snprintf(v->tenant, sizeof v->tenant, "%s", t->name);
    snprintf(v->key_id, sizeof v->key_id, "%s", k.id);
    return true;
}
