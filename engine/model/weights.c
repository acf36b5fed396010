/*
 * weights.c — the format-independent weights container (see weights.h), the
 * Llama shape check and dummy weights. It knows no file format: the loaders
 * (weights_hf.c, weights_gguf.c) call into it to build a model, and
 * weights_load.c picks the loader; nothing here calls back into them.
 *
 * Container: a growable array of lg_wtensor plus an open-addressing hash
 * table (linear probing, power-of-two capacity, load <= 1/2) from name to
 * index. A model has ~300-1000 tensors; lookups happen at engine setup, so
 * simplicity beats speed here. Memory owned: tensor names, heap buffers given
 * as owned_buf, kept mmaps, the tokenizer and the chat template.
 *
 * Dummy weights: one pool allocation for all tensors (64-byte aligned
 * pieces), filled by all cores. Values come from a 4096-entry table of
 * N(0, 0.02) samples in the target dtype, indexed by 12-bit slices of a
 * xorshift64* stream that is reseeded per 64K-element block from
 * (seed, tensor, block) — so the result does not depend on the thread count
 * and a 7B model fills at memory bandwidth. Norm weights are 1.0.
 */
#include "engine/model/weights.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct lg_weights {
    lg_model_config cfg;
    lg_wtensor *t;      /* [n] */
    void **owned;       /* [n], heap buffer freed with w, or NULL */
    int n, cap;
    uint32_t *slots;    /* [n_slots], index + 1, 0 = empty */
    size_t n_slots;
    lg_mmap *maps;      /* [n_maps] kept alive until free */
    int n_maps, cap_maps;
    lg_tokenizer *tok;
    char *chat_template;
};

/* ---- container ------------------------------------------------------------ */

lg_weights *lg_weights_new(void)
{
    lg_weights *w = calloc(1, sizeof *w);
    if (w) {
        w->cfg.bos_id = -1;
        w->cfg.weight_dtype = LG_F16;
        snprintf(w->cfg.quant_method, sizeof w->cfg.quant_method, "none");
        snprintf(w->cfg.quant_desc, sizeof w->cfg.quant_desc, "none");
    }
    return w;
}

void lg_weights_free(lg_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->owned[i]);
    }
    for (int i = 0; i < w->n_maps; i++)
        lg_mmap_close(&w->maps[i]);
    lg_tokenizer_free(w->tok);
    free(w->chat_template);
    free(w->t);
    free(w->owned);
    free(w->slots);
    free(w->maps);
    free(w);
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Slot holding name, or the empty slot where it would go. */
static size_t find_slot(const lg_weights *w, const char *name)
{
    size_t mask = w->n_slots - 1, i = (size_t)hash_name(name) & mask;
    while (w->slots[i] && strcmp(w->t[w->slots[i] - 1].name, name))
        i = (i + 1) & mask;
    return i;
}

static int grow_slots(lg_weights *w)
{
    size_t ns = w->n_slots ? w->n_slots * 2 : 64;
    uint32_t *s = calloc(ns, sizeof *s);
    if (!s)
        return -1;
    free(w->slots);
    w->slots = s;
    w->n_slots = ns;
    for (int i = 0; i < w->n; i++)
        w->slots[find_slot(w, w->t[i].name)] = (uint32_t)i + 1;
    return 0;
}

static void fmt_shape(char *buf, size_t cap, int n_dims, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* On failure the caller keeps ownership of owned_buf. */
int lg_weights_add(lg_weights *w, const char *name, lg_dtype dt, int n_dims, const int64_t *shape, const void *data,
                   void *owned_buf, lg_err *err)
{
    if (!name || !*name)
        return lg_fail(err, "adding a tensor: expected a non-empty name");
    if (dt != LG_F32 && dt != LG_F16 && dt != LG_BF16)
        return lg_fail(err, "tensor '%s': dtype %s, expected f32, f16 or bf16", name, lg_dtype_name(dt));
    if (n_dims < 0 || n_dims > 4)
        return lg_fail(err, "tensor '%s': rank %d, expected 0 to 4", name, n_dims);
    size_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX || !lg_mul_ok(n, (size_t)shape[i], &n))
            return lg_fail(err, "tensor '%s': shape[%d] = %lld is negative or overflows", name, i,
                           (long long)shape[i]);
    }
    size_t nbytes;
    if (!lg_mul_ok(n, lg_dtype_size(dt), &nbytes))
        return lg_fail(err, "tensor '%s': byte size overflows", name);
    if (!data && nbytes)
        return lg_fail(err, "tensor '%s': %zu bytes but no data", name, nbytes);
    if (w->n >= INT32_MAX / 2)
        return lg_fail(err, "tensor '%s': too many tensors (%d)", name, w->n);
    if ((size_t)(w->n + 1) * 2 > w->n_slots && grow_slots(w))
        return lg_fail(err, "tensor '%s': out of memory", name);
    size_t slot = find_slot(w, name);
    if (w->slots[slot])
        return lg_fail(err, "duplicate tensor name '%s'", name);
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 256;
        lg_wtensor *t = realloc(w->t, (size_t)nc * sizeof *t);
        if (!t)
            return lg_fail(err, "tensor '%s': out of memory", name);
        w->t = t;
        void **o = realloc(w->owned, (size_t)nc * sizeof *o);
        if (!o)
            return lg_fail(err, "tensor '%s': out of memory", name);
        w->owned = o;
        w->cap = nc;
    }
    char *nm = strdup(name);
    if (!nm)
        return lg_fail(err, "tensor '%s': out of memory", name);
    lg_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++)
        t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    w->owned[w->n] = owned_buf;
    w->slots[slot] = (uint32_t)w->n + 1;
    w->n++;
    return 0;
}

int lg_weights_add_quant(lg_weights *w, const char *name, lg_qtype q, const int64_t shape[2], const void *data,
                         void *owned_buf, lg_err *err)
{
    const lg_qtype_info qi = lg_qtype_get(q);
    if (q <= LG_QNONE || q >= LG_QTYPE_COUNT)
        return lg_fail(err, "tensor '%s': quantized layout %d, expected one of backend.h's lg_qtype", name ? name : "",
                       (int)q);
    const bool planar = lg_qtype_is_planar(q); /* planar: ceil(cols / 128) groups a row (backend.h) */
    if (shape[0] < 0 || shape[1] <= 0 || (!planar && shape[1] % qi.block_elems))
        return lg_fail(err, "tensor '%s': %s rows of %lld elements, expected a positive multiple of %d",
                       name ? name : "", qi.name, (long long)shape[1], qi.block_elems);
    size_t row_bytes, nbytes;
    const int64_t n_blocks = planar ? (shape[1] + qi.block_elems - 1) / qi.block_elems : shape[1] / qi.block_elems;
    if (!lg_mul_ok((size_t)n_blocks, (size_t)qi.block_bytes, &row_bytes) ||
        (uint64_t)shape[0] > SIZE_MAX || !lg_mul_ok(row_bytes, (size_t)shape[0], &nbytes))
        return lg_fail(err, "tensor '%s': byte size overflows", name ? name : "");
    if (lg_weights_add(w, name, LG_F32, 0, NULL, data ? data : "", owned_buf, err))
        return -1;
    lg_wtensor *t = &w->t[w->n - 1];
    t->n_dims = 2;
    t->shape[0] = shape[0];
    t->shape[1] = shape[1];
    t->data = data;
    t->nbytes = nbytes;
    t->q = q;
    return 0;
}

int lg_weights_set_quant(lg_weights *w, int i, lg_qtype q, const void *data, size_t nbytes, void *owned_buf,
                         lg_err *err)
{
    if (i < 0 || i >= w->n || w->t[i].n_dims != 2 || !lg_qtype_is_planar(q))
        return lg_fail(err, "replacing tensor %d: expected a 2-D tensor and a planar layout", i);
    lg_wtensor *t = &w->t[i];
    free(w->owned[i]);
    w->owned[i] = owned_buf;
    t->data = data;
    t->nbytes = nbytes;
    t->q = q;
    t->dtype = LG_F32;
    return 0;
}

void lg_weights_drop_pages(const lg_weights *w, const void *data, size_t n)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)data, b = a + n;
    for (int i = 0; w && data && i < w->n_maps; i++) {
        const uintptr_t m0 = (uintptr_t)w->maps[i].data, m1 = m0 + w->maps[i].size;
        if (!w->maps[i].data || a < m0 || b > m1)
            continue;
        const uintptr_t p0 = (a + pg - 1) & ~(pg - 1), p1 = b & ~(pg - 1); /* whole pages inside */
        if (p1 > p0)
            madvise((void *)p0, p1 - p0, MADV_DONTNEED);
        return;
    }
}

/* Takes ownership of *m and clears it; on failure the caller still owns it. */
int lg_weights_keep_mmap(lg_weights *w, lg_mmap *m, lg_err *err)
{
    if (w->n_maps == w->cap_maps) {
        int nc = w->cap_maps ? w->cap_maps * 2 : 8;
        lg_mmap *p = realloc(w->maps, (size_t)nc * sizeof *p);
        if (!p)
            return lg_fail(err, "out of memory keeping a mapping");
        w->maps = p;
        w->cap_maps = nc;
    }
    w->maps[w->n_maps++] = *m;
    m->data = NULL;
    m->size = 0;
    return 0;
}

const lg_model_config *lg_weights_config(const lg_weights *w) { return &w->cfg; }
lg_model_config *lg_weights_config_mut(lg_weights *w) { return &w->cfg; }

const lg_wtensor *lg_weights_get(const lg_weights *w, const char *name)
{
    if (!w || !name || !w->n_slots)
        return NULL;
    uint32_t s = w->slots[find_slot(w, name)];
    return s ? &w->t[s - 1] : NULL;
}

int lg_weights_count(const lg_weights *w) { return w ? w->n : 0; }

const lg_wtensor *lg_weights_at(const lg_weights *w, int i)
{
    return w && i >= 0 && i < w->n ? &w->t[i] : NULL;
}

lg_tokenizer *lg_weights_tokenizer(const lg_weights *w) { return w->tok; }

void lg_weights_set_tokenizer(lg_weights *w, lg_tokenizer *t)
{
    if (w->tok != t)
        lg_tokenizer_free(w->tok);
    w->tok = t;
}

const char *lg_weights_chat_template(const lg_weights *w) { return w->chat_template; }

void lg_weights_set_chat_template(lg_weights *w, const char *tmpl)
{
    char *c = tmpl ? strdup(tmpl) : NULL;
    free(w->chat_template);
    w->chat_template = c; /* NULL on OOM: the model then has no template */
}

/* ---- expected Llama tensors -------------------------------------------------- */

typedef struct {
    char name[96];
    int n_dims;
    int64_t shape[2];
    bool is_norm; /* filled with 1.0 by dummy */
} tspec;

static void spec_add(tspec *s, int *n, bool norm, int n_dims, int64_t a, int64_t b, const char *fmt, int layer)
{
    tspec *t = &s[(*n)++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->n_dims = n_dims;
    t->shape[0] = a;
    t->shape[1] = b;
    t->is_norm = norm;
}

/* Every tensor the forward reads for c's family (model_arch.h), in file order. Caller frees *out. */
static int llama_specs(const lg_model_config *c, tspec **out, int *n_out, lg_err *err)
{
    *out = NULL;
    if (lg_model_config_validate(c, err))
        return -1;
    int per_layer = 9 + (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0) + (c->post_norms ? 2 : 0);
    size_t cap = 3 + (size_t)c->n_layers * (size_t)per_layer;
    tspec *s = calloc(cap, sizeof *s);
    if (!s)
        return lg_fail(err, "out of memory listing %zu tensors", cap);
    int64_t d = c->d_model, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim,
            ff = c->d_ff, V = c->vocab_size, hd = c->head_dim;
    int n = 0;
    spec_add(s, &n, false, 2, V, d, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        spec_add(s, &n, true, 1, d, 0, "model.layers.%d.input_layernorm.weight", l);
        if (c->fused_qkv) {
            spec_add(s, &n, false, 2, q + 2 * kv, d, "model.layers.%d.self_attn.qkv_proj.weight", l);
        } else {
            spec_add(s, &n, false, 2, q, d, "model.layers.%d.self_attn.q_proj.weight", l);
            spec_add(s, &n, false, 2, kv, d, "model.layers.%d.self_attn.k_proj.weight", l);
            spec_add(s, &n, false, 2, kv, d, "model.layers.%d.self_attn.v_proj.weight", l);
        }
        if (c->qkv_bias) {
            spec_add(s, &n, false, 1, q, 0, "model.layers.%d.self_attn.q_proj.bias", l);
            spec_add(s, &n, false, 1, kv, 0, "model.layers.%d.self_attn.k_proj.bias", l);
            spec_add(s, &n, false, 1, kv, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        }
        if (c->qk_norm) {
            spec_add(s, &n, true, 1, hd, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            spec_add(s, &n, true, 1, hd, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        spec_add(s, &n, false, 2, d, q, "model.layers.%d.self_attn.o_proj.weight", l);
        spec_add(s, &n, true, 1, d, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        if (c->post_norms) {
            spec_add(s, &n, true, 1, d, 0, "model.layers.%d.pre_feedforward_layernorm.weight", l);
            spec_add(s, &n, true, 1, d, 0, "model.layers.%d.post_feedforward_layernorm.weight", l);
        }
        if (c->fused_qkv) {
            spec_add(s, &n, false, 2, 2 * ff, d, "model.layers.%d.mlp.gate_up_proj.weight", l);
        } else {
            spec_add(s, &n, false, 2, ff, d, "model.layers.%d.mlp.gate_proj.weight", l);
            spec_add(s, &n, false, 2, ff, d, "model.layers.%d.mlp.up_proj.weight", l);
        }
        spec_add(s, &n, false, 2, d, ff, "model.layers.%d.mlp.down_proj.weight", l);
    }
    spec_add(s, &n, true, 1, d, 0, "model.norm.weight", 0);
    if (!c->tie_embeddings)
        spec_add(s, &n, false, 2, V, d, "lm_head.weight", 0);
    *out = s;
    *n_out = n;
    return 0;
}

int lg_weights_check_llama(const lg_weights *w, lg_err *err)
{
    tspec *s;
    int n;
    if (llama_specs(&w->cfg, &s, &n, err))
        return -1;
    for (int i = 0; i < n; i++) {
        char want[96], got[96];
        fmt_shape(want, sizeof want, s[i].n_dims, s[i].shape);
        const lg_wtensor *t = lg_weights_get(w, s[i].name);
        if (!t) {
            lg_fail(err, "missing tensor '%s' (expected shape %s%s)", s[i].name, want,
                    !strcmp(s[i].name, "lm_head.weight") ? "; config says tie_word_embeddings=false" : "");
            free(s);
            return -1;
        }
        bool ok = t->n_dims == s[i].n_dims;
        for (int k = 0; ok && k < t->n_dims; k++)
            ok = t->shape[k] == s[i].shape[k];
        if (!ok) {
            fmt_shape(got, sizeof got, t->n_dims, t->shape);
            lg_fail(err, "tensor '%s' has shape %s, expected %s for this config", s[i].name, got, want);
            free(s);
            return -1;
        }
    }
    free(s);
    return 0;
}

/* ---- dummy weights ------------------------------------------------------------ */

#define DUMMY_BLOCK ((size_t)1 << 16) /* elements per independently seeded block */
#define DUMMY_TABLE 4096 /* fill_rand_* index it with 12 bits */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    lg_dtype dt;
    size_t esize;
    uint64_t seed;
    int n;                  /* tensors */
    void **data;            /* [n] */
    size_t *n_elems;        /* [n] */
    bool *is_norm;          /* [n] */
    size_t *first_block;    /* [n + 1] prefix sums of block counts */
    union {                 /* DUMMY_TABLE samples in dt */
        uint16_t h[DUMMY_TABLE];
        float f[DUMMY_TABLE];
    } table;
    uint8_t one[4];         /* 1.0 in dt */
    atomic_size_t next;     /* next block to claim */
    atomic_size_t done;
    size_t n_blocks;
} dummy_job;

/* Five 12-bit table indices per xorshift64* step; full groups unrolled.
 * The f32 twin below is the same loop on 4-byte elements. */
static void fill_rand_u16(uint16_t *o, size_t n, const uint16_t *tab, uint64_t x)
{
    for (size_t i = 0; i < n; i += 5) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        uint64_t r = x * 0x2545f4914f6cdd1dull;
        if (i + 5 <= n) {
            o[i] = tab[r & 4095], o[i + 1] = tab[(r >> 12) & 4095], o[i + 2] = tab[(r >> 24) & 4095];
            o[i + 3] = tab[(r >> 36) & 4095], o[i + 4] = tab[(r >> 48) & 4095];
        } else {
            for (size_t k = i; k < n; k++, r >>= 12)
                o[k] = tab[r & 4095];
        }
    }
}

static void fill_rand_f32(float *o, size_t n, const float *tab, uint64_t x)
{
    for (size_t i = 0; i < n; i += 5) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        uint64_t r = x * 0x2545f4914f6cdd1dull;
        if (i + 5 <= n) {
            o[i] = tab[r & 4095], o[i + 1] = tab[(r >> 12) & 4095], o[i + 2] = tab[(r >> 24) & 4095];
            o[i + 3] = tab[(r >> 36) & 4095], o[i + 4] = tab[(r >> 48) & 4095];
        } else {
            for (size_t k = i; k < n; k++, r >>= 12)
                o[k] = tab[r & 4095];
        }
    }
}

static void fill_block(dummy_job *j, size_t b)
{
    /* tensor holding block b: last i with first_block[i] <= b */
    int lo = 0, hi = j->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->first_block[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    int ti = lo;
    size_t lb = b - j->first_block[ti];
    size_t e0 = lb * DUMMY_BLOCK, e1 = e0 + DUMMY_BLOCK;
    if (e1 > j->n_elems[ti])
        e1 = j->n_elems[ti];
    uint8_t *p = (uint8_t *)j->data[ti] + e0 * j->esize;
    size_t n = e1 - e0;
    if (j->is_norm[ti]) {
        for (size_t i = 0; i < n; i++)
            memcpy(p + i * j->esize, j->one, j->esize);
        return;
    }
    uint64_t sm = j->seed ^ ((uint64_t)ti << 40) ^ lb;
    uint64_t x = splitmix64(&sm) | 1;
    if (j->esize == 2)
        fill_rand_u16((uint16_t *)p, n, j->table.h, x);
    else
        fill_rand_f32((float *)p, n, j->table.f, x);
}

static void *dummy_worker(void *arg)
{
    dummy_job *j = arg;
    for (;;) {
        size_t b = atomic_fetch_add(&j->next, 1);
        if (b >= j->n_blocks)
            break;
        fill_block(j, b);
        atomic_fetch_add(&j->done, 1);
    }
    return NULL;
}

static void dummy_progress(dummy_job *j, double t0, bool final)
{
    size_t done = atomic_load(&j->done);
    int pct = j->n_blocks ? (int)(100.0 * (double)done / (double)j->n_blocks) : 100;
    char bar[41];
    for (int i = 0; i < 40; i++)
        bar[i] = i < pct * 40 / 100 ? '=' : ' ';
    bar[40] = 0;
    fprintf(stderr, "\rdummy weights [%s] %3d%% %.1fs%s", bar, pct, lg_now() - t0, final ? "\n" : "");
}

int lg_weights_fill_dummy(lg_weights *w, lg_dtype dt, uint64_t seed, bool progress, bool skip_linear, lg_err *err)
{
    if (dt != LG_F32 && dt != LG_F16 && dt != LG_BF16)
        return lg_fail(err, "dummy weights: dtype %s, expected f32, f16 or bf16", lg_dtype_name(dt));
    tspec *s;
    int n;
    if (llama_specs(&w->cfg, &s, &n, err))
        return -1;
    dummy_job *j = calloc(1, sizeof *j);
    size_t *offs = calloc((size_t)n, sizeof *offs);
    if (j) {
        j->data = calloc((size_t)n, sizeof *j->data);
        j->n_elems = calloc((size_t)n, sizeof *j->n_elems);
        j->is_norm = calloc((size_t)n, sizeof *j->is_norm);
        j->first_block = calloc((size_t)n + 1, sizeof *j->first_block);
    }
    uint8_t *pool = NULL;
    int rc = -1;
    if (!j || !offs || !j->data || !j->n_elems || !j->is_norm || !j->first_block) {
        lg_fail(err, "dummy weights: out of memory");
        goto done;
    }
    j->dt = dt;
    j->esize = lg_dtype_size(dt);
    j->seed = seed;
    j->n = n;

    /* layout: one pool, 64-byte aligned pieces, checked sizes */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t ne = 1, nb;
        for (int k = 0; k < s[i].n_dims; k++)
            if (!lg_mul_ok(ne, (size_t)s[i].shape[k], &ne)) {
                lg_fail(err, "dummy weights: tensor '%s' size overflows", s[i].name);
                goto done;
            }
        if (skip_linear && lg_weights_is_linear(s[i].name))
            ne = 0; /* added without data: lg_weights_dummy_quantized fills it */
        if (!lg_mul_ok(ne, j->esize, &nb) || !lg_add_ok(nb, 63, &nb) ||
            !lg_add_ok(total, nb & ~(size_t)63, &total)) {
            lg_fail(err, "dummy weights: total size overflows at tensor '%s'", s[i].name);
            goto done;
        }
        offs[i] = total - (nb & ~(size_t)63);
        j->n_elems[i] = ne;
        j->is_norm[i] = s[i].is_norm;
        j->first_block[i + 1] = j->first_block[i] + (ne + DUMMY_BLOCK - 1) / DUMMY_BLOCK;
    }
    j->n_blocks = j->first_block[n];
    pool = aligned_alloc(64, total ? total : 64);
    if (!pool) {
        lg_fail(err, "dummy weights: cannot allocate %.2f GB", (double)total / 1e9);
        goto done;
    }
    for (int i = 0; i < n; i++)
        j->data[i] = pool + offs[i];

    /* value table: Irwin-Hall(12) approximates N(0,1); scaled to std 0.02 */
    uint64_t ts = seed ^ 0x5eedull;
    for (int i = 0; i < DUMMY_TABLE; i++) {
        double sum = 0;
        for (int k = 0; k < 12; k++)
            sum += (double)(splitmix64(&ts) >> 11) * (1.0 / 9007199254740992.0);
        float v = (float)((sum - 6.0) * 0.02);
        lg_from_f32((uint8_t *)&j->table + (size_t)i * j->esize, dt, &v, 1);
    }
    float one = 1.0f;
    lg_from_f32(j->one, dt, &one, 1);

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    pthread_t th[64];
    int started = 0;
    for (int i = 1; i < nt; i++) {
        if (pthread_create(&th[started], NULL, dummy_worker, j))
            break; /* fewer threads is fine */
        started++;
    }
    bool bar = progress && isatty(2);
    double t0 = lg_now(), last = t0;
    for (;;) { /* the calling thread works too, and draws the bar */
        size_t b = atomic_fetch_add(&j->next, 1);
        if (b >= j->n_blocks)
            break;
        fill_block(j, b);
        atomic_fetch_add(&j->done, 1);
        if (bar && lg_now() - last > 0.1) {
            last = lg_now();
            dummy_progress(j, t0, false);
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (bar)
        dummy_progress(j, t0, true);

    for (int i = 0; i < n; i++) {
        /* the first tensor owns the pool; the others point into it */
        if (lg_weights_add(w, s[i].name, dt, s[i].n_dims, s[i].shape, j->data[i], NULL, err))
            goto done;
        if (i == 0) {
            w->owned[w->n - 1] = pool;
            pool = NULL;
        }
    }
    w->cfg.weight_dtype = dt;
    rc = 0;
done:
    free(pool);
    if (j) {
        free(j->data);
        free(j->n_elems);
        free(j->is_norm);
        free(j->first_block);
    }
    free(j);
    free(offs);
    free(s);
    return rc;
}
