/*
 * test_page_pool.c — lg_page_pool: accounting, entries and the shared LRU,
 * and a randomized check against a reference model.
 *
 * The model keeps, per page, its state (free / raw / entry) and owner, plus
 * the LRU of cached entries as an array (index 0 = least recently used). It
 * predicts which entries an allocation evicts and every counter of
 * lg_page_pool_stats; the evict callback logs what the pool really did.
 * Pools are created with be = NULL (malloc'd arena).
 */
#include <stdint.h>
#include <stdlib.h>

#include "engine/backend/page_pool.h"
#include "tests/unit/test.h"

/* ---- evict callback log ---- */

typedef struct ev_rec {
    void *owner;
    lg_pool_entry *e;
    int n_free;   /* pool's free count when the callback ran */
    int n_cached; /* pool's cached count when the callback ran */
    int pins;
} ev_rec;

#define MAX_EV 256
static ev_rec ev_log[MAX_EV];
static int n_ev;
static lg_page_pool *ev_pool;

static void on_evict(void *owner, lg_pool_entry *e)
{
    lg_pool_stats s;
    lg_page_pool_stats(ev_pool, &s);
    if (n_ev < MAX_EV)
        ev_log[n_ev] = (ev_rec){owner, e, s.pages_free, s.pages_cached, e->pins};
    n_ev++;
}

static bool stats_eq(const lg_pool_stats *a, const lg_pool_stats *b)
{
    return a->pages_total == b->pages_total && a->pages_free == b->pages_free && a->pages_kv == b->pages_kv &&
           a->pages_adapter == b->pages_adapter && a->pages_cached == b->pages_cached &&
           a->evictions_kv == b->evictions_kv && a->evictions_adapter == b->evictions_adapter;
}

static lg_pool_stats get_stats(const lg_page_pool *p)
{
    lg_pool_stats s;
    lg_page_pool_stats(p, &s);
    return s;
}

/* All of pages[0..n) in [0, n_pages) and pairwise distinct, also across seen[]
 * (marks them in seen[] as it goes). */
static bool fresh_pages(const int32_t *pages, int n, int n_pages, uint8_t *seen)
{
    for (int i = 0; i < n; i++) {
        if (pages[i] < 0 || pages[i] >= n_pages || seen[pages[i]])
            return false;
        seen[pages[i]] = 1;
    }
    return true;
}

static bool subset_of(const int32_t *a, int na, const int32_t *b, int nb)
{
    for (int i = 0; i < na; i++) {
        bool found = false;
        for (int j = 0; j < nb; j++) found |= a[i] == b[j];
        if (!found)
            return false;
    }
    return true;
}

/* Makes an entry of n fresh pages of `kind`, pinned once. */
static void make_entry(lg_page_pool *p, lg_pool_entry *e, int32_t *pages, int n, lg_page_kind kind, void *owner)
{
    CHECK(lg_page_pool_alloc(p, kind, n, pages) == 0);
    *e = (lg_pool_entry){.kind = kind, .pages = pages, .n_pages = n, .evict = on_evict, .owner = owner};
    lg_page_pool_entry_add(p, e);
}

/* ---- 1. basic accounting ---- */

static void test_basic(void)
{
    enum { N = 16, PB = 64 };
    lg_page_pool *p = NULL;
    lg_err err;
    CHECK(lg_page_pool_create(NULL, PB, N, &p, &err) == 0 && p);
    if (!p)
        return;
    CHECK(lg_page_pool_n_pages(p) == N && lg_page_pool_page_bytes(p) == PB && lg_page_pool_base(p));
    memset(lg_page_pool_base(p), 0xab, (size_t)N * PB); /* the whole arena is addressable (ASan) */

    lg_page_pool *bad = (lg_page_pool *)1;
    CHECK(lg_page_pool_create(NULL, PB, 0, &bad, &err) != 0 && bad == NULL);
    CHECK(lg_page_pool_create(NULL, 0, N, &bad, &err) != 0 && bad == NULL);
    lg_page_pool_free(NULL);

    lg_pool_stats s = get_stats(p);
    CHECK(s.pages_total == N && s.pages_free == N && s.pages_kv == 0 && s.pages_adapter == 0 && s.pages_cached == 0);

    uint8_t seen[N] = {0};
    int32_t kv[5], ad[3], rest[8], one[1];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 5, kv) == 0);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, 3, ad) == 0);
    CHECK(fresh_pages(kv, 5, N, seen) && fresh_pages(ad, 3, N, seen));
    s = get_stats(p);
    CHECK(s.pages_free == 8 && s.pages_kv == 5 && s.pages_adapter == 3 && s.pages_cached == 0);
    CHECK(lg_page_pool_n_free(p) == 8 && lg_page_pool_n_available(p) == 8);

    /* too many: -1, nothing changes */
    int32_t big[N + 1];
    for (int i = 0; i < N + 1; i++) big[i] = -7;
    lg_pool_stats before = get_stats(p);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 9, big) == -1);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, N + 1, big) == -1);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, -1, big) == -1);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));
    CHECK(big[0] == -7); /* out[] untouched */
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 0, big) == 0);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));

    /* exactly what is left */
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 8, rest) == 0);
    CHECK(fresh_pages(rest, 8, N, seen));
    s = get_stats(p);
    CHECK(s.pages_free == 0 && s.pages_kv == 13 && s.pages_adapter == 3);
    before = s;
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, 1, one) == -1);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));

    /* release, then release again / foreign pages: ignored */
    lg_page_pool_release(p, ad, 3);
    s = get_stats(p);
    CHECK(s.pages_free == 3 && s.pages_kv == 13 && s.pages_adapter == 0);
    before = s;
    lg_page_pool_release(p, ad, 3); /* already free */
    int32_t foreign[] = {-1, N, 1000, INT32_MIN, ad[0], ad[0]};
    lg_page_pool_release(p, foreign, 6);
    lg_page_pool_release(p, NULL, 0);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));
    /* the free stack is not corrupted: exactly those 3 pages come back, once */
    int32_t again[3];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 3, again) == 0);
    CHECK(subset_of(again, 3, ad, 3) && again[0] != again[1] && again[1] != again[2] && again[0] != again[2]);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 1, one) == -1);

    /* an entry's pages cannot be released as raw */
    lg_pool_entry e;
    e = (lg_pool_entry){.kind = LG_PAGE_KV, .pages = again, .n_pages = 3, .evict = on_evict, .owner = &e};
    lg_page_pool_entry_add(p, &e);
    before = get_stats(p);
    lg_page_pool_release(p, again, 3);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));
    lg_page_pool_entry_drop(p, &e);

    lg_page_pool_release(p, kv, 5);
    lg_page_pool_release(p, rest, 8);
    s = get_stats(p);
    CHECK(s.pages_free == N && s.pages_kv == 0 && s.pages_adapter == 0 && s.pages_cached == 0);
    int32_t all[N];
    uint8_t seen2[N] = {0};
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, N, all) == 0 && fresh_pages(all, N, N, seen2));
    lg_page_pool_release(p, all, N);
    CHECK(lg_page_pool_n_free(p) == N);
    lg_page_pool_free(p);
}

/* ---- 2. entries and LRU ---- */

static void test_entries(void)
{
    enum { N = 12 };
    lg_page_pool *p = NULL;
    lg_err err;
    CHECK(lg_page_pool_create(NULL, 32, N, &p, &err) == 0 && p);
    if (!p)
        return;
    ev_pool = p;
    n_ev = 0;
    int oa, ob, oc, od; /* owner tags, distinct from the entries */
    lg_pool_entry A, B, C, D;
    int32_t pa[3], pb[3], pc[3], pd[3];
    make_entry(p, &A, pa, 3, LG_PAGE_ADAPTER, &oa);
    make_entry(p, &B, pb, 3, LG_PAGE_KV, &ob);
    make_entry(p, &C, pc, 3, LG_PAGE_ADAPTER, &oc);
    make_entry(p, &D, pd, 3, LG_PAGE_KV, &od);
    lg_pool_stats s = get_stats(p);
    CHECK(s.pages_free == 0 && s.pages_kv == 6 && s.pages_adapter == 6 && s.pages_cached == 0);
    CHECK(A.pins == 1 && C.pins == 1);

    /* all pinned: nothing can be evicted */
    int32_t out[N];
    lg_pool_stats before = get_stats(p);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 1, out) == -1);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s) && n_ev == 0);

    /* extra pins count */
    lg_page_pool_pin(p, &C);
    lg_page_pool_pin(p, &C);
    CHECK(C.pins == 3);
    lg_page_pool_unpin(p, &C);
    lg_page_pool_unpin(p, &C);
    CHECK(C.pins == 1 && get_stats(p).pages_cached == 0);

    /* LRU: unpin B, A, D -> [B, A, D]; re-pin + unpin B -> [A, D, B] */
    lg_page_pool_unpin(p, &B);
    lg_page_pool_unpin(p, &A);
    lg_page_pool_unpin(p, &D);
    CHECK(get_stats(p).pages_cached == 9 && lg_page_pool_n_available(p) == 9);
    lg_page_pool_unpin(p, &A); /* already cached: no-op */
    CHECK(A.pins == 0 && get_stats(p).pages_cached == 9);
    lg_page_pool_pin(p, &B);
    CHECK(get_stats(p).pages_cached == 6);
    lg_page_pool_unpin(p, &B);
    CHECK(get_stats(p).pages_cached == 9);

    /* alloc 2: evicts A only */
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 2, out) == 0);
    CHECK_MSG(n_ev == 1, "n_ev=%d", n_ev);
    if (n_ev >= 1) {
        CHECK(ev_log[0].e == &A && ev_log[0].owner == &oa && ev_log[0].pins == 0);
        CHECK_MSG(ev_log[0].n_free == 3, "free at callback %d", ev_log[0].n_free); /* A's pages already free */
        CHECK(ev_log[0].n_cached == 6);
    }
    CHECK(subset_of(out, 2, pa, 3));
    s = get_stats(p);
    CHECK(s.pages_free == 1 && s.pages_kv == 8 && s.pages_adapter == 3 && s.pages_cached == 6);
    CHECK(s.evictions_adapter == 1 && s.evictions_kv == 0);

    /* an evicted entry is dead: pin / unpin / drop are no-ops */
    before = get_stats(p);
    lg_page_pool_pin(p, &A);
    lg_page_pool_unpin(p, &A);
    lg_page_pool_entry_drop(p, &A);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s) && n_ev == 1);

    /* alloc 5: needs D then B (LRU order), C (pinned) untouched */
    int32_t out2[5];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, 5, out2) == 0);
    CHECK_MSG(n_ev == 3, "n_ev=%d", n_ev);
    if (n_ev >= 3) {
        CHECK(ev_log[1].e == &D && ev_log[1].owner == &od && ev_log[1].n_free == 4);
        CHECK(ev_log[2].e == &B && ev_log[2].owner == &ob && ev_log[2].n_free == 7);
        CHECK(ev_log[2].n_cached == 0);
    }
    s = get_stats(p);
    CHECK(s.pages_free == 2 && s.pages_kv == 2 && s.pages_adapter == 8 && s.pages_cached == 0);
    CHECK(s.evictions_adapter == 1 && s.evictions_kv == 2);
    {
        uint8_t seen[N] = {0};
        CHECK(fresh_pages(out, 2, N, seen) && fresh_pages(out2, 5, N, seen) && fresh_pages(pc, 3, N, seen));
    }

    /* C pinned: alloc 3 fails, evicts nothing */
    before = get_stats(p);
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 3, out) == -1 && n_ev == 3);
    s = get_stats(p);
    CHECK(stats_eq(&before, &s));

    /* entry_drop: pinned and cached, no callback */
    lg_page_pool_entry_drop(p, &C);
    s = get_stats(p);
    CHECK(s.pages_free == 5 && s.pages_adapter == 5 && s.pages_cached == 0 && n_ev == 3);
    lg_page_pool_entry_drop(p, &C); /* twice: no-op */
    before = get_stats(p);
    CHECK(stats_eq(&s, &before));

    lg_pool_entry E;
    int oe;
    int32_t pe[4];
    make_entry(p, &E, pe, 4, LG_PAGE_KV, &oe);
    lg_page_pool_unpin(p, &E);
    CHECK(get_stats(p).pages_cached == 4);
    lg_page_pool_entry_drop(p, &E);
    s = get_stats(p);
    CHECK(s.pages_free == 5 && s.pages_cached == 0 && s.pages_kv == 2 && n_ev == 3);
    CHECK(lg_page_pool_n_available(p) == 5);
    /* the dropped entry is out of the LRU: allocating everything evicts nothing */
    int32_t out3[5];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 5, out3) == 0 && n_ev == 3);
    lg_page_pool_release(p, out3, 5);
    lg_page_pool_release(p, out, 2);
    lg_page_pool_release(p, out2, 5);
    s = get_stats(p);
    CHECK(s.pages_free == N && s.pages_kv == 0 && s.pages_adapter == 0 && s.pages_cached == 0);
    lg_page_pool_free(p);
}

/* ---- 3. pressure from both kinds, one LRU ---- */

static void test_pressure(void)
{
    enum { N = 8 };
    lg_page_pool *p = NULL;
    lg_err err;
    CHECK(lg_page_pool_create(NULL, 16, N, &p, &err) == 0 && p);
    if (!p)
        return;
    ev_pool = p;
    n_ev = 0;
    int o1, o2, o3;
    lg_pool_entry K1, A1, K2;
    int32_t pk1[2], pa1[2], pk2[2];
    make_entry(p, &K1, pk1, 2, LG_PAGE_KV, &o1);
    make_entry(p, &A1, pa1, 2, LG_PAGE_ADAPTER, &o2);
    make_entry(p, &K2, pk2, 2, LG_PAGE_KV, &o3);
    lg_page_pool_unpin(p, &K1); /* oldest */
    lg_page_pool_unpin(p, &A1);
    lg_page_pool_unpin(p, &K2); /* newest */
    lg_pool_stats s = get_stats(p);
    CHECK(s.pages_free == 2 && s.pages_cached == 6 && s.pages_kv == 4 && s.pages_adapter == 2);

    /* adapter pages: the old KV entry goes before the newer adapter entry */
    int32_t a[4];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, 4, a) == 0);
    CHECK(n_ev == 1 && ev_log[0].e == &K1 && ev_log[0].owner == &o1);
    s = get_stats(p);
    CHECK(s.pages_free == 0 && s.pages_kv == 2 && s.pages_adapter == 6 && s.pages_cached == 4);
    CHECK(s.evictions_kv == 1 && s.evictions_adapter == 0);

    /* KV pages: evicts the cached adapter entry next */
    int32_t k[2];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 2, k) == 0);
    CHECK(n_ev == 2 && ev_log[1].e == &A1 && ev_log[1].owner == &o2 && ev_log[1].n_free == 2);
    CHECK(subset_of(k, 2, pa1, 2));
    s = get_stats(p);
    CHECK(s.pages_free == 0 && s.pages_kv == 4 && s.pages_adapter == 4 && s.pages_cached == 2);
    CHECK(s.evictions_kv == 1 && s.evictions_adapter == 1);

    /* make the adapter pages an entry, cache it after K2: K2 is older */
    lg_pool_entry A2;
    int o4;
    A2 = (lg_pool_entry){.kind = LG_PAGE_ADAPTER, .pages = a, .n_pages = 4, .evict = on_evict, .owner = &o4};
    lg_page_pool_entry_add(p, &A2);
    lg_page_pool_unpin(p, &A2);
    int32_t k2[3];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, 3, k2) == 0);
    CHECK(n_ev == 4 && ev_log[2].e == &K2 && ev_log[3].e == &A2 && ev_log[3].owner == &o4);
    s = get_stats(p);
    CHECK(s.pages_free == 3 && s.pages_kv == 5 && s.pages_adapter == 0 && s.pages_cached == 0);
    CHECK(s.evictions_kv == 2 && s.evictions_adapter == 2);
    lg_page_pool_release(p, k, 2);
    lg_page_pool_release(p, k2, 3);
    CHECK(lg_page_pool_n_free(p) == N);
    lg_page_pool_free(p);
}

/* ---- 4. randomized model check ---- */

enum { RN = 64, MAX_RAW = 48, MAX_ENT = 48, N_OPS = 20000 };
enum { M_FREE = 0, M_RAW = 1, M_ENTRY = 2 };

typedef struct raw_set {
    bool used;
    lg_page_kind kind;
    int n;
    int32_t pages[RN];
} raw_set;

typedef struct ent_slot {
    bool live;
    lg_pool_entry e;
    int32_t pages[RN];
    int pins;
    int tag; /* owner = &tag */
} ent_slot;

typedef struct model {
    uint8_t state[RN];
    uint8_t kind[RN];
    int owner[RN]; /* raw set index or entry slot index */
    raw_set raw[MAX_RAW];
    ent_slot ent[MAX_ENT];
    int lru[MAX_ENT]; /* slot indices, [0] = least recently used */
    int n_lru;
    int64_t evictions[2];
} model;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static int model_free(const model *m)
{
    int n = 0;
    for (int i = 0; i < RN; i++) n += m->state[i] == M_FREE;
    return n;
}

static int model_cached(const model *m)
{
    int n = 0;
    for (int i = 0; i < m->n_lru; i++) n += m->ent[m->lru[i]].e.n_pages;
    return n;
}

static void lru_remove(model *m, int slot)
{
    for (int i = 0; i < m->n_lru; i++)
        if (m->lru[i] == slot) {
            memmove(&m->lru[i], &m->lru[i + 1], (size_t)(m->n_lru - i - 1) * sizeof(int));
            m->n_lru--;
            return;
        }
}

static void model_free_pages(model *m, const int32_t *pages, int n)
{
    for (int i = 0; i < n; i++) m->state[pages[i]] = M_FREE;
}

/* Checks the pool's counters and the model's own ownership invariant. */
static int check_model(const lg_page_pool *p, const model *m, int op, const char *what)
{
    int bad = 0;
    /* every page exactly one of free / raw-owned / entry-owned, consistent with owner lists */
    int cnt[RN] = {0};
    for (int r = 0; r < MAX_RAW; r++)
        if (m->raw[r].used)
            for (int i = 0; i < m->raw[r].n; i++) {
                int pg = m->raw[r].pages[i];
                cnt[pg]++;
                if (m->state[pg] != M_RAW || m->owner[pg] != r || m->kind[pg] != m->raw[r].kind)
                    bad++;
            }
    for (int s = 0; s < MAX_ENT; s++)
        if (m->ent[s].live)
            for (int i = 0; i < m->ent[s].e.n_pages; i++) {
                int pg = m->ent[s].pages[i];
                cnt[pg]++;
                if (m->state[pg] != M_ENTRY || m->owner[pg] != s || m->kind[pg] != m->ent[s].e.kind)
                    bad++;
            }
    int kv = 0, ad = 0;
    for (int i = 0; i < RN; i++) {
        if (cnt[i] != (m->state[i] != M_FREE))
            bad++;
        if (m->state[i] != M_FREE)
            *(m->kind[i] == LG_PAGE_KV ? &kv : &ad) += 1;
    }
    CHECK_MSG(bad == 0, "op %d (%s): model ownership inconsistent (%d)", op, what, bad);

    lg_pool_stats s = get_stats(p);
    int mf = model_free(m), mc = model_cached(m);
    bool ok = s.pages_total == RN && s.pages_free == mf && s.pages_kv == kv && s.pages_adapter == ad &&
              s.pages_cached == mc && s.evictions_kv == m->evictions[0] && s.evictions_adapter == m->evictions[1] &&
              lg_page_pool_n_free(p) == mf && lg_page_pool_n_available(p) == mf + mc;
    CHECK_MSG(ok, "op %d (%s): stats free %d/%d kv %d/%d ad %d/%d cached %d/%d ev %lld/%lld %lld/%lld (got/want)",
              op, what, s.pages_free, mf, s.pages_kv, kv, s.pages_adapter, ad, s.pages_cached, mc,
              (long long)s.evictions_kv, (long long)m->evictions[0], (long long)s.evictions_adapter,
              (long long)m->evictions[1]);
    return ok && bad == 0;
}

static int pick_raw(const model *m, bool used)
{
    int c[MAX_RAW], n = 0;
    for (int r = 0; r < MAX_RAW; r++)
        if (m->raw[r].used == used && (!used || m->raw[r].n > 0))
            c[n++] = r;
    return n ? c[rnd((uint32_t)n)] : -1;
}

static int pick_ent(const model *m, int want) /* want: 0 free slot, 1 live, 2 live with pins, 3 dead used once */
{
    int c[MAX_ENT], n = 0;
    for (int s = 0; s < MAX_ENT; s++) {
        const ent_slot *e = &m->ent[s];
        bool ok = want == 0 ? !e->live : want == 1 ? e->live : want == 2 ? e->live && e->pins > 0 : !e->live;
        if (ok)
            c[n++] = s;
    }
    return n ? c[rnd((uint32_t)n)] : -1;
}

static void test_random(void)
{
    lg_page_pool *p = NULL;
    lg_err err;
    CHECK(lg_page_pool_create(NULL, 8, RN, &p, &err) == 0 && p);
    if (!p)
        return;
    ev_pool = p;
    model *m = calloc(1, sizeof *m);
    for (int s = 0; s < MAX_ENT; s++) m->ent[s].tag = s;
    int failures = 0, n_evicting_allocs = 0, n_failed_allocs = 0, n_ent_made = 0;
    int hist[8] = {0};

    for (int op = 0; op < N_OPS && failures < 10; op++) {
        int kind_op = (int)rnd(100);
        const char *what = "";
        if (kind_op < 30) { /* alloc raw */
            what = "alloc";
            hist[0]++;
            int r = pick_raw(m, false);
            if (r < 0)
                continue;
            lg_page_kind k = rnd(2) ? LG_PAGE_KV : LG_PAGE_ADAPTER;
            int n = 1 + (int)rnd(rnd(4) == 0 ? 24 : 8);
            /* prediction */
            int mf = model_free(m), mc = model_cached(m);
            int want_ev[MAX_ENT], n_want = 0;
            bool want_ok = n <= mf + mc;
            if (want_ok)
                for (int i = 0, f = mf; f < n; i++) {
                    want_ev[n_want++] = m->lru[i];
                    f += m->ent[m->lru[i]].e.n_pages;
                }
            lg_pool_stats before = get_stats(p);
            int32_t out[RN];
            n_ev = 0;
            int rc = lg_page_pool_alloc(p, k, n, out);
            if (!want_ok) {
                n_failed_allocs++;
                lg_pool_stats after = get_stats(p);
                bool ok = rc == -1 && n_ev == 0 && stats_eq(&before, &after);
                CHECK_MSG(ok, "op %d: alloc %d (avail %d) should fail cleanly: rc %d, %d evictions", op, n, mf + mc,
                          rc, n_ev);
                failures += !ok;
                continue;
            }
            CHECK_MSG(rc == 0, "op %d: alloc %d (avail %d) failed", op, n, mf + mc);
            if (rc != 0) {
                failures++;
                continue;
            }
            n_evicting_allocs += n_want > 0;
            bool ev_ok = n_ev == n_want;
            for (int i = 0; ev_ok && i < n_want; i++) {
                ent_slot *es = &m->ent[want_ev[i]];
                int freed_so_far = 0;
                for (int j = 0; j <= i; j++) freed_so_far += m->ent[want_ev[j]].e.n_pages;
                ev_ok = ev_log[i].e == &es->e && ev_log[i].owner == &es->tag && ev_log[i].pins == 0 &&
                        ev_log[i].n_free == mf + freed_so_far;
            }
            CHECK_MSG(ev_ok, "op %d: alloc %d: got %d evictions, model predicts %d (LRU-first)", op, n, n_ev,
                      n_want);
            failures += !ev_ok;
            for (int i = 0; i < n_want; i++) {
                ent_slot *es = &m->ent[want_ev[i]];
                model_free_pages(m, es->pages, es->e.n_pages);
                es->live = false;
                m->evictions[es->e.kind]++;
                lru_remove(m, want_ev[i]);
            }
            bool pg_ok = true;
            for (int i = 0; i < n; i++) {
                int pg = out[i];
                if (pg < 0 || pg >= RN || m->state[pg] != M_FREE) {
                    pg_ok = false;
                    break;
                }
                m->state[pg] = M_RAW;
                m->kind[pg] = (uint8_t)k;
                m->owner[pg] = r;
            }
            CHECK_MSG(pg_ok, "op %d: alloc returned a page that is not free", op);
            if (!pg_ok) {
                failures = 1000; /* model is out of sync; stop */
                break;
            }
            raw_set *rs = &m->raw[r];
            rs->used = true;
            rs->kind = k;
            rs->n = n;
            memcpy(rs->pages, out, (size_t)n * sizeof(int32_t));
        } else if (kind_op < 45) { /* release raw (all or a tail), plus some junk */
            what = "release";
            hist[1]++;
            int r = pick_raw(m, true);
            if (r < 0)
                continue;
            raw_set *rs = &m->raw[r];
            int k = rnd(2) ? rs->n : 1 + (int)rnd((uint32_t)rs->n);
            int32_t rel[RN + 4];
            int nr = 0;
            for (int i = rs->n - k; i < rs->n; i++) rel[nr++] = rs->pages[i];
            if (rnd(4) == 0) { /* junk: out of range, and a page that is free or entry-owned */
                rel[nr++] = rnd(2) ? -1 : RN + (int)rnd(100);
                int pg = (int)rnd(RN);
                if (m->state[pg] != M_RAW)
                    rel[nr++] = pg;
            }
            lg_page_pool_release(p, rel, nr);
            if (rnd(8) == 0)
                lg_page_pool_release(p, rel, nr); /* double release */
            model_free_pages(m, rs->pages + rs->n - k, k);
            rs->n -= k;
            if (rs->n == 0)
                rs->used = false;
        } else if (kind_op < 58) { /* entry from (part of) a raw set */
            what = "entry_add";
            hist[2]++;
            int r = pick_raw(m, true), s = pick_ent(m, 0);
            if (r < 0 || s < 0)
                continue;
            raw_set *rs = &m->raw[r];
            int k = 1 + (int)rnd((uint32_t)rs->n);
            ent_slot *es = &m->ent[s];
            memcpy(es->pages, rs->pages + rs->n - k, (size_t)k * sizeof(int32_t));
            rs->n -= k;
            if (rs->n == 0)
                rs->used = false;
            /* stale internal fields from a previous life must not matter */
            es->e = (lg_pool_entry){.kind = rs->kind, .pages = es->pages, .n_pages = k, .evict = on_evict,
                                    .owner = &es->tag, .pins = 77, .lru_prev = (lg_pool_entry *)&es->e,
                                    .lru_next = (lg_pool_entry *)&es->e};
            lg_page_pool_entry_add(p, &es->e);
            es->live = true;
            es->pins = 1;
            for (int i = 0; i < k; i++) {
                m->state[es->pages[i]] = M_ENTRY;
                m->owner[es->pages[i]] = s;
            }
            n_ent_made++;
        } else if (kind_op < 72) { /* pin */
            what = "pin";
            hist[3]++;
            int s = pick_ent(m, rnd(10) == 0 ? 3 : 1);
            if (s < 0)
                continue;
            ent_slot *es = &m->ent[s];
            lg_page_pool_pin(p, &es->e);
            if (es->live) {
                if (es->pins++ == 0)
                    lru_remove(m, s);
                CHECK(es->e.pins == es->pins);
            }
        } else if (kind_op < 92) { /* unpin */
            what = "unpin";
            hist[4]++;
            int s = pick_ent(m, rnd(10) == 0 ? (rnd(2) ? 3 : 1) : 2);
            if (s < 0)
                continue;
            ent_slot *es = &m->ent[s];
            lg_page_pool_unpin(p, &es->e);
            if (es->live && es->pins > 0 && --es->pins == 0)
                m->lru[m->n_lru++] = s;
            if (es->live)
                CHECK(es->e.pins == es->pins);
        } else { /* drop */
            what = "drop";
            hist[5]++;
            int s = pick_ent(m, rnd(10) == 0 ? 3 : 1);
            if (s < 0)
                continue;
            ent_slot *es = &m->ent[s];
            int before_ev = n_ev;
            lg_page_pool_entry_drop(p, &es->e);
            CHECK(n_ev == before_ev);
            if (es->live) {
                if (es->pins == 0)
                    lru_remove(m, s);
                model_free_pages(m, es->pages, es->e.n_pages);
                es->live = false;
            }
        }
        if (!check_model(p, m, op, what))
            failures++;

        /* every 50 ops: the free stack holds exactly the model's free pages */
        if (op % 50 == 0) {
            int mf = model_free(m);
            int32_t out[RN];
            n_ev = 0;
            CHECK(lg_page_pool_alloc(p, LG_PAGE_KV, mf, out) == 0 && n_ev == 0);
            bool ok = true;
            uint8_t seen[RN] = {0};
            for (int i = 0; i < mf; i++) {
                if (out[i] < 0 || out[i] >= RN || m->state[out[i]] != M_FREE || seen[out[i]])
                    ok = false;
                else
                    seen[out[i]] = 1;
            }
            CHECK_MSG(ok, "op %d: free stack differs from the model's free pages", op);
            failures += !ok;
            lg_page_pool_release(p, out, mf);
            if (!check_model(p, m, op, "free-stack probe"))
                failures++;
        }
    }
    CHECK_MSG(n_evicting_allocs > 200 && n_failed_allocs > 50 && n_ent_made > 1000,
              "random test coverage too thin: %d evicting allocs, %d failed allocs, %d entries", n_evicting_allocs,
              n_failed_allocs, n_ent_made);
    printf("random: %d evicting allocs, %d failed allocs, %d entries made, %lld+%lld evictions\n",
           n_evicting_allocs, n_failed_allocs, n_ent_made, (long long)m->evictions[0], (long long)m->evictions[1]);

    /* tear down: release everything, nothing leaks */
    for (int r = 0; r < MAX_RAW; r++)
        if (m->raw[r].used) {
            lg_page_pool_release(p, m->raw[r].pages, m->raw[r].n);
            m->raw[r].used = false;
            model_free_pages(m, m->raw[r].pages, m->raw[r].n);
        }
    for (int s = 0; s < MAX_ENT; s++)
        if (m->ent[s].live) {
            if (rnd(2)) {
                lg_page_pool_entry_drop(p, &m->ent[s].e);
            } else { /* unpin to cached; the final alloc must evict it */
                while (m->ent[s].e.pins > 0) lg_page_pool_unpin(p, &m->ent[s].e);
                continue;
            }
            m->ent[s].live = false;
            model_free_pages(m, m->ent[s].pages, m->ent[s].e.n_pages);
        }
    n_ev = 0;
    int32_t all[RN];
    CHECK(lg_page_pool_alloc(p, LG_PAGE_ADAPTER, RN, all) == 0);
    uint8_t seen[RN] = {0};
    CHECK(fresh_pages(all, RN, RN, seen));
    lg_page_pool_release(p, all, RN);
    lg_pool_stats s = get_stats(p);
    CHECK_MSG(s.pages_free == RN && s.pages_kv == 0 && s.pages_adapter == 0 && s.pages_cached == 0,
              "leak: free %d kv %d adapter %d cached %d", s.pages_free, s.pages_kv, s.pages_adapter, s.pages_cached);
    free(m);
    lg_page_pool_free(p);
}

int main(void)
{
    test_basic();
    test_entries();
    test_pressure();
    test_random();
    TEST_DONE();
}
