/*
 * form.h — application/x-www-form-urlencoded text: a request's query string
 * (the usage views' parameters, routes_usage.c and usage_page.c) or a form
 * body (the usage page's sign-in). Pure parsing over the HTTP core's
 * percent-decoding; nothing here keeps state.
 */
#ifndef LG_GW_FORM_H
#define LG_GW_FORM_H

#include <stddef.h>

#include "gateway/http/request.h"

/* Calls cb for each name=value pair, both decoded ('+' is a space, %XX),
 * NUL-terminated, in order. Stops at the first cb that returns non-zero and
 * returns its value; -1 for malformed escapes, a NUL, or a pair over 4 KiB. */
int lg_form_each(const char *s, size_t len, int (*cb)(void *user, const char *name, const char *value), void *user);
/* The request's query string (without '?'); "" when none. [loop] */
const char *lg_form_query(lg_request *r, size_t *len);

#endif
