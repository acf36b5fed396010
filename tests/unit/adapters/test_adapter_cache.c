/*
 * test_adapter_cache.c — the adapter cache's three tiers (disk -> host image
 * -> unified-pool pages) against the PEFT fixtures of
 * tests/fixtures/peft/make_fixtures.py, on the CPU backend so the pool arena
 * is host memory the test can read back.
 *
 * What is checked: specs (digest, rejection of bad dirs, ranks above the
 * maximum), the slot table after acquire (ranks, scales, bytes in the pool
 * equal the adapter converted to the act dtype, placement: inside the arena,
 * inside one page, 256-byte aligned, no overlaps), that loads happen on the
 * loader thread (acquire says "not yet" until poll has seen the finished
 * job), eviction under KV pressure and reload, pins blocking eviction,
 * "retry later" when the pool is full of pinned KV, host-tier LRU and reload
 * from disk, refusal of an adapter whose files changed on disk, removal
 * while pinned, synthetic adapters (same layout as files, deterministic
 * bytes), and lg_adapter_max_tensor_bytes. Run from the repository root,
 * under ASan/UBSan.
 */
#include "adapters/adapter_cache.h"
#include "adapters/peft.h"
#include "tests/unit/test.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define FIX "tests/fixtures/peft/"
#define MAX_RANK 8
#define PAGE_BYTES 4096 /* >= 8 * 128 * 4: the largest tensor at MAX_RANK in f32 */

#include "tests/unit/adapters/peft_base.h" /* base_config(): the fixtures' tiny base model */

static const char *VALID[] = {"list_f16", "all_linear_f32", "regex", "patterns", "layers_int",
                              "layers_list", "fan_in_fan_out", "rslora", "default_bf16"};
#define N_VALID ((int)(sizeof VALID / sizeof VALID[0]))

static lg_backend *g_be;
static lg_model_config g_cfg;

static lg_adapter *load_ref(const char *dir)
{
    lg_adapter *a = NULL;
    lg_err err = {{0}};
    int rc = lg_adapter_load(dir, "ref", &g_cfg, MAX_RANK, &a, &err);
    CHECK_MSG(rc == 0 && a, "%s: %s", dir, err.msg);
    return a;
}

/* Compares `n` elements at pool pointer p (act dtype f32) with src (dtype st). */
static bool same_values(const void *p, const void *src, lg_dtype st, size_t n)
{
    float *ref = malloc(n * sizeof(float));
    lg_to_f32(ref, src, st, n);
    bool ok = memcmp(p, ref, n * sizeof(float)) == 0;
    free(ref);
    return ok;
}

typedef struct span {
    uintptr_t lo, hi; /* [lo, hi) */
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The slot table of an acquired adapter matches the adapter loaded from dir.
 * Appends every tensor's byte range to spans (may be NULL). Returns the
 * number of failed checks. */
static int check_slots(const lg_lora_w *slots, const char *dir, lg_page_pool *pool, span *spans, int *n_spans)
{
    int fail0 = lg_t_fail;
    lg_adapter *a = load_ref(dir);
    if (!a)
        return 1;
    const char *base = lg_page_pool_base(pool);
    size_t pb = lg_page_pool_page_bytes(pool);
    uintptr_t lo = (uintptr_t)base, hi = lo + pb * (size_t)lg_page_pool_n_pages(pool);
    int n_slots = g_cfg.n_layers * LG_LORA_N_MODULES;
    int adapted = 0;
    for (int s = 0; s < n_slots; s++) {
        int layer = s / LG_LORA_N_MODULES;
        lg_lora_target t = (lg_lora_target)(s % LG_LORA_N_MODULES);
        const lg_lora_module *m = lg_adapter_find(a, layer, t);
        const lg_lora_w *w = &slots[s];
        if (!m) {
            CHECK_MSG(w->rank == 0, "%s slot %d: rank %d for an untargeted module", dir, s, w->rank);
            continue;
        }
        adapted++;
        CHECK_MSG(w->rank == m->rank, "%s slot %d: rank %d, want %d", dir, s, w->rank, m->rank);
        CHECK_MSG(w->scale == m->scale, "%s slot %d: scale %g, want %g", dir, s, w->scale, m->scale);
        if (w->rank != m->rank || !w->A || !w->B)
            continue;
        size_t na = (size_t)m->rank * m->in_dim, nb = (size_t)m->out_dim * m->rank;
        CHECK_MSG(same_values(w->A, m->A, lg_adapter_dtype(a), na), "%s layer %d %s: A differs", dir, layer,
                  lg_lora_target_name(t));
        CHECK_MSG(same_values(w->B, m->B, lg_adapter_dtype(a), nb), "%s layer %d %s: B differs", dir, layer,
                  lg_lora_target_name(t));
        const void *ptr[2] = {w->A, w->B};
        size_t bytes[2] = {na * 4, nb * 4};
        for (int k = 0; k < 2; k++) {
            uintptr_t p = (uintptr_t)ptr[k], e = p + bytes[k];
            CHECK_MSG(p >= lo && e <= hi, "%s slot %d %c: outside the arena", dir, s, "AB"[k]);
            CHECK_MSG((p - lo) / pb == (e - 1 - lo) / pb, "%s slot %d %c: straddles a page", dir, s, "AB"[k]);
            CHECK_MSG((p - lo) % 256 == 0, "%s slot %d %c: offset %zu in the arena not 256-aligned", dir, s,
                      "AB"[k], (size_t)(p - lo));
            if (spans)
                spans[(*n_spans)++] = (span){p, e};
        }
    }
    CHECK_MSG(adapted == lg_adapter_n_modules(a), "%s: %d slots adapted, adapter has %d modules", dir, adapted,
              lg_adapter_n_modules(a));
    lg_adapter_free(a);
    return lg_t_fail - fail0;
}

static int n_overlaps(span *s, int n)
{
    qsort(s, (size_t)n, sizeof *s, span_cmp);
    int bad = 0;
    for (int i = 1; i < n; i++)
        bad += s[i].lo < s[i - 1].hi;
    return bad;
}

static lg_page_pool *make_pool(int n_pages)
{
    lg_page_pool *p = NULL;
    lg_err err = {{0}};
    int rc = lg_page_pool_create(g_be, PAGE_BYTES, n_pages, &p, &err);
    CHECK_MSG(rc == 0, "pool: %s", err.msg);
    return p;
}

static lg_adapter_cache *make_cache(lg_page_pool *pool, size_t host_bytes)
{
    lg_adapter_cache *c = NULL;
    lg_err err = {{0}};
    lg_adapter_cache_opts o = {.max_rank = MAX_RANK, .host_bytes = host_bytes};
    int rc = lg_adapter_cache_create(g_be, pool, &g_cfg, &o, &c, &err);
    CHECK_MSG(rc == 0, "cache: %s", err.msg);
    return c;
}

static int g_next_id = 1;

/* Registers dir as a new version; returns its id (or -1). */
static int reg(lg_adapter_cache *c, const char *name, const char *dir)
{
    lg_adapter_spec *spec = NULL;
    lg_err err = {{0}};
    int rc = lg_adapter_spec_from_dir(lg_adapter_cache_geom(c), name, dir, &spec, &err);
    CHECK_MSG(rc == 0 && spec, "spec %s (%s): %s", name, dir, err.msg);
    if (rc != 0)
        return -1;
    int id = g_next_id++;
    rc = lg_adapter_cache_add(c, id, spec, &err);
    CHECK_MSG(rc == 0, "add %s: %s", name, err.msg);
    return rc == 0 ? id : -1;
}

/* acquire, polling while the loader works ("not yet" = 1); 2 s at most. */
static int acquire_wait(lg_adapter_cache *c, int id, const lg_lora_w **slots, lg_err *err)
{
    for (int i = 0; i < 2000; i++) {
        int rc = lg_adapter_cache_acquire(c, id, slots, err);
        if (rc != 1)
            return rc;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        lg_adapter_cache_poll(c);
    }
    return 1;
}

static lg_adapter_cache_stats stats(const lg_adapter_cache *c)
{
    lg_adapter_cache_stats s;
    lg_adapter_cache_get_stats(c, &s);
    return s;
}

static int pool_adapter_pages(const lg_page_pool *p)
{
    lg_pool_stats s;
    lg_page_pool_stats(p, &s);
    return s.pages_adapter;
}

/* 1. specs: digest, bad directories, ranks, page sizes; adding is lazy */
static void test_register(void)
{
    lg_page_pool *pool = make_pool(64);
    lg_adapter_cache *c = make_cache(pool, 0);
    if (!c) {
        lg_page_pool_free(pool);
        return;
    }
    char dir[256];
    int ids[N_VALID];
    for (int i = 0; i < N_VALID; i++) {
        snprintf(dir, sizeof dir, FIX "%s", VALID[i]);
        ids[i] = reg(c, VALID[i], dir);
        const lg_adapter_spec *sp = lg_adapter_cache_spec(c, ids[i]);
        CHECK(sp && !strcmp(sp->name, VALID[i]) && sp->n_pages > 0 && sp->weight_bytes > 0);
    }
    CHECK(lg_adapter_cache_spec(c, 0) == NULL && lg_adapter_cache_spec(c, 9999) == NULL);

    /* digest of list_f16 = the recorded sha256 */
    char want[80] = {0};
    FILE *f = fopen(FIX "list_f16.sha256", "r");
    CHECK(f && fgets(want, sizeof want, f));
    if (f)
        fclose(f);
    const lg_adapter_spec *s0p = lg_adapter_cache_spec(c, ids[0]);
    CHECK_MSG(s0p && !strncmp(s0p->digest, want, 64), "digest %s, want %.64s", s0p ? s0p->digest : "(null)", want);

    lg_adapter_cache_stats s = stats(c);
    CHECK(s.registered == N_VALID && s.resident == 0 && s.pool_loads == 0);
    CHECK(s.host_loads == 0 && s.host_bytes == 0); /* nothing is loaded before it is needed */
    CHECK(pool_adapter_pages(pool) == 0);

    /* an id in use is refused (and the spec freed) */
    lg_err err = {{0}};
    lg_adapter_spec *dup = NULL;
    CHECK(lg_adapter_spec_from_dir(lg_adapter_cache_geom(c), "d", FIX "list_f16", &dup, &err) == 0);
    CHECK(lg_adapter_cache_add(c, ids[0], dup, &err) == -1 && err.msg[0]);

    /* bad dirs: message, no spec */
    const char *bad[] = {FIX "reject/dora_config", FIX "reject/rank_config", FIX "reject/missing_files",
                         FIX "reject/truncated", FIX "does_not_exist"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        lg_adapter_spec *sp = (lg_adapter_spec *)1;
        CHECK_MSG(lg_adapter_spec_from_dir(lg_adapter_cache_geom(c), "bad", bad[i], &sp, &err) == -1 && !sp,
                  "%s accepted", bad[i]);
        CHECK_MSG(err.msg[0] != 0, "%s: no message", bad[i]);
    }
    CHECK(stats(c).registered == N_VALID);

    /* rank above the maximum: rank 6 of patterns vs max_rank 4 */
    lg_adapter_geom g4 = *lg_adapter_cache_geom(c);
    g4.max_rank = 4;
    lg_adapter_spec *sp4 = NULL;
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_spec_from_dir(&g4, "p", FIX "patterns", &sp4, &err) == -1 && !sp4 && err.msg[0]);

    /* pages too small for max_rank */
    lg_adapter_cache *c64 = NULL;
    lg_adapter_cache_opts o64 = {.max_rank = 64};
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_cache_create(g_be, pool, &g_cfg, &o64, &c64, &err) == -1 && !c64 && err.msg[0]);

    /* pages that are not a multiple of 256 bytes cannot keep tensors aligned */
    lg_page_pool *odd = NULL;
    CHECK(lg_page_pool_create(g_be, PAGE_BYTES + 64, 8, &odd, &err) == 0);
    if (odd) {
        lg_adapter_cache *co = NULL;
        lg_adapter_cache_opts oo = {.max_rank = MAX_RANK};
        memset(&err, 0, sizeof err);
        CHECK(lg_adapter_cache_create(g_be, odd, &g_cfg, &oo, &co, &err) == -1 && !co);
        CHECK_MSG(strstr(err.msg, "256"), "odd page size: '%s'", err.msg);
        lg_adapter_cache_free(co);
        lg_page_pool_free(odd);
    }

    /* an adapter larger than the host tier is refused when added */
    lg_adapter_cache *small = make_cache(pool, PAGE_BYTES);
    if (small) {
        lg_adapter_spec *big = NULL;
        CHECK(lg_adapter_spec_from_dir(lg_adapter_cache_geom(small), "big", FIX "all_linear_f32", &big, &err) == 0);
        memset(&err, 0, sizeof err);
        CHECK(big && big->n_pages > 1 && lg_adapter_cache_add(small, 1, big, &err) == -1);
        CHECK_MSG(strstr(err.msg, "host tier"), "too big: '%s'", err.msg);
        lg_adapter_cache_free(small);
    }

    lg_adapter_cache_free(c);
    lg_adapter_cache_free(NULL);
    lg_page_pool_free(pool);
}

/* 2. acquire -> slot table, for every valid fixture, all resident at once */
static void test_slots(void)
{
    lg_page_pool *pool = make_pool(128);
    lg_adapter_cache *c = make_cache(pool, 0);
    if (!c) {
        lg_page_pool_free(pool);
        return;
    }
    char dir[N_VALID][256];
    int ids[N_VALID];
    const lg_lora_w *slots[N_VALID];
    for (int i = 0; i < N_VALID; i++) {
        snprintf(dir[i], sizeof dir[i], FIX "%s", VALID[i]);
        ids[i] = reg(c, VALID[i], dir[i]);
    }
    /* the first acquire only starts the load: the loader thread fills the
     * host image, poll takes the finished job, the next acquire copies */
    lg_err err = {{0}};
    const lg_lora_w *first = NULL;
    CHECK(lg_adapter_cache_acquire(c, ids[0], &first, &err) == 1 && !first);
    CHECK(lg_adapter_cache_busy(c));
    int n_slots = g_cfg.n_layers * LG_LORA_N_MODULES;
    span *spans = malloc((size_t)N_VALID * (size_t)n_slots * 2 * sizeof *spans);
    int n_spans = 0;
    for (int i = 0; i < N_VALID; i++) {
        memset(&err, 0, sizeof err);
        slots[i] = NULL;
        int rc = acquire_wait(c, ids[i], &slots[i], &err);
        CHECK_MSG(rc == 0 && slots[i], "acquire %s: rc %d %s", VALID[i], rc, err.msg);
    }
    lg_adapter_cache_stats s = stats(c);
    CHECK(s.resident == N_VALID && s.pool_loads == N_VALID && s.pool_evictions == 0);
    CHECK(s.host_loads == N_VALID && s.host_images == N_VALID);
    CHECK(s.load_samples == N_VALID);
    float ms[N_VALID];
    CHECK(lg_adapter_cache_load_times(c, ms, N_VALID) == N_VALID && ms[0] >= 0);
    for (int i = 0; i < N_VALID; i++)
        if (slots[i])
            check_slots(slots[i], dir[i], pool, spans, &n_spans);
    CHECK_MSG(n_overlaps(spans, n_spans) == 0, "overlapping tensors in the pool");
    void *base = lg_page_pool_base(pool);
    CHECK_MSG((uintptr_t)base % 256 == 0, "pool arena base %p is not 256-byte aligned, so adapter tensors are "
              "not either (engine/backend/backend_cpu.c cpu_alloc aligns to 64)", base);

    /* a second acquire of a resident adapter gives the same table, no load */
    const lg_lora_w *again = NULL;
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_cache_acquire(c, ids[1], &again, &err) == 0 && again == slots[1]);
    CHECK(stats(c).pool_loads == N_VALID);
    lg_adapter_cache_release(c, ids[1]);

    /* bad id */
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_cache_acquire(c, 9999, &again, &err) == -1 && err.msg[0]);
    CHECK(lg_adapter_cache_acquire(c, -1, &again, &err) == -1);

    for (int i = 0; i < N_VALID; i++)
        lg_adapter_cache_release(c, ids[i]);
    lg_pool_stats ps;
    lg_page_pool_stats(pool, &ps);
    CHECK(ps.pages_cached == ps.pages_adapter && ps.pages_adapter > 0);
    free(spans);
    lg_adapter_cache_free(c);
    lg_page_pool_stats(pool, &ps);
    CHECK_MSG(ps.pages_free == ps.pages_total, "free: %d of %d pages free", ps.pages_free, ps.pages_total);
    lg_page_pool_free(pool);
}

/* Number of pool pages adapter `dir` takes (its spec's layout). */
static int pages_of(const char *dir)
{
    lg_page_pool *pool = make_pool(64);
    lg_adapter_cache *c = make_cache(pool, 0);
    int n = -1;
    if (c) {
        int id = reg(c, "x", dir);
        const lg_lora_w *sl;
        lg_err err = {{0}};
        if (id >= 0 && acquire_wait(c, id, &sl, &err) == 0)
            n = pool_adapter_pages(pool);
        CHECK(id < 0 || n == lg_adapter_cache_spec(c, id)->n_pages);
        lg_adapter_cache_free(c);
    }
    lg_page_pool_free(pool);
    return n;
}

/* 3. the unified pool: KV pressure evicts a cached adapter, never a pinned one */
static void test_pool_pressure(void)
{
    const char *dx = FIX "all_linear_f32";
    int need = pages_of(dx);
    CHECK_MSG(need >= 2, "all_linear_f32 takes %d pages", need);
    if (need < 1)
        return;
    const int n_pages = need + 3;
    lg_page_pool *pool = make_pool(n_pages);
    lg_adapter_cache *c = make_cache(pool, 0);
    if (!c) {
        lg_page_pool_free(pool);
        return;
    }
    int x = reg(c, "x", dx);
    const lg_lora_w *sl = NULL;
    lg_err err = {{0}};
    int32_t kv[64];

    /* acquire + release: cached */
    CHECK(acquire_wait(c, x, &sl, &err) == 0);
    CHECK(pool_adapter_pages(pool) == need);
    lg_adapter_cache_release(c, x);
    lg_adapter_cache_stats s0 = stats(c);
    CHECK(s0.resident == 1 && s0.pool_loads == 1 && s0.pool_evictions == 0);
    CHECK(lg_page_pool_n_free(pool) == 3 && lg_page_pool_n_available(pool) == n_pages);

    /* 4 KV pages: only 3 free, X must go */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 4, kv) == 0);
    lg_adapter_cache_stats s1 = stats(c);
    CHECK_MSG(s1.pool_evictions == s0.pool_evictions + 1 && s1.resident == s0.resident - 1,
              "evictions %lld resident %d", (long long)s1.pool_evictions, s1.resident);
    CHECK(pool_adapter_pages(pool) == 0);
    /* the KV pages overwrite X's old pages: the reload must really re-upload */
    memset(lg_page_pool_base(pool), 0xA5, (size_t)n_pages * PAGE_BYTES);
    lg_page_pool_release(pool, kv, 4);

    sl = NULL;
    CHECK(lg_adapter_cache_acquire(c, x, &sl, &err) == 0 && sl); /* host image kept: copied at once */
    lg_adapter_cache_stats s2 = stats(c);
    CHECK(s2.pool_loads == s1.pool_loads + 1 && s2.resident == 1 && s2.host_loads == 1);
    if (sl)
        CHECK(check_slots(sl, dx, pool, NULL, NULL) == 0);

    /* pinned (twice): a KV alloc that needs its pages fails and takes nothing */
    const lg_lora_w *sl2 = NULL;
    CHECK(lg_adapter_cache_acquire(c, x, &sl2, &err) == 0 && sl2 == sl);
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 4, kv) == -1);
    CHECK(lg_page_pool_n_free(pool) == 3);
    lg_adapter_cache_release(c, x); /* one pin left */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 4, kv) == -1);
    lg_adapter_cache_stats s3 = stats(c);
    CHECK(s3.resident == 1 && s3.pool_evictions == s2.pool_evictions);
    if (sl)
        CHECK(check_slots(sl, dx, pool, NULL, NULL) == 0);
    lg_adapter_cache_release(c, x); /* now cached */

    /* the pool full of pinned KV pages: acquire says "retry later" */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, n_pages, kv) == 0); /* evicts X */
    lg_adapter_cache_stats s4 = stats(c);
    CHECK(s4.resident == 0 && s4.pool_evictions == s3.pool_evictions + 1);
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_cache_acquire(c, x, &sl, &err) == 1);
    /* still not enough with one page short */
    lg_page_pool_release(pool, kv, need - 1);
    CHECK(lg_adapter_cache_acquire(c, x, &sl, &err) == 1);
    lg_adapter_cache_stats s5 = stats(c);
    CHECK(s5.resident == 0 && s5.pool_loads == s4.pool_loads);
    CHECK(lg_page_pool_n_free(pool) == need - 1);
    /* one more page: it fits */
    lg_page_pool_release(pool, kv + need - 1, 1);
    sl = NULL;
    CHECK(lg_adapter_cache_acquire(c, x, &sl, &err) == 0 && sl);
    if (sl)
        CHECK(check_slots(sl, dx, pool, NULL, NULL) == 0);
    CHECK(stats(c).pool_loads == s5.pool_loads + 1);
    lg_adapter_cache_release(c, x);
    lg_page_pool_release(pool, kv + need, n_pages - need);

    /* release when not resident is a no-op */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, n_pages, kv) == 0);
    lg_adapter_cache_release(c, x);
    CHECK(stats(c).resident == 0);
    lg_page_pool_release(pool, kv, n_pages);

    /* removal while pinned: freed at the last release, every page back */
    sl = NULL;
    CHECK(acquire_wait(c, x, &sl, &err) == 0 && sl);
    lg_adapter_cache_remove(c, x);
    CHECK(lg_adapter_cache_spec(c, x) == NULL);            /* gone for new users */
    CHECK(stats(c).registered == 1 && pool_adapter_pages(pool) == need); /* still in use */
    lg_adapter_cache_release(c, x);
    CHECK(stats(c).registered == 0 && pool_adapter_pages(pool) == 0);
    CHECK(lg_page_pool_n_free(pool) == n_pages);

    lg_adapter_cache_free(c);
    CHECK(lg_page_pool_n_free(pool) == n_pages);
    lg_page_pool_free(pool);
}

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    int rc = in && out ? 0 : -1;
    char buf[4096];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in) fclose(in);
    if (out && fclose(out) != 0) rc = -1;
    return rc;
}

/* Evicts every cached pool entry by taking (and giving back) all pages. */
static void flush_pool(lg_page_pool *pool)
{
    int n = lg_page_pool_n_available(pool);
    int32_t *kv = malloc((size_t)n * sizeof *kv);
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, n, kv) == 0);
    lg_page_pool_release(pool, kv, n);
    free(kv);
}

/* A private copy of list_f16 in a temporary dir; the paths are written out. */
static char *tmp_copy(char *tmpl, char *cfg_path, char *st_path, size_t n)
{
    char *tmp = mkdtemp(tmpl);
    CHECK(tmp != NULL);
    if (!tmp)
        return NULL;
    snprintf(cfg_path, n, "%s/adapter_config.json", tmp);
    snprintf(st_path, n, "%s/adapter_model.safetensors", tmp);
    CHECK(copy_file(FIX "list_f16/adapter_config.json", cfg_path) == 0);
    CHECK(copy_file(FIX "list_f16/adapter_model.safetensors", st_path) == 0);
    return tmp;
}

/* 4. host tier: LRU under a byte budget, reload from disk, changed files */
static void test_host_tier(void)
{
    const char *dx = FIX "all_linear_f32", *dy = FIX "patterns", *dz = FIX "list_f16";
    int px = pages_of(dx), py = pages_of(dy), pz = pages_of(dz);
    CHECK(px > 0 && py > 0 && pz > 0);
    if (px <= 0 || py <= 0 || pz <= 0)
        return;
    size_t ix = (size_t)px * PAGE_BYTES, iy = (size_t)py * PAGE_BYTES, iz = (size_t)pz * PAGE_BYTES;
    size_t budget = ix > iy ? ix : iy;
    if (iz > budget) budget = iz;
    /* room for any one image, never for two */
    CHECK(budget < ix + iy && budget < ix + iz && budget < iy + iz);

    lg_page_pool *pool = make_pool(64);
    lg_adapter_cache *c = make_cache(pool, budget);
    if (!c) {
        lg_page_pool_free(pool);
        return;
    }
    lg_err err = {{0}};
    const lg_lora_w *sl = NULL;
    int x = reg(c, "x", dx), y = reg(c, "y", dy);
    CHECK(acquire_wait(c, x, &sl, &err) == 0);
    lg_adapter_cache_release(c, x); /* resident, cached; its image cached too */
    lg_adapter_cache_stats s0 = stats(c);
    CHECK(s0.host_loads == 1 && s0.host_evictions == 0 && s0.host_bytes == ix);

    CHECK(acquire_wait(c, y, &sl, &err) == 0); /* X's image must go */
    lg_adapter_cache_release(c, y);
    lg_adapter_cache_stats s1 = stats(c);
    CHECK_MSG(s1.host_loads == 2 && s1.host_evictions == 1 && s1.host_bytes == iy,
              "host loads %lld evictions %lld bytes %zu", (long long)s1.host_loads, (long long)s1.host_evictions,
              s1.host_bytes);
    CHECK(s1.resident == 2); /* the pool copies are untouched */

    /* resident without a host image: acquire still works, no disk read */
    sl = NULL;
    CHECK(lg_adapter_cache_acquire(c, x, &sl, &err) == 0 && sl);
    if (sl)
        CHECK(check_slots(sl, dx, pool, NULL, NULL) == 0);
    CHECK(stats(c).host_loads == 2);
    lg_adapter_cache_release(c, x);

    /* out of the pool too: the next acquire rebuilds from disk */
    flush_pool(pool);
    lg_adapter_cache_stats s2 = stats(c);
    CHECK(s2.resident == 0 && s2.pool_evictions == s1.pool_evictions + 2);
    memset(lg_page_pool_base(pool), 0x5A, 64 * (size_t)PAGE_BYTES);
    sl = NULL;
    CHECK(acquire_wait(c, x, &sl, &err) == 0 && sl);
    lg_adapter_cache_stats s3 = stats(c);
    CHECK_MSG(s3.host_loads == s2.host_loads + 1, "host loads %lld", (long long)s3.host_loads);
    CHECK(s3.host_evictions == s2.host_evictions + 1 && s3.host_bytes == ix); /* Y's image went */
    CHECK(s3.pool_loads == s2.pool_loads + 1 && s3.resident == 1);
    if (sl)
        CHECK(check_slots(sl, dx, pool, NULL, NULL) == 0);
    lg_adapter_cache_release(c, x);
    /* and Y, whose image went, reloads from disk too */
    sl = NULL;
    CHECK(acquire_wait(c, y, &sl, &err) == 0 && sl);
    if (sl)
        CHECK(check_slots(sl, dy, pool, NULL, NULL) == 0);
    CHECK(stats(c).host_loads == s3.host_loads + 1);
    lg_adapter_cache_release(c, y);

    /* a private copy that changes on disk after registration */
    char tmpl[] = "/tmp/lg_adapter_cache_XXXXXX", cfg_path[512], st_path[512];
    char *tmp = tmp_copy(tmpl, cfg_path, st_path, sizeof cfg_path);
    if (!tmp) {
        lg_adapter_cache_free(c);
        lg_page_pool_free(pool);
        return;
    }
    int z = reg(c, "z", tmp);
    CHECK(z >= 0 && strcmp(lg_adapter_cache_spec(c, z)->digest, lg_adapter_cache_spec(c, x)->digest) != 0);
    sl = NULL;
    CHECK(acquire_wait(c, z, &sl, &err) == 0 && sl);
    if (sl)
        CHECK(check_slots(sl, tmp, pool, NULL, NULL) == 0);
    lg_adapter_cache_release(c, z);
    lg_adapter_cache_evict(c, z, true); /* out of the pool and the host tier */
    lg_adapter_cache_stats s4 = stats(c);
    CHECK(s4.resident == 2 && s4.host_images == 0); /* x and y in the pool; z's image went, y's before it */

    /* change one value in the last tensor: still valid, another digest */
    FILE *f = fopen(st_path, "r+b");
    CHECK(f != NULL);
    if (f) {
        CHECK(fseek(f, -2, SEEK_END) == 0);
        int b = fgetc(f);
        CHECK(b != EOF);
        CHECK(fseek(f, -2, SEEK_END) == 0);
        fputc(b ^ 1, f); /* low mantissa bit of the last f16 element */
        fclose(f);
    }
    memset(&err, 0, sizeof err);
    sl = NULL;
    CHECK(acquire_wait(c, z, &sl, &err) == -1);
    CHECK_MSG(strstr(err.msg, "changed on disk") && strstr(err.msg, "digest"), "changed: '%s'", err.msg);
    lg_adapter_cache_stats s5 = stats(c);
    CHECK(s5.resident == 2 && s5.pool_loads == s4.pool_loads && s5.host_bytes == s4.host_bytes);
    CHECK(s5.load_failures == 1);
    /* the version stays failed, also once the bytes are back: a new version
     * must be registered (the gateway's re-upload) */
    CHECK(copy_file(FIX "list_f16/adapter_model.safetensors", st_path) == 0);
    memset(&err, 0, sizeof err);
    CHECK(lg_adapter_cache_acquire(c, z, &sl, &err) == -1 && strstr(err.msg, "changed on disk"));
    int z2 = reg(c, "z", tmp);
    sl = NULL;
    memset(&err, 0, sizeof err);
    CHECK_MSG(acquire_wait(c, z2, &sl, &err) == 0 && sl, "new version: %s", err.msg);
    if (sl)
        CHECK(check_slots(sl, tmp, pool, NULL, NULL) == 0);
    lg_adapter_cache_release(c, z2);
    lg_adapter_cache_evict(c, z2, true);

    /* a file that no longer validates against the config: -1, says reloading */
    CHECK(copy_file(FIX "rslora/adapter_model.safetensors", st_path) == 0);
    memset(&err, 0, sizeof err);
    CHECK(acquire_wait(c, z2, &sl, &err) == -1);
    CHECK_MSG(strstr(err.msg, "reloading") && strstr(err.msg, "'z'"), "invalid: '%s'", err.msg);
    lg_adapter_cache_remove(c, z);
    lg_adapter_cache_remove(c, z2);

    unlink(cfg_path);
    unlink(st_path);
    rmdir(tmp);
    lg_adapter_cache_free(c);
    lg_pool_stats ps;
    lg_page_pool_stats(pool, &ps);
    CHECK(ps.pages_free == ps.pages_total);
    lg_page_pool_free(pool);
}

/* 4b. synthetic adapters: the layout of a file adapter of the same shapes,
 * bytes a function of the seed, digest of (rank, targets, seed, alpha) */
static void test_synthetic(void)
{
    lg_page_pool *pool = make_pool(64);
    lg_adapter_cache *c = make_cache(pool, 0);
    if (!c) {
        lg_page_pool_free(pool);
        return;
    }
    const lg_adapter_geom *g = lg_adapter_cache_geom(c);
    lg_err err = {{0}};
    /* all_linear_f32: rank 2 on every module but down_proj, alpha 4 */
    lg_adapter_spec *fs = NULL, *s1 = NULL, *s2 = NULL, *s3 = NULL;
    CHECK(lg_adapter_spec_from_dir(g, "f", FIX "all_linear_f32", &fs, &err) == 0);
    lg_synth_adapter sy = {.rank = 2, .targets = 0x3F, .seed = 11};
    CHECK(lg_adapter_spec_synthetic(g, "s1", &sy, &s1, &err) == 0);
    CHECK(lg_adapter_spec_synthetic(g, "s2", &sy, &s2, &err) == 0);
    sy.seed = 12;
    CHECK(lg_adapter_spec_synthetic(g, "s3", &sy, &s3, &err) == 0);
    if (fs && s1 && s2 && s3) {
        bool same_layout = fs->n_pages == s1->n_pages && fs->n_slots == s1->n_slots;
        for (int k = 0; same_layout && k < fs->n_slots; k++)
            same_layout = fs->rank[k] == s1->rank[k] && fs->pa[k].page == s1->pa[k].page &&
                          fs->pa[k].off == s1->pa[k].off && fs->pb[k].page == s1->pb[k].page &&
                          fs->pb[k].off == s1->pb[k].off;
        CHECK_MSG(same_layout, "synthetic layout differs from the file adapter's");
        CHECK(!strcmp(s1->digest, s2->digest) && strcmp(s1->digest, s3->digest) != 0);
        CHECK(s1->scale[0] == 2.0f); /* alpha defaults to 2 * rank */
        /* fill twice: the same bytes; another seed: other bytes */
        size_t bytes = (size_t)s1->n_pages * PAGE_BYTES;
        unsigned char *a = calloc(1, bytes), *b = calloc(1, bytes), *d = calloc(1, bytes);
        unsigned char *pa[64], *pb[64], *pd[64];
        for (int p = 0; p < s1->n_pages && p < 64; p++) {
            pa[p] = a + (size_t)p * PAGE_BYTES;
            pb[p] = b + (size_t)p * PAGE_BYTES;
            pd[p] = d + (size_t)p * PAGE_BYTES;
        }
        CHECK(lg_adapter_image_fill(s1, pa, &err) == 0 && lg_adapter_image_fill(s2, pb, &err) == 0 &&
              lg_adapter_image_fill(s3, pd, &err) == 0);
        CHECK(memcmp(a, b, bytes) == 0 && memcmp(a, d, bytes) != 0);
        /* values are finite and small */
        const float *v = (const float *)(a + s1->pa[0].off);
        bool ok = true;
        for (int i = 0; i < s1->rank[0] * s1->in_dim[0]; i++) ok &= fabsf(v[i]) >= 0.0078125f && fabsf(v[i]) < 0.015625f;
        CHECK(ok);
        free(a), free(b), free(d);
    }
    /* bad synthetic specs */
    lg_adapter_spec *bad = NULL;
    sy.rank = MAX_RANK + 1;
    CHECK(lg_adapter_spec_synthetic(g, "b", &sy, &bad, &err) == -1 && !bad);
    sy.rank = 2;
    sy.targets = 0;
    CHECK(lg_adapter_spec_synthetic(g, "b", &sy, &bad, &err) == -1 && !bad);
    /* through the tiers */
    int id = g_next_id++;
    CHECK(s1 && lg_adapter_cache_add(c, id, s1, &err) == 0);
    const lg_lora_w *sl = NULL;
    CHECK(acquire_wait(c, id, &sl, &err) == 0 && sl && sl[0].rank == 2 && sl[0].A);
    lg_adapter_cache_release(c, id);
    lg_adapter_spec_free(fs);
    lg_adapter_spec_free(s2);
    lg_adapter_spec_free(s3);
    lg_adapter_cache_free(c);
    lg_page_pool_free(pool);
}

/* 5. lg_adapter_max_tensor_bytes */
static void test_max_tensor_bytes(void)
{
    int dims[7][2] = {
        {g_cfg.d_model, g_cfg.n_heads * g_cfg.head_dim},      /* q */
        {g_cfg.d_model, g_cfg.n_kv_heads * g_cfg.head_dim},   /* k */
        {g_cfg.d_model, g_cfg.n_kv_heads * g_cfg.head_dim},   /* v */
        {g_cfg.n_heads * g_cfg.head_dim, g_cfg.d_model},      /* o */
        {g_cfg.d_model, g_cfg.d_ff},                          /* gate */
        {g_cfg.d_model, g_cfg.d_ff},                          /* up */
        {g_cfg.d_ff, g_cfg.d_model},                          /* down */
    };
    int ranks[] = {1, 2, 4, 8, 16, 64};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        size_t want = 0;
        for (int t = 0; t < 7; t++) {
            int mx = dims[t][0] > dims[t][1] ? dims[t][0] : dims[t][1];
            size_t b = (size_t)ranks[i] * (size_t)mx * 4;
            if (b > want) want = b;
        }
        size_t got = lg_adapter_max_tensor_bytes(&g_cfg, ranks[i], LG_F32);
        CHECK_MSG(got == want, "rank %d: %zu, want %zu", ranks[i], got, want);
        CHECK(lg_adapter_max_tensor_bytes(&g_cfg, ranks[i], LG_F16) == want / 2);
    }
    CHECK(lg_adapter_max_tensor_bytes(&g_cfg, 8, LG_F32) == 8 * 128 * 4);
    /* a config whose widest layer is the attention (d_ff < n_heads * head_dim) */
    lg_model_config w = g_cfg;
    w.n_heads = 16; /* q/o: 64 <-> 256 */
    w.d_ff = 32;
    CHECK(lg_adapter_max_tensor_bytes(&w, 4, LG_F32) == 4 * 256 * 4);
}

int main(void)
{
    g_cfg = base_config();
    lg_err err = {{0}};
    if (lg_backend_create("cpu", &(lg_backend_opts){.n_threads = 1}, &g_be, &err) != 0) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    CHECK(g_be->act_dtype == LG_F32);
    test_register();
    test_slots();
    test_pool_pressure();
    test_host_tier();
    test_synthetic();
    test_max_tensor_bytes();
    lg_backend_free(g_be);
    TEST_DONE();
}
