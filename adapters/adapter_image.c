/*
 * adapter_image.c — see adapter_image.h.
 *
 * The layout walks slots in (layer, module) order and places A then B of
 * each adapted slot first-fit; both spec constructors feed it the same way,
 * so a directory adapter and a synthetic one of the same shapes get the
 * same layout. A module's tensor is at most page_bytes (checked), so one
 * slot adds at most two pages: 2 * n_slots + 1 bounds the page count.
 */
#include "adapters/adapter_image.h"
#include "adapters/peft.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>

size_t lg_adapter_max_tensor_bytes(const lg_model_config *cfg, int max_rank, lg_dtype dt)
{
    size_t m = 0;
    for (int t = 0; t < LG_LORA_N_TARGETS; t++) {
        int in, out;
        lg_lora_target_dims(cfg, (lg_lora_target)t, &in, &out);
        size_t a = (size_t)max_rank * (size_t)(in > out ? in : out) * lg_dtype_size(dt);
        if (a > m)
            m = a;
    }
    return m;
}

void lg_adapter_spec_free(lg_adapter_spec *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->dir);
    free(s->rank);
    free(s->scale);
    free(s->in_dim);
    free(s->out_dim);
    free(s->pa);
    free(s->pb);
    free(s->page_used);
    free(s);
}

static lg_adapter_spec *spec_new(const lg_adapter_geom *g, const char *name)
{
    lg_adapter_spec *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->geom = *g;
    s->tp = g->tp > 1 ? g->tp : 1;
    s->n_slots = g->cfg.n_layers * LG_LORA_N_MODULES;
    size_t n = (size_t)s->n_slots;
    s->name = strdup(name);
    s->rank = calloc(n, sizeof *s->rank);
    s->scale = calloc(n, sizeof *s->scale);
    s->in_dim = calloc(n, sizeof *s->in_dim);
    s->out_dim = calloc(n, sizeof *s->out_dim);
    s->pa = calloc(n, sizeof *s->pa);
    s->pb = calloc(n, sizeof *s->pb);
    s->page_used = calloc(2 * n + 1, sizeof *s->page_used);
    if (!s->name || !s->rank || !s->scale || !s->in_dim || !s->out_dim || !s->pa || !s->pb || !s->page_used) {
        lg_adapter_spec_free(s);
        return NULL;
    }
    return s;
}

/* First-fit placement of `bytes` in the adapter's pages. */
static lg_adapter_place place(lg_adapter_spec *s, size_t bytes)
{
    for (int p = 0; p < s->n_pages; p++) {
        size_t off = (s->page_used[p] + 255) & ~(size_t)255;
        if (off + bytes <= s->geom.page_bytes) {
            s->page_used[p] = off + bytes;
            return (lg_adapter_place){p, off};
        }
    }
    s->page_used[s->n_pages] = bytes;
    return (lg_adapter_place){s->n_pages++, 0};
}

/* Records slot (layer, module) and places its two tensors. */
static int add_slot(lg_adapter_spec *s, int layer, int module, int rank, float scale, lg_err *err)
{
    int slot = layer * LG_LORA_N_MODULES + module;
    int in, out;
    lg_lora_target_dims(&s->geom.cfg, (lg_lora_target)module, &in, &out);
    if (s->tp > 1) { /* a shard's shapes (adapter_image.h) */
        int *split = lg_lora_module_row_parallel(module) ? &in : &out;
        if (*split % s->tp != 0)
            return lg_fail(err, "adapter '%s': module %d's %d features do not split over %d ranks", s->name, module,
                           *split, s->tp);
        *split /= s->tp;
    }
    size_t es = lg_dtype_size(s->geom.dt);
    size_t ab = (size_t)rank * (size_t)in * es, bb = (size_t)out * (size_t)rank * es;
    if (ab > s->geom.page_bytes || bb > s->geom.page_bytes)
        return lg_fail(err, "adapter '%s': a rank-%d tensor does not fit in a %zu-byte page", s->name, rank,
                       s->geom.page_bytes);
    s->rank[slot] = rank;
    s->scale[slot] = scale;
    s->in_dim[slot] = in;
    s->out_dim[slot] = out;
    s->pa[slot] = place(s, ab);
    s->pb[slot] = place(s, bb);
    s->weight_bytes += ab + bb;
    if (rank > s->max_rank)
        s->max_rank = rank;
    return 0;
}

int lg_adapter_spec_from_dir(const lg_adapter_geom *g, const char *name, const char *dir, lg_adapter_spec **out,
                             lg_err *err)
{
    *out = NULL;
    lg_adapter *a = NULL;
    if (lg_adapter_load(dir, name, &g->cfg, g->max_rank, &a, err) != 0)
        return -1;
    lg_adapter_spec *s = spec_new(g, name);
    if (!s || !(s->dir = strdup(dir))) {
        lg_adapter_free(a);
        lg_adapter_spec_free(s);
        return lg_fail(err, "out of memory");
    }
    memcpy(s->digest, lg_adapter_digest(a), 65);
    int rc = 0;
    for (int i = 0; i < lg_adapter_n_modules(a) && rc == 0; i++) {
        const lg_lora_module *m = lg_adapter_module(a, i);
        rc = add_slot(s, m->layer, (int)m->target, m->rank, m->scale, err);
    }
    lg_adapter_free(a);
    if (rc == 0 && s->n_pages == 0)
        rc = lg_fail(err, "adapter '%s' has no modules", name);
    if (rc != 0) {
        lg_adapter_spec_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int lg_adapter_spec_synthetic(const lg_adapter_geom *g, const char *name, const lg_synth_adapter *syn,
                              lg_adapter_spec **out, lg_err *err)
{
    *out = NULL;
    unsigned all = (1u << LG_LORA_N_MODULES) - 1;
    if (syn->rank < 1 || syn->rank > g->max_rank)
        return lg_fail(err, "synthetic adapter '%s': rank %d outside [1, %d]", name, syn->rank, g->max_rank);
    if (!syn->targets || (syn->targets & ~all))
        return lg_fail(err, "synthetic adapter '%s': targets must name at least one of the 7 modules", name);
    lg_adapter_spec *s = spec_new(g, name);
    if (!s)
        return lg_fail(err, "out of memory");
    s->synth = *syn;
    if (!(s->synth.alpha > 0))
        s->synth.alpha = 2.0f * (float)syn->rank;
    char key[160];
    int kl = snprintf(key, sizeof key, "loragate-synthetic-v1 rank=%d targets=%u seed=%llu alpha=%.9g", syn->rank,
                      syn->targets, (unsigned long long)syn->seed, (double)s->synth.alpha);
    unsigned char md[32];
    SHA256((const unsigned char *)key, (size_t)kl, md);
    for (int i = 0; i < 32; i++) snprintf(s->digest + 2 * i, 3, "%02x", md[i]);
    float scale = s->synth.alpha / (float)syn->rank;
    for (int l = 0; l < g->cfg.n_layers; l++)
        for (int m = 0; m < LG_LORA_N_MODULES; m++)
            if ((syn->targets >> m) & 1u)
                if (add_slot(s, l, m, syn->rank, scale, err) != 0) {
                    lg_adapter_spec_free(s);
                    return -1;
                }
    *out = s;
    return 0;
}

/* ---- filling ------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Values with random sign and mantissa and magnitude in [2^-7, 2^-6), built
 * directly as bits of dt (fast: a 1,000-adapter benchmark makes gigabytes of
 * these): elements [first, first + n) of the sequence of `seed`, each a
 * function of its index (the 64-bit word i / per of a counter-based
 * generator, part i % per), so a shard's slice is the unsharded values. */
static uint64_t rand_word(uint64_t seed, uint64_t w)
{
    uint64_t st = seed + w * 0x9E3779B97F4A7C15ull;
    return splitmix(&st);
}

static void fill_random(void *dst, lg_dtype dt, size_t n, uint64_t seed, size_t first)
{
    const unsigned per = dt == LG_F32 ? 2 : 4;
    uint64_t r = 0;
    for (size_t k = 0; k < n; k++) {
        const size_t i = first + k;
        if (k == 0 || i % per == 0)
            r = rand_word(seed, i / per);
        if (dt == LG_F32) {
            uint32_t b = (uint32_t)(r >> (32 * (i % 2)));
            ((uint32_t *)dst)[k] = (b & 0x80000000u) | (120u << 23) | (b & 0x7FFFFFu);
        } else {
            uint16_t b = (uint16_t)(r >> (16 * (i % 4)));
            ((uint16_t *)dst)[k] = dt == LG_BF16 ? (uint16_t)((b & 0x8000u) | (120u << 7) | (b & 0x7Fu))
                                                 : (uint16_t)((b & 0x8000u) | (8u << 10) | (b & 0x3FFu));
        }
    }
}

static void *at(const lg_adapter_spec *s, unsigned char *const *pages, int shard, lg_adapter_place p)
{
    return pages[(size_t)shard * (size_t)s->n_pages + (size_t)p.page] + p.off;
}

/* Shard r of slot's A [rank, in] and B [out, rank] (adapter_image.h): the element runs of the unsharded
 * tensors that make it, as (first index, count) handed to put(ctx, which, first, count, dst) in order;
 * dst advances by count elements. */
typedef void (*put_fn)(void *ctx, int which, size_t first, size_t count, void *dst);

static void shard_runs(const lg_adapter_spec *s, int slot, int r, unsigned char *const *pages, put_fn put, void *ctx)
{
    const int rank = s->rank[slot], m = slot % LG_LORA_N_MODULES;
    const size_t in = (size_t)s->in_dim[slot], out = (size_t)s->out_dim[slot], es = lg_dtype_size(s->geom.dt);
    unsigned char *a = at(s, pages, r, s->pa[slot]), *b = at(s, pages, r, s->pb[slot]);
    if (s->tp > 1 && lg_lora_module_row_parallel(m)) { /* A's columns [r in, (r + 1) in) of each row */
        const size_t full_in = in * (size_t)s->tp;
        for (int i = 0; i < rank; i++)
            put(ctx, 0, (size_t)i * full_in + (size_t)r * in, in, a + (size_t)i * in * es);
        put(ctx, 1, 0, out * (size_t)rank, b);
    } else { /* A whole; B's rows [r out, (r + 1) out) (all of them with tp 1) */
        put(ctx, 0, 0, (size_t)rank * in, a);
        put(ctx, 1, (size_t)r * out * (size_t)rank, out * (size_t)rank, b);
    }
}

typedef struct dir_put {
    const lg_lora_module *m;
    lg_dtype src_dt, dt;
    float *tmp; /* [largest run] */
} dir_put;

static void put_from_dir(void *ctx, int which, size_t first, size_t count, void *dst)
{
    dir_put *d = ctx;
    const void *src = which ? d->m->B : d->m->A;
    lg_to_f32(d->tmp, (const char *)src + first * lg_dtype_size(d->src_dt), d->src_dt, count);
    lg_from_f32(dst, d->dt, d->tmp, count);
}

static int fill_from_dir(const lg_adapter_spec *s, unsigned char *const *pages, lg_err *err)
{
    lg_adapter *a = NULL;
    if (lg_adapter_load(s->dir, s->name, &s->geom.cfg, s->geom.max_rank, &a, err) != 0) {
        lg_err_prefix(err, "reloading adapter '%s'", s->name);
        return -1;
    }
    if (memcmp(lg_adapter_digest(a), s->digest, 64) != 0) {
        lg_adapter_free(a);
        return lg_fail(err, "adapter '%s' changed on disk since it was registered (digest differs)", s->name);
    }
    float *tmp = NULL;
    size_t tmp_n = 0;
    int rc = 0;
    for (int i = 0; i < lg_adapter_n_modules(a) && rc == 0; i++) {
        const lg_lora_module *m = lg_adapter_module(a, i);
        int slot = m->layer * LG_LORA_N_MODULES + (int)m->target;
        size_t na = (size_t)m->rank * m->in_dim, nb = (size_t)m->out_dim * m->rank;
        size_t mx = na > nb ? na : nb;
        if (s->rank[slot] != m->rank) {
            rc = lg_fail(err, "adapter '%s' changed shape since it was registered", s->name);
            break;
        }
        if (mx > tmp_n) {
            float *t = realloc(tmp, mx * sizeof(float));
            if (!t) {
                rc = lg_fail(err, "out of memory");
                break;
            }
            tmp = t;
            tmp_n = mx;
        }
        dir_put d = {m, lg_adapter_dtype(a), s->geom.dt, tmp};
        for (int r = 0; r < s->tp; r++)
            shard_runs(s, slot, r, pages, put_from_dir, &d);
    }
    free(tmp);
    lg_adapter_free(a);
    return rc;
}

typedef struct synth_put {
    uint64_t base;
    lg_dtype dt;
} synth_put;

static void put_random(void *ctx, int which, size_t first, size_t count, void *dst)
{
    synth_put *p = ctx;
    fill_random(dst, p->dt, count, p->base + (uint64_t)which, first);
}

int lg_adapter_image_fill(const lg_adapter_spec *s, unsigned char *const *pages, lg_err *err)
{
    if (s->dir)
        return fill_from_dir(s, pages, err);
    for (int slot = 0; slot < s->n_slots; slot++) {
        if (!s->rank[slot])
            continue;
        synth_put p = {s->synth.seed * 0x9E3779B97F4A7C15ull + (uint64_t)slot * 2, s->geom.dt};
        for (int r = 0; r < s->tp; r++)
            shard_runs(s, slot, r, pages, put_random, &p);
    }
    return 0;
}
