/*
 * bench_workload.c — serving workloads for `loragate bench --workload ...`:
 * requests that arrive over time, in-process (no HTTP), against the engine
 * thread, as a gateway would submit them.
 *
 * A workload is generated up front from the seed, so the same command gives
 * the same requests:
 *   - arrivals: `poisson` (exponential gaps at --rate per second), `burst`
 *     (all at t = 0), `closed` (--clients requests in flight; each finish
 *     submits the next), or `trace` (a JSONL file: "prompt_len",
 *     "output_len", optional "t" seconds, "tenant" and "adapter" indices;
 *     without "t", Poisson gaps at --rate);
 *   - lengths: fixed or uniform in --prompt-len-range / --output-len-range;
 *     outputs run to their length (EOS ignored), prompts are random ids;
 *   - a shared prefix: with --shared-prefix-len L, a --shared-prefix-frac
 *     of the requests start with their tenant's own L-token prefix (a
 *     system prompt) followed by their own prompt;
 *   - tenants: --tenants T (named t0..), arrivals split by --tenant-share,
 *     fair-share weights --tenant-weights;
 *   - adapters: --adapters K synthetic ones, picked by --popularity
 *     (uniform or zipf:ALPHA over a0..aK-1; a0 the most popular).
 * Measured per request from its scheduled arrival: TTFT (first token), TPOT
 * ((finish - first token) / (tokens - 1)) and end-to-end time. Goodput is
 * the rate of requests that met both --slo-ttft-ms and --slo-tpot-ms.
 * Throughput and rates are over the run: first arrival to last finish.
 *
 * Also the helpers cmd_bench.c's fixed batch shares: a request's sampling
 * (bench_sampling) and percentiles (bench_percentile). Calls point one way:
 * cmd_bench.c calls this file, which calls nothing of cmd_bench.c.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "adapters/adapter_cache.h"
#include "cli/bench.h"

typedef struct wreq {
    double t_arrival;        /* seconds after the start */
    int tenant, adapter;     /* adapter: index into the registered adapters, -1 none */
    int n_prompt, n_out;
    int32_t *prompt;
    /* results */
    int got, cached;
    double t_first, t_done;  /* lg_now() */
    lg_finish_reason reason;
    bool done, failed;
    struct wctx *ctx;
} wreq;

typedef struct wctx {
    lg_dp *e;                /* the engines (one unless --data-parallel-size) */
    const bench_opts *o;
    const int *adapter_ids;
    char tenant_names[BENCH_MAX_TENANTS][16];
    wreq *reqs;
    int n;
    double t0;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done, next;        /* next: closed loop's next request to submit */
} wctx;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }
static int unif_int(uint64_t *s, int lo, int hi) { return lo + (int)(splitmix(s) % (uint64_t)(hi - lo + 1)); }

/* Index drawn from cumulative weights cdf[0..n) (cdf[n-1] == 1). */
static int draw_cdf(const double *cdf, int n, double u)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] >= u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static double *make_cdf(const double *w, int n)
{
    double *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return NULL;
    double s = 0;
    for (int i = 0; i < n; i++) s += w[i];
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += w[i] / s;
        c[i] = acc;
    }
    c[n - 1] = 1.0;
    return c;
}

/* ---- helpers both bench modes use (declared in bench.h) ------------------------------ */

void bench_sampling(const bench_opts *o, uint64_t i, lg_request_params *rp)
{
    rp->sampling = o->sampling;
    rp->sampling.seed = o->seed * 1000003u + i;
    rp->presence_penalty = o->presence_penalty;
    rp->frequency_penalty = o->frequency_penalty;
    rp->logprobs = o->logprobs >= 0;
    rp->top_logprobs = o->logprobs > 0 ? o->logprobs : 0;
}

double bench_percentile(double *v, int n, double p)
{
    if (n == 0)
        return 0;
    for (int i = 1; i < n; i++) /* insertion sort: n is thousands at most */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    double x = p / 100.0 * (n - 1);
    int i = (int)x;
    if (i >= n - 1)
        return v[n - 1];
    return v[i] + (x - i) * (v[i + 1] - v[i]);
}

/* ---- callbacks (engine thread) ------------------------------------------------------ */

static int submit(wctx *c, wreq *r, lg_err *err);

static void on_token(void *user, int64_t id, const lg_token_out *t) { ((wreq *)user)->got++; }

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    wreq *r = user;
    wctx *c = r->ctx;
    r->reason = reason;
    r->cached = u->cached_tokens;
    r->t_first = u->t_first_token;
    r->t_done = u->t_finished;
    if (reason == LG_FINISH_ERROR || reason == LG_FINISH_CANCELLED) {
        r->failed = true;
        if (error)
            fprintf(stderr, "request failed: %s\n", error);
    }
    pthread_mutex_lock(&c->mu);
    r->done = true;
    c->n_done++;
    wreq *nx = NULL;
    if (!strcmp(c->o->workload, "closed") && c->next < c->n) {
        nx = &c->reqs[c->next++];
        nx->t_arrival = lg_now() - c->t0;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (nx) {
        lg_err err;
        if (submit(c, nx, &err) != 0) {
            pthread_mutex_lock(&c->mu);
            nx->failed = nx->done = true;
            c->n_done++;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
        }
    }
}

static int submit(wctx *c, wreq *r, lg_err *err)
{
    lg_request_params rp = {.prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->n_out,
                            .ignore_eos = true, .adapter_id = r->adapter >= 0 ? c->adapter_ids[r->adapter] : 0,
                            .tenant = c->tenant_names[r->tenant], .cb = {on_token, on_finish}, .user = r};
    bench_sampling(c->o, (uint64_t)(r - c->reqs), &rp);
    r->ctx = c;
    return lg_dp_submit(c->e, &rp, NULL, err);
}

/* ---- generation ------------------------------------------------------------------------ */

typedef struct trace_line {
    int plen, olen, tenant, adapter;
    double t;
} trace_line;

static int read_trace(const char *path, trace_line **out, int *n, bool *has_t, lg_err *err)
{
    char *text;
    size_t len;
    if (lg_read_file(path, (size_t)1 << 30, &text, &len, err) != 0)
        return -1;
    int cap = 256, k = 0, lineno = 0, rc = 0;
    trace_line *tl = malloc((size_t)cap * sizeof *tl);
    *has_t = true;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && tl; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (!line[strspn(line, " \t\r")])
            continue;
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        json_t *pl = json_object_get(j, "prompt_len"), *ol = json_object_get(j, "output_len");
        if (!json_is_integer(pl) || !json_is_integer(ol) || json_integer_value(pl) < 1 || json_integer_value(ol) < 1) {
            json_decref(j);
            rc = lg_fail(err, "--trace %s line %d: needs positive integer \"prompt_len\" and \"output_len\"", path, lineno);
            break;
        }
        if (k == cap) {
            trace_line *n2 = realloc(tl, (size_t)(cap *= 2) * sizeof *tl);
            if (!n2) {
                json_decref(j);
                rc = lg_fail(err, "out of memory");
                break;
            }
            tl = n2;
        }
        json_t *t = json_object_get(j, "t"), *tn = json_object_get(j, "tenant"), *ad = json_object_get(j, "adapter");
        tl[k] = (trace_line){.plen = (int)json_integer_value(pl), .olen = (int)json_integer_value(ol),
                             .t = json_is_number(t) ? json_number_value(t) : -1,
                             .tenant = json_is_integer(tn) ? (int)json_integer_value(tn) : -1,
                             .adapter = json_is_integer(ad) ? (int)json_integer_value(ad) : -2};
        if (!json_is_number(t))
            *has_t = false;
        k++;
        json_decref(j);
    }
    free(text);
    if (!tl)
        return lg_fail(err, "out of memory");
    if (rc == 0 && k == 0)
        rc = lg_fail(err, "--trace %s has no requests", path);
    if (rc != 0) {
        free(tl);
        return -1;
    }
    *out = tl;
    *n = k;
    return 0;
}

static int generate(wctx *c, int vocab, lg_err *err)
{
    const bench_opts *o = c->o;
    uint64_t s = o->seed * 0x9E3779B97F4A7C15ull + 12345;
    trace_line *tl = NULL;
    int n = o->requests;
    bool trace_t = false;
    if (o->trace) {
        if (read_trace(o->trace, &tl, &n, &trace_t, err) != 0)
            return -1;
    }
    int T = o->tenants;
    double share[BENCH_MAX_TENANTS];
    for (int t = 0; t < T; t++) {
        share[t] = o->tenant_share[t] > 0 ? o->tenant_share[t] : 1.0;
        snprintf(c->tenant_names[t], sizeof c->tenant_names[t], "t%d", t);
    }
    double *tcdf = make_cdf(share, T);
    double *acdf = NULL;
    if (o->adapters) {
        double alpha = !strncmp(o->popularity, "zipf:", 5) ? strtod(o->popularity + 5, NULL) : 0;
        double *w = malloc((size_t)o->adapters * sizeof *w);
        for (int i = 0; w && i < o->adapters; i++) w[i] = alpha > 0 ? pow(i + 1.0, -alpha) : 1.0;
        acdf = w ? make_cdf(w, o->adapters) : NULL;
        free(w);
    }
    int32_t *prefix = NULL;
    if (o->prefix_len)
        prefix = malloc((size_t)T * (size_t)o->prefix_len * sizeof *prefix);
    c->reqs = calloc((size_t)n, sizeof *c->reqs);
    if (!tcdf || (o->adapters && !acdf) || (o->prefix_len && !prefix) || !c->reqs) {
        free(tl), free(tcdf), free(acdf), free(prefix);
        return lg_fail(err, "out of memory");
    }
    for (int t = 0; t < T; t++) { /* each tenant's own system prompt */
        uint64_t ps = o->seed * 31 + 1000 + (uint64_t)t;
        for (int k = 0; k < o->prefix_len; k++) prefix[(size_t)t * o->prefix_len + k] = (int32_t)(splitmix(&ps) % (uint64_t)vocab);
    }
    c->n = n;
    double t = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        wreq *r = &c->reqs[i];
        if (!strcmp(o->workload, "poisson") || (o->trace && !trace_t))
            t += -log(1.0 - unif(&s)) / o->rate;
        else if (o->trace)
            t = tl[i].t;
        r->t_arrival = !strcmp(o->workload, "burst") || !strcmp(o->workload, "closed") ? 0 : t;
        r->tenant = tl && tl[i].tenant >= 0 ? tl[i].tenant % T : draw_cdf(tcdf, T, unif(&s));
        r->adapter = !o->adapters ? -1
                     : tl && tl[i].adapter >= -1 ? (tl[i].adapter < 0 ? -1 : tl[i].adapter % o->adapters)
                                                  : draw_cdf(acdf, o->adapters, unif(&s));
        int plen = tl ? tl[i].plen : unif_int(&s, o->prompt_min, o->prompt_max);
        r->n_out = tl ? tl[i].olen : unif_int(&s, o->output_min, o->output_max);
        bool use_prefix = o->prefix_len > 0 && unif(&s) < o->prefix_frac;
        r->n_prompt = plen + (use_prefix ? o->prefix_len : 0);
        r->prompt = malloc((size_t)r->n_prompt * sizeof *r->prompt);
        if (!r->prompt) {
            rc = lg_fail(err, "out of memory");
            break;
        }
        int k = 0;
        if (use_prefix) {
            memcpy(r->prompt, prefix + (size_t)r->tenant * o->prefix_len, (size_t)o->prefix_len * sizeof *r->prompt);
            k = o->prefix_len;
        }
        for (; k < r->n_prompt; k++) r->prompt[k] = (int32_t)(splitmix(&s) % (uint64_t)vocab);
    }
    free(tl);
    free(tcdf);
    free(acdf);
    free(prefix);
    return rc;
}

/* ---- report ------------------------------------------------------------------------------- */

static json_t *pct(double *v, int n, bool p90)
{
    double a = bench_percentile(v, n, 50), b = bench_percentile(v, n, 90), c = bench_percentile(v, n, 99);
    return p90 ? json_pack("{s:f,s:f,s:f}", "p50", a, "p90", b, "p99", c) : json_pack("{s:f,s:f}", "p50", a, "p99", c);
}

static void progress(const wctx *c, double now)
{
    lg_engine_stats s;
    lg_dp_get_stats(c->e, &s);
    fprintf(stderr, "\r[bench] %d/%d done  %.1f s  running %d  queued %d  pages kv %d adapter %d prefix %d/%d   ",
            c->n_done, c->n, now - c->t0, s.running, s.queued, s.pages_kv - s.pages_prefix, s.pages_adapter,
            s.pages_prefix, s.pages_total);
}

/* Base-model requests of the workload's shape before timing (graphs,
 * cuBLAS plans); adapters are not warmed: loading them is part of serving. */
static int warm_up(const wctx *c, int vocab, lg_err *err)
{
    int nw = c->o->warmup ? c->o->warmup : 2;
    wctx wc = {.e = c->e, .o = c->o, .adapter_ids = c->adapter_ids, .n = nw, .next = nw};
    memcpy(wc.tenant_names, c->tenant_names, sizeof wc.tenant_names);
    pthread_mutex_init(&wc.mu, NULL);
    pthread_cond_init(&wc.cv, NULL);
    wc.reqs = calloc((size_t)nw, sizeof *wc.reqs);
    int32_t tok[32];
    for (int i = 0; i < 32; i++) tok[i] = (int32_t)((i * 7919) % vocab);
    int rc = wc.reqs ? 0 : lg_fail(err, "out of memory"), submitted = 0;
    for (int i = 0; rc == 0 && i < nw; i++, submitted++) {
        /* small enough for the shortest context a workload may configure */
        int ctx = lg_dp_max_context(c->e), np = ctx / 2 < 32 ? ctx / 2 : 32;
        wc.reqs[i] = (wreq){.adapter = -1, .n_prompt = np, .n_out = ctx - np - 1 < 8 ? ctx - np - 1 : 8, .prompt = tok};
        rc = submit(&wc, &wc.reqs[i], err);
    }
    pthread_mutex_lock(&wc.mu);
    while (wc.n_done < submitted - (rc != 0))
        pthread_cond_wait(&wc.cv, &wc.mu);
    pthread_mutex_unlock(&wc.mu);
    free(wc.reqs);
    pthread_cond_destroy(&wc.cv);
    pthread_mutex_destroy(&wc.mu);
    return rc;
}

int bench_run_workload(lg_dp *e, lg_backend *be, const bench_opts *o, const int *adapter_ids, lg_err *err)
{
    wctx c = {.e = e, .o = o, .adapter_ids = adapter_ids};
    const int n_eng = lg_dp_size(e);
    lg_engine_stats es0[LG_MAX_DP], es1[LG_MAX_DP]; /* per engine, before and after the run */
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    int rc = -1;
    const lg_model_config *cfg = lg_dp_config(e);
    for (int t = 0; t < o->tenants; t++)
        if (o->tenant_weights[t] > 0) {
            char name[16];
            snprintf(name, sizeof name, "t%d", t);
            if (lg_dp_set_tenant_weight(e, name, o->tenant_weights[t], err) != 0)
                return -1;
        }
    if (generate(&c, cfg->vocab_size, err) != 0)
        goto out;
    if (lg_dp_start(e, err) != 0)
        goto out;

    /* warm-up: base-model requests of the workload's shape (graphs, cuBLAS
     * plans); adapters are not warmed: loading them is part of serving */
    if (warm_up(&c, cfg->vocab_size, err) != 0)
        goto out;
    lg_engine_stats s0;
    lg_dp_get_stats(e, &s0);
    for (int k = 0; k < n_eng; k++) lg_engine_get_stats(lg_dp_engine(e, k), &es0[k]);
    lg_dp_routing rt0[LG_MAX_DP];
    for (int k = 0; k < n_eng; k++) lg_dp_routing_get(e, k, &rt0[k]);
    lg_tenant_stats ts0[BENCH_MAX_TENANTS];
    for (int t = 0; t < o->tenants; t++)
        if (lg_dp_tenant_stats(e, c.tenant_names[t], &ts0[t]) != 0)
            memset(&ts0[t], 0, sizeof ts0[t]);

    bool tty = o->progress && isatty(2);
    c.t0 = lg_now();
    bool closed = !strcmp(o->workload, "closed");
    int n_open = closed ? (o->clients < c.n ? o->clients : c.n) : c.n;
    c.next = n_open;
    double last_prog = 0;
    for (int i = 0; i < n_open; i++) {
        wreq *r = &c.reqs[i];
        for (;;) { /* sleep until its arrival, showing progress meanwhile */
            double now = lg_now(), wait = c.t0 + r->t_arrival - now;
            if (tty && now - last_prog > 0.25) {
                progress(&c, now);
                last_prog = now;
            }
            if (wait <= 0)
                break;
            double sl = wait > 0.1 ? 0.1 : wait;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(sl * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (submit(&c, r, err) != 0) {
            fprintf(stderr, "request %d refused: %s\n", i, err->msg);
            pthread_mutex_lock(&c.mu);
            r->failed = r->done = true;
            c.n_done++;
            pthread_mutex_unlock(&c.mu);
        }
    }
    pthread_mutex_lock(&c.mu);
    while (c.n_done < c.n) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c.cv, &c.mu, &ts);
        if (tty) {
            pthread_mutex_unlock(&c.mu);
            progress(&c, lg_now());
            pthread_mutex_lock(&c.mu);
        }
    }
    pthread_mutex_unlock(&c.mu);
    lg_dp_stop(e);
    if (tty)
        fputc('\n', stderr);

    /* ---- metrics ---- */
    lg_engine_stats s1;
    lg_dp_get_stats(e, &s1);
    for (int k = 0; k < n_eng; k++) lg_engine_get_stats(lg_dp_engine(e, k), &es1[k]);
    int n = c.n, n_ok = 0, n_good = 0, n_tpot = 0;
    double *ttft = malloc((size_t)n * sizeof *ttft), *tpot = malloc((size_t)n * sizeof *tpot),
           *e2e = malloc((size_t)n * sizeof *e2e);
    if (!ttft || !tpot || !e2e) {
        free(ttft), free(tpot), free(e2e);
        lg_fail(err, "out of memory");
        goto out;
    }
    double t_end = c.t0, t_first_arrival = c.t0 + (n ? c.reqs[0].t_arrival : 0);
    long out_tok = 0, prompt_tok = 0, cached_tok = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        wreq *r = &c.reqs[i];
        if (c.t0 + r->t_arrival < t_first_arrival)
            t_first_arrival = c.t0 + r->t_arrival;
        if (r->failed || !r->t_first)
            continue;
        double arr = c.t0 + r->t_arrival;
        double a = (r->t_first - arr) * 1e3, b = r->got > 1 ? (r->t_done - r->t_first) * 1e3 / (r->got - 1) : 0;
        ttft[n_ok] = a;
        e2e[n_ok] = (r->t_done - arr) * 1e3;
        if (r->got > 1)
            tpot[n_tpot++] = b;
        n_ok++;
        if (a <= o->slo_ttft_ms && b <= o->slo_tpot_ms)
            n_good++;
        if (r->t_done > t_end)
            t_end = r->t_done;
        out_tok += r->got;
        prompt_tok += r->n_prompt;
        cached_tok += r->cached;
        hits += r->cached > 0;
    }
    double dur = t_end - t_first_arrival;
    if (dur <= 0)
        dur = 1e-9;
    /* the run's adapter loads are the latest samples */
    int64_t loads = s1.adapter_loads - s0.adapter_loads;
    float *lms = malloc(LG_ADAPTER_LOAD_SAMPLES * sizeof *lms);
    int tot = lms ? lg_dp_adapter_load_times(e, lms, LG_ADAPTER_LOAD_SAMPLES) : 0;
    int n_l = tot < loads ? tot : (int)loads;
    double *lm = malloc(((size_t)n_l + 1) * sizeof *lm);
    if (!lm)
        n_l = 0;
    for (int i = 0; i < n_l; i++) lm[i] = lms[tot - n_l + i];
    free(lms);

    json_t *j = json_object();
    json_object_set_new(j, "backend", json_string(be->i.name));
    json_object_set_new(j, "workload", json_string(o->workload));
    json_object_set_new(j, "requests", json_integer(n));
    json_object_set_new(j, "completed", json_integer(n_ok));
    json_object_set_new(j, "duration_s", json_real(dur));
    json_object_set_new(j, "output_tok_s", json_real(out_tok / dur));
    json_object_set_new(j, "req_s", json_real(n_ok / dur));
    json_object_set_new(j, "ttft_ms", pct(ttft, n_ok, true));
    json_object_set_new(j, "tpot_ms", pct(tpot, n_tpot, true));
    json_object_set_new(j, "e2e_ms", pct(e2e, n_ok, true));
    json_object_set_new(j, "goodput_req_s", json_real(n_good / dur));
    json_object_set_new(j, "slo", json_pack("{s:f,s:f}", "ttft_ms", o->slo_ttft_ms, "tpot_ms", o->slo_tpot_ms));
    json_object_set_new(j, "prefix_hit_rate", json_real(prompt_tok ? (double)cached_tok / prompt_tok : 0));
    json_object_set_new(j, "prefix_hit_requests", json_integer(hits));
    json_object_set_new(j, "prompt_tokens", json_integer(prompt_tok));
    json_object_set_new(j, "cached_tokens", json_integer(cached_tok));
    json_object_set_new(j, "output_tokens", json_integer(out_tok));
    json_object_set_new(j, "adapters", json_integer(o->adapters));
    json_object_set_new(j, "adapter_loads", json_integer(loads));
    json_object_set_new(j, "adapter_load_ms", pct(lm, n_l, false));
    json_object_set_new(j, "preemptions", json_integer(s1.preemptions - s0.preemptions));
    json_object_set_new(j, "decode_steps", json_integer(s1.decode_steps - s0.decode_steps));
    json_object_set_new(j, "chained_steps", json_integer(s1.chained_steps - s0.chained_steps));
    const int64_t sp = s1.spec_proposed - s0.spec_proposed, sa = s1.spec_accepted - s0.spec_accepted;
    json_object_set_new(j, "speculative",
                        json_pack("{s:s,s:I,s:I,s:I,s:f,s:I}", "mode", lg_spec_mode_name(o->spec.mode), "verify_rows",
                                  (json_int_t)(s1.spec_verify_rows - s0.spec_verify_rows), "proposed", (json_int_t)sp,
                                  "accepted", (json_int_t)sa, "acceptance_rate", sp ? (double)sa / (double)sp : 0.0,
                                  "batch_off_steps", (json_int_t)(s1.spec_batch_off_steps - s0.spec_batch_off_steps)));
    json_object_set_new(j, "pool_max_pages", json_pack("{s:i,s:i,s:i,s:i}", "kv", s1.max_pages_kv, "adapter",
                                                       s1.max_pages_adapter, "prefix", s1.max_pages_prefix, "total",
                                                       s1.pages_total));
    json_object_set_new(j, "page_mib", json_real(s1.page_bytes / 1048576.0));
    json_t *tj = json_array();
    for (int t = 0; t < o->tenants; t++) {
        int k = 0;
        long tout = 0;
        double *tt = malloc(((size_t)n + 1) * sizeof *tt);
        for (int i = 0; tt && i < n; i++) {
            wreq *r = &c.reqs[i];
            if (r->tenant != t || r->failed || !r->t_first)
                continue;
            tt[k++] = (r->t_first - (c.t0 + r->t_arrival)) * 1e3;
            tout += r->got;
        }
        lg_tenant_stats ts1 = {0};
        lg_dp_tenant_stats(e, c.tenant_names[t], &ts1);
        json_t *x = json_object();
        json_object_set_new(x, "tenant", json_string(c.tenant_names[t]));
        json_object_set_new(x, "completed", json_integer(k));
        json_object_set_new(x, "output_tokens", json_integer(tout));
        json_object_set_new(x, "service", json_real(ts1.service - ts0[t].service));
        json_object_set_new(x, "ttft_ms", pct(tt, k, true));
        json_array_append_new(tj, x);
        free(tt);
    }
    json_object_set_new(j, "tenants", tj);
    /* --data-parallel-size: each engine's share of the run (and the router's placement) */
    json_object_set_new(j, "data_parallel_size", json_integer(n_eng));
    json_t *ej = json_array();
    for (int k = 0; k < n_eng; k++) {
        const lg_engine_stats *a = &es0[k], *b = &es1[k];
        lg_dp_routing rt;
        lg_dp_routing_get(e, k, &rt);
        json_t *x = json_object();
        json_object_set_new(x, "engine", json_integer(k));
        json_object_set_new(x, "adapter_loads", json_integer(b->adapter_loads - a->adapter_loads));
        json_object_set_new(x, "adapter_evictions", json_integer(b->adapter_evictions - a->adapter_evictions));
        json_object_set_new(x, "adapters_resident", json_integer(b->adapters_resident));
        json_object_set_new(x, "steps", json_integer(b->steps - a->steps));
        json_object_set_new(x, "prefill_steps", json_integer(b->prefill_steps - a->prefill_steps));
        json_object_set_new(x, "decode_steps", json_integer(b->decode_steps - a->decode_steps));
        json_object_set_new(x, "requests_finished", json_integer(b->requests_finished - a->requests_finished));
        json_object_set_new(x, "prefix_hits", json_integer(b->prefix_hits - a->prefix_hits));
        json_object_set_new(x, "preemptions", json_integer(b->preemptions - a->preemptions));
        json_object_set_new(x, "routed", json_integer(rt.routed - rt0[k].routed));
        json_object_set_new(x, "spilled", json_integer(rt.spilled - rt0[k].spilled));
        json_array_append_new(ej, x);
    }
    json_object_set_new(j, "engines", ej);
    if (o->json) {
        char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(txt);
        free(txt);
    } else {
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        puts(txt);
        free(txt);
    }
    json_decref(j);
    free(ttft), free(tpot), free(e2e), free(lm);
    rc = 0;
out:
    lg_dp_stop(e);
    for (int i = 0; c.reqs && i < c.n; i++) free(c.reqs[i].prompt);
    free(c.reqs);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    return rc;
}
