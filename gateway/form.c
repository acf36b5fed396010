/*
 * form.c — see form.h.
 */
#include "gateway/form.h"

#include <stdint.h>
#include <string.h>

#include <h2o.h>

#include "gateway/http/http_util.h"

int lg_form_each(const char *s, size_t len, int (*cb)(void *user, const char *name, const char *value), void *user)
{
    char name[4096], value[4096];
    const char *end = s + len;
    while (s < end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *pe = amp ? amp : end;
        if (pe > s) {
            const char *eq = memchr(s, '=', (size_t)(pe - s));
            const char *ke = eq ? eq : pe;
            const char *v = eq ? eq + 1 : pe;
            if (lg_form_decode(s, (size_t)(ke - s), name, sizeof name) < 0 ||
                lg_form_decode(v, (size_t)(pe - v), value, sizeof value) < 0)
                return -1;
            int rc = cb(user, name, value);
            if (rc)
                return rc;
        }
        s = pe + 1;
    }
    return 0;
}

const char *lg_form_query(lg_request *r, size_t *len)
{
    h2o_req_t *req = lg_request_h2o(r);
    if (!req || req->query_at == SIZE_MAX) {
        *len = 0;
        return "";
    }
    *len = req->path.len - req->query_at - 1;
    return req->path.base + req->query_at + 1;
}
