/*
 * usage_page.h — internal to the usage route family (routes_usage.c, the
 * JSON/CSV views; usage_page.c, the HTML page at GET /usage).
 */
#ifndef LG_GW_USAGE_PAGE_H
#define LG_GW_USAGE_PAGE_H

#include <stddef.h>

#include "gateway/http/router.h"

typedef struct lg_app lg_app;
typedef struct lg_request lg_request;

/* GET /usage, POST /usage/login, POST /usage/logout (usage_page.c). */
int lg__usage_page_routes(lg_router *rt, lg_app *app, lg_err *err);

/* application/x-www-form-urlencoded text (a query string or a form body):
 * calls cb for each name=value pair, both decoded ('+' is a space, %XX),
 * NUL-terminated, in order. Stops at the first cb that returns non-zero and
 * returns its value; -1 for malformed escapes, a NUL, or a pair over 4 KiB. */
int lg__form_each(const char *s, size_t len, int (*cb)(void *user, const char *name, const char *value), void *user);
/* The request's query string (without '?'); "" when none. */
const char *lg__request_query_string(lg_request *r, size_t *len);

#endif
