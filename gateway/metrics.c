/*
 * metrics.c — GET /metrics in the Prometheus text format (0.0.4), and the
 * counters the gateway feeds (metrics.h).
 *
 * What is counted here, under one short mutex (a hash lookup and a few
 * additions per event; at most tens of thousands of events a second):
 *   loragate_http_requests_total{route,status,tenant}  every answered request
 *     (fed by request.c's observer where the access-log line is written)
 *   loragate_generation_{ttft,tpot,e2e}_seconds       histograms, one per
 *     finished generation request (routes_openai.c)
 *   loragate_generations_total{tenant}, loragate_{prompt,cached_prompt,
 *     completion}_tokens_total{tenant}               what the ledger bills
 *   loragate_rate_limited_total{tenant,reason}       429s of rate_limits.c
 * What is read at scrape time from its owner (no copies kept here):
 *   the engine (queue depth, running sequences, pool pages by kind, prefix
 *   cache lookups/hits/cached tokens, adapter loads, evictions, load
 *   latency), the ledger (commit latency histogram, backlog, records,
 *   failures, health), the connection guard (early refusals, resets,
 *   lingering closes), the access log (dropped lines).
 *
 * The model-server protocol of the Gateway API Inference Extension (its
 * endpoint picker scrapes vLLM's names; render_vllm): from one engine
 * snapshot,
 *   vllm:num_requests_waiting, vllm:num_requests_running   gauges (requests
 *     queued or preempted / admitted: the same figures as
 *     loragate_engine_queue_depth / _running_sequences)
 *   vllm:kv_cache_usage_perc   gauge, a fraction in [0, 1] as vLLM's: pool
 *     pages neither free nor evictable prefix cache (KV in use and adapter
 *     weights) over the pool's pages
 *   vllm:cache_config_info{block_size,num_gpu_blocks}   1; tokens a page and
 *     the pool's pages (KV and adapters share them), for the picker's
 *     prefix-cache scorer
 *   vllm:lora_requests_info{max_lora,running_lora_adapters,
 *     waiting_lora_adapters}   gauge whose value is the scrape's Unix time
 *     (vLLM's: when the lists were last set); the lists are comma-separated (no spaces), sorted, distinct
 *     adapter names as a request names them in `model` (the tenant's own
 *     name, without the tenant: two tenants' adapters of one name are one
 *     entry) of the requests running / waiting; max_lora is the most
 *     adapters one engine step serves (each sequence may have its own).
 * With several engines (--data-parallel-size, engine/runtime/dp_router.h)
 * every series above is for the server as a whole: counts, pages and
 * seconds summed over the engines (so kv_cache_usage_perc is over all
 * their pages, num_gpu_blocks their pages in all, max_lora the adapters
 * all their steps serve at once), the adapter lists merged. Per engine,
 * with an engine="k" label (render_per_engine): loragate_dp_queue_depth,
 * _running_sequences, _pool_pages{kind}, _pool_pages_capacity,
 * _kv_cache_usage_perc, _adapters_resident, _adapter_loads_total,
 * _steps_total, _requests_finished_total, and with more than one engine the
 * router's _routed_requests_total and _spilled_requests_total.
 * Adapter names are label values here: /metrics shows every tenant's
 * adapters in use to whoever may read it (docs/operations.md).
 *
 * Dependencies, one way: request.c calls the observer below; routes_openai.c
 * feeds generations and 429s; this file reads the tenant view and, when
 * scraped, the engine, ledger, server and access log. The exposition is one
 * function per group of series (render_*), in the order they appear.
 *
 * Tenant labels. A tenant label value is always the slug of a tenant that
 * exists (a slug nobody created, e.g. from a scanner probing /t/<x>/, is
 * counted as tenant=""), and at most LG_METRICS_MAX_TENANTS distinct ones
 * are kept; later ones share tenant="_other". With tenant_labels false
 * (`--metrics-tenant-labels off`) no series has a tenant label at all.
 * Histograms never carry one (buckets x tenants grows too fast).
 */
#include "gateway/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "engine/base/strmap.h"
#include "engine/base/version.h"
#include "gateway/http/request.h"
#include "gateway/http/server.h"

#define LG_METRICS_MAX_TENANTS 1000
#define OTHER_TENANT "_other"

enum { R_RPM, R_TPM, R_CONCURRENT, R_MONTHLY, R_N };
static const char *const REASONS[R_N] = {"rpm", "tpm", "concurrent", "monthly_tokens"};

typedef struct tenant_ent {
    char name[LG_STORE_NAME_MAX];
    uint64_t generations, prompt, cached, completion;
    uint64_t limited[R_N];
} tenant_ent;

typedef struct req_ent {
    char *route; /* NULL: free slot */
    int status;
    int tenant;  /* index in tenants, -1: "" */
    uint64_t n;
} req_ent;

typedef struct hist {
    const double *bounds;
    int n;
    uint64_t counts[16]; /* per bucket (not cumulative), [n] = above the last bound */
    uint64_t count;
    double sum;
} hist;

static const double TTFT_B[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TPOT_B[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
static const double E2E_B[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

struct lg_metrics {
    lg_metrics_sources src;
    bool tenant_labels;
    pthread_mutex_t mu;
    tenant_ent *tenants;
    int n_tenants;
    lg_strmap *tenant_index; /* name -> index + 1 */
    int other; /* index of "_other", -1 until needed */
    req_ent *reqs;
    size_t cap_reqs, n_reqs;
    hist ttft, tpot, e2e;
    uint64_t generations_untenanted;
    void *auth; /* --metrics-auth's state, freed with the metrics */
};

/* ---- growing text ------------------------------------------------------------ */

/* A label value with \ " and newline escaped (the exposition format's rule). */
static void sb_label(lg_strbuf *b, const char *v)
{
    char tmp[3 * LG_STORE_NAME_MAX + 8];
    size_t k = 0;
    for (const char *c = v; *c && k + 3 < sizeof tmp; c++) {
        if (*c == '\\' || *c == '"') {
            tmp[k++] = '\\';
            tmp[k++] = *c;
        } else if (*c == '\n') {
            tmp[k++] = '\\';
            tmp[k++] = 'n';
        } else {
            tmp[k++] = *c;
        }
    }
    tmp[k] = 0;
    lg_strbuf_printf(b, "%s", tmp);
}

/* ---- creation ------------------------------------------------------------------ */

static void observe(void *user, const char *route, int status, const char *tenant)
{
    lg_metrics_request(user, route, status, tenant);
}

int lg_metrics_create(const lg_metrics_sources *src, bool tenant_labels, lg_metrics **out, lg_err *err)
{
    lg_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return lg_fail(err, "out of memory");
    if (src)
        m->src = *src;
    m->tenant_labels = tenant_labels;
    m->other = -1;
    pthread_mutex_init(&m->mu, NULL);
    m->cap_reqs = 256;
    m->reqs = calloc(m->cap_reqs, sizeof *m->reqs);
    m->tenants = calloc(LG_METRICS_MAX_TENANTS + 1, sizeof *m->tenants);
    m->tenant_index = lg_strmap_new();
    if (!m->reqs || !m->tenants || !m->tenant_index) {
        lg_metrics_free(m);
        return lg_fail(err, "out of memory");
    }
    m->ttft = (hist){.bounds = TTFT_B, .n = (int)(sizeof TTFT_B / sizeof TTFT_B[0])};
    m->tpot = (hist){.bounds = TPOT_B, .n = (int)(sizeof TPOT_B / sizeof TPOT_B[0])};
    m->e2e = (hist){.bounds = E2E_B, .n = (int)(sizeof E2E_B / sizeof E2E_B[0])};
    lg_request_set_observer(observe, m);
    *out = m;
    return 0;
}

void lg_metrics_free(lg_metrics *m)
{
    if (!m)
        return;
    lg_request_set_observer(NULL, NULL);
    for (size_t i = 0; i < m->cap_reqs; i++)
        free(m->reqs ? m->reqs[i].route : NULL);
    free(m->reqs);
    free(m->tenants);
    lg_strmap_free(m->tenant_index);
    pthread_mutex_destroy(&m->mu);
    free(m->auth);
    free(m);
}

/* ---- feeding ----------------------------------------------------------------------- */

/* Index of the tenant label (mu held): -1 for none/unknown. `known`: the
 * caller knows it is a real tenant (it came from a tenant object). */
static int tenant_ix(lg_metrics *m, const char *name, bool known)
{
    if (!m->tenant_labels || !name || !*name)
        return -1;
    void *hit = lg_strmap_get(m->tenant_index, name);
    if (hit)
        return (int)((intptr_t)hit - 1);
    if (!known && (!m->src.tenants || !lg_tenants_find(m->src.tenants, name)))
        return -1; /* not a tenant: no label value from a stranger */
    if (m->n_tenants >= LG_METRICS_MAX_TENANTS) {
        if (m->other < 0) {
            m->other = m->n_tenants++;
            snprintf(m->tenants[m->other].name, sizeof m->tenants[m->other].name, "%s", OTHER_TENANT);
        }
        return m->other;
    }
    if (lg_strmap_put(m->tenant_index, name, (void *)(intptr_t)(m->n_tenants + 1)) != 0)
        return -1;
    int i = m->n_tenants++;
    snprintf(m->tenants[i].name, sizeof m->tenants[i].name, "%s", name);
    return i;
}

static uint64_t hash_req(const char *route, int status, int tenant)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *c = route; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    h = (h ^ (uint64_t)status) * 1099511628211ull;
    h = (h ^ (uint64_t)(tenant + 1)) * 1099511628211ull;
    return h;
}

static int grow_reqs(lg_metrics *m)
{
    size_t cap = m->cap_reqs * 2;
    req_ent *n = calloc(cap, sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < m->cap_reqs; i++)
        if (m->reqs[i].route) {
            size_t j = hash_req(m->reqs[i].route, m->reqs[i].status, m->reqs[i].tenant) & (cap - 1);
            while (n[j].route)
                j = (j + 1) & (cap - 1);
            n[j] = m->reqs[i];
        }
    free(m->reqs);
    m->reqs = n;
    m->cap_reqs = cap;
    return 0;
}

void lg_metrics_request(lg_metrics *m, const char *route, int status, const char *tenant)
{
    if (!m)
        return;
    if (!route || !*route)
        route = "unmatched"; /* 404s of unknown paths: one series, not one per path */
    if (status < 0 || status > 999)
        status = 0;
    pthread_mutex_lock(&m->mu);
    int t = tenant_ix(m, tenant, false);
    size_t j = hash_req(route, status, t) & (m->cap_reqs - 1);
    while (m->reqs[j].route && (m->reqs[j].status != status || m->reqs[j].tenant != t || strcmp(m->reqs[j].route, route)))
        j = (j + 1) & (m->cap_reqs - 1);
    if (!m->reqs[j].route) {
        if ((m->n_reqs + 1) * 2 > m->cap_reqs) {
            if (grow_reqs(m) != 0)
                goto out;
            j = hash_req(route, status, t) & (m->cap_reqs - 1);
            while (m->reqs[j].route)
                j = (j + 1) & (m->cap_reqs - 1);
        }
        if (!(m->reqs[j].route = strdup(route)))
            goto out;
        m->reqs[j].status = status;
        m->reqs[j].tenant = t;
        m->n_reqs++;
    }
    m->reqs[j].n++;
out:
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void lg_metrics_generation(lg_metrics *m, const char *tenant, double ttft_s, double tpot_s, double e2e_s,
                           int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    if (ttft_s >= 0)
        hist_add(&m->ttft, ttft_s);
    if (tpot_s >= 0)
        hist_add(&m->tpot, tpot_s);
    if (e2e_s >= 0)
        hist_add(&m->e2e, e2e_s);
    int t = m->tenant_labels ? tenant_ix(m, tenant, true) : -1;
    if (t >= 0) {
        m->tenants[t].generations++;
        m->tenants[t].prompt += prompt_tokens > 0 ? (uint64_t)prompt_tokens : 0;
        m->tenants[t].cached += cached_tokens > 0 ? (uint64_t)cached_tokens : 0;
        m->tenants[t].completion += completion_tokens > 0 ? (uint64_t)completion_tokens : 0;
    } else {
        /* no tenant labels: one series, kept on a pseudo entry at the end */
        tenant_ent *u = &m->tenants[LG_METRICS_MAX_TENANTS];
        u->generations++;
        u->prompt += prompt_tokens > 0 ? (uint64_t)prompt_tokens : 0;
        u->cached += cached_tokens > 0 ? (uint64_t)cached_tokens : 0;
        u->completion += completion_tokens > 0 ? (uint64_t)completion_tokens : 0;
    }
    pthread_mutex_unlock(&m->mu);
}

void lg_metrics_limited(lg_metrics *m, const char *tenant, const char *reason)
{
    if (!m || !reason)
        return;
    int r = 0;
    while (r < R_N && strcmp(REASONS[r], reason))
        r++;
    if (r == R_N)
        return;
    pthread_mutex_lock(&m->mu);
    int t = m->tenant_labels ? tenant_ix(m, tenant, true) : -1;
    m->tenants[t >= 0 ? t : LG_METRICS_MAX_TENANTS].limited[r]++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- the exposition ------------------------------------------------------------------ */

static void head(lg_strbuf *b, const char *name, const char *type, const char *help)
{
    lg_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "NaN");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
    else {
        /* the shortest text that reads back as v: 0.025, not 0.025000000000000001 */
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
}

static void hist_out(lg_strbuf *b, const char *name, const char *help, const hist *h)
{
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    char le[40];
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        fmt_num(le, sizeof le, h->bounds[i]);
        lg_strbuf_printf(b, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, le, cum);
    }
    lg_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h->count);
    char sum[40];
    fmt_num(sum, sizeof sum, h->sum);
    lg_strbuf_printf(b, "%s_sum %s\n%s_count %" PRIu64 "\n", name, sum, name, h->count);
}

static void gauge(lg_strbuf *b, const char *name, const char *help, double v)
{
    char s[40];
    fmt_num(s, sizeof s, v);
    head(b, name, "gauge", help);
    lg_strbuf_printf(b, "%s %s\n", name, s);
}

static void counter(lg_strbuf *b, const char *name, const char *help, uint64_t v)
{
    head(b, name, "counter", help);
    lg_strbuf_printf(b, "%s %" PRIu64 "\n", name, v);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The per-tenant counters: with labels one line per tenant, else one line. */
static void tenant_counter(lg_strbuf *b, bool labels, const tenant_ent *tenants, int nt, const char *name,
                           const char *help, size_t off)
{
    head(b, name, "counter", help);
    if (!labels) {
        lg_strbuf_printf(b, "%s %" PRIu64 "\n", name, *(const uint64_t *)((const char *)&tenants[LG_METRICS_MAX_TENANTS] + off));
        return;
    }
    for (int i = 0; i < nt; i++) {
        lg_strbuf_printf(b, "%s{tenant=\"", name);
        sb_label(b, tenants[i].name);
        lg_strbuf_printf(b, "\"} %" PRIu64 "\n", *(const uint64_t *)((const char *)&tenants[i] + off));
    }
}

static int cmp_req(const void *a, const void *b)
{
    const req_ent *x = a, *y = b;
    int c = strcmp(x->route, y->route);
    if (c)
        return c;
    if (x->status != y->status)
        return x->status - y->status;
    return x->tenant - y->tenant;
}

/* Our own counters, copied under the lock so that rendering holds no lock. */
typedef struct snapshot {
    req_ent *reqs; /* route strings stay valid: entries are never freed before m */
    size_t n_reqs;
    tenant_ent *tenants; /* LG_METRICS_MAX_TENANTS + 1: the last one is the unlabelled total */
    int n_tenants;
    hist ttft, tpot, e2e;
} snapshot;

static int take_snapshot(lg_metrics *m, snapshot *s)
{
    pthread_mutex_lock(&m->mu);
    s->reqs = malloc((m->n_reqs ? m->n_reqs : 1) * sizeof *s->reqs);
    s->n_reqs = 0;
    if (s->reqs)
        for (size_t i = 0; i < m->cap_reqs; i++)
            if (m->reqs[i].route)
                s->reqs[s->n_reqs++] = m->reqs[i];
    s->n_tenants = m->n_tenants;
    s->tenants = malloc(((size_t)LG_METRICS_MAX_TENANTS + 1) * sizeof *s->tenants);
    if (s->tenants)
        memcpy(s->tenants, m->tenants, ((size_t)LG_METRICS_MAX_TENANTS + 1) * sizeof *s->tenants);
    s->ttft = m->ttft;
    s->tpot = m->tpot;
    s->e2e = m->e2e;
    pthread_mutex_unlock(&m->mu);
    if (!s->reqs || !s->tenants) {
        free(s->reqs);
        free(s->tenants);
        return -1;
    }
    return 0;
}

static void render_process(lg_strbuf *b, int64_t started_at)
{
    lg_strbuf_printf(b, "# HELP loragate_build_info The running loragate version.\n# TYPE loragate_build_info gauge\n"
                  "loragate_build_info{version=\"%s\"} 1\n",
              LG_VERSION);
    if (started_at)
        gauge(b, "loragate_start_time_seconds", "Unix time the serve process started.", (double)started_at);
}

static void render_requests(lg_strbuf *b, bool labels, snapshot *s)
{
    head(b, "loragate_http_requests_total", "counter", "HTTP requests answered, by route name, status and tenant.");
    qsort(s->reqs, s->n_reqs, sizeof *s->reqs, cmp_req);
    for (size_t i = 0; i < s->n_reqs; i++) {
        const req_ent *q = &s->reqs[i];
        lg_strbuf_printf(b, "loragate_http_requests_total{route=\"");
        sb_label(b, q->route);
        lg_strbuf_printf(b, "\",status=\"%d\"", q->status);
        if (labels) {
            lg_strbuf_printf(b, ",tenant=\"");
            sb_label(b, q->tenant >= 0 ? s->tenants[q->tenant].name : "");
            lg_strbuf_printf(b, "\"");
        }
        lg_strbuf_printf(b, "} %" PRIu64 "\n", q->n);
    }
}

static void render_generations(lg_strbuf *b, bool labels, const snapshot *s)
{
    hist_out(b, "loragate_generation_ttft_seconds",
             "Time to first token of finished generation requests (received to first token).", &s->ttft);
    hist_out(b, "loragate_generation_tpot_seconds",
             "Time per output token after the first, per generation request with at least two tokens.", &s->tpot);
    hist_out(b, "loragate_generation_e2e_seconds", "End-to-end time of generation requests (received to finished).",
             &s->e2e);
    tenant_counter(b, labels, s->tenants, s->n_tenants, "loragate_generations_total",
                   "Generation requests that reached the engine (billed).", offsetof(tenant_ent, generations));
    tenant_counter(b, labels, s->tenants, s->n_tenants, "loragate_prompt_tokens_total",
                   "Prompt tokens billed (cached ones included).", offsetof(tenant_ent, prompt));
    tenant_counter(b, labels, s->tenants, s->n_tenants, "loragate_cached_prompt_tokens_total",
                   "Prompt tokens served from the prefix cache (billed at the cached-input price).",
                   offsetof(tenant_ent, cached));
    tenant_counter(b, labels, s->tenants, s->n_tenants, "loragate_completion_tokens_total",
                   "Completion tokens billed.", offsetof(tenant_ent, completion));
}

static void render_limited(lg_strbuf *b, bool labels, const snapshot *s)
{
    head(b, "loragate_rate_limited_total", "counter",
         "Requests refused with 429 by the tenant limits, by reason (rpm, tpm, concurrent, monthly_tokens).");
    for (int r = 0; r < R_N; r++) {
        if (!labels) {
            lg_strbuf_printf(b, "loragate_rate_limited_total{reason=\"%s\"} %" PRIu64 "\n", REASONS[r],
                      s->tenants[LG_METRICS_MAX_TENANTS].limited[r]);
            continue;
        }
        for (int i = 0; i < s->n_tenants; i++)
            if (s->tenants[i].limited[r]) {
                lg_strbuf_printf(b, "loragate_rate_limited_total{reason=\"%s\",tenant=\"", REASONS[r]);
                sb_label(b, s->tenants[i].name);
                lg_strbuf_printf(b, "\"} %" PRIu64 "\n", s->tenants[i].limited[r]);
            }
    }
}

/* The engine's queue, pool and prefix cache, from its published snapshot. */
static void render_engine(lg_strbuf *b, const lg_engine_stats *es)
{
    gauge(b, "loragate_engine_queue_depth", "Requests waiting for admission to the engine.", es->queued);
    gauge(b, "loragate_engine_running_sequences", "Sequences admitted and running in the engine.", es->running);
    head(b, "loragate_pool_pages", "gauge",
         "Pages of the device memory pool by kind: kv (KV cache in use), adapter (LoRA weights), cached "
         "(evictable prefix-cache pages), free.");
    lg_strbuf_printf(b, "loragate_pool_pages{kind=\"kv\"} %d\nloragate_pool_pages{kind=\"adapter\"} %d\n"
                  "loragate_pool_pages{kind=\"cached\"} %d\nloragate_pool_pages{kind=\"free\"} %d\n",
              es->pages_kv, es->pages_adapter, es->pages_cached, es->pages_free);
    gauge(b, "loragate_pool_pages_capacity", "Pages of the device memory pool.", es->pages_total);
    gauge(b, "loragate_pool_page_bytes", "Bytes per pool page.", (double)es->page_bytes);
    gauge(b, "loragate_kv_cache_tokens_capacity", "Tokens of KV cache the pool holds when every page is KV.",
          (double)es->kv_tokens_capacity);
    head(b, "loragate_model_quantization_info", "gauge",
         "The base model's weight quantization (none, fp8, fp8-block, awq, gptq, compressed-tensors-int4, fbgemm_fp8, "
         "int4-rtn, gguf), as a label.");
    lg_strbuf_printf(b, "loragate_model_quantization_info{quantization=\"%s\"} 1\n",
                     es->weights_quant ? es->weights_quant : "none");
    head(b, "loragate_kv_cache_info", "gauge", "The KV cache's element type (f32, f16, bf16, f8e4m3), as a label.");
    lg_strbuf_printf(b, "loragate_kv_cache_info{dtype=\"%s\"} 1\n", es->kv_dtype ? es->kv_dtype : "?");
    gauge(b, "loragate_prefix_cache_pages", "KV pages held by the prefix cache (in use or cached).",
          es->pages_prefix);
    counter(b, "loragate_prefix_cache_lookups_total", "Admissions that looked up the prefix cache.",
            (uint64_t)es->prefix_lookups);
    counter(b, "loragate_prefix_cache_hits_total", "Admissions that found at least one cached page.",
            (uint64_t)es->prefix_hits);
    gauge(b, "loragate_prefix_cache_hit_ratio",
          "Prefix-cache hits over lookups since start (NaN before the first lookup).",
          es->prefix_lookups ? (double)es->prefix_hits / (double)es->prefix_lookups : NAN);
    counter(b, "loragate_engine_prompt_tokens_total", "Prompt tokens of admitted sequences.",
            (uint64_t)es->prompt_tokens);
    counter(b, "loragate_engine_prefill_tokens_total",
            "Prompt tokens the engine computed (prefill work, recomputation after preemption included).",
            (uint64_t)es->prefill_tokens);
    counter(b, "loragate_prefix_cache_cached_tokens_total",
            "Prompt tokens of admitted sequences served from the prefix cache.", (uint64_t)es->cached_tokens);
    gauge(b, "loragate_prefix_cache_token_ratio",
          "Cached prompt tokens over prompt tokens since start (NaN before the first).",
          es->prompt_tokens ? (double)es->cached_tokens / (double)es->prompt_tokens : NAN);
    counter(b, "loragate_engine_decode_steps_total", "Engine steps that only decoded.", (uint64_t)es->decode_steps);
    counter(b, "loragate_engine_chained_decode_steps_total",
            "Decode steps enqueued before the previous step's tokens were read (decode bursts).",
            (uint64_t)es->chained_steps);
    counter(b, "loragate_spec_verify_rows_total",
            "Speculative decoding: sequence steps that verified proposed tokens.", (uint64_t)es->spec_verify_rows);
    counter(b, "loragate_spec_proposed_tokens_total", "Speculative decoding: tokens proposed.",
            (uint64_t)es->spec_proposed);
    counter(b, "loragate_spec_accepted_tokens_total",
            "Speculative decoding: proposed tokens accepted (emitted as proposed).", (uint64_t)es->spec_accepted);
    gauge(b, "loragate_spec_acceptance_ratio",
          "Speculative decoding: accepted over proposed tokens since start (NaN before the first proposal).",
          es->spec_proposed ? (double)es->spec_accepted / (double)es->spec_proposed : NAN);
    counter(b, "loragate_spec_batch_off_steps_total",
            "Speculative decoding: steps with too many decoding sequences to speculate.",
            (uint64_t)es->spec_batch_off_steps);
}

/* The name a request gives in `model` for an engine adapter name: the
 * gateway registers a tenant's adapter as "<tenant id>/<name>"
 * (tenant_adapters.h); other names (none in serve today) are kept whole. */
static const char *request_name(const char *engine_name)
{
    const char *c = engine_name;
    while (*c >= '0' && *c <= '9')
        c++;
    return c > engine_name && *c == '/' ? c + 1 : engine_name;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* names[0, n) sorted, duplicates dropped, joined with ',' as one label value
 * (escaped: adapter names cannot hold \ " or newline, but a label value is
 * escaped wherever it comes from). */
static void label_list(lg_strbuf *b, char **names, int n)
{
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0, first = 1; i < n; i++) {
        if (i > 0 && !strcmp(names[i], names[i - 1]))
            continue;
        if (!first)
            lg_strbuf_puts(b, ",");
        first = 0;
        for (const char *c = names[i]; *c; c++) {
            if (*c == '\\' || *c == '"')
                lg_strbuf_put(b, "\\", 1);
            lg_strbuf_put(b, *c == '\n' ? "\\n" : c, *c == '\n' ? 2 : 1);
        }
    }
}

/* vLLM's names for the endpoint picker (see the note at the top). */
static void render_vllm(lg_strbuf *b, lg_dp *engine, const lg_engine_stats *es, const lg_adapter_activity *act,
                        int n_act, double now)
{
    gauge(b, "vllm:num_requests_waiting",
          "Requests waiting for the engine (queued or preempted); Gateway API Inference Extension protocol.",
          es->queued);
    gauge(b, "vllm:num_requests_running", "Requests running in the engine; Gateway API Inference Extension protocol.",
          es->running);
    int free_pages = es->pages_free + es->pages_cached;
    gauge(b, "vllm:kv_cache_usage_perc",
          "Pool pages in use by KV cache and adapters over the pool's pages, 0 to 1 (1: full); evictable prefix-cache "
          "pages count as free.",
          es->pages_total > 0 ? (double)(es->pages_total - free_pages) / (double)es->pages_total : 0);
    head(b, "vllm:cache_config_info", "gauge",
         "The KV cache's geometry: block_size tokens a page, num_gpu_blocks pages in the pool (shared with adapter "
         "weights). Gateway API Inference Extension protocol (optional).");
    lg_strbuf_printf(b, "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\"} 1\n", es->page_tokens,
                     es->pages_total);
    if (es->max_step_adapters <= 0)
        return; /* no LoRA: no LoRA series, as vLLM */
    size_t cap = n_act > 0 ? (size_t)n_act : 1;
    char **run = malloc(cap * sizeof *run), **wait = malloc(cap * sizeof *wait);
    char(*names)[sizeof ((lg_adapter_info *)0)->name] = malloc(cap * sizeof *names);
    int n_run = 0, n_wait = 0;
    if (run && wait && names)
        for (int i = 0; i < n_act; i++) {
            lg_adapter_info info;
            if (lg_dp_adapter_info(engine, act[i].adapter_id, &info) != 0)
                continue; /* the version finished since the snapshot */
            snprintf(names[i], sizeof names[i], "%s", request_name(info.name));
            if (act[i].running)
                run[n_run++] = names[i];
            if (act[i].waiting)
                wait[n_wait++] = names[i];
        }
    else
        b->oom = true;
    head(b, "vllm:lora_requests_info", "gauge",
         "Adapters of running and waiting requests (as requests name them in `model`), and the most adapters one "
         "step serves; the value is the Unix time of the scrape. Gateway API Inference Extension protocol.");
    lg_strbuf_printf(b, "vllm:lora_requests_info{max_lora=\"%d\",running_lora_adapters=\"", es->max_step_adapters);
    label_list(b, run, n_run);
    lg_strbuf_puts(b, "\",waiting_lora_adapters=\"");
    label_list(b, wait, n_wait);
    char t[40];
    fmt_num(t, sizeof t, now);
    lg_strbuf_printf(b, "\"} %s\n", t);
    free(run);
    free(wait);
    free(names);
}

/* Adapters in the engine's pool: loads, evictions, residency, load latency. */
static void render_adapters(lg_strbuf *b, lg_dp *engine, const lg_engine_stats *es)
{
    counter(b, "loragate_adapter_loads_total", "Adapter loads into the device pool.", (uint64_t)es->adapter_loads);
    counter(b, "loragate_adapter_evictions_total", "Adapter evictions from the device pool.",
            (uint64_t)es->adapter_evictions);
    counter(b, "loragate_adapter_host_loads_total", "Adapter loads from disk into host memory.",
            (uint64_t)es->adapter_host_loads);
    gauge(b, "loragate_adapters_registered", "Adapter versions registered with the engine.",
          es->adapters_registered);
    gauge(b, "loragate_adapters_resident", "Adapters resident in the device pool.", es->adapters_resident);
    float ms[512];
    int n = lg_dp_adapter_load_times(engine, ms, 512);
    qsort(ms, (size_t)n, sizeof ms[0], cmp_float);
    head(b, "loragate_adapter_load_seconds", "summary",
         "Adapter load latency (asked for to resident in the pool); quantiles over the most recent loads.");
    static const double Q[] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3; i++) {
        char v[40];
        fmt_num(v, sizeof v, n ? ms[(int)floor(Q[i] * (n - 1) + 0.5)] / 1000.0 : NAN);
        lg_strbuf_printf(b, "loragate_adapter_load_seconds{quantile=\"%g\"} %s\n", Q[i], v);
    }
    char sum[40];
    fmt_num(sum, sizeof sum, es->adapter_load_seconds);
    lg_strbuf_printf(b, "loragate_adapter_load_seconds_sum %s\nloragate_adapter_load_seconds_count %" PRId64 "\n", sum,
              es->adapter_loads);
}

/* The engines one by one (engine="k"; --data-parallel-size), from the
 * snapshots the sums above were made of; the router's own figures only
 * with several engines (one engine is not routed). */
static void render_per_engine(lg_strbuf *b, lg_dp *dp, const lg_engine_stats *per, int n)
{
    gauge(b, "loragate_dp_engines", "Engines behind this server (--data-parallel-size).", n);
#define PER(name, type, help, fmt, expr)                                                        \
    do {                                                                                        \
        head(b, name, type, help);                                                              \
        for (int k = 0; k < n; k++) {                                                           \
            const lg_engine_stats *s = &per[k];                                                 \
            (void)s;                                                                            \
            lg_strbuf_printf(b, name "{engine=\"%d\"} " fmt "\n", k, expr);                     \
        }                                                                                       \
    } while (0)
    PER("loragate_dp_queue_depth", "gauge", "Requests waiting for admission, per engine.", "%d", s->queued);
    PER("loragate_dp_running_sequences", "gauge", "Sequences admitted and running, per engine.", "%d", s->running);
    head(b, "loragate_dp_pool_pages", "gauge",
         "Pages of each engine's pool by kind: kv (KV cache in use), adapter, cached (evictable prefix-cache "
         "pages), free.");
    for (int k = 0; k < n; k++)
        lg_strbuf_printf(b,
                         "loragate_dp_pool_pages{engine=\"%d\",kind=\"kv\"} %d\n"
                         "loragate_dp_pool_pages{engine=\"%d\",kind=\"adapter\"} %d\n"
                         "loragate_dp_pool_pages{engine=\"%d\",kind=\"cached\"} %d\n"
                         "loragate_dp_pool_pages{engine=\"%d\",kind=\"free\"} %d\n",
                         k, per[k].pages_kv, k, per[k].pages_adapter, k, per[k].pages_cached, k, per[k].pages_free);
    PER("loragate_dp_pool_pages_capacity", "gauge", "Pages of each engine's pool.", "%d", s->pages_total);
    head(b, "loragate_dp_kv_cache_usage_perc", "gauge",
         "Per engine, as vllm:kv_cache_usage_perc: pages in use by KV and adapters over the pool's pages, 0 to 1.");
    for (int k = 0; k < n; k++) {
        char v[40];
        int used = per[k].pages_total - per[k].pages_free - per[k].pages_cached;
        fmt_num(v, sizeof v, per[k].pages_total > 0 ? (double)used / (double)per[k].pages_total : 0);
        lg_strbuf_printf(b, "loragate_dp_kv_cache_usage_perc{engine=\"%d\"} %s\n", k, v);
    }
    PER("loragate_dp_adapters_resident", "gauge", "Adapters resident in each engine's pool.", "%d",
        s->adapters_resident);
    PER("loragate_dp_adapter_loads_total", "counter", "Adapter loads into each engine's pool.", "%" PRId64,
        s->adapter_loads);
    PER("loragate_dp_steps_total", "counter", "Steps each engine ran.", "%" PRId64, s->steps);
    PER("loragate_dp_requests_finished_total", "counter", "Requests each engine finished.", "%" PRId64,
        s->requests_finished);
    if (n > 1) {
        lg_dp_routing rt[LG_MAX_DP];
        for (int k = 0; k < n; k++) lg_dp_routing_get(dp, k, &rt[k]);
        PER("loragate_dp_routed_requests_total", "counter", "Requests the router sent to each engine.", "%" PRId64,
            rt[k].routed);
        PER("loragate_dp_spilled_requests_total", "counter",
            "Requests sent to an engine past a busier preferred one (dp_router.h, the spill rule).", "%" PRId64,
            rt[k].spilled);
    }
#undef PER
}

static void render_ledger(lg_strbuf *b, lg_ledger *ledger)
{
    lg_ledger_stats ls;
    lg_ledger_stats_get(ledger, &ls);
    head(b, "loragate_ledger_commit_seconds", "histogram",
         "Usage ledger group commits: BEGIN to durable COMMIT, seconds.");
    char le[40];
    for (int i = 0; i < LG_LEDGER_HIST_N; i++) {
        fmt_num(le, sizeof le, lg_ledger_hist_bounds[i]);
        lg_strbuf_printf(b, "loragate_ledger_commit_seconds_bucket{le=\"%s\"} %" PRIu64 "\n", le, ls.hist[i]);
    }
    char sum[40];
    fmt_num(sum, sizeof sum, ls.commit_seconds_sum);
    lg_strbuf_printf(b,
              "loragate_ledger_commit_seconds_bucket{le=\"+Inf\"} %" PRIu64
              "\nloragate_ledger_commit_seconds_sum %s\nloragate_ledger_commit_seconds_count %" PRIu64 "\n",
              ls.hist[LG_LEDGER_HIST_N], sum, ls.hist[LG_LEDGER_HIST_N]);
    gauge(b, "loragate_ledger_backlog_records", "Usage records appended and not yet durable.", (double)ls.backlog);
    gauge(b, "loragate_ledger_last_commit_seconds", "Duration of the last committed batch.", ls.last_commit_seconds);
    counter(b, "loragate_ledger_appended_total", "Usage records accepted by the ledger.", ls.appended);
    counter(b, "loragate_ledger_records_written_total", "Usage records inserted.", ls.records_written);
    counter(b, "loragate_ledger_duplicates_total", "Records whose request id was already in the ledger.",
            ls.duplicates);
    counter(b, "loragate_ledger_batches_total", "Committed ledger transactions.", ls.batches);
    counter(b, "loragate_ledger_commit_errors_total", "Failed commit attempts (retried).", ls.errors);
    counter(b, "loragate_ledger_rejected_total", "Records the database refused (logged in full).", ls.rejected);
    counter(b, "loragate_ledger_abandoned_total", "Records given up at shutdown with the disk failing (logged).",
            ls.abandoned);
    gauge(b, "loragate_ledger_healthy", "1 while the ledger commits; 0 after a failed commit (requests get 503).",
          ls.healthy ? 1 : 0);
}

/* The connection guard's refusals (server.h). */
static void render_connections(lg_strbuf *b)
{
    lg_conn_stats cs;
    lg_conn_stats_get(&cs);
    counter(b, "loragate_http_early_refusals_total",
            "Requests refused from their head (route, key, size, upload quota) without reading their body.",
            cs.early_refusals);
    counter(b, "loragate_http2_reset_flood_closes_total",
            "HTTP/2 connections closed with GOAWAY for resetting too many streams (rapid reset).", cs.h2_reset_goaways);
    counter(b, "loragate_http_lingering_closes_total",
            "Connections that drained a refused request's unread body before closing.", cs.lingering_closes);
}

static char *render(lg_metrics *m, size_t *len)
{
    snapshot s;
    if (take_snapshot(m, &s) != 0)
        return NULL;
    lg_strbuf b = {0};
    render_process(&b, m->src.started_at);
    render_requests(&b, m->tenant_labels, &s);
    render_generations(&b, m->tenant_labels, &s);
    render_limited(&b, m->tenant_labels, &s);
    free(s.reqs);
    free(s.tenants);
    if (m->src.engine) {
        lg_engine_stats es;
        lg_adapter_activity *act = NULL;
        int n_eng = lg_dp_size(m->src.engine);
        lg_engine_stats *per = malloc((size_t)n_eng * sizeof *per);
        /* one snapshot of each engine for the sums, the lists and the per-engine series */
        int n_act = per ? lg_dp_adapter_activity(m->src.engine, &es, per, &act) : -1;
        if (n_act < 0) {
            b.oom = true;
            n_act = 0;
        }
        if (per) {
            render_engine(&b, &es);
            render_adapters(&b, m->src.engine, &es);
            render_vllm(&b, m->src.engine, &es, act, n_act, wall_now());
            render_per_engine(&b, m->src.engine, per, n_eng);
        }
        free(per);
        free(act);
    }
    if (m->src.ledger)
        render_ledger(&b, m->src.ledger);
    render_connections(&b);
    if (m->src.access_log)
        counter(&b, "loragate_access_log_dropped_lines_total", "Access-log lines dropped because the sink was stuck.",
                lg_access_log_dropped(m->src.access_log));
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static int get_metrics(lg_request *r, void *user)
{
    size_t len = 0;
    char *text = render(user, &len);
    if (!text)
        return lg_respond_error(r, 500, NULL, NULL, "out of memory while rendering the metrics"), 0;
    lg_request_add_header(r, "cache-control", "no-store");
    lg_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
    return 0;
}

/* Exposed for unit tests and for processes without routes. */
char *lg_metrics_render(lg_metrics *m, size_t *len) { return m ? render(m, len) : NULL; }

/* --metrics-auth on: the bearer is $LORAGATE_METRICS_KEY (when set: a
 * scraper's own key, kept as its SHA-256) or the operator key. */
typedef struct metrics_auth {
    const lg_admin_key *admin;
    bool has_key;
    uint8_t key_sha256[32];
} metrics_auth;

static int auth_metrics(const lg_auth_in *in, void *user, lg_auth_result *out)
{
    metrics_auth *a = user;
    if (!in->bearer) {
        out->status = 401;
        return -1;
    }
    if (a->has_key) {
        uint8_t h[32];
        SHA256((const unsigned char *)in->bearer, in->bearer_len, h);
        if (CRYPTO_memcmp(h, a->key_sha256, 32) == 0) {
            out->principal_ptr = a;
            return 0;
        }
    }
    if (a->admin && lg_admin_key_matches(a->admin, in->bearer, in->bearer_len)) {
        out->principal_ptr = (void *)a->admin;
        return 0;
    }
    out->status = 401;
    out->message = "Incorrect metrics key provided.";
    return -1;
}

int lg_routes_metrics(lg_router *rt, lg_metrics *m, bool auth, const lg_admin_key *admin, lg_err *err)
{
    if (!m)
        return lg_fail(err, "metrics: no metrics object");
    lg_route r = {.method = "GET", .pattern = "/metrics", .fn = get_metrics, .user = m, .name = "metrics"};
    if (auth) {
        metrics_auth *a = calloc(1, sizeof *a);
        if (!a)
            return lg_fail(err, "out of memory");
        a->admin = admin;
        const char *k = getenv(LG_METRICS_KEY_ENV);
        if (k && *k) {
            if (strlen(k) < LG_ADMIN_KEY_MIN_LEN) {
                free(a);
                return lg_fail(err, "$%s must be at least %d characters", LG_METRICS_KEY_ENV, LG_ADMIN_KEY_MIN_LEN);
            }
            SHA256((const unsigned char *)k, strlen(k), a->key_sha256);
            a->has_key = true;
        }
        r.auth = auth_metrics;
        r.auth_user = a;
        r.free_user = NULL;
        m->auth = a;
    }
    return lg_router_add(rt, &r, err);
}
