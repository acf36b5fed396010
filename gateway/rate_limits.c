/* rate_limits.c — placeholder until the limits work lands: admits everything. */
#include "rate_limits.h"

#include <stdlib.h>

struct lg_limits {
    lg_app *app;
};

int lg_limits_create(lg_app *app, lg_limits **out, lg_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return lg_fail(err, "out of memory");
    (*out)->app = app;
    return 0;
}
void lg_limits_free(lg_limits *l) { free(l); }
int lg_limits_admit(lg_limits *l, lg_request *r, const lg_app_tenant *t, int64_t est_tokens) { return 0; }
void lg_limits_finish(lg_limits *l, const lg_app_tenant *t, int64_t est_tokens, int64_t actual_tokens) {}
