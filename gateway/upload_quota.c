/*
 * upload_quota.c — see upload_quota.h. Per-tenant counters in a small
 * open-addressing table (tenant ids are never reused; an entry whose
 * counters are back at zero is reused by any tenant).
 */
#include "gateway/upload_quota.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "gateway/tenant_auth.h"

typedef struct slot {
    int64_t tenant_id; /* -1: free */
    int n;
    uint64_t bytes;
} slot;

struct lg_upload_quota {
    pthread_mutex_t mu;
    char *data_dir;
    int max_per_tenant;
    uint64_t bytes_per_tenant, min_free, max_body;
    slot *slots;
    int cap; /* power of two */
    int n_held;
    uint64_t held_bytes;
};

typedef struct hold {
    lg_upload_quota *q;
    int64_t tenant_id;
    uint64_t bytes;
} hold;

int lg_upload_quota_create(const char *data_dir, int max_per_tenant, uint64_t bytes_per_tenant, uint64_t min_free,
                           uint64_t max_body, lg_upload_quota **out, lg_err *err)
{
    *out = NULL;
    lg_upload_quota *q = calloc(1, sizeof *q);
    if (!q || !(q->data_dir = strdup(data_dir))) {
        free(q);
        return lg_fail(err, "out of memory");
    }
    q->max_per_tenant = max_per_tenant > 0 ? max_per_tenant : 1;
    q->bytes_per_tenant = bytes_per_tenant;
    q->min_free = min_free;
    q->max_body = max_body;
    pthread_mutex_init(&q->mu, NULL);
    *out = q;
    return 0;
}

void lg_upload_quota_free(lg_upload_quota *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->mu);
    free(q->slots);
    free(q->data_dir);
    free(q);
}

static slot *find_slot(lg_upload_quota *q, int64_t id, bool create)
{
    if (create && (q->cap == 0 || q->n_held * 2 >= q->cap)) {
        /* grow (live entries only: those with n > 0) */
        int cap = q->cap ? q->cap * 2 : 16;
        slot *ns = malloc((size_t)cap * sizeof *ns);
        if (!ns)
            return NULL;
        for (int i = 0; i < cap; i++)
            ns[i].tenant_id = -1;
        for (int i = 0; i < q->cap; i++) {
            if (q->slots[i].tenant_id < 0 || q->slots[i].n == 0)
                continue;
            unsigned h = (unsigned)(q->slots[i].tenant_id * 2654435761u) & (unsigned)(cap - 1);
            while (ns[h].tenant_id >= 0)
                h = (h + 1) & (unsigned)(cap - 1);
            ns[h] = q->slots[i];
        }
        free(q->slots);
        q->slots = ns;
        q->cap = cap;
    }
    if (!q->cap)
        return NULL;
    unsigned h = (unsigned)(id * 2654435761u) & (unsigned)(q->cap - 1);
    slot *reuse = NULL;
    for (int probes = 0; probes < q->cap; probes++, h = (h + 1) & (unsigned)(q->cap - 1)) {
        slot *s = &q->slots[h];
        if (s->tenant_id == id)
            return s;
        if (s->tenant_id < 0 || (s->n == 0 && !reuse)) {
            if (!reuse)
                reuse = s;
            if (s->tenant_id < 0)
                break;
        }
    }
    if (!create || !reuse)
        return NULL;
    reuse->tenant_id = id;
    reuse->n = 0;
    reuse->bytes = 0;
    return reuse;
}

int lg_upload_quota_admit(const lg_auth_result *who, int64_t declared, void *user, void **out_hold, lg_auth_result *out)
{
    lg_upload_quota *q = user;
    *out_hold = NULL;
    int64_t tenant_id = 0; /* the operator */
    if (who->principal_len == sizeof(lg_principal)) {
        const lg_principal *p = (const lg_principal *)who->principal;
        tenant_id = p->tenant ? p->tenant->id : 0;
    }
    uint64_t bytes = declared >= 0 ? (uint64_t)declared : q->max_body;
    hold *h = malloc(sizeof *h);
    if (!h) {
        out->status = 503;
        out->message = "The server is out of memory; please retry.";
        return -1;
    }
    pthread_mutex_lock(&q->mu);
    slot *s = find_slot(q, tenant_id, true);
    int rc = 0;
    if (!s) {
        out->status = 503;
        out->message = "The server is out of memory; please retry.";
        rc = -1;
    } else if (s->n >= q->max_per_tenant) {
        out->status = 429;
        out->message = "Too many adapter uploads in flight for this tenant; retry when one has finished.";
        rc = -1;
    } else if (s->bytes + bytes > q->bytes_per_tenant) {
        out->status = 429;
        out->message = "The adapter uploads in flight for this tenant are too large together; retry when one has "
                       "finished.";
        rc = -1;
    } else if (q->min_free) {
        struct statvfs fs;
        if (statvfs(q->data_dir, &fs) == 0) {
            uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
            uint64_t need = 2 * (bytes + q->held_bytes) + q->min_free;
            if (avail < need) {
                out->status = 507;
                out->message = "Not enough free disk space for this upload on the server; please contact the operator.";
                rc = -1;
            }
        }
    }
    if (rc == 0) {
        s->n++;
        s->bytes += bytes;
        q->n_held++;
        q->held_bytes += bytes;
        *h = (hold){q, tenant_id, bytes};
        *out_hold = h;
    }
    pthread_mutex_unlock(&q->mu);
    if (rc != 0)
        free(h);
    return rc;
}

void lg_upload_quota_release(void *p)
{
    hold *h = p;
    if (!h)
        return;
    lg_upload_quota *q = h->q;
    pthread_mutex_lock(&q->mu);
    slot *s = find_slot(q, h->tenant_id, false);
    if (s && s->n > 0) {
        s->n--;
        s->bytes -= h->bytes <= s->bytes ? h->bytes : s->bytes;
    }
    q->n_held--;
    q->held_bytes -= h->bytes <= q->held_bytes ? h->bytes : q->held_bytes;
    pthread_mutex_unlock(&q->mu);
    free(h);
}

int lg_upload_quota_in_flight(lg_upload_quota *q, uint64_t *bytes)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n_held;
    if (bytes)
        *bytes = q->held_bytes;
    pthread_mutex_unlock(&q->mu);
    return n;
}
