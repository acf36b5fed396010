/* metrics.c — placeholder until the metrics work lands: counts nothing. */
#include "metrics.h"

#include <stdlib.h>

struct lg_metrics {
    lg_app *app;
};

int lg_metrics_create(lg_app *app, bool tenant_labels, lg_metrics **out, lg_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return lg_fail(err, "out of memory");
    (*out)->app = app;
    return 0;
}
void lg_metrics_free(lg_metrics *m) { free(m); }
void lg_metrics_request(lg_metrics *m, const char *route, int status, const char *tenant) {}
void lg_metrics_generation(lg_metrics *m, const char *tenant, double ttft_s, double tpot_s, double e2e_s,
                           int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens) {}
int lg_routes_metrics(lg_router *rt, lg_app *app, lg_err *err) { return 0; }
