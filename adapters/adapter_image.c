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

/* n values with random sign and mantissa and magnitude in [2^-7, 2^-6),
 * built directly as bits of dt (fast: a 1,000-adapter benchmark makes
 * gigabytes of these). */
static void fill_random(void *dst, lg_dtype dt, size_t n, uint64_t seed)
{
    uint64_t st = seed;
    if (dt == LG_F32) {
        uint32_t *d = dst;
        for (size_t i = 0; i < n; i += 2) {
            uint64_t r = splitmix(&st);
            for (int k = 0; k < 2 && i + k < n; k++) {
                uint32_t b = (uint32_t)(r >> (32 * k));
                d[i + k] = (b & 0x80000000u) | (120u << 23) | (b & 0x7FFFFFu);
            }
        }
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i += 4) {
        uint64_t r = splitmix(&st);
        for (int k = 0; k < 4 && i + k < n; k++) {
            uint16_t b = (uint16_t)(r >> (16 * k));
            d[i + k] = dt == LG_BF16 ? (uint16_t)((b & 0x8000u) | (120u << 7) | (b & 0x7Fu))
                                     : (uint16_t)((b & 0x8000u) | (8u << 10) | (b & 0x3FFu));
        }
    }
}

static void *at(const lg_adapter_spec *s, unsigned char *const *pages, lg_adapter_place p)
{
    return pages[p.page] + p.off;
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
        lg_to_f32(tmp, m->A, lg_adapter_dtype(a), na);
        lg_from_f32(at(s, pages, s->pa[slot]), s->geom.dt, tmp, na);
        lg_to_f32(tmp, m->B, lg_adapter_dtype(a), nb);
        lg_from_f32(at(s, pages, s->pb[slot]), s->geom.dt, tmp, nb);
    }
    free(tmp);
    lg_adapter_free(a);
    return rc;
}

int lg_adapter_image_fill(const lg_adapter_spec *s, unsigned char *const *pages, lg_err *err)
{
    if (s->dir)
        return fill_from_dir(s, pages, err);
    for (int slot = 0; slot < s->n_slots; slot++) {
        int r = s->rank[slot];
        if (!r)
            continue;
        uint64_t base = s->synth.seed * 0x9E3779B97F4A7C15ull + (uint64_t)slot * 2;
        fill_random(at(s, pages, s->pa[slot]), s->geom.dt, (size_t)r * s->in_dim[slot], base);
        fill_random(at(s, pages, s->pb[slot]), s->geom.dt, (size_t)s->out_dim[slot] * r, base + 1);
    }
    return 0;
}
