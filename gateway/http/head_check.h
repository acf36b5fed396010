/*
 * head_check.h — INTERNAL to gateway/: everything the gateway decides from
 * a request's head (method, path, Host, Authorization, Content-Type, the
 * declared body length) before it reads any body byte.
 *
 * Two callers run the same pure function:
 *  - the connection guard (conn.c), as soon as the headers of a request
 *    that carries a body have arrived: a refusal is answered at once and
 *    the body is never read (no unauthenticated buffering);
 *  - the dispatcher (request.c), when h2o hands over a complete request:
 *    the same checks plus the ones that need the whole body (its real size,
 *    a missing body).
 * Because the function is pure (a route table, the tenancy's non-blocking
 * resolver, the routes' auth hooks), both calls agree unless a key or a
 * tenant changed in between; the dispatcher's answer is the one sent.
 *
 * Order of the checks (the first failure is the answer): route (404, 405
 * with Allow, 400 tenant conflict), path parameters (400), tenant
 * resolution (503 when the directory cannot tell; an unknown tenant is
 * handed to auth as "no tenant", which answers it exactly as a key of
 * another tenant: 401, never a 404 that would confirm the name), auth
 * (401/403), then what the caller sends: body size (413), missing body
 * (400, whole requests only), content type (415). Who is asking comes
 * first, so an anonymous client learns nothing about a route's limits.
 */
#ifndef LG_GW_HEAD_CHECK_H
#define LG_GW_HEAD_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/http/router.h"

/* A request head as the checks read it: slices of the caller's buffers,
 * not NUL-terminated; NULL (len 0) when a header is absent. */
typedef struct lg_head {
    const char *method;
    size_t method_len;
    const char *path; /* the raw request target (matching stops at '?') */
    size_t path_len;
    const char *authority; /* Host / :authority */
    size_t authority_len;
    const char *authorization;
    size_t authorization_len;
    const char *content_type;
    size_t content_type_len;
    int64_t body_len; /* bytes of body: declared (guard) or received (dispatch); -1: unknown (chunked) */
    bool whole;       /* the whole request is here (dispatch); false: only its head (guard) */
} lg_head;

typedef struct lg_verdict {
    int status;              /* 0: admitted; else the answer's HTTP status */
    const char *code;        /* error object code (static), NULL: none */
    const char *param;       /* error object param (static or a route's parameter name), NULL: none */
    char message[512];
    char allow[96];          /* 405: the Allow header */
    int retry_after_s;       /* > 0: Retry-After */
    bool www_authenticate;   /* 401 */
    /* admitted, or refused by tenant/auth: what the route match found */
    lg_route_match m;
    char tenant_slug[64]; /* lowercased; "" when not addressed */
    void *tenant;         /* the resolver's object; NULL: not addressed or unknown */
    lg_auth_result auth;  /* admitted: the principal and log fields */
} lg_verdict;

/* Runs the checks above on h; fills v (always). Returns v->status. */
int lg__head_check(const lg_router *rt, const lg_head *h, lg_verdict *v);

/* A refused verdict for other reasons, worded like the checks' own. */
void lg__verdict_refuse(lg_verdict *v, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
