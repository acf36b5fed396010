/*
 * test_cuda_ops.c — every CUDA backend op against the CPU backend (the
 * oracle; LoRA shrink/expand against a plain f64 loop here, until the CPU
 * backend has them), on fresh random inputs, in f16 and bf16.
 *
 * Each GPU buffer carries 256 guard bytes on both sides and, for strided
 * views, gap bytes between rows: all hold a known pattern that is checked
 * after the op. Outputs are poisoned (0xFF bytes: NaN in every float type)
 * before the op, so an unwritten element shows up as NaN. Inputs fed to
 * the CPU are the values after rounding to the GPU's dtype, so the error
 * measured is the kernels' own: relative L2 ||gpu - cpu|| / ||cpu||.
 *
 * Step graphs: a one-layer decode step recorded once and replayed while its
 * inputs change must give bit-identical logits to eager runs (also over an
 * e4m3 KV cache, whose steps take rope + kv_write for the fused rope forms); the
 * multi-slot LoRA ops must equal the single-slot ones bit for bit.
 *
 * Then times the decode-critical kernels (host clock around 50 launches
 * between syncs) and prints one table: op, case, dtype, error, limit, us.
 * Usage: test_cuda_ops [--no-bench]. Exit status 0 only if all passed.
 * LG_ONLY=group[,group...] runs only those groups (misc, attention, lora,
 * graph, matmul: gemv, the TMA matmul, matmul_lora; rope_kv; norm: norm_matmul) — for kernel work.
 * attention includes the e4m3 KV cache (`--kv-cache-dtype fp8`): kv_write's bytes equal the CPU's, attention
 * over e4m3 pages against the CPU backend's.
 * Kernel forms are forced by writing the backend's switches (G->tune, engine/base/tuning.h) between
 * ops and put back to the values read from the environment (env_tune) after.
 * Needs a GPU; a CMake target of CUDA builds, run by tests/gpu/run_device.sh.
 */
#include "engine/backend/backend.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 256
#define PATTERN 0xA5

static lg_backend *G, *C; /* GPU under test, CPU oracle */
/* G's switches as the environment set them (lg_backend_create): what a test that forces a form puts back. The
 * ones forced here: attn_fa2 (0: prefill on the wmma kernel), dec_resident_kb (0: no resident form),
 * shrink_rg (rank rows a decode shrink block, 0 = auto), streamk (2 TMA auto, 20 + v its variant v, 0 off),
 * gemv (1 auto, 11 variant 1 forced), shrink_wide (0: the prefill shrink's shared-memory form), exm_tpb (the
 * store form's token tiles a block, 0 = by size), sgmv_prefill (0: segments > 4 tokens on the CUDA-core
 * kernels, 2: on the prefill kernels at any grid size). */
static lg_tuning env_tune;
long lg_cuda_dec_resident_launches(void); /* kernels/attention_decode.cu: launches of the resident form so far */
unsigned long lg_cuda_tma_launches(void); /* kernels/gemm_tma.cu: launches so far */
int lg_cuda_carve_for(lg_backend *be, size_t smem, int blocks); /* kernels/backend_cuda.cu: cu_carve_for */
unsigned long lg_cuda_lora_store_launches(void); /* kernels/lora_expand.cu: store-form expands so far */
unsigned long lg_cuda_lora_norm_launches(void);  /* kernels/lora_shrink.cu: norm-form shrinks so far */
unsigned long lg_cuda_lora_rope_launches(void);  /* kernels/lora_expand.cu: rope-form expands so far */
static int n_fail, n_pass;
static int only(const char *group) /* LG_ONLY unset: every group */
{
    const char *e = getenv("LG_ONLY");
    if (!e || !*e)
        return 1;
    const size_t n = strlen(group);
    for (const char *p = e; (p = strstr(p, group)); p += n)
        if ((p == e || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}
static uint64_t rng_s = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return (uint32_t)(rng_s >> 11);
}
static float frand(void) { return (float)((rnd() & 0xFFFFFF) / (double)0x800000 - 1.0); } /* [-1, 1) */
static int irand(int n) { return (int)(rnd() % (uint32_t)n); }

/* ---- result table ---- */
typedef struct {
    char op[24], cas[48];
    const char *dt;
    double err, lim, us;
    int ok;
} row_t;
#define MAX_ROWS 4096 /* the table's rows; past it, records still count but are not printed */
static row_t rows[MAX_ROWS];
static int n_rows;

static const char *case_sfx = ""; /* appended to every case name (a kernel form under test) */
static void record(const char *op, const char *cas, lg_dtype dt, double err, double lim, int ok_extra)
{
    int ok = ok_extra && err <= lim && !isnan(err);
    row_t *r = &rows[n_rows < MAX_ROWS - 1 ? n_rows++ : MAX_ROWS - 1];
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->cas, sizeof r->cas, "%s%s", cas, case_sfx);
    r->dt = lg_dtype_name(dt);
    r->err = err;
    r->lim = lim;
    r->us = -1;
    r->ok = ok;
    if (ok) n_pass++;
    else {
        n_fail++;
        fprintf(stderr, "FAIL %s %s %s: err %.3g (limit %.3g)%s\n", op, r->cas, r->dt, err, lim,
                ok_extra ? "" : ", guard/poison/status check failed");
    }
}
static double lim_for(lg_dtype dt) { return dt == LG_BF16 ? 1e-2 : 1e-3; }

/* ---- guarded device tensors ---- */
typedef struct {
    lg_dtype dt;
    int64_t rows, cols, stride;
    size_t bytes;       /* whole buffer incl. guards */
    unsigned char *img; /* host image of the whole buffer: what it must hold */
    void *base;         /* device */
    lg_tensor t;        /* the view */
    float *f;           /* [rows * cols] the view's values as floats (after rounding) */
} gt;

static size_t esz(lg_dtype dt) { return lg_dtype_size(dt); }

static gt gt_new(lg_dtype dt, int64_t rows, int64_t cols, int64_t pad)
{
    gt b = {0};
    b.dt = dt;
    b.rows = rows;
    b.cols = cols;
    b.stride = cols + pad;
    b.bytes = (size_t)(rows ? rows : 1) * (size_t)b.stride * esz(dt) + 2 * GUARD;
    b.img = malloc(b.bytes);
    memset(b.img, PATTERN, b.bytes);
    b.base = G->i.alloc(G, b.bytes);
    b.f = calloc((size_t)(rows ? rows : 1) * (size_t)cols, sizeof(float));
    if (!b.img || !b.base || !b.f) {
        fprintf(stderr, "allocation failed\n");
        exit(2);
    }
    b.t = (lg_tensor){(char *)b.base + GUARD, dt, rows, cols, b.stride};
    G->i.upload(G, b.base, b.img, b.bytes);
    return b;
}
static void gt_free(gt *b)
{
    G->i.sync(G);
    G->i.dealloc(G, b->base);
    free(b->img);
    free(b->f);
    memset(b, 0, sizeof *b);
}
static unsigned char *elem(gt *b, int64_t r, int64_t c)
{
    return b->img + GUARD + ((size_t)r * (size_t)b->stride + (size_t)c) * esz(b->dt);
}
/* Sets the view from v (or random when v is NULL), rounding through dt; uploads. */
static void gt_set(gt *b, const float *v, float amp)
{
    for (int64_t r = 0; r < b->rows; r++) {
        float *fr = b->f + r * b->cols;
        for (int64_t c = 0; c < b->cols; c++) fr[c] = v ? v[r * b->cols + c] : frand() * amp;
        lg_from_f32(elem(b, r, 0), b->dt, fr, (size_t)b->cols);
        lg_to_f32(fr, elem(b, r, 0), b->dt, (size_t)b->cols);
    }
    G->i.upload(G, b->base, b->img, b->bytes);
}
static void gt_poison(gt *b)
{
    for (int64_t r = 0; r < b->rows; r++) memset(elem(b, r, 0), 0xFF, (size_t)b->cols * esz(b->dt));
    G->i.upload(G, b->base, b->img, b->bytes);
}
/* Downloads; checks every byte outside the view against the image; fills out
 * (rows*cols floats, may be NULL) and returns 0 if guards held and the view
 * is finite (allow_nan_rows: rows whose poison is expected to survive). */
static int gt_get(gt *b, float *out, const unsigned char *allow_nan_rows)
{
    unsigned char *d = malloc(b->bytes);
    int bad = 0;
    if (G->i.sync(G) != 0 || G->i.download(G, d, b->base, b->bytes) != 0) {
        free(d);
        return -1;
    }
    size_t es = esz(b->dt), vb = (size_t)b->cols * es;
    size_t o = 0;
    for (int64_t r = 0; r <= b->rows; r++) { /* bytes before row r's view (gap/guard), then skip the view */
        size_t start = r < b->rows ? (size_t)(elem(b, r, 0) - b->img) : b->bytes;
        for (; o < start; o++)
            if (d[o] != b->img[o]) bad++;
        o = start + vb;
    }
    if (bad)
        fprintf(stderr, "  %d guard/gap bytes overwritten\n", bad);
    for (int64_t r = 0; r < b->rows && out; r++) {
        float *fr = out + r * b->cols;
        lg_to_f32(fr, d + (elem(b, r, 0) - b->img), b->dt, (size_t)b->cols);
        if (allow_nan_rows && allow_nan_rows[r])
            continue;
        for (int64_t c = 0; c < b->cols; c++)
            if (!isfinite(fr[c])) {
                if (bad < 1000000) fprintf(stderr, "  non-finite at [%lld, %lld]\n", (long long)r, (long long)c);
                bad += 1000000;
                break;
            }
    }
    /* keep the image in sync with what the device holds inside the view */
    for (int64_t r = 0; r < b->rows; r++) memcpy(elem(b, r, 0), d + (elem(b, r, 0) - b->img), vb);
    free(d);
    return bad ? -1 : 0;
}
static double rel_l2(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static int32_t *dev_i32(const int32_t *h, size_t n)
{
    int32_t *d = G->i.alloc(G, n * 4 + 4);
    G->i.upload(G, d, h, n * 4);
    return d;
}
static float *fdup(const float *v, size_t n)
{
    float *d = malloc(n * 4);
    memcpy(d, v, n * 4);
    return d;
}
static lg_tensor host_t(float *p, int64_t rows, int64_t cols) { return lg_tensor_2d(p, LG_F32, rows, cols); }

/* ---- simple ops ----------------------------------------------------------------- */

static void test_embed(lg_dtype dt, int T, int V, int D)
{
    gt tab = gt_new(dt, V, D, 0), out = gt_new(dt, T, D, 8);
    gt_set(&tab, NULL, 1.0f);
    int32_t *tok = malloc(T * 4);
    for (int t = 0; t < T; t++) tok[t] = t == 1 ? -1 : t == 2 ? V : irand(V);
    int32_t *dtok = dev_i32(tok, T);
    gt_poison(&out);
    int rc = G->i.embed(G, out.t, tab.t, dtok);
    float *got = malloc((size_t)T * D * 4), *ref = calloc((size_t)T * D, 4);
    int g = gt_get(&out, got, NULL);
    C->i.embed(C, host_t(ref, T, D), host_t(tab.f, V, D), tok);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d V%d D%d oob ids", T, V, D);
    record("embed", cas, dt, rel_l2(got, ref, (size_t)T * D), 0, rc == 0 && g == 0);
    G->i.dealloc(G, dtok);
    free(tok), free(got), free(ref);
    gt_free(&tab), gt_free(&out);
}

static void test_add_rmsnorm(lg_dtype dt, int T, int D, int with_delta)
{
    gt resid = gt_new(dt, T, D, 16), delta = gt_new(dt, T, D, 0), out = gt_new(dt, T, D, 8);
    gt_set(&resid, NULL, 2.0f);
    gt_set(&delta, NULL, 1.0f);
    float *w = malloc(D * 4);
    for (int i = 0; i < D; i++) w[i] = 1.0f + 0.5f * frand();
    float *dw = G->i.alloc(G, D * 4);
    G->i.upload(G, dw, w, D * 4);
    gt_poison(&out);
    lg_tensor none = {0};
    int rc = G->i.add_rmsnorm(G, resid.t, with_delta ? delta.t : none, lg_tensor_2d(dw, LG_F32, 1, D), out.t, 1e-5f);
    size_t n = (size_t)T * D;
    float *gr = malloc(n * 4), *go = malloc(n * 4), *rr = fdup(resid.f, n), *ro = calloc(n, 4);
    int g1 = gt_get(&resid, gr, NULL), g2 = gt_get(&out, go, NULL);
    C->i.add_rmsnorm(C, host_t(rr, T, D), with_delta ? host_t(delta.f, T, D) : none, host_t(w, 1, D),
                     host_t(ro, T, D), 1e-5f);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d D%d %s", T, D, with_delta ? "+delta" : "no delta");
    double e = fmax(rel_l2(go, ro, n), rel_l2(gr, rr, n));
    record("add_rmsnorm", cas, dt, e, lim_for(dt), rc == 0 && g1 == 0 && g2 == 0);
    G->i.dealloc(G, dw);
    free(w), free(gr), free(go), free(rr), free(ro);
    gt_free(&resid), gt_free(&delta), gt_free(&out);
}

static void test_matmul(lg_dtype dt, int T, int N, int K, int f32_out, int bias, int accumulate, int ypad)
{
    lg_dtype ydt = f32_out ? LG_F32 : dt;
    gt x = gt_new(dt, T, K, 8), W = gt_new(dt, N, K, 0), y = gt_new(ydt, T, N, ypad);
    gt_set(&x, NULL, 1.0f);
    gt_set(&W, NULL, 0.1f);
    size_t n = (size_t)T * N;
    float *ry = calloc(n, 4);
    if (accumulate) {
        gt_set(&y, NULL, 1.0f);
        memcpy(ry, y.f, n * 4);
    } else {
        gt_poison(&y);
    }
    float *b = malloc(N * 4);
    for (int i = 0; i < N; i++) b[i] = frand();
    float *db = G->i.alloc(G, N * 4);
    G->i.upload(G, db, b, N * 4);
    lg_tensor none = {0}, bt = lg_tensor_2d(db, LG_F32, 1, N);
    int rc = G->i.matmul(G, y.t, x.t, W.t, bias ? bt : none, accumulate);
    float *gy = malloc(n * 4);
    int g = gt_get(&y, gy, NULL);
    C->i.matmul(C, host_t(ry, T, N), host_t(x.f, T, K), host_t(W.f, N, K), bias ? host_t(b, 1, N) : none, accumulate);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d N%d K%d%s%s%s", T, N, K, f32_out ? " y32" : "", bias ? " bias" : "",
             accumulate ? " acc" : "");
    record("matmul", cas, dt, rel_l2(gy, ry, n), lim_for(f32_out ? LG_F16 : dt) * (f32_out ? 0.5 : 1), rc == 0 && g == 0);
    G->i.dealloc(G, db);
    free(ry), free(b), free(gy);
    gt_free(&x), gt_free(&W), gt_free(&y);
}

static void test_rope(lg_dtype dt, int T, int nh, int nkv, int hd, int max_pos)
{
    int qdim = nh * hd, kvdim = nkv * hd, W = qdim + 2 * kvdim;
    gt qkv = gt_new(dt, T, W, 8);
    gt_set(&qkv, NULL, 1.0f);
    int32_t *pos = malloc(T * 4);
    for (int t = 0; t < T; t++) pos[t] = irand(max_pos);
    float *inv = malloc(hd / 2 * 4);
    for (int i = 0; i < hd / 2; i++) inv[i] = (float)(1.0 / pow(500000.0, 2.0 * i / hd));
    int32_t *dpos = dev_i32(pos, T);
    float *dinv = G->i.alloc(G, hd / 2 * 4);
    G->i.upload(G, dinv, inv, hd / 2 * 4);
    lg_tensor q = lg_tensor_cols(qkv.t, 0, qdim), k = lg_tensor_cols(qkv.t, qdim, kvdim);
    int rc = G->i.rope(G, q, k, dpos, dinv, nh, nkv, hd);
    size_t n = (size_t)T * W;
    float *got = malloc(n * 4), *ref = fdup(qkv.f, n);
    int g = gt_get(&qkv, got, NULL);
    lg_tensor hq = {ref, LG_F32, T, qdim, W}, hk = {ref + qdim, LG_F32, T, kvdim, W};
    C->i.rope(C, hq, hk, pos, inv, nh, nkv, hd);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d h%d/%d hd%d pos<%d", T, nh, nkv, hd, max_pos);
    record("rope", cas, dt, rel_l2(got, ref, n), lim_for(dt), rc == 0 && g == 0);
    G->i.dealloc(G, dpos), G->i.dealloc(G, dinv);
    free(pos), free(inv), free(got), free(ref);
    gt_free(&qkv);
}

static void test_silu_mul(lg_dtype dt, int T, int F)
{
    gt gu = gt_new(dt, T, 2 * F, 0), out = gt_new(dt, T, F, 24);
    gt_set(&gu, NULL, 4.0f);
    gt_poison(&out);
    int rc = G->i.silu_mul(G, out.t, gu.t);
    size_t n = (size_t)T * F;
    float *got = malloc(n * 4), *ref = calloc(n, 4);
    int g = gt_get(&out, got, NULL);
    C->i.silu_mul(C, host_t(ref, T, F), host_t(gu.f, T, 2 * F));
    char cas[48];
    snprintf(cas, sizeof cas, "T%d F%d", T, F);
    record("silu_mul", cas, dt, rel_l2(got, ref, n), lim_for(dt), rc == 0 && g == 0);
    free(got), free(ref);
    gt_free(&gu), gt_free(&out);
}

static void test_get_rows(lg_dtype dt, int T, int D, int n)
{
    gt x = gt_new(dt, T, D, 8), out = gt_new(dt, n, D, 0);
    gt_set(&x, NULL, 1.0f);
    gt_poison(&out);
    int32_t *r = malloc(n * 4);
    for (int i = 0; i < n; i++) r[i] = irand(T);
    int32_t *dr = dev_i32(r, n);
    int rc = G->i.get_rows(G, out.t, x.t, dr, n);
    float *got = malloc((size_t)n * D * 4), *ref = calloc((size_t)n * D, 4);
    int g = gt_get(&out, got, NULL);
    C->i.get_rows(C, host_t(ref, n, D), host_t(x.f, T, D), r, n);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d D%d n%d", T, D, n);
    record("get_rows", cas, dt, rel_l2(got, ref, (size_t)n * D), 0, rc == 0 && g == 0);
    G->i.dealloc(G, dr);
    free(r), free(got), free(ref);
    gt_free(&x), gt_free(&out);
}

static void test_convert(lg_dtype from, lg_dtype to, int R, int Cc)
{
    gt s = gt_new(from, R, Cc, 4), d = gt_new(to, R, Cc, 12);
    gt_set(&s, NULL, 3.0f);
    gt_poison(&d);
    int rc = G->i.convert(G, d.t, s.t);
    size_t n = (size_t)R * Cc;
    float *got = malloc(n * 4), *ref = malloc(n * 4);
    int g = gt_get(&d, got, NULL);
    /* reference: round s.f through `to` on the host */
    void *tmp = malloc(n * 4);
    lg_from_f32(tmp, to, s.f, n);
    lg_to_f32(ref, tmp, to, n);
    char cas[48];
    snprintf(cas, sizeof cas, "%s->%s %dx%d", lg_dtype_name(from), lg_dtype_name(to), R, Cc);
    record("convert", cas, to == LG_F32 ? from : to, rel_l2(got, ref, n), 0, rc == 0 && g == 0);
    free(got), free(ref), free(tmp);
    gt_free(&s), gt_free(&d);
}

/* ---- kv_write + attention ----------------------------------------------------------- */

typedef struct {
    int n_seqs;
    const int *q_len, *kv_len; /* new tokens, and kv length after this step */
} attn_case;

static double bench_us(int (*fn)(void *), void *arg, int iters);

typedef struct {
    lg_tensor out, q;
    lg_kv_view kv;
    lg_step_meta m;
    int nh;
    float scale;
} attn_bench;
static int attn_bench_fn(void *p)
{
    attn_bench *a = p;
    return G->i.attention(G, a->out, a->q, a->kv, &a->m, a->nh, a->scale);
}

static int attn_pt = 16; /* page_tokens of test_attention's pool */

static void test_attention(lg_dtype dt, const char *name, const attn_case *ac, int nh, int nkv, int hd, int bench)
{
    const int pt = attn_pt, L = 2, layer = 1;
    const int S = ac->n_seqs, kvdim = nkv * hd, qdim = nh * hd;
    int T = 0, max_q = 0, max_kv = 0, n_pages_used = 0;
    for (int s = 0; s < S; s++) {
        T += ac->q_len[s];
        if (ac->q_len[s] > max_q) max_q = ac->q_len[s];
        if (ac->kv_len[s] > max_kv) max_kv = ac->kv_len[s];
        n_pages_used += (ac->kv_len[s] + pt - 1) / pt;
    }
    const int n_pages = n_pages_used + 7;
    /* pages scattered over the pool: a random permutation */
    int *perm = malloc(n_pages * 4);
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = irand(i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tok_pos = malloc(T * 4), *slot = malloc(T * 4), *q_indptr = malloc((S + 1) * 4),
            *kv_len = malloc(S * 4), *page_indptr = malloc((S + 1) * 4), *page_ids = malloc(n_pages_used * 4);
    int t = 0, pg = 0;
    for (int s = 0; s < S; s++) {
        q_indptr[s] = t;
        page_indptr[s] = pg;
        kv_len[s] = ac->kv_len[s];
        int np = (ac->kv_len[s] + pt - 1) / pt;
        for (int i = 0; i < np; i++) page_ids[pg + i] = perm[pg + i];
        for (int i = 0; i < ac->q_len[s]; i++) {
            int p = ac->kv_len[s] - ac->q_len[s] + i;
            tok_pos[t + i] = p;
            slot[t + i] = page_ids[pg + p / pt] * pt + p % pt;
        }
        t += ac->q_len[s];
        pg += np;
    }
    q_indptr[S] = t;
    page_indptr[S] = pg;

    /* pools: GPU (dt) and CPU (f32), same logical content, random everywhere */
    const size_t es = esz(dt), kv_block_g = (size_t)pt * kvdim * es, kv_block_c = (size_t)pt * kvdim * 4;
    const size_t pb_g = (size_t)L * 2 * kv_block_g, pb_c = (size_t)L * 2 * kv_block_c;
    size_t n_el = (size_t)n_pages * L * 2 * pt * kvdim;
    float *cpool = malloc(n_el * 4);
    for (size_t i = 0; i < n_el; i++) cpool[i] = frand();
    void *hp = malloc(n_el * es);
    lg_from_f32(hp, dt, cpool, n_el);
    lg_to_f32(cpool, hp, dt, n_el);
    void *gpool = G->i.alloc(G, n_el * es);
    G->i.upload(G, gpool, hp, n_el * es);
    lg_kv_view kvg = {gpool, pb_g, layer * 2 * kv_block_g, layer * 2 * kv_block_g + kv_block_g, pt, nkv, hd, dt, 0, 0, 1, 1};
    lg_kv_view kvc = {cpool, pb_c, layer * 2 * kv_block_c, layer * 2 * kv_block_c + kv_block_c, pt, nkv, hd, LG_F32, 0, 0, 1, 1};

    /* this step's q, k, v as column slices of one qkv buffer */
    gt qkv = gt_new(dt, T, qdim + 2 * kvdim, 8), out = gt_new(dt, T, qdim, 8);
    gt_set(&qkv, NULL, 1.5f);
    gt_poison(&out);
    lg_tensor q = lg_tensor_cols(qkv.t, 0, qdim), k = lg_tensor_cols(qkv.t, qdim, kvdim),
              v = lg_tensor_cols(qkv.t, qdim + kvdim, kvdim);
    int W = qdim + 2 * kvdim;
    lg_tensor hq = {qkv.f, LG_F32, T, qdim, W}, hk = {qkv.f + qdim, LG_F32, T, kvdim, W},
              hv = {qkv.f + qdim + kvdim, LG_F32, T, kvdim, W};

    int32_t *d_pos = dev_i32(tok_pos, T), *d_slot = dev_i32(slot, T), *d_qi = dev_i32(q_indptr, S + 1),
            *d_kvl = dev_i32(kv_len, S), *d_pi = dev_i32(page_indptr, S + 1), *d_pids = dev_i32(page_ids, pg);
    lg_step_meta mg = {.n_tokens = T, .n_seqs = S, .max_q_len = max_q, .max_kv_len = max_kv, .pos = d_pos,
                       .slot = d_slot, .q_indptr = d_qi, .kv_len = d_kvl, .page_indptr = d_pi, .page_ids = d_pids};
    lg_step_meta mc = {.n_tokens = T, .n_seqs = S, .max_q_len = max_q, .max_kv_len = max_kv, .pos = tok_pos,
                       .slot = slot, .q_indptr = q_indptr, .kv_len = kv_len, .page_indptr = page_indptr,
                       .page_ids = page_ids};
    const float scale = 1.0f / sqrtf((float)hd);
    char cas[48];

    /* kv_write: compare the whole pool */
    int rc = G->i.kv_write(G, kvg, k, v, d_slot, T);
    C->i.kv_write(C, kvc, hk, hv, slot, T);
    {
        void *back = malloc(n_el * es);
        float *bf = malloc(n_el * 4);
        int ok = G->i.sync(G) == 0 && G->i.download(G, back, gpool, n_el * es) == 0;
        lg_to_f32(bf, back, dt, n_el);
        snprintf(cas, sizeof cas, "%s T%d", name, T);
        record("kv_write", cas, dt, rel_l2(bf, cpool, n_el), 0, rc == 0 && ok);
        free(back), free(bf);
    }
    rc = G->i.attention(G, out.t, q, kvg, &mg, nh, scale);
    size_t n = (size_t)T * qdim;
    float *got = malloc(n * 4), *ref = calloc(n, 4);
    int g = gt_get(&out, got, NULL);
    C->i.attention(C, host_t(ref, T, qdim), hq, kvc, &mc, nh, scale);
    snprintf(cas, sizeof cas, "%s h%d/%d hd%d", name, nh, nkv, hd);
    record("attention", cas, dt, rel_l2(got, ref, n), lim_for(dt) * 2, rc == 0 && g == 0);
    if (bench) {
        attn_bench ab = {out.t, q, kvg, mg, nh, scale};
        rows[n_rows - 1].us = bench_us(attn_bench_fn, &ab, 50);
    }

    G->i.dealloc(G, d_pos), G->i.dealloc(G, d_slot), G->i.dealloc(G, d_qi), G->i.dealloc(G, d_kvl);
    G->i.dealloc(G, d_pi), G->i.dealloc(G, d_pids), G->i.dealloc(G, gpool);
    free(perm), free(tok_pos), free(slot), free(q_indptr), free(kv_len), free(page_indptr), free(page_ids);
    free(cpool), free(hp), free(got), free(ref);
    gt_free(&qkv), gt_free(&out);
}

/* An e4m3 KV cache (`--kv-cache-dtype fp8`): the same e4m3 pool bytes on both backends (random codes, no
 * NaN), this step's k, v written by the GPU's kv_write (16-bit k, v / scale -> e4m3) and the CPU's (f32 k, v:
 * the same values) must leave equal bytes (both round x / scale to nearest even, saturating: counted as the
 * share of differing bytes, limit 0); then attention over the e4m3 pages (read back x k_scale / v_scale; the
 * window kernel, whatever the step's shape) against the CPU's, optionally with a window or a soft-cap. */
static void test_attention_e4m3(lg_dtype dt, const char *name, const attn_case *ac, int nh, int nkv, int hd,
                                int window, float softcap)
{
    const int pt = attn_pt, L = 2, layer = 1;
    const int S = ac->n_seqs, kvdim = nkv * hd, qdim = nh * hd;
    int T = 0, max_q = 0, max_kv = 0, n_pages_used = 0;
    for (int s = 0; s < S; s++) {
        T += ac->q_len[s];
        if (ac->q_len[s] > max_q) max_q = ac->q_len[s];
        if (ac->kv_len[s] > max_kv) max_kv = ac->kv_len[s];
        n_pages_used += (ac->kv_len[s] + pt - 1) / pt;
    }
    const int n_pages = n_pages_used + 5;
    int *perm = malloc(n_pages * 4);
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = irand(i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tok_pos = malloc(T * 4), *slot = malloc(T * 4), *q_indptr = malloc((S + 1) * 4),
            *kv_len = malloc(S * 4), *page_indptr = malloc((S + 1) * 4), *page_ids = malloc(n_pages_used * 4);
    int t = 0, pg = 0;
    for (int s = 0; s < S; s++) {
        q_indptr[s] = t;
        page_indptr[s] = pg;
        kv_len[s] = ac->kv_len[s];
        int np = (ac->kv_len[s] + pt - 1) / pt;
        for (int i = 0; i < np; i++) page_ids[pg + i] = perm[pg + i];
        for (int i = 0; i < ac->q_len[s]; i++) {
            int p = ac->kv_len[s] - ac->q_len[s] + i;
            tok_pos[t + i] = p;
            slot[t + i] = page_ids[pg + p / pt] * pt + p % pt;
        }
        t += ac->q_len[s];
        pg += np;
    }
    q_indptr[S] = t;
    page_indptr[S] = pg;
    const size_t kv_block = (size_t)pt * kvdim, pb = (size_t)L * 2 * kv_block, n_el = (size_t)n_pages * pb;
    uint8_t *cpool = malloc(n_el), *back = malloc(n_el);
    for (size_t i = 0; i < n_el; i++) {
        cpool[i] = (uint8_t)rnd();
        if ((cpool[i] & 0x7F) == 0x7F) cpool[i] ^= 1; /* not NaN */
    }
    void *gpool = G->i.alloc(G, n_el);
    G->i.upload(G, gpool, cpool, n_el);
    const float ks = 0.75f + frand() * 0.25f, vs = 1.25f + frand() * 0.25f;
    lg_kv_view kvg = {gpool, pb, layer * 2 * kv_block, layer * 2 * kv_block + kv_block, pt, nkv, hd, LG_F8E4M3,
                      window, softcap, ks, vs};
    lg_kv_view kvc = kvg;
    kvc.base = cpool;

    gt qkv = gt_new(dt, T, qdim + 2 * kvdim, 8), out = gt_new(dt, T, qdim, 8);
    gt_set(&qkv, NULL, 1.5f);
    /* k, v up to 600 x scale: some saturate at 448 */
    for (int r = 0; r < T; r++)
        for (int c = qdim; c < qdim + 2 * kvdim; c++)
            if (irand(64) == 0) qkv.f[(size_t)r * qkv.cols + c] = (float)(irand(2) ? 600 : -600);
    gt_set(&qkv, qkv.f, 0);
    gt_poison(&out);
    lg_tensor q = lg_tensor_cols(qkv.t, 0, qdim), k = lg_tensor_cols(qkv.t, qdim, kvdim),
              v = lg_tensor_cols(qkv.t, qdim + kvdim, kvdim);
    int W = qdim + 2 * kvdim;
    lg_tensor hq = {qkv.f, LG_F32, T, qdim, W}, hk = {qkv.f + qdim, LG_F32, T, kvdim, W},
              hv = {qkv.f + qdim + kvdim, LG_F32, T, kvdim, W};
    int32_t *d_pos = dev_i32(tok_pos, T), *d_slot = dev_i32(slot, T), *d_qi = dev_i32(q_indptr, S + 1),
            *d_kvl = dev_i32(kv_len, S), *d_pi = dev_i32(page_indptr, S + 1), *d_pids = dev_i32(page_ids, pg);
    lg_step_meta mg = {.n_tokens = T, .n_seqs = S, .max_q_len = max_q, .max_kv_len = max_kv, .pos = d_pos,
                       .slot = d_slot, .q_indptr = d_qi, .kv_len = d_kvl, .page_indptr = d_pi, .page_ids = d_pids};
    lg_step_meta mc = {.n_tokens = T, .n_seqs = S, .max_q_len = max_q, .max_kv_len = max_kv, .pos = tok_pos,
                       .slot = slot, .q_indptr = q_indptr, .kv_len = kv_len, .page_indptr = page_indptr,
                       .page_ids = page_ids};
    const float scale = 1.0f / sqrtf((float)hd);
    char cas[48];
    int rc = G->i.kv_write(G, kvg, k, v, d_slot, T);
    int rcc = C->i.kv_write(C, kvc, hk, hv, slot, T);
    int ok = G->i.sync(G) == 0 && G->i.download(G, back, gpool, n_el) == 0;
    size_t diff = 0;
    for (size_t i = 0; i < n_el; i++) diff += back[i] != cpool[i];
    snprintf(cas, sizeof cas, "e4m3 %s T%d", name, T);
    record("kv_write", cas, dt, (double)diff / (double)n_el, 0, rc == 0 && rcc == 0 && ok);
    rc = G->i.attention(G, out.t, q, kvg, &mg, nh, scale);
    size_t n = (size_t)T * qdim;
    float *got = malloc(n * 4), *ref = calloc(n, 4);
    int g = gt_get(&out, got, NULL);
    rcc = C->i.attention(C, host_t(ref, T, qdim), hq, kvc, &mc, nh, scale);
    snprintf(cas, sizeof cas, "e4m3 %s h%d/%d hd%d w%d c%g", name, nh, nkv, hd, window, softcap);
    record("attention", cas, dt, rel_l2(got, ref, n), lim_for(dt) * 2, rc == 0 && rcc == 0 && g == 0);

    G->i.dealloc(G, d_pos), G->i.dealloc(G, d_slot), G->i.dealloc(G, d_qi), G->i.dealloc(G, d_kvl);
    G->i.dealloc(G, d_pi), G->i.dealloc(G, d_pids), G->i.dealloc(G, gpool);
    free(perm), free(tok_pos), free(slot), free(q_indptr), free(kv_len), free(page_indptr), free(page_ids);
    free(cpool), free(back), free(got), free(ref);
    gt_free(&qkv), gt_free(&out);
}

/* ---- LoRA (SGMV) ------------------------------------------------------------------- */

typedef struct {
    lg_tensor a, b;
    lg_lora_meta lm;
    int slot;
} lora_bench;
static int shrink_fn(void *p)
{
    lora_bench *l = p;
    return G->i.lora_shrink(G, l->a, l->b, &l->lm, l->slot);
}
static int expand_fn(void *p)
{
    lora_bench *l = p;
    return G->i.lora_expand(G, l->a, l->b, &l->lm, l->slot);
}

/* LG_SGMV_PREFILL=0 in the environment: both runs would be the CUDA-core kernels */
static int sgmv_forced_off(void) { return env_tune.sgmv_prefill == 0; }
static int sgmv_mode = -1; /* the prefill SGMV mode the LoRA tests run in (restored after a comparison; -1: the
                            * environment's) */
static void set_sgmv_prefill(int mode) { G->tune.sgmv_prefill = mode < 0 ? env_tune.sgmv_prefill : mode; }
static int lora_cap;   /* > the ranks: lm.max_rank (tmp's width) = lora_cap, step_max_rank = the largest rank */
static int lora_a_off; /* bytes added to each A's pool offset (2: A not 16-byte aligned) */

/* test_lora's shrink error: relative L2 of the GPU's tmp [T, max_rank] against the f64 reference rt
 * over each segment's rank columns (non-finite counts as huge); poison_ok (when given) is cleared
 * if a column past the rank lost its NaN poison. */
static double lora_tmp_err(const float *gtmp, const double *rt, const int32_t *indptr, const int *rank, int n_segs,
                           int max_rank, int *poison_ok)
{
    double num = 0, den = 0;
    for (int s = 0; s < n_segs; s++)
        for (int t = indptr[s]; t < indptr[s + 1]; t++)
            for (int j = 0; j < max_rank; j++) {
                const size_t i = (size_t)t * max_rank + j;
                if (j < rank[s]) {
                    const double e = gtmp[i] - rt[i];
                    num += isfinite(gtmp[i]) ? e * e : 1e30;
                    den += rt[i] * rt[i];
                } else if (poison_ok && !isnan(gtmp[i])) {
                    *poison_ok = 0;
                }
            }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* seg_len[s] tokens per segment, rank[s] (0 = no LoRA). in -> out, y a column
 * slice at column y_c0 of a fused [T, y_total] buffer. A segment of more than 4
 * tokens takes the prefill kernels (lora_shrink_mma.cu, the expand's tile
 * kernel); those cases also run the CUDA-core paths (LG_SGMV_PREFILL=0): the
 * expand must give the same bits from the same tmp, the shrink the reference. */
static void test_lora(lg_dtype dt, lg_dtype tmp_dt, const char *name, int n_segs, const int *seg_len, const int *rank,
                      int in, int out_dim, int y_c0, int y_total, int bench)
{
    const int n_slots = 2 * LG_LORA_N_MODULES, slot = LG_LORA_N_MODULES + 4;
    int T = 0, max_rank = 1, max_seg = 0;
    int32_t *indptr = malloc((n_segs + 1) * 4);
    for (int s = 0; s < n_segs; s++) {
        indptr[s] = T;
        T += seg_len[s];
        if (rank[s] > max_rank) max_rank = rank[s];
        if (seg_len[s] > max_seg) max_seg = seg_len[s];
    }
    indptr[n_segs] = T;
    const int step_rank = max_rank;
    if (lora_cap > max_rank)
        max_rank = lora_cap;
    /* adapter weights: scattered through one "pool" allocation at random 16-byte aligned offsets */
    size_t es = esz(dt), need = 0;
    for (int s = 0; s < n_segs; s++) need += (size_t)rank[s] * (in + out_dim) * es + 4096;
    size_t pool_bytes = need * 2 + 65536;
    char *pool = G->i.alloc(G, pool_bytes);
    unsigned char *hpool = malloc(pool_bytes);
    memset(hpool, PATTERN, pool_bytes);
    float **A = calloc(n_segs, sizeof(float *)), **B = calloc(n_segs, sizeof(float *));
    lg_lora_w *w = calloc((size_t)n_segs * n_slots, sizeof(lg_lora_w));
    for (size_t i = 0; i < (size_t)n_segs * n_slots; i++) w[i].rank = 1 + irand(8); /* other slots: decoys */
    size_t off = (size_t)irand(64) * 16;
    for (int s = 0; s < n_segs; s++) {
        lg_lora_w *ws = &w[(size_t)s * n_slots + slot];
        ws->rank = rank[s];
        ws->scale = 0.5f + frand() * 0.25f;
        ws->A = ws->B = NULL;
        if (!rank[s]) continue;
        size_t na = (size_t)rank[s] * in, nb = (size_t)out_dim * rank[s];
        A[s] = malloc(na * 4);
        B[s] = malloc(nb * 4);
        for (size_t i = 0; i < na; i++) A[s][i] = frand() * 0.1f;
        for (size_t i = 0; i < nb; i++) B[s][i] = frand() * 0.1f;
        off += (size_t)irand(32) * 16 + (size_t)lora_a_off;
        lg_from_f32(hpool + off, dt, A[s], na);
        lg_to_f32(A[s], hpool + off, dt, na);
        ws->A = pool + off;
        off = (off + na * es + 15) & ~(size_t)15;
        off += (size_t)irand(32) * 16;
        lg_from_f32(hpool + off, dt, B[s], nb);
        lg_to_f32(B[s], hpool + off, dt, nb);
        ws->B = pool + off;
        off = (off + nb * es + 15) & ~(size_t)15;
    }
    G->i.upload(G, pool, hpool, pool_bytes);
    lg_lora_w *dw = G->i.alloc(G, (size_t)n_segs * n_slots * sizeof(lg_lora_w));
    G->i.upload(G, dw, w, (size_t)n_segs * n_slots * sizeof(lg_lora_w));
    int32_t *dind = dev_i32(indptr, n_segs + 1);
    lg_lora_meta lm = {n_segs, n_slots, max_rank, dind, dw, indptr, lora_cap > step_rank ? step_rank : 0};

    gt x = gt_new(dt, T, in, 8), tmp = gt_new(tmp_dt, T, max_rank, 3), yf = gt_new(dt, T, y_total, 0);
    gt_set(&x, NULL, 1.0f);
    gt_set(&yf, NULL, 1.0f);
    gt_poison(&tmp);
    lg_tensor y = lg_tensor_cols(yf.t, y_c0, out_dim);

    /* reference in f64 */
    double *rt = calloc((size_t)T * max_rank, 8);
    float *ry = fdup(yf.f, (size_t)T * y_total);
    unsigned char *untouched = calloc(T, 1);
    for (int s = 0; s < n_segs; s++)
        for (int t = indptr[s]; t < indptr[s + 1]; t++) {
            if (!rank[s]) {
                untouched[t] = 1;
                continue;
            }
            for (int j = 0; j < rank[s]; j++) {
                double acc = 0;
                for (int kk = 0; kk < in; kk++) acc += (double)x.f[(size_t)t * in + kk] * A[s][(size_t)j * in + kk];
                rt[(size_t)t * max_rank + j] = acc;
            }
        }
    int rc = G->i.lora_shrink(G, tmp.t, x.t, &lm, slot);
    float *gtmp = malloc((size_t)T * max_rank * 4);
    unsigned char *all = malloc(T);
    memset(all, 1, T);
    int g0 = gt_get(&tmp, gtmp, all); /* guards only: finiteness checked per segment below */
    free(all);
    /* error over the written part; poison must survive in rank-0 rows and columns >= rank */
    int poison_ok = 1;
    char cas[48];
    snprintf(cas, sizeof cas, "%s tmp %s", name, lg_dtype_name(tmp_dt));
    record("lora_shrink", cas, dt, lora_tmp_err(gtmp, rt, indptr, rank, n_segs, max_rank, &poison_ok),
           lim_for(tmp_dt == LG_F32 ? LG_F16 : tmp_dt), rc == 0 && g0 == 0 && poison_ok);
    lora_bench lb = {tmp.t, x.t, lm, slot};
    if (bench)
        rows[n_rows - 1].us = bench_us(shrink_fn, &lb, 50);

    /* expand from the GPU's tmp (as rounded there), reference in f64 */
    for (int s = 0; s < n_segs; s++)
        for (int t = indptr[s]; t < indptr[s + 1] && rank[s]; t++)
            for (int n2 = 0; n2 < out_dim; n2++) {
                double acc = 0;
                for (int j = 0; j < rank[s]; j++)
                    acc += (double)gtmp[(size_t)t * max_rank + j] * B[s][(size_t)n2 * rank[s] + j];
                const lg_lora_w *ws = &w[(size_t)s * n_slots + slot];
                ry[(size_t)t * y_total + y_c0 + n2] += (float)(ws->scale * acc);
            }
    rc = G->i.lora_expand(G, y, tmp.t, &lm, slot);
    float *gy = malloc((size_t)T * y_total * 4);
    int g = gt_get(&yf, gy, NULL);
    /* the reference rounded once to dt, as the kernel's single store does */
    for (int t = 0; t < T; t++) {
        float *r = ry + (size_t)t * y_total;
        unsigned char tmpb[8];
        for (int c = 0; c < y_total; c++) {
            lg_from_f32(tmpb, dt, &r[c], 1);
            lg_to_f32(&r[c], tmpb, dt, 1);
        }
    }
    /* error relative to the LoRA delta itself (y - y0), and exact equality outside it */
    double num = 0, den = 0;
    int outside_ok = 1;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < y_total; c++) {
            size_t i = (size_t)t * y_total + c;
            if (c < y_c0 || c >= y_c0 + out_dim || untouched[t]) {
                if (gy[i] != yf.f[i]) outside_ok = 0;
                continue;
            }
            double e = (double)gy[i] - ry[i], d = (double)ry[i] - yf.f[i];
            num += e * e;
            den += d * d;
        }
    record("lora_expand", cas, dt, den > 0 ? sqrt(num / den) : sqrt(num), lim_for(dt) * 4,
           rc == 0 && g == 0 && outside_ok);
    if (bench) {
        lora_bench le = {y, tmp.t, lm, slot};
        rows[n_rows - 1].us = bench_us(expand_fn, &le, 50);
    }
    if (max_seg > 4 && !bench && !sgmv_forced_off()) { /* the CUDA-core paths of the same segments */
        float *gy2 = malloc((size_t)T * y_total * 4);
        gt_set(&yf, yf.f, 1.0f); /* y as before the expand (gt_get refreshed the image; .f kept the inputs); tmp as the prefill shrink left it */
        set_sgmv_prefill(0);
        rc = G->i.lora_expand(G, y, tmp.t, &lm, slot);
        g = gt_get(&yf, gy2, NULL);
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)T * y_total; i++) diff += memcmp(&gy[i], &gy2[i], 4) != 0;
        snprintf(cas, sizeof cas, "%s tile==8-token", name);
        record("lora_expand", cas, dt, (double)diff, 0, rc == 0 && g == 0);
        gt_poison(&tmp);
        rc = G->i.lora_shrink(G, tmp.t, x.t, &lm, slot);
        unsigned char *nanok = malloc(T);
        memset(nanok, 1, T);
        g = gt_get(&tmp, gtmp, nanok);
        free(nanok);
        snprintf(cas, sizeof cas, "%s cuda-core", name);
        record("lora_shrink", cas, dt, lora_tmp_err(gtmp, rt, indptr, rank, n_segs, max_rank, NULL),
               lim_for(tmp_dt == LG_F32 ? LG_F16 : tmp_dt), rc == 0 && g == 0);
        set_sgmv_prefill(sgmv_mode);
        free(gy2);
    }

    for (int s = 0; s < n_segs; s++) free(A[s]), free(B[s]);
    free(A), free(B), free(w), free(indptr), free(hpool), free(rt), free(ry), free(untouched), free(gtmp), free(gy);
    G->i.dealloc(G, pool), G->i.dealloc(G, dw), G->i.dealloc(G, dind);
    gt_free(&x), gt_free(&tmp), gt_free(&yf);
}

static void *dev_rand(lg_dtype dt, size_t n, float amp);

/* The q,k,v form of a prefill step: lora_shrink_multi / lora_expand_multi over k = 3 slots
 * (outputs: column slices of one fused y) with segments of many tokens, against an f64
 * reference, and the expand against the CUDA-core path (LG_SGMV_PREFILL=0) from the same tmp,
 * bit for bit. cap > 0: lm.max_rank = cap above the ranks (a server's --max-lora-rank), with
 * step_max_rank = the largest rank. */
static void test_lora_multi_prefill(lg_dtype dt, const char *name, int n_segs, const int *seg_len, const int *rank,
                                    int in, const int *outs, int cap)
{
    enum { K = 3 };
    const int n_slots = LG_LORA_N_MODULES, slots[K] = {0, 1, 2};
    int T = 0, R = 1, ytot = 0;
    int32_t *indptr = malloc((n_segs + 1) * 4);
    for (int s = 0; s < n_segs; s++) {
        indptr[s] = T, T += seg_len[s];
        for (int i = 0; i < K; i++) R = rank[s * K + i] > R ? rank[s * K + i] : R;
    }
    indptr[n_segs] = T;
    const int step_rank = R, W = cap > R ? cap : R; /* tmp columns per slot */
    int y0[K];
    for (int i = 0; i < K; i++) y0[i] = ytot, ytot += outs[i];
    const size_t es = esz(dt);
    lg_lora_w *w = calloc((size_t)n_segs * n_slots, sizeof *w);
    float **A = calloc((size_t)n_segs * K, sizeof(float *)), **B = calloc((size_t)n_segs * K, sizeof(float *));
    size_t pool_bytes = 65536;
    for (int s = 0; s < n_segs; s++)
        for (int i = 0; i < K; i++) pool_bytes += (size_t)rank[s * K + i] * (in + outs[i]) * es + 64;
    char *pool = G->i.alloc(G, pool_bytes);
    unsigned char *hpool = calloc(pool_bytes, 1);
    size_t off = 0;
    for (int s = 0; s < n_segs; s++)
        for (int i = 0; i < K; i++) {
            const int r = rank[s * K + i];
            lg_lora_w *ws = &w[(size_t)s * n_slots + slots[i]];
            ws->rank = r;
            ws->scale = 0.25f + 0.25f * (float)irand(4);
            if (!r) continue;
            const size_t na = (size_t)r * in, nb = (size_t)outs[i] * r;
            float *a = A[s * K + i] = malloc(na * 4), *b = B[s * K + i] = malloc(nb * 4);
            for (size_t j = 0; j < na; j++) a[j] = frand() * 0.1f;
            for (size_t j = 0; j < nb; j++) b[j] = frand() * 0.1f;
            lg_from_f32(hpool + off, dt, a, na);
            lg_to_f32(a, hpool + off, dt, na);
            ws->A = pool + off;
            off = (off + na * es + 15) & ~(size_t)15;
            lg_from_f32(hpool + off, dt, b, nb);
            lg_to_f32(b, hpool + off, dt, nb);
            ws->B = pool + off;
            off = (off + nb * es + 15) & ~(size_t)15;
        }
    G->i.upload(G, pool, hpool, pool_bytes);
    lg_lora_w *dw = G->i.alloc(G, (size_t)n_segs * n_slots * sizeof *w);
    G->i.upload(G, dw, w, (size_t)n_segs * n_slots * sizeof *w);
    int32_t *dind = dev_i32(indptr, n_segs + 1);
    lg_lora_meta lm = {n_segs, n_slots, W, dind, dw, indptr, cap > R ? step_rank : 0};

    gt x = gt_new(dt, T, in, 8), tmp = gt_new(LG_F32, T, K * W, 0), yf = gt_new(dt, T, ytot, 0);
    gt_set(&x, NULL, 1.0f);
    gt_set(&yf, NULL, 1.0f);
    gt_poison(&tmp);
    lg_tensor ys[K];
    for (int i = 0; i < K; i++) ys[i] = lg_tensor_cols(yf.t, y0[i], outs[i]);
    int rc = G->i.lora_shrink_multi(G, tmp.t, x.t, &lm, slots, K);
    float *gt_ = malloc((size_t)T * K * W * 4), *gy = malloc((size_t)T * ytot * 4), *gy2 = malloc((size_t)T * ytot * 4);
    unsigned char *nanok = malloc(T);
    memset(nanok, 1, T);
    int g = gt_get(&tmp, gt_, nanok);
    double num = 0, den = 0, enum_ = 0, eden = 0;
    int poison_ok = 1;
    for (int s = 0; s < n_segs; s++)
        for (int t = indptr[s]; t < indptr[s + 1]; t++)
            for (int i = 0; i < K; i++)
                for (int j = 0; j < W; j++) {
                    const float gv = gt_[(size_t)t * K * W + i * W + j];
                    if (j >= rank[s * K + i]) { /* past the slot's rank: the poison stays */
                        poison_ok &= isnan(gv) != 0;
                        continue;
                    }
                    double ref = 0;
                    for (int kk = 0; kk < in; kk++) ref += (double)x.f[(size_t)t * in + kk] * A[s * K + i][(size_t)j * in + kk];
                    num += isfinite(gv) ? (gv - ref) * (gv - ref) : 1e30;
                    den += ref * ref;
                }
    int max_len = 0;
    for (int s = 0; s < n_segs; s++) max_len = seg_len[s] > max_len ? seg_len[s] : max_len;
    if (max_len == 1) { /* decode: 4, 2 or 1 rank rows a block give the auto choice's tmp bit for bit */
        float *g2 = malloc((size_t)T * K * W * 4);
        int same = 0, grc = 0;
        for (int rg = 1; rg <= 4; rg *= 2) {
            G->tune.shrink_rg = rg;
            gt_poison(&tmp);
            grc |= G->i.lora_shrink_multi(G, tmp.t, x.t, &lm, slots, K);
            grc |= gt_get(&tmp, g2, nanok);
            same += memcmp(g2, gt_, (size_t)T * K * W * 4) == 0;
        }
        G->tune.shrink_rg = env_tune.shrink_rg;
        char c2[64];
        snprintf(c2, sizeof c2, "%s rank rows 1/2/4 == auto %d/3", name, same);
        record("lora_shrink_multi", c2, dt, 3 - same, 0, grc == 0);
        free(g2);
        gt_poison(&tmp); /* tmp as the auto choice left it, for the expand below */
        rc |= G->i.lora_shrink_multi(G, tmp.t, x.t, &lm, slots, K);
        g |= gt_get(&tmp, gt_, nanok);
    }
    rc |= G->i.lora_expand_multi(G, ys, tmp.t, &lm, slots, K);
    g |= gt_get(&yf, gy, NULL);
    for (int s = 0; s < n_segs; s++)
        for (int t = indptr[s]; t < indptr[s + 1]; t++)
            for (int i = 0; i < K; i++) {
                const int r = rank[s * K + i];
                const float sc = w[(size_t)s * n_slots + slots[i]].scale;
                for (int n = 0; n < outs[i]; n++) {
                    const size_t yi = (size_t)t * ytot + y0[i] + n;
                    double d = 0;
                    for (int j = 0; j < r; j++) d += (double)gt_[(size_t)t * K * W + i * W + j] * B[s * K + i][(size_t)n * r + j];
                    float ref = (float)(yf.f[yi] + sc * d);
                    unsigned char hb[8];
                    lg_from_f32(hb, dt, &ref, 1);
                    lg_to_f32(&ref, hb, dt, 1);
                    if (!r) {
                        if (gy[yi] != yf.f[yi]) enum_ += 1e30; /* rank 0: untouched */
                        continue;
                    }
                    enum_ += ((double)gy[yi] - ref) * ((double)gy[yi] - ref);
                    eden += (sc * d) * (sc * d);
                }
            }
    char cas[48];
    snprintf(cas, sizeof cas, "%s tmp f32", name);
    record("lora_shrink_multi", cas, dt, den > 0 ? sqrt(num / den) : sqrt(num), lim_for(LG_F16),
           rc == 0 && g == 0 && poison_ok);
    record("lora_expand_multi", cas, dt, eden > 0 ? sqrt(enum_ / eden) : sqrt(enum_), lim_for(dt) * 4, rc == 0 && g == 0);
    if (!sgmv_forced_off()) {
        gt_set(&yf, yf.f, 1.0f); /* y as before the expand */
        set_sgmv_prefill(0);
        rc = G->i.lora_expand_multi(G, ys, tmp.t, &lm, slots, K);
        g = gt_get(&yf, gy2, NULL);
        set_sgmv_prefill(sgmv_mode);
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)T * ytot; i++) diff += memcmp(&gy[i], &gy2[i], 4) != 0;
        snprintf(cas, sizeof cas, "%s tile==8-token", name);
        record("lora_expand_multi", cas, dt, (double)diff, 0, rc == 0 && g == 0);
    }

    for (int i = 0; i < n_segs * K; i++) free(A[i]), free(B[i]);
    free(A), free(B), free(w), free(indptr), free(hpool), free(gt_), free(gy), free(gy2), free(nanok);
    G->i.dealloc(G, pool), G->i.dealloc(G, dw), G->i.dealloc(G, dind);
    gt_free(&x), gt_free(&tmp), gt_free(&yf);
}

/* matmul_lora (kernels/matmul_lora.cu): y = x W^T (+ bias) plus the expand of k slots into column
 * ranges of y, from the GPU's own shrink (lora_shrink_multi, as model.c runs them), against the
 * CPU matmul plus an f64 expand of that tmp. T picks the path: <= 2 the GEMV (one row) or the TMA
 * matmul, then the expand kernel, 3..64 the TMA matmul then the expand, > 64 cuBLAS then the expand
 * kernel; segments the tile expand takes (prefill): the
 * expand stores y first, then the matmul adds into it (store: 1 when that order must be taken,
 * 0 when it must not, -1 either). gap: columns of y without a slot before each range and after
 * the last (the store order zeroes them). */
static int mlora_graph; /* also record the launch in a step graph and compare replays with eager runs */
/* With rope (mlora_rope.hd > 0; k = 3 ranges n_heads x hd, n_kv_heads x hd twice, no gap): the op
 * also does rope_kv_write. Against the op without rope followed by rope_kv_write, on the same
 * inputs and a copy of the KV pages: y and every page byte bit for bit (the contract); the CPU
 * reference gets the CPU's rope. fused: 1 when the expand's rope form must be taken, 0 when not. */
static struct { int nh, nkv, hd, fused; } mlora_rope;
/* Inputs of a rope + KV write over T tokens: positions (< 5000), cache slots (token 2 without a
 * row), inverse frequencies, and two equal copies of random KV pages (16 tokens a page, two
 * layers K, V, K, V; kv1 / kv2 view the second layer of each copy). */
typedef struct {
    int32_t *pos, *slot, *dpos, *dslot;
    float inv[512], *dinv;
    void *p1, *p2;
    size_t pool_bytes;
    lg_kv_view kv1, kv2;
} rope_fix;
/* Whether n bytes of device memory at a and b are equal (a failed download: not equal). */
static int dev_same(const void *a, const void *b, size_t n)
{
    unsigned char *ha = malloc(n), *hb = malloc(n);
    const int same = G->i.download(G, ha, a, n) == 0 && G->i.download(G, hb, b, n) == 0 && memcmp(ha, hb, n) == 0;
    free(ha), free(hb);
    return same;
}
static rope_fix rope_fix_new(lg_dtype dt, int T, int nkv, int hd)
{
    rope_fix f;
    const int pt = 16, kvd = nkv * hd, n_pages = T + 2;
    const size_t es = esz(dt), blk = (size_t)pt * kvd * es, pb = 4 * blk;
    f.pos = malloc(T * 4), f.slot = malloc(T * 4);
    for (int t = 0; t < T; t++) f.pos[t] = irand(5000), f.slot[t] = t == 2 ? -1 : (T - t) * pt + t * 5 % pt;
    for (int i = 0; i < hd / 2; i++) f.inv[i] = powf(10000.0f, -2.0f * i / hd);
    f.dpos = dev_i32(f.pos, T), f.dslot = dev_i32(f.slot, T);
    f.dinv = G->i.alloc(G, hd * 2);
    G->i.upload(G, f.dinv, f.inv, hd * 2);
    f.pool_bytes = (size_t)n_pages * pb;
    f.p1 = dev_rand(dt, f.pool_bytes / es, 1.0f), f.p2 = G->i.alloc(G, f.pool_bytes);
    G->i.copy(G, f.p2, f.p1, f.pool_bytes);
    f.kv1 = (lg_kv_view){f.p1, pb, 2 * blk, 3 * blk, pt, nkv, hd, dt, 0, 0, 1, 1};
    f.kv2 = f.kv1;
    f.kv2.base = f.p2;
    return f;
}
static void rope_fix_free(rope_fix *f)
{
    G->i.dealloc(G, f->dpos), G->i.dealloc(G, f->dslot), G->i.dealloc(G, f->dinv);
    G->i.dealloc(G, f->p1), G->i.dealloc(G, f->p2);
    free(f->pos), free(f->slot);
}
static void mlora_rope_check(lg_dtype dt, const char *cas, gt *yg, lg_tensor x, lg_tensor W, lg_tensor b,
                             lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0,
                             const int *ncols, float *ry);
/* mlora_norm >= 0: also norm_matmul_lora on the case's W, adapters and segments (with rope when
 * mlora_rope.hd), against add_rmsnorm + matmul_lora on copies: y, xn, the new residual, tmp (every
 * byte) and the KV pages bit for bit, resid unchanged; 1: its norm form must be taken, 0: must not
 * (then it returns 1, nothing run), 2: either (grids near one resident wave, which it needs: that
 * depends on the GPU). mlora_norm_delta: with a delta (else h = resid). */
static int mlora_norm = -1, mlora_norm_delta = 1;
static void mlora_norm_check(lg_dtype dt, const char *cas, int T, int K, int N, int R, lg_tensor W, lg_tensor b,
                             const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k);
static void test_matmul_lora_case(lg_dtype dt, const char *name, int n_segs, const int *seg_len, const int *rank,
                                  int K, int k, const int *ncols, int bias, int gap, int store)
{
    const int n_slots = LG_LORA_N_MODULES;
    int T = 0, R = 1, N = 0, col0[3], slots[3];
    int32_t *indptr = malloc((n_segs + 1) * 4);
    for (int s2 = 0; s2 < n_segs; s2++) {
        indptr[s2] = T;
        T += seg_len[s2];
        if (rank[s2] > R) R = rank[s2];
    }
    indptr[n_segs] = T;
    for (int i = 0; i < k; i++) N += gap, col0[i] = N, N += ncols[i], slots[i] = i;
    N += gap;
    size_t es = esz(dt), pool_bytes = 4096;
    for (int s2 = 0; s2 < n_segs; s2++) pool_bytes += (size_t)k * rank[s2] * (K + N) * es + (size_t)k * 64;
    char *pool = G->i.alloc(G, pool_bytes);
    unsigned char *hpool = calloc(pool_bytes, 1);
    lg_lora_w *w = calloc((size_t)n_segs * n_slots, sizeof(lg_lora_w));
    float **B = calloc((size_t)n_segs * k, sizeof(float *));
    size_t off = 0;
    for (int s2 = 0; s2 < n_segs; s2++)
        for (int i = 0; i < k; i++) {
            lg_lora_w *ws = &w[(size_t)s2 * n_slots + i];
            const int r = (s2 + i) % 4 == 3 ? 0 : rank[s2]; /* some (segment, slot) pairs without LoRA */
            ws->rank = r;
            ws->scale = 0.5f + 0.25f * frand();
            if (!r)
                continue;
            size_t na = (size_t)r * K, nb = (size_t)ncols[i] * r;
            float *fa = malloc(na * 4);
            B[s2 * k + i] = malloc(nb * 4);
            for (size_t j = 0; j < na; j++) fa[j] = 0.1f * frand();
            for (size_t j = 0; j < nb; j++) B[s2 * k + i][j] = 0.1f * frand();
            off += (size_t)lora_a_off; /* lora_a_off 2: A not 16-byte aligned */
            lg_from_f32(hpool + off, dt, fa, na);
            ws->A = pool + off;
            off = (off + na * es + 15) & ~(size_t)15;
            lg_from_f32(hpool + off, dt, B[s2 * k + i], nb);
            lg_to_f32(B[s2 * k + i], hpool + off, dt, nb);
            ws->B = pool + off;
            off = (off + nb * es + 15) & ~(size_t)15;
            free(fa);
        }
    G->i.upload(G, pool, hpool, pool_bytes);
    lg_lora_w *dw = G->i.alloc(G, (size_t)n_segs * n_slots * sizeof(lg_lora_w));
    G->i.upload(G, dw, w, (size_t)n_segs * n_slots * sizeof(lg_lora_w));
    int32_t *dind = dev_i32(indptr, n_segs + 1);
    lg_lora_meta lm = {n_segs, n_slots, R, dind, dw, indptr, 0};

    gt x = gt_new(dt, T, K, 8), W = gt_new(dt, N, K, 0), y = gt_new(dt, T, N, 8), tmp = gt_new(LG_F32, T, k * R, 0);
    gt_set(&x, NULL, 1.0f);
    gt_set(&W, NULL, 0.1f);
    gt_poison(&y);
    gt_poison(&tmp);
    float *b = malloc(N * 4);
    for (int i = 0; i < N; i++) b[i] = frand();
    float *db = G->i.alloc(G, N * 4);
    G->i.upload(G, db, b, N * 4);
    lg_tensor none = {0}, bt = lg_tensor_2d(db, LG_F32, 1, N);
    /* the op computes tmp itself (its shrink); a separate lora_shrink_multi into tmp2 must match it bit for bit */
    gt tmp2 = gt_new(LG_F32, T, k * R, 0);
    gt_poison(&tmp2);
    const unsigned long st0 = lg_cuda_lora_store_launches();
    int rc = G->i.matmul_lora ? G->i.matmul_lora(G, y.t, x.t, W.t, bias ? bt : none, tmp.t, &lm, slots, col0, ncols, k,
                                                 NULL)
                              : -1;
    const int stored = lg_cuda_lora_store_launches() != st0;
    rc |= G->i.lora_shrink_multi(G, tmp2.t, x.t, &lm, slots, k);
    size_t n = (size_t)T * N;
    float *gy = malloc(n * 4), *gtmp = malloc((size_t)T * k * R * 4), *gtmp2 = malloc((size_t)T * k * R * 4),
          *ry = calloc(n, 4);
    unsigned char *all = malloc(T);
    memset(all, 1, T);
    int g = gt_get(&y, gy, NULL), g2 = gt_get(&tmp, gtmp, all) | gt_get(&tmp2, gtmp2, all);
    free(all);
    for (int t = 0; t < T; t++) /* columns of slots without LoRA for t's segment are not written: compare ranked ones */
        for (int s2 = 0; s2 < n_segs; s2++)
            if (t >= indptr[s2] && t < indptr[s2 + 1])
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < w[(size_t)s2 * n_slots + i].rank; j++)
                        if (gtmp[(size_t)t * k * R + i * R + j] != gtmp2[(size_t)t * k * R + i * R + j])
                            g2 = -1;
    C->i.matmul(C, host_t(ry, T, N), host_t(x.f, T, K), host_t(W.f, N, K), bias ? host_t(b, 1, N) : none, false);
    for (int s2 = 0; s2 < n_segs; s2++)
        for (int t = indptr[s2]; t < indptr[s2 + 1]; t++)
            for (int i = 0; i < k; i++) {
                const lg_lora_w *ws = &w[(size_t)s2 * n_slots + i];
                for (int c = 0; c < ncols[i] && ws->rank; c++) {
                    double acc = 0;
                    for (int j = 0; j < ws->rank; j++)
                        acc += (double)gtmp[(size_t)t * k * R + i * R + j] * B[s2 * k + i][(size_t)c * ws->rank + j];
                    ry[(size_t)t * N + col0[i] + c] += (float)(ws->scale * acc);
                }
            }
    char cas[64];
    snprintf(cas, sizeof cas, "%s T%d K%d N%d k%d%s%s", name, T, K, N, k, bias ? " bias" : "", stored ? " store" : "");
    if (mlora_rope.hd) {
        mlora_rope_check(dt, cas, &y, x.t, W.t, bias ? bt : none, tmp.t, &lm, slots, col0, ncols, ry);
    } else {
        record("matmul_lora", cas, dt, rel_l2(gy, ry, n), lim_for(dt),
               rc == 0 && g == 0 && g2 == 0 && (store < 0 || store == stored));
    }
    if (mlora_norm >= 0)
        mlora_norm_check(dt, cas, T, K, N, R, W.t, bias ? bt : none, &lm, slots, col0, ncols, k);
    if (mlora_graph && G->i.graph_begin) {
        /* the same launch recorded in a step graph, then replayed with new x and new adapter
         * scales (device inputs the graph reads): bit for bit the eager op on the same inputs */
        float *ye = malloc(n * 4), *yg = malloc(n * 4);
        int grc = 0, same = 0, reps = 0;
        const char key[] = "matmul_lora graph";
        for (int it = 0; it < 3; it++) {
            if (it) {
                gt_set(&x, NULL, 1.0f);
                for (int s2 = 0; s2 < n_segs * n_slots; s2++) w[s2].scale *= 0.75f;
                grc |= G->i.upload(G, dw, w, (size_t)n_segs * n_slots * sizeof(lg_lora_w));
            }
            gt_poison(&y);
            grc |= G->i.matmul_lora(G, y.t, x.t, W.t, bias ? bt : none, tmp.t, &lm, slots, col0, ncols, k, NULL);
            grc |= gt_get(&y, ye, NULL);
            gt_poison(&y);
            bool rep = false;
            grc |= G->i.graph_begin(G, key, sizeof key, &rep);
            if (!rep)
                grc |= G->i.graph_end(
                    G, G->i.matmul_lora(G, y.t, x.t, W.t, bias ? bt : none, tmp.t, &lm, slots, col0, ncols, k, NULL) == 0);
            else
                grc |= G->i.graph_end(G, true);
            grc |= gt_get(&y, yg, NULL);
            reps += rep;
            same += memcmp(ye, yg, n * 4) == 0;
        }
        G->i.graph_reset(G);
        snprintf(cas, sizeof cas, "%s T%d%s replay==eager %d/3", name, T, stored ? " store" : "", same);
        record("graph", cas, dt, 3 - same, 0, grc == 0 && reps == 2);
        free(ye), free(yg);
    }
    for (int i = 0; i < n_segs * k; i++) free(B[i]);
    free(B), free(w), free(indptr), free(hpool), free(b), free(gy), free(gtmp), free(gtmp2), free(ry);
    G->i.dealloc(G, pool), G->i.dealloc(G, dw), G->i.dealloc(G, dind), G->i.dealloc(G, db);
    gt_free(&x), gt_free(&W), gt_free(&y), gt_free(&tmp), gt_free(&tmp2);
}

static void mlora_rope_check(lg_dtype dt, const char *cas, gt *yg, lg_tensor x, lg_tensor W, lg_tensor b,
                             lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0,
                             const int *ncols, float *ry)
{
    const lg_tensor y = yg->t;
    const int T = (int)y.rows, N = (int)y.cols, nh = mlora_rope.nh, nkv = mlora_rope.nkv, hd = mlora_rope.hd;
    const int qd = nh * hd, kvd = nkv * hd;
    rope_fix f = rope_fix_new(dt, T, nkv, hd);
    const lg_rope_kv rk1 = {f.dpos, f.dinv, nh, nkv, hd, f.kv1, f.dslot};
    /* the op with rope, then the op without it and rope_kv_write on the copy of the pages */
    const unsigned long r0 = lg_cuda_lora_rope_launches();
    gt_poison(yg);
    int rc = G->i.matmul_lora(G, y, x, W, b, tmp, lm, slots, col0, ncols, 3, &rk1);
    const int fused = lg_cuda_lora_rope_launches() != r0;
    const size_t n = (size_t)T * N;
    float *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    int g = gt_get(yg, g1, NULL);
    gt_poison(yg);
    rc |= G->i.matmul_lora(G, y, x, W, b, tmp, lm, slots, col0, ncols, 3, NULL);
    rc |= G->i.rope_kv_write(G, lg_tensor_cols(y, 0, qd), lg_tensor_cols(y, qd, kvd), lg_tensor_cols(y, qd + kvd, kvd),
                             f.dpos, f.dinv, nh, nkv, hd, f.kv2, f.dslot);
    g |= gt_get(yg, g2, NULL);
    const int same = memcmp(g1, g2, n * 4) == 0 && dev_same(f.p1, f.p2, f.pool_bytes);
    lg_tensor hq = {ry, LG_F32, T, qd, N}, hk = {ry + qd, LG_F32, T, kvd, N};
    C->i.rope(C, hq, hk, f.pos, f.inv, nh, nkv, hd);
    char c2[96];
    snprintf(c2, sizeof c2, "%s rope h%d/%d hd%d %s ==ops %s", cas, nh, nkv, hd, fused ? "fused" : "two ops",
             same ? "yes" : "NO");
    record("matmul_lora", c2, dt, rel_l2(g1, ry, n), lim_for(dt), rc == 0 && g == 0 && same && fused == mlora_rope.fused);
    rope_fix_free(&f);
    free(g1), free(g2);
}

/* The whole buffer of b (guards, gaps and view) as the device holds it. */
static unsigned char *gt_raw(gt *b)
{
    unsigned char *d = malloc(b->bytes);
    if (G->i.sync(G) != 0 || G->i.download(G, d, b->base, b->bytes) != 0)
        memset(d, 0x5A, b->bytes), d[0] ^= 1; /* differs from any image */
    return d;
}
static int gt_same(gt *a, gt *b)
{
    return a->bytes == b->bytes && G->i.sync(G) == 0 && dev_same(a->base, b->base, a->bytes);
}

static void mlora_norm_check(lg_dtype dt, const char *cas, int T, int K, int N, int R, lg_tensor W, lg_tensor b,
                             const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k)
{
    char c2[112];
    if (!G->i.norm_matmul_lora) {
        record("norm_matmul_lora", "slot missing (LG_FUSE_LORA=0)", dt, 0, 0, 1);
        return;
    }
    const lg_tensor none = {0};
    gt r1 = gt_new(dt, T, K, 8), r2 = gt_new(dt, T, K, 8), d = gt_new(dt, T, K, 8), ro = gt_new(dt, T, K, 8);
    gt x1 = gt_new(dt, T, K, 8), x2 = gt_new(dt, T, K, 8), y1 = gt_new(dt, T, N, 8), y2 = gt_new(dt, T, N, 8);
    gt t1 = gt_new(LG_F32, T, k * R, 0), t2 = gt_new(LG_F32, T, k * R, 0);
    gt_set(&r1, NULL, 2.0f);
    gt_set(&r2, r1.f, 1.0f);
    gt_set(&d, NULL, 1.0f);
    gt *po[] = {&ro, &x1, &x2, &y1, &y2, &t1, &t2};
    for (size_t i = 0; i < sizeof po / sizeof po[0]; i++) gt_poison(po[i]);
    unsigned char *r0 = gt_raw(&r1);
    float *g = malloc((size_t)K * 4);
    for (int i = 0; i < K; i++) g[i] = 1.0f + 0.25f * frand();
    float *dg = G->i.alloc(G, (size_t)K * 4);
    G->i.upload(G, dg, g, (size_t)K * 4);
    const lg_tensor gw = lg_tensor_2d(dg, LG_F32, 1, K);
    const int rope = mlora_rope.hd > 0, nh = mlora_rope.nh, nkv = mlora_rope.nkv, hd = mlora_rope.hd;
    rope_fix f;
    lg_rope_kv rk1, rk2;
    if (rope) {
        f = rope_fix_new(dt, T, nkv, hd);
        rk1 = (lg_rope_kv){f.dpos, f.dinv, nh, nkv, hd, f.kv1, f.dslot};
        rk2 = rk1;
        rk2.kv = f.kv2;
    }
    const float eps = 1e-5f;
    const lg_norm_in nm = {r1.t, mlora_norm_delta ? d.t : none, gw, ro.t, eps};
    const unsigned long n0 = lg_cuda_lora_norm_launches();
    const int rc = G->i.norm_matmul_lora(G, &nm, y1.t, x1.t, W, b, t1.t, lm, slots, col0, ncols, k, rope ? &rk1 : NULL);
    const int taken = lg_cuda_lora_norm_launches() != n0;
    int ok = mlora_norm == 2 || taken == mlora_norm, same = 0;
    if (rc == 1) { /* not taken: nothing written */
        gt *un[][2] = {{&ro, &x2}, {&x1, &x2}, {&y1, &y2}, {&t1, &t2}}; /* each against an untouched twin */
        same = !taken;
        for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) same &= gt_same(un[i][0], un[i][1]);
    } else {
        ok &= rc == 0;
        ok &= G->i.add_rmsnorm(G, r2.t, mlora_norm_delta ? d.t : none, gw, x2.t, eps) == 0;
        ok &= G->i.matmul_lora(G, y2.t, x2.t, W, b, t2.t, lm, slots, col0, ncols, k, rope ? &rk2 : NULL) == 0;
        same = gt_same(&x1, &x2) && (mlora_norm_delta ? gt_same(&ro, &r2) : 1);
        if (lora_a_off) { /* A unaligned: the norm form's 2-byte loads sum in chunk order, within rounding */
            float *g1 = malloc((size_t)T * N * 4), *g2 = malloc((size_t)T * N * 4);
            same &= gt_get(&y1, g1, NULL) == 0 && gt_get(&y2, g2, NULL) == 0 &&
                    rel_l2(g1, g2, (size_t)T * N) < lim_for(dt);
            free(g1), free(g2);
        } else {
            same &= gt_same(&y1, &y2) && gt_same(&t1, &t2);
        }
        unsigned char *r1d = gt_raw(&r1);
        same &= memcmp(r0, r1d, r1.bytes) == 0; /* resid is not written */
        free(r1d);
        if (rope)
            same &= dev_same(f.p1, f.p2, f.pool_bytes);
    }
    snprintf(c2, sizeof c2, "%s%s%s: %s, ==ops %s", cas, rope ? " rope" : "", mlora_norm_delta ? "" : " no delta",
             taken ? "norm form" : rc == 1 ? "not taken" : "two ops", same ? "yes" : "NO");
    record("norm_matmul_lora", c2, dt, 0, 0, ok && same);
    if (rope)
        rope_fix_free(&f);
    for (size_t i = 0; i < sizeof po / sizeof po[0]; i++) gt_free(po[i]);
    gt_free(&r1), gt_free(&r2), gt_free(&d);
    G->i.dealloc(G, dg);
    free(g), free(r0);
}

/* matmul_lora with rope (the q,k,v form of a layer): decode steps take the expand's rope form
 * (ranks 0..16 with an odd one: the expand's element path; max_rank 64: 256-column blocks;
 * GQA, head_dim 64 and 128; a token without a cache row); segments of several tokens and a
 * head_dim the column blocks do not hold whole run the two ops. */
static void test_matmul_lora_rope(lg_dtype dt)
{
    int one[128], r16[128], mixed[128], r64[128], len2[] = {1, 2, 1, 3}, r2[] = {16, 8, 16, 0};
    for (int i = 0; i < 128; i++)
        one[i] = 1, r16[i] = 16, r64[i] = i == 1 ? 64 : 16, mixed[i] = (int[]){16, 8, 0, 13, 16, 8}[i % 6];
    const struct { int nh, nkv, hd, fused, T, K; const int *len, *rank; const char *name; } cs[] = {
        {8, 8, 128, 1, 32, 512, one, r16, "decode"},         /* W1's shape, 1,024-column blocks */
        {12, 4, 64, 1, 7, 256, one, mixed, "decode mixed"},  /* GQA, hd 64, ranks 0/8/13/16 */
        {16, 4, 128, 1, 5, 256, one, r64, "decode r64"},     /* max_rank 64: 256-column blocks */
        {12, 4, 64, 0, 7, 256, len2, r2, "segments"},        /* max_seg 3: the two ops */
        {4, 2, 320, 0, 3, 256, one, r16, "hd320"},           /* hd > the rope form's 256 */
        {32, 32, 128, 1, 128, 512, one, mixed, "decode 128"}, /* W2's shape: 1,536 blocks, several waves */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        mlora_rope.nh = cs[i].nh, mlora_rope.nkv = cs[i].nkv, mlora_rope.hd = cs[i].hd, mlora_rope.fused = cs[i].fused;
        const int nc[3] = {cs[i].nh * cs[i].hd, cs[i].nkv * cs[i].hd, cs[i].nkv * cs[i].hd};
        const int ns = cs[i].len == len2 ? 4 : cs[i].T;
        /* decode steps take the norm form; at 128 tokens it depends on how many of its blocks are resident
         * at once */
        mlora_norm = cs[i].len == one ? (cs[i].T <= 64 ? 1 : 2) : 0; /* 2: either, by resident blocks */
        test_matmul_lora_case(dt, cs[i].name, ns, cs[i].len, cs[i].rank, cs[i].K, 3, nc, i == 1, 0, 0);
    }
    mlora_norm = -1;
    mlora_rope.hd = 0;
}

static void test_matmul_lora(lg_dtype dt)
{
    if (!G->i.matmul_lora) {
        record("matmul_lora", "slot missing (LG_FUSE_LORA=0)", dt, 0, 0, 1);
        return;
    }
    int one[64], r16[64], mixed[64], len3[] = {3, 1, 2, 4, 7}, r3[] = {16, 8, 0, 13, 16};
    for (int i = 0; i < 64; i++) one[i] = 1, r16[i] = 16, mixed[i] = (int[]){16, 8, 0, 32, 16, 4, 64, 16}[i % 8];
    const int qkv[] = {512, 128, 128}, gu[] = {1024, 1024}, o[] = {512}, odd[] = {520};
    int l70[] = {40, 30}, r70[] = {16, 8};
    /* shrink, matmul, expand kernel; and norm_matmul_lora on the same inputs: its norm form in decode
     * steps (one-token segments) */
    mlora_norm = 1;
    test_matmul_lora_case(dt, "side decode", 32, one, r16, 1024, 3, qkv, 1, 0, 0);
    mlora_norm = 2; /* 1,024 blocks: one wave on a GPU of 205 or more SMs */
    test_matmul_lora_case(dt, "side decode", 32, one, mixed, 512, 2, gu, 0, 0, 0); /* ranks 0..64 */
    test_matmul_lora_case(dt, "side decode", 64, one, mixed, 2048, 1, o, 0, 0, 0); /* 64 rows, split-K */
    mlora_norm = 0;
    test_matmul_lora_case(dt, "side ragged", 5, len3, r3, 520, 3, qkv, 1, 0, 0);   /* segments of 1..7, rank 13 */
    mlora_norm = 1;
    test_matmul_lora_case(dt, "side unfused", 7, one, r16, 512, 1, odd, 0, 0, 0);  /* range not whole tiles */
    mlora_norm = 1, mlora_norm_delta = 0;
    test_matmul_lora_case(dt, "side gemv", 2, one, r16, 1024, 3, qkv, 1, 0, 0);    /* T = 2: GEMV + expand */
    mlora_norm = 0, mlora_norm_delta = 1;
    test_matmul_lora_case(dt, "side cublas", 2, l70, r70, 256, 3, qkv, 0, 0, 0);   /* T = 70: cuBLAS + expand */
    mlora_norm = -1;
    { /* the norm form's row widths: 4,104 (chunks past 512 a thread), 8,192 (the widest), 8,200 (not taken) */
        const int o1[] = {256};
        mlora_norm = 1;
        test_matmul_lora_case(dt, "norm K4104", 8, one, mixed, 4104, 1, o1, 0, 0, 0);
        test_matmul_lora_case(dt, "norm K8192", 3, one, r16, 8192, 1, o1, 1, 0, 0);
        lora_a_off = 2;
        test_matmul_lora_case(dt, "norm A unaligned", 8, one, mixed, 1024, 1, o1, 0, 0, 0);
        lora_a_off = 0, mlora_norm = 0;
        test_matmul_lora_case(dt, "norm K8200", 3, one, r16, 8200, 1, o1, 0, 0, 0);
        const int qkv64[] = {256, 128, 128}; /* 64 x 16 x 3 = 3,072 blocks: more than one wave anywhere */
        test_matmul_lora_case(dt, "norm waves", 64, one, mixed, 1024, 3, qkv64, 0, 0, 0);
        mlora_norm = -1;
    }
    /* prefill: the expand stores y, then cuBLAS adds x W^T (beta = 1), unless switched off (LG_LORA_FIRST=0) */
    const int on = !sgmv_forced_off() && G->tune.lora_first != 0;
    int l24[24], r24[24], l96[3] = {96, 40, 120}, r96[3] = {16, 0, 8};
    for (int i = 0; i < 24; i++) l24[i] = 96, r24[i] = (int[]){16, 8, 0, 16, 13, 16}[i % 6];
    const int pq[] = {2048, 512, 512}, pv[] = {2048, 512}, po[] = {4096};
    /* default thresholds: 72 tiles x 4 column blocks = 288 >= 2 blocks per SM up to 144 SMs (H100, H200: 132) */
    test_matmul_lora_case(dt, "prefill qkv", 24, l24, r24, 256, 3, pq, 0, 0, on);
    test_matmul_lora_case(dt, "prefill q,v gaps", 24, l24, r24, 256, 2, pv, 1, 512, -1);
    test_matmul_lora_case(dt, "prefill o", 24, l24, r24, 256, 1, po, 0, 0, on);
    for (int tpb = 2; tpb <= 4; tpb += 2) { /* the store form's blocks of 2 and 4 token tiles (by size: 1 here) */
        char sfx[16];
        snprintf(sfx, sizeof sfx, " tpb%d", tpb);
        G->tune.exm_tpb = tpb;
        case_sfx = sfx;
        test_matmul_lora_case(dt, "prefill qkv", 24, l24, r24, 256, 3, pq, 0, 0, on);
        test_matmul_lora_case(dt, "prefill o", 24, l24, r24, 256, 1, po, 0, 0, on);
        if (!sgmv_forced_off()) { /* segments of 96, 40 and 120 tokens: a block's later tiles partial or absent */
            G->tune.sgmv_prefill = 2;
            test_matmul_lora_case(dt, "prefill ragged tiles", 3, l96, r96, 256, 3, pq, 0, 0, on);
            G->tune.sgmv_prefill = env_tune.sgmv_prefill;
        }
    }
    G->tune.exm_tpb = env_tune.exm_tpb;
    case_sfx = "";
    if (!sgmv_forced_off()) { /* the tile expand forced on (any grid): small and odd shapes in the store order */
        G->tune.sgmv_prefill = 2;
        int r32[3] = {32, 0, 64};
        test_matmul_lora_case(dt, "prefill gaps forced", 3, l96, r96, 256, 2, pv, 1, 512, on);
        test_matmul_lora_case(dt, "prefill odd forced", 3, l96, r32, 520, 1, odd, 1, 3, on); /* ranks 32, 64 */
        test_matmul_lora_case(dt, "ragged forced", 5, len3, r3, 520, 3, qkv, 1, 0, on);      /* T 17: decode matmul */
        mlora_graph = 1; /* step graphs: the store order (prefill chunks of a recorded step) and decode */
        test_matmul_lora_case(dt, "graph prefill", 3, l96, r96, 256, 3, pq, 1, 0, on);
        test_matmul_lora_case(dt, "graph decode", 32, one, r16, 1024, 3, qkv, 1, 0, 0);
        mlora_graph = 0;
        G->tune.sgmv_prefill = env_tune.sgmv_prefill;
    }
    test_matmul_lora_rope(dt);
}

/* rope_kv_write (kernels/rope_kv.cu) against the GPU's own rope + kv_write (bit for bit: the
 * contract) and the CPU's; slot -1 tokens write no cache row. */
static void test_rope_kv(lg_dtype dt)
{
    if (!G->i.rope_kv_write) {
        record("rope_kv", "slot missing (LG_FUSE_ROPE_KV=0)", dt, 0, 0, 1);
        return;
    }
    const int cases[][4] = {{7, 8, 2, 64}, {32, 32, 32, 128}, {5, 12, 4, 80}}; /* T, nh, nkv, hd */
    for (int ci = 0; ci < 3; ci++) {
        const int T = cases[ci][0], nh = cases[ci][1], nkv = cases[ci][2], hd = cases[ci][3];
        const int qd = nh * hd, kvd = nkv * hd, Wd = qd + 2 * kvd;
        gt a = gt_new(dt, T, Wd, 8), b = gt_new(dt, T, Wd, 8);
        gt_set(&a, NULL, 1.0f);
        gt_set(&b, a.f, 1.0f);
        rope_fix f = rope_fix_new(dt, T, nkv, hd);
        lg_tensor qa = lg_tensor_cols(a.t, 0, qd), ka = lg_tensor_cols(a.t, qd, kvd), va = lg_tensor_cols(a.t, qd + kvd, kvd);
        lg_tensor qb = lg_tensor_cols(b.t, 0, qd), kb = lg_tensor_cols(b.t, qd, kvd), vb = lg_tensor_cols(b.t, qd + kvd, kvd);
        int rc = G->i.rope_kv_write(G, qa, ka, va, f.dpos, f.dinv, nh, nkv, hd, f.kv1, f.dslot);
        rc |= G->i.rope(G, qb, kb, f.dpos, f.dinv, nh, nkv, hd);
        rc |= G->i.kv_write(G, f.kv2, kb, vb, f.dslot, T);
        size_t n = (size_t)T * Wd;
        float *ga = malloc(n * 4), *gb = malloc(n * 4), *ref = fdup(a.f, n);
        int g = gt_get(&a, ga, NULL) | gt_get(&b, gb, NULL);
        const int same = memcmp(ga, gb, n * 4) == 0 && dev_same(f.p1, f.p2, f.pool_bytes);
        lg_tensor hq = {ref, LG_F32, T, qd, Wd}, hk = {ref + qd, LG_F32, T, kvd, Wd};
        C->i.rope(C, hq, hk, f.pos, f.inv, nh, nkv, hd);
        char cas[48];
        snprintf(cas, sizeof cas, "T%d h%d/%d hd%d ==rope+kv_write %s", T, nh, nkv, hd, same ? "yes" : "NO");
        record("rope_kv", cas, dt, rel_l2(ga, ref, n), lim_for(dt), rc == 0 && g == 0 && same);
        rope_fix_free(&f);
        free(ga), free(gb), free(ref);
        gt_free(&a), gt_free(&b);
    }
}

/* Rounds n floats through dt in place (what a GPU op stores between two ops). */
static void round_dt(float *v, size_t n, lg_dtype dt)
{
    void *h = malloc(n * esz(dt));
    lg_from_f32(h, dt, v, n);
    lg_to_f32(v, h, dt, n);
    free(h);
}

/* The separate ops' matmul as the GEMV runs it, the kernel norm_matmul fuses (the ==ops contract): on
 * Hopper 2-row matmuls otherwise go to the TMA matmul, whose sums differ in the last bits. */
static int gemv_matmul(lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor b)
{
    G->tune.gemv = 11; /* the GEMV forced, variant 1 (norm_matmul's) */
    const int rc = G->i.matmul(G, y, x, W, b, false);
    G->tune.gemv = env_tune.gemv;
    return rc;
}
/* norm_matmul (kernels/norm_matmul.cu) against the GPU's own add_rmsnorm + matmul (+ silu_mul), bit
 * for bit (the contract), and the CPU's; rout must hold resid + delta and resid stay as it was. A
 * shape the op does not take must return 1 and write nothing. */
static void test_norm_matmul(lg_dtype dt, int T, int K, int N, int silu, int with_delta, int bias, int wpad, int g16,
                             int taken)
{
    if (!G->i.norm_matmul) {
        record("norm_matmul", "slot missing (LG_FUSE_NORM=0)", dt, 0, 0, 1);
        return;
    }
    const int F = silu ? N / 2 : N;
    gt resid = gt_new(dt, T, K, 16), delta = gt_new(dt, T, K, 0), rout = gt_new(dt, T, K, 8);
    gt r2 = gt_new(dt, T, K, 16), xn = gt_new(dt, T, K, 0), W = gt_new(dt, N, K, wpad);
    gt y = gt_new(dt, T, F, 8), y2 = gt_new(dt, T, N, 0), a2 = gt_new(dt, T, F, 0);
    gt_set(&resid, NULL, 2.0f);
    gt_set(&delta, NULL, 1.0f);
    gt_set(&r2, resid.f, 1.0f);
    gt_set(&W, NULL, 0.05f);
    gt_poison(&rout), gt_poison(&y), gt_poison(&y2), gt_poison(&a2), gt_poison(&xn);
    float *w = malloc(K * 4), *b = malloc(N * 4);
    for (int i = 0; i < K; i++) w[i] = 1.0f + 0.5f * frand();
    for (int i = 0; i < N; i++) b[i] = 0.5f * frand();
    /* norm weights f32, or f16 (rounded here so the CPU sees the same values) */
    const lg_dtype gdt = g16 ? LG_F16 : LG_F32;
    if (g16)
        round_dt(w, K, LG_F16);
    void *hw = malloc((size_t)K * 4), *dw = G->i.alloc(G, (size_t)K * 4);
    lg_from_f32(hw, gdt, w, K);
    float *db = G->i.alloc(G, N * 4);
    G->i.upload(G, dw, hw, (size_t)K * esz(gdt));
    G->i.upload(G, db, b, N * 4);
    free(hw);
    lg_tensor none = {0}, wt = lg_tensor_2d(dw, gdt, 1, K), bt = bias ? lg_tensor_2d(db, LG_F32, 1, N) : none;
    lg_tensor dl = with_delta ? delta.t : none;
    char cas[48];
    snprintf(cas, sizeof cas, "T%d K%d N%d%s%s%s%s%s", T, K, N, silu ? " silu" : "", with_delta ? " +d" : "",
             bias ? " bias" : "", wpad ? " ldw" : "", g16 ? " g16" : "");
    const int rc = G->i.norm_matmul(G, y.t, resid.t, dl, wt, 1e-5f, rout.t, W.t, bt, silu, NULL);
    size_t ny = (size_t)T * F, nk = (size_t)T * K, nn = (size_t)T * N;
    float *gy = malloc(ny * 4), *g2 = malloc(ny * 4), *gy2 = malloc(nn * 4), *gr = malloc(nk * 4),
          *gro = malloc(nk * 4), *gr2 = malloc(nk * 4);
    if (!taken) { /* not taken: 1, y untouched (still poison: gt_get fails on NaN) */
        snprintf(cas + strlen(cas), sizeof cas - strlen(cas), " not taken");
        record("norm_matmul", cas, dt, 0, 0, rc == 1 && gt_get(&y, gy, NULL) != 0 && gt_get(&rout, gro, NULL) != 0);
    } else {
        int rc2 = G->i.add_rmsnorm(G, r2.t, dl, wt, xn.t, 1e-5f);
        rc2 |= gemv_matmul(y2.t, xn.t, W.t, bt);
        if (silu)
            rc2 |= G->i.silu_mul(G, a2.t, y2.t);
        int g = gt_get(&y, gy, NULL) | gt_get(&resid, gr, NULL) | gt_get(&r2, gr2, NULL) |
                gt_get(silu ? &a2 : &y2, silu ? g2 : gy2, NULL);
        if (with_delta)
            g |= gt_get(&rout, gro, NULL);
        const int same = memcmp(gy, silu ? g2 : gy2, ny * 4) == 0 && memcmp(gr, resid.f, nk * 4) == 0 &&
                         (!with_delta || memcmp(gro, gr2, nk * 4) == 0);
        /* CPU: the same ops, each result rounded to dt as the GPU stores it */
        float *rr = fdup(resid.f, nk), *ro = calloc(nk, 4), *ry = calloc(nn, 4), *ra = calloc(ny, 4);
        C->i.add_rmsnorm(C, host_t(rr, T, K), with_delta ? host_t(delta.f, T, K) : none, host_t(w, 1, K),
                         host_t(ro, T, K), 1e-5f);
        round_dt(ro, nk, dt);
        C->i.matmul(C, host_t(ry, T, N), host_t(ro, T, K), host_t(W.f, N, K), bias ? host_t(b, 1, N) : none, false);
        if (silu) {
            round_dt(ry, nn, dt);
            C->i.silu_mul(C, host_t(ra, T, F), host_t(ry, T, N));
        }
        snprintf(cas + strlen(cas), sizeof cas - strlen(cas), " ==ops %s", same ? "yes" : "NO");
        /* a handful of outputs (N 22 with SwiGLU: 11): one value's roundings dominate their relative
         * L2 (1.35e-3 in f16 on one draw, 2026-11-23, bit-equal to the ops); the contract is ==ops */
        const double lim = lim_for(dt) * (ny < 64 ? 2 : 1);
        record("norm_matmul", cas, dt, rel_l2(gy, silu ? ra : ry, ny), lim, rc == 0 && rc2 == 0 && g == 0 && same);
        free(rr), free(ro), free(ry), free(ra);
    }
    G->i.dealloc(G, dw), G->i.dealloc(G, db);
    free(w), free(b), free(gy), free(g2), free(gy2), free(gr), free(gro), free(gr2);
    gt_free(&resid), gt_free(&delta), gt_free(&rout), gt_free(&r2), gt_free(&xn), gt_free(&W), gt_free(&y);
    gt_free(&y2), gt_free(&a2);
}

/* norm_matmul's q,k,v form (rope: the GEMV's rope + KV write epilogue, kernels/gemv.cuh) against
 * the GPU's own add_rmsnorm + matmul + rope_kv_write, bit for bit (y and both KV pools), and the
 * CPU's add_rmsnorm + matmul + rope within the usual limit; slot -1 writes no cache row. */
static void test_norm_matmul_rope(lg_dtype dt, int T, int nh, int nkv, int hd, int with_delta, int bias)
{
    if (!G->i.norm_matmul) {
        record("norm_rope", "slot missing (LG_FUSE_NORM=0)", dt, 0, 0, 1);
        return;
    }
    const int K = 1024, qd = nh * hd, kvd = nkv * hd, N = qd + 2 * kvd, pt = 16, n_pages = 6;
    gt resid = gt_new(dt, T, K, 16), delta = gt_new(dt, T, K, 0), rout = gt_new(dt, T, K, 8);
    gt r2 = gt_new(dt, T, K, 16), xn = gt_new(dt, T, K, 0), W = gt_new(dt, N, K, 0);
    gt y = gt_new(dt, T, N, 8), y2 = gt_new(dt, T, N, 0);
    gt_set(&resid, NULL, 2.0f);
    gt_set(&delta, NULL, 1.0f);
    gt_set(&r2, resid.f, 1.0f);
    gt_set(&W, NULL, 0.05f);
    gt_poison(&rout), gt_poison(&y), gt_poison(&y2), gt_poison(&xn);
    float *w = malloc(K * 4), *b = malloc(N * 4), inv[512];
    for (int i = 0; i < K; i++) w[i] = 1.0f + 0.5f * frand();
    for (int i = 0; i < N; i++) b[i] = 0.5f * frand();
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / hd);
    int32_t pos[2], slot[2];
    for (int t = 0; t < T; t++) pos[t] = 100 + irand(3000), slot[t] = t == 1 ? -1 : 3 * pt + 5; /* row 1: no slot */
    float *dw = G->i.alloc(G, K * 4), *db = G->i.alloc(G, N * 4), *dinv = G->i.alloc(G, hd * 2);
    G->i.upload(G, dw, w, K * 4);
    G->i.upload(G, db, b, N * 4);
    G->i.upload(G, dinv, inv, hd * 2);
    int32_t *dpos = dev_i32(pos, T), *dslot = dev_i32(slot, T);
    const size_t es = esz(dt), blk = (size_t)pt * kvd * es, pb = 4 * blk; /* 2 layers: K, V, K, V */
    const size_t pool_el = (size_t)n_pages * pb / es;
    void *p1 = dev_rand(dt, pool_el, 1.0f), *p2 = G->i.alloc(G, pool_el * es);
    G->i.copy(G, p2, p1, pool_el * es);
    lg_kv_view kv1 = {p1, pb, 2 * blk, 3 * blk, pt, nkv, hd, dt, 0, 0, 1, 1}, kv2 = kv1;
    kv2.base = p2;
    lg_tensor none = {0}, wt = lg_tensor_2d(dw, LG_F32, 1, K), bt = bias ? lg_tensor_2d(db, LG_F32, 1, N) : none;
    lg_tensor dl = with_delta ? delta.t : none;
    const lg_rope_kv rk = {dpos, dinv, nh, nkv, hd, kv1, dslot};
    const int rc = G->i.norm_matmul(G, y.t, resid.t, dl, wt, 1e-5f, rout.t, W.t, bt, false, &rk);
    int rc2 = G->i.add_rmsnorm(G, r2.t, dl, wt, xn.t, 1e-5f);
    rc2 |= gemv_matmul(y2.t, xn.t, W.t, bt);
    rc2 |= G->i.rope_kv_write(G, lg_tensor_cols(y2.t, 0, qd), lg_tensor_cols(y2.t, qd, kvd),
                              lg_tensor_cols(y2.t, qd + kvd, kvd), dpos, dinv, nh, nkv, hd, kv2, dslot);
    const size_t ny = (size_t)T * N, nk = (size_t)T * K;
    float *gy = malloc(ny * 4), *gy2 = malloc(ny * 4), *gro = malloc(nk * 4), *gr2 = malloc(nk * 4);
    int g = gt_get(&y, gy, NULL) | gt_get(&y2, gy2, NULL) | gt_get(&r2, gr2, NULL);
    if (with_delta)
        g |= gt_get(&rout, gro, NULL);
    const int same = memcmp(gy, gy2, ny * 4) == 0 && dev_same(p1, p2, pool_el * es) &&
                     (!with_delta || memcmp(gro, gr2, nk * 4) == 0);
    /* CPU: add_rmsnorm, matmul, rope, each result rounded to dt as the GPU stores it */
    float *rr = fdup(resid.f, nk), *ro = calloc(nk, 4), *ry = calloc(ny, 4);
    C->i.add_rmsnorm(C, host_t(rr, T, K), with_delta ? host_t(delta.f, T, K) : none, host_t(w, 1, K), host_t(ro, T, K),
                     1e-5f);
    round_dt(ro, nk, dt);
    C->i.matmul(C, host_t(ry, T, N), host_t(ro, T, K), host_t(W.f, N, K), bias ? host_t(b, 1, N) : none, false);
    round_dt(ry, ny, dt);
    lg_tensor hq = {ry, LG_F32, T, qd, N}, hk = {ry + qd, LG_F32, T, kvd, N};
    C->i.rope(C, hq, hk, pos, inv, nh, nkv, hd);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d h%d/%d hd%d%s%s ==ops %s", T, nh, nkv, hd, with_delta ? " +d" : "",
             bias ? " bias" : "", same ? "yes" : "NO");
    record("norm_rope", cas, dt, rel_l2(gy, ry, ny), lim_for(dt), rc == 0 && rc2 == 0 && g == 0 && same);
    G->i.dealloc(G, dw), G->i.dealloc(G, db), G->i.dealloc(G, dinv), G->i.dealloc(G, dpos), G->i.dealloc(G, dslot);
    G->i.dealloc(G, p1), G->i.dealloc(G, p2);
    free(w), free(b), free(gy), free(gy2), free(gro), free(gr2), free(rr), free(ro), free(ry);
    gt_free(&resid), gt_free(&delta), gt_free(&rout), gt_free(&r2), gt_free(&xn), gt_free(&W), gt_free(&y);
    gt_free(&y2);
}

/* ---- step graphs and multi-slot LoRA ------------------------------------------------ */

/* A one-layer decode step over the backend ops (embed .. logits), as
 * engine/model/model.c enqueues it; every per-step input sits in fixed device
 * buffers. Graph replays must give bit-identical logits to eager runs while
 * tokens, positions, kv lengths, pages and adapter weights change. */
typedef struct {
    lg_dtype dt;
    int S, d, nh, nkv, hd, V, R, pt, n_pages, multi;
    void *emb, *wqkv, *wo, *head, *ln, *pool, *lora_pool;
    void *x, *xn, *qkv, *attn, *o, *rows, *logits, *tmp;
    float *inv_freq;
    int32_t *meta;      /* device: tok[S] pos[S] slot[S] q_indptr[S+1] kv_len[S] page_indptr[S+1] logit_rows[S] page_ids[..] */
    int32_t *seg_dev, *seg_host;
    lg_lora_w *w_dev;
    int n_segs, max_pages;
    lg_step_meta m;
    lg_lora_meta lm;
} mini;

static int graph_kv8; /* test_graph's step over an e4m3 KV cache (k_scale 0.9, v_scale 1.1) */

static void *dev_rand(lg_dtype dt, size_t n, float amp)
{
    float *f = malloc(n * 4);
    void *h = malloc(n * esz(dt));
    for (size_t i = 0; i < n; i++) f[i] = frand() * amp;
    lg_from_f32(h, dt, f, n);
    void *d = G->i.alloc(G, n * esz(dt));
    G->i.upload(G, d, h, n * esz(dt));
    G->i.sync(G);
    free(f), free(h);
    return d;
}

static int mini_forward(mini *k)
{
    lg_backend *be = G;
    const int S = k->S, d = k->d, qd = k->nh * k->hd, kvd = k->nkv * k->hd, W = qd + 2 * kvd;
    lg_dtype a = k->dt;
    lg_tensor none = {0};
    lg_tensor x = lg_tensor_2d(k->x, a, S, d), xn = lg_tensor_2d(k->xn, a, S, d), qkv = lg_tensor_2d(k->qkv, a, S, W);
    lg_tensor q = lg_tensor_cols(qkv, 0, qd), kk = lg_tensor_cols(qkv, qd, kvd), v = lg_tensor_cols(qkv, qd + kvd, kvd);
    lg_tensor attn = lg_tensor_2d(k->attn, a, S, qd), o = lg_tensor_2d(k->o, a, S, d);
    lg_tensor ln = lg_tensor_2d(k->ln, LG_F32, 1, d), tmp = lg_tensor_2d(k->tmp, LG_F32, S, 3 * k->R);
    const lg_dtype kdt = graph_kv8 ? LG_F8E4M3 : a;
    size_t kv_block = (size_t)k->pt * kvd * esz(kdt);
    lg_kv_view kv = {k->pool, 2 * kv_block, 0, kv_block, k->pt, k->nkv, k->hd, kdt, 0, 0, graph_kv8 ? 0.9f : 1.0f,
                     graph_kv8 ? 1.1f : 1.0f};
    int rc = 0;
    rc |= be->i.embed(be, x, lg_tensor_2d(k->emb, a, k->V, d), k->m.tok);
    rc |= be->i.add_rmsnorm(be, x, none, ln, xn, 1e-5f);
    int slots[3] = {0, 1, 2};
    lg_tensor ys[3] = {q, kk, v};
    if (k->multi == 2) { /* the fused ops, as model.c runs them on CUDA */
        const int col0[3] = {0, qd, qd + kvd}, ncols[3] = {qd, kvd, kvd}, s3 = 3, c0 = 0;
        const lg_rope_kv rk = {k->m.pos, k->inv_freq, k->nh, k->nkv, k->hd, kv, k->m.slot};
        rc |= be->i.matmul_lora(be, qkv, xn, lg_tensor_2d(k->wqkv, a, W, d), none, tmp, &k->lm, slots, col0, ncols, 3,
                                &rk);
        rc |= be->i.attention(be, attn, q, kv, &k->m, k->nh, 1.0f / sqrtf((float)k->hd));
        rc |= be->i.matmul_lora(be, o, attn, lg_tensor_2d(k->wo, a, d, qd), none, tmp, &k->lm, &s3, &c0, &d, 1, NULL);
        goto tail;
    }
    rc |= be->i.matmul(be, qkv, xn, lg_tensor_2d(k->wqkv, a, W, d), none, false);
    if (k->multi) {
        rc |= be->i.lora_shrink_multi(be, tmp, xn, &k->lm, slots, 3);
        rc |= be->i.lora_expand_multi(be, ys, tmp, &k->lm, slots, 3);
    } else {
        for (int i = 0; i < 3; i++) {
            rc |= be->i.lora_shrink(be, tmp, xn, &k->lm, slots[i]);
            rc |= be->i.lora_expand(be, ys[i], tmp, &k->lm, slots[i]);
        }
    }
    rc |= be->i.rope(be, q, kk, k->m.pos, k->inv_freq, k->nh, k->nkv, k->hd);
    rc |= be->i.kv_write(be, kv, kk, v, k->m.slot, S);
    rc |= be->i.attention(be, attn, q, kv, &k->m, k->nh, 1.0f / sqrtf((float)k->hd));
    rc |= be->i.matmul(be, o, attn, lg_tensor_2d(k->wo, a, d, qd), none, false);
    rc |= be->i.lora_shrink(be, tmp, attn, &k->lm, 3);
    rc |= be->i.lora_expand(be, o, tmp, &k->lm, 3);
tail:
    rc |= be->i.add_rmsnorm(be, x, o, ln, xn, 1e-5f);
    lg_tensor rows = lg_tensor_2d(k->rows, a, S, d);
    rc |= be->i.get_rows(be, rows, xn, k->m.logit_rows, S);
    rc |= be->i.matmul(be, lg_tensor_2d(k->logits, LG_F32, S, k->V), rows, lg_tensor_2d(k->head, a, k->V, d), none,
                       false);
    return rc;
}

/* New per-step inputs: kv lengths in (lo, hi], fresh pages, tokens, adapter weights. */
static void mini_new_step(mini *k, int lo, int hi)
{
    const int S = k->S, pt = k->pt;
    int32_t *h = calloc(8 * S + 8 + k->max_pages, 4);
    int32_t *tok = h, *pos = tok + S, *slot = pos + S, *qi = slot + S, *kvl = qi + S + 1, *pi = kvl + S,
            *lr = pi + S + 1, *pids = lr + S;
    int *perm = malloc(k->n_pages * sizeof(int));
    for (int i = 0; i < k->n_pages; i++) perm[i] = i;
    for (int i = k->n_pages - 1; i > 0; i--) {
        int j = irand(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int pg = 0, max_kv = 0;
    for (int s = 0; s < S; s++) {
        int L = lo + 1 + irand(hi - lo), np = (L + pt - 1) / pt;
        if (L > max_kv) max_kv = L;
        qi[s] = s, pi[s] = pg, kvl[s] = L, lr[s] = s;
        for (int i = 0; i < np; i++) pids[pg + i] = perm[pg + i];
        tok[s] = irand(k->V), pos[s] = L - 1, slot[s] = pids[pg + (L - 1) / pt] * pt + (L - 1) % pt;
        pg += np;
    }
    qi[S] = S, pi[S] = pg;
    G->i.upload(G, k->meta, h, (size_t)(8 * S + 8 + k->max_pages) * 4);
    int32_t *dv = k->meta;
    k->m = (lg_step_meta){.n_tokens = S, .n_seqs = S, .max_q_len = 1, .max_kv_len = (hi + 255) / 256 * 256,
                          .tok = dv, .pos = dv + S, .slot = dv + 2 * S, .q_indptr = dv + 3 * S,
                          .kv_len = dv + 4 * S + 1, .page_indptr = dv + 5 * S + 1, .logit_rows = dv + 6 * S + 2,
                          .page_ids = dv + 7 * S + 2, .n_logits = S};
    (void)max_kv;
    /* adapters: each segment picks random rank-R weights for slots 0..3 out of 4 sets in lora_pool */
    const int n_slots = LG_LORA_N_MODULES, d = k->d, qd = k->nh * k->hd, kvd = k->nkv * k->hd;
    const int outs[4] = {qd, kvd, kvd, d}, ins[4] = {d, d, d, qd};
    lg_lora_w *w = calloc((size_t)k->n_segs * n_slots, sizeof *w);
    size_t es = esz(k->dt), set_bytes = (size_t)k->R * (d + qd) * es * 2 + (size_t)k->R * 4 * d * es;
    for (int s = 0; s < k->n_segs; s++)
        for (int m = 0; m < 4; m++) {
            lg_lora_w *x = &w[(size_t)s * n_slots + m];
            char *base = (char *)k->lora_pool + (size_t)irand(4) * set_bytes + (size_t)m * (set_bytes / 4);
            x->rank = (s == 1 && m == 2) ? 0 : k->R - 4 * irand(2); /* a rank-0 slot and mixed ranks */
            x->scale = 0.5f + 0.1f * (float)irand(4);
            x->A = base;
            x->B = base + (size_t)k->R * ins[m] * es;
            (void)outs;
        }
    G->i.upload(G, k->w_dev, w, (size_t)k->n_segs * n_slots * sizeof *w);
    free(w), free(h), free(perm);
}

/* one_tok: every token its own segment (a decode step of distinct adapters: the q,k,v expand's rope form) */
static void test_graph(lg_dtype dt, int one_tok)
{
    if (!G->i.graph_begin || !G->i.lora_shrink_multi) {
        record("graph", "slots missing", dt, 1, 0, 0);
        return;
    }
    mini k = {0};
    k.dt = dt, k.S = 6, k.d = 256, k.nh = 8, k.nkv = 2, k.hd = 64, k.V = 1000, k.R = 16, k.pt = 16;
    const int qd = k.nh * k.hd, kvd = k.nkv * k.hd, W = qd + 2 * kvd, S = k.S, d = k.d;
    k.max_pages = S * (512 / k.pt + 1);
    k.n_pages = k.max_pages + 13;
    k.emb = dev_rand(dt, (size_t)k.V * d, 1.0f);
    k.wqkv = dev_rand(dt, (size_t)W * d, 0.1f);
    k.wo = dev_rand(dt, (size_t)d * qd, 0.1f);
    k.head = dev_rand(dt, (size_t)k.V * d, 0.1f);
    if (graph_kv8) { /* random e4m3 codes, no NaN */
        const size_t nb = (size_t)k.n_pages * 2 * k.pt * kvd;
        uint8_t *hb = malloc(nb);
        for (size_t i = 0; i < nb; i++) {
            hb[i] = (uint8_t)(rnd() & 0xBF); /* |x| < 2 */
            if ((hb[i] & 0x7F) == 0x7F) hb[i] ^= 1;
        }
        k.pool = G->i.alloc(G, nb);
        G->i.upload(G, k.pool, hb, nb);
        G->i.sync(G);
        free(hb);
    } else {
        k.pool = dev_rand(dt, (size_t)k.n_pages * 2 * k.pt * kvd, 1.0f);
    }
    size_t set_bytes = (size_t)k.R * (d + qd) * esz(dt) * 2 + (size_t)k.R * 4 * d * esz(dt);
    k.lora_pool = dev_rand(dt, 4 * set_bytes / esz(dt) + 4096, 0.1f);
    {
        float ln[4096], inv[512];
        for (int i = 0; i < d; i++) ln[i] = 1.0f + 0.1f * frand();
        for (int i = 0; i < k.hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / k.hd);
        k.ln = G->i.alloc(G, d * 4);
        k.inv_freq = G->i.alloc(G, k.hd * 2);
        G->i.upload(G, k.ln, ln, d * 4);
        G->i.upload(G, k.inv_freq, inv, k.hd * 2);
    }
    size_t es = esz(dt);
    k.x = G->i.alloc(G, S * d * es), k.xn = G->i.alloc(G, S * d * es), k.qkv = G->i.alloc(G, S * W * es);
    k.attn = G->i.alloc(G, S * qd * es), k.o = G->i.alloc(G, S * d * es), k.rows = G->i.alloc(G, S * d * es);
    k.logits = G->i.alloc(G, (size_t)S * k.V * 4), k.tmp = G->i.alloc(G, S * 3 * k.R * 4);
    k.meta = G->i.alloc(G, (size_t)(8 * S + 8 + k.max_pages) * 4);
    /* segments: [0,1) [1,4) [4,6): a longest segment of 3 (the tiled kernels); or one token each */
    int32_t seg[7] = {0, 1, 4, 6}, seg1[7] = {0, 1, 2, 3, 4, 5, 6};
    if (one_tok)
        memcpy(seg, seg1, sizeof seg);
    k.n_segs = one_tok ? 6 : 3;
    k.seg_host = seg;
    k.seg_dev = dev_i32(seg, k.n_segs + 1);
    k.w_dev = G->i.alloc(G, (size_t)k.n_segs * LG_LORA_N_MODULES * sizeof(lg_lora_w));
    k.lm = (lg_lora_meta){k.n_segs, LG_LORA_N_MODULES, k.R, k.seg_dev, k.w_dev, k.seg_host, 0};

    size_t nl = (size_t)S * k.V;
    float *eager = malloc(nl * 4), *graph = malloc(nl * 4), *single = malloc(nl * 4), *multi = malloc(nl * 4);
    int n_same = 0, n_replayed = 0, n_multi_same = 0, rc_all = 0, finite = 1;
    double fused_err = 0;
    const int fused = G->i.matmul_lora && G->i.rope_kv_write; /* the eager/graph step runs them when present */
    const int n_steps = 6;
    const char key[] = "mini-step";
    for (int step = 0; step < n_steps; step++) {
        mini_new_step(&k, 100 + 20 * step, 250); /* one bucket (256): one recording */
        k.multi = fused ? 2 : 1;
        rc_all |= mini_forward(&k);
        rc_all |= G->i.download(G, eager, k.logits, nl * 4);
        bool replayed = false;
        rc_all |= G->i.graph_begin(G, key, sizeof key, &replayed);
        if (!replayed)
            rc_all |= G->i.graph_end(G, mini_forward(&k) == 0);
        else
            rc_all |= G->i.graph_end(G, true);
        rc_all |= G->i.download(G, graph, k.logits, nl * 4);
        n_replayed += replayed;
        n_same += memcmp(eager, graph, nl * 4) == 0;
        k.multi = 1;
        rc_all |= mini_forward(&k);
        rc_all |= G->i.download(G, multi, k.logits, nl * 4);
        k.multi = 0;
        rc_all |= mini_forward(&k);
        rc_all |= G->i.download(G, single, k.logits, nl * 4);
        n_multi_same += memcmp(multi, single, nl * 4) == 0;
        const double fe = rel_l2(eager, multi, nl); /* fused ops round y once: close, not equal */
        fused_err = isnan(fe) || fe > fused_err ? fe : fused_err;
        for (size_t i = 0; i < nl; i++) finite &= isfinite(eager[i]) != 0;
    }
    rc_all |= G->i.sync(G);
    char cas[64];
    const char *sg = one_tok ? ", 1-token segments" : "";
    snprintf(cas, sizeof cas, "replay==eager %d/%d steps%s", n_same, n_steps, sg);
    record("graph", cas, dt, n_steps - n_same, 0, rc_all == 0 && n_replayed == n_steps - 1 && finite);
    snprintf(cas, sizeof cas, "lora multi==single %d/%d%s", n_multi_same, n_steps, sg);
    record("lora_multi", cas, dt, n_steps - n_multi_same, 0, rc_all == 0);
    snprintf(cas, sizeof cas, "matmul_lora+rope_kv vs unfused%s", sg);
    if (fused)
        record("fused_step", cas, dt, fused_err, lim_for(dt) * 4, rc_all == 0);
    if (n_replayed != n_steps - 1)
        fprintf(stderr, "graph: %d replays, expected %d\n", n_replayed, n_steps - 1);
    G->i.graph_reset(G);
    void *bufs[] = {k.emb, k.wqkv, k.wo, k.head, k.pool, k.lora_pool, k.ln, k.inv_freq, k.x, k.xn, k.qkv, k.attn,
                    k.o, k.rows, k.logits, k.tmp, k.meta, k.seg_dev, k.w_dev};
    G->i.sync(G);
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) G->i.dealloc(G, bufs[i]);
    free(eager), free(graph), free(single), free(multi);
}

/* A decode attention launch recorded in a step graph under the key decode_kv_key gives for its max_kv_len,
 * then a step whose lengths need a larger max_kv_len: where the two keys are equal (model.c then replays the
 * recording) the replay must be bit for bit the eager launch at the larger max_kv_len. 64 rows of 32 kv heads
 * (MHA, head_dim 128): one chunk of the split form on any GPU of up to 256 SMs, so the keys must be equal;
 * batch 1 (the resident form, whose shared memory follows max_kv_len) must get distinct keys. */
static void test_graph_kv_key(lg_dtype dt)
{
    if (!G->i.graph_begin || !G->i.decode_kv_key) {
        record("graph", "kv key: slots missing", dt, 1, 0, 0);
        return;
    }
    const int T = 64, nh = 32, hd = 128, pt = 16, max_len = 320, per = (max_len + pt - 1) / pt, np = T * per;
    const int qd = nh * hd;
    const size_t es = esz(dt), kv_block = (size_t)pt * qd * es;
    void *pool = dev_rand(dt, (size_t)np * 2 * pt * qd, 1.0f), *q = dev_rand(dt, (size_t)T * qd, 0.5f);
    void *out = G->i.alloc(G, (size_t)T * qd * es);
    const lg_kv_view kv = {pool, 2 * kv_block, 0, kv_block, pt, nh, hd, dt, 0, 0, 1, 1};
    int32_t *h = malloc((size_t)(4 * T + 2 + np) * 4), *pos = h, *qi = pos + T, *pi = qi + T + 1, *pids = pi + T + 1;
    int32_t *meta = G->i.alloc(G, (size_t)(4 * T + 2 + np) * 4);
    lg_tensor tq = lg_tensor_2d(q, dt, T, qd), to = lg_tensor_2d(out, dt, T, qd);
    const size_t n = (size_t)T * qd * es;
    char *eager = malloc(n), *graph = malloc(n), *zero = calloc(1, n);
    const int lo[2] = {100, 200}, hi[2] = {144, 320};
    int keys[2], rc = 0, same[2] = {0, 0}, replayed_b = 0;
    for (int step = 0; step < 2; step++) {
        for (int s = 0; s < T; s++) {
            pos[s] = lo[step] + irand(hi[step] - lo[step]); /* length pos + 1 in (lo, hi] */
            qi[s] = s, pi[s] = s * per;
        }
        qi[T] = T, pi[T] = T * per;
        for (int i = 0; i < np; i++) pids[i] = (i * 7 + step) % np; /* pages scattered over the pool */
        G->i.upload(G, meta, h, (size_t)(4 * T + 2 + np) * 4);
        const lg_step_meta m = {.n_tokens = T, .n_seqs = T, .max_q_len = 1, .max_kv_len = hi[step], .pos = meta,
                                .q_indptr = meta + T, .page_indptr = meta + 2 * T + 1, .page_ids = meta + 3 * T + 2};
        keys[step] = G->i.decode_kv_key(G, T, nh, &kv, hi[step]);
        rc |= G->i.attention(G, to, tq, kv, &m, nh, 1.0f / sqrtf((float)hd));
        rc |= G->i.download(G, eager, out, n);
        G->i.upload(G, out, zero, n); /* the graph's run must write every output */
        bool replayed = false;
        rc |= G->i.graph_begin(G, &keys[step], sizeof keys[step], &replayed);
        if (!replayed)
            rc |= G->i.graph_end(G, G->i.attention(G, to, tq, kv, &m, nh, 1.0f / sqrtf((float)hd)) == 0);
        else
            rc |= G->i.graph_end(G, true);
        rc |= G->i.download(G, graph, out, n);
        same[step] = memcmp(eager, graph, n) == 0;
        replayed_b |= step == 1 && replayed;
    }
    const int r1 = G->i.decode_kv_key(G, 1, nh, &kv, 144), r2 = G->i.decode_kv_key(G, 1, nh, &kv, 320);
    rc |= G->i.sync(G);
    record("graph", "kv key: T64 replay at a longer max_kv_len == eager", dt, !same[0] + !same[1], 0,
           rc == 0 && keys[0] == keys[1] && replayed_b);
    record("graph", "kv key: batch 1 keys differ by max_kv_len", dt, r1 == r2, 0, rc == 0);
    if (keys[0] != keys[1] || !replayed_b)
        fprintf(stderr, "graph kv key: keys %d / %d, replayed %d\n", keys[0], keys[1], replayed_b);
    G->i.graph_reset(G);
    G->i.sync(G);
    G->i.dealloc(G, pool), G->i.dealloc(G, q), G->i.dealloc(G, out), G->i.dealloc(G, meta);
    free(h), free(eager), free(graph), free(zero);
}

/* ---- benchmarks ---------------------------------------------------------------------- */

#include <time.h>
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* Median of 5 runs of `iters` back-to-back launches; us per launch. */
static double bench_us(int (*fn)(void *), void *arg, int iters)
{
    double best[5];
    for (int i = 0; i < 3; i++) fn(arg);
    G->i.sync(G);
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int i = 0; i < iters; i++) fn(arg);
        G->i.sync(G);
        best[r] = (now_s() - t0) / iters * 1e6;
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (best[j] < best[i]) {
                double t = best[i];
                best[i] = best[j];
                best[j] = t;
            }
    return best[2];
}

typedef struct {
    lg_tensor y, x, W;
} mm_bench;
static int mm_fn(void *p)
{
    mm_bench *m = p;
    lg_tensor none = {0};
    return G->i.matmul(G, m->y, m->x, m->W, none, false);
}
static void bench_matmul(lg_dtype dt, int T, int N, int K)
{
    gt x = gt_new(dt, T, K, 0), W = gt_new(dt, N, K, 0), y = gt_new(dt, T, N, 0);
    gt_set(&x, NULL, 1.0f);
    gt_set(&W, NULL, 0.1f);
    mm_bench mb = {y.t, x.t, W.t};
    char cas[48];
    snprintf(cas, sizeof cas, "bench T%d N%d K%d", T, N, K);
    record("matmul", cas, dt, 0, 1, 1);
    rows[n_rows - 1].us = bench_us(mm_fn, &mb, 50);
    gt_free(&x), gt_free(&W), gt_free(&y);
}

/* ---- skinny matmul (T <= 4: kernels/gemv.cu) ----------------------------------------------
 * Each case runs twice: as the engine dispatches (on Hopper the TMA matmul for 2..4 rows, else gemv.cu
 * or cuBLAS by T and N) and with the
 * GEMV forced for every T <= 4 (G->tune.gemv = 11), so T = 3, 4 cover the kernel too.
 * y is a column slice [T, N] at column c0 of a [T, ytot] buffer (ytot > N: strided, unaligned
 * start when c0 is odd); columns outside the slice must come back bit for bit. xpad % 8 != 0
 * sends the call to cuBLAS (the fallback). bias: 0 none, 1 f32, 2 in the act dtype. */
static const char *gemv_op = "gemv";

static void test_gemv(lg_dtype dt, int T, int N, int K, int f32_out, int bias, int accumulate, int c0, int ytot,
                      int xpad)
{
    lg_dtype ydt = f32_out ? LG_F32 : dt;
    gt x = gt_new(dt, T, K, xpad), W = gt_new(dt, N, K, 0), y = gt_new(ydt, T, ytot, 0);
    gt_set(&x, NULL, 1.0f);
    gt_set(&W, NULL, 0.1f);
    gt_set(&y, NULL, 1.0f);
    size_t n = (size_t)T * ytot;
    float *ry = fdup(y.f, n);
    if (!accumulate) { /* poison the slice only */
        for (int t = 0; t < T; t++) memset(elem(&y, t, c0), 0xFF, (size_t)N * esz(ydt));
        G->i.upload(G, y.base, y.img, y.bytes);
    }
    lg_dtype bdt = bias == 2 ? dt : LG_F32;
    float *b = malloc(N * 4);
    for (int i = 0; i < N; i++) b[i] = frand();
    void *bh = malloc((size_t)N * 4);
    lg_from_f32(bh, bdt, b, N);
    lg_to_f32(b, bh, bdt, N);
    void *db = G->i.alloc(G, (size_t)N * 4);
    G->i.upload(G, db, bh, (size_t)N * esz(bdt));
    lg_tensor none = {0}, bt = lg_tensor_2d(db, bdt, 1, N);
    lg_tensor yv = lg_tensor_cols(y.t, c0, N);
    int rc = G->i.matmul(G, yv, x.t, W.t, bias ? bt : none, accumulate);
    float *gy = malloc(n * 4);
    int g = gt_get(&y, gy, NULL);
    lg_tensor ryv = {ry + c0, LG_F32, T, N, ytot};
    C->i.matmul(C, ryv, host_t(x.f, T, K), host_t(W.f, N, K), bias ? host_t(b, 1, N) : none, accumulate);
    int outside = 0; /* columns outside the slice: untouched, exactly */
    for (int t = 0; t < T; t++)
        for (int j = 0; j < ytot; j++)
            if ((j < c0 || j >= c0 + N) && memcmp(&gy[(size_t)t * ytot + j], &ry[(size_t)t * ytot + j], 4))
                outside++;
    if (outside)
        fprintf(stderr, "  gemv: %d elements outside the y slice changed\n", outside);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d N%d K%d%s%s%s y%d+%d%s", T, N, K, f32_out ? " y32" : "",
             bias == 1 ? " b32" : bias == 2 ? " b16" : "", accumulate ? " acc" : "", c0, ytot, xpad % 8 ? " blas" : "");
    record(gemv_op, cas, dt, rel_l2(gy, ry, n), lim_for(f32_out ? LG_F16 : dt) * (f32_out ? 0.5 : 1),
           rc == 0 && g == 0 && outside == 0);
    G->i.dealloc(G, db);
    free(ry), free(b), free(bh), free(gy);
    gt_free(&x), gt_free(&W), gt_free(&y);
}

/* A kernel writes x, a GEMV reads it, a second GEMV reads the first's output: eagerly and
 * recorded in a step graph, replayed with new inputs (programmatic dependent launch must
 * still order each GEMV's reads after its producer). Checked against the CPU each time. */
static void test_gemv_chain(lg_dtype dt, int T)
{
    const int K = 1024, N1 = 2048, N2 = 520;
    float *x32h = malloc((size_t)T * K * 4), *w1 = malloc((size_t)N1 * K * 4), *w2 = malloc((size_t)N2 * N1 * 4);
    void *hb = malloc((size_t)N1 * K * 2);
    for (size_t i = 0; i < (size_t)N1 * K; i++) w1[i] = 0.05f * frand();
    for (size_t i = 0; i < (size_t)N2 * N1; i++) w2[i] = 0.05f * frand();
    lg_from_f32(hb, dt, w1, (size_t)N1 * K), lg_to_f32(w1, hb, dt, (size_t)N1 * K);
    void *dw1 = G->i.alloc(G, (size_t)N1 * K * 2), *dw2 = G->i.alloc(G, (size_t)N2 * N1 * 2);
    G->i.upload(G, dw1, hb, (size_t)N1 * K * 2);
    lg_from_f32(hb, dt, w2, (size_t)N2 * N1), lg_to_f32(w2, hb, dt, (size_t)N2 * N1);
    G->i.upload(G, dw2, hb, (size_t)N2 * N1 * 2);
    float *dx32 = G->i.alloc(G, (size_t)T * K * 4), *dy2 = G->i.alloc(G, (size_t)T * N2 * 4);
    void *dx = G->i.alloc(G, (size_t)T * K * 2), *dy1 = G->i.alloc(G, (size_t)T * N1 * 2);
    float *xr = malloc((size_t)T * K * 4), *y1 = malloc((size_t)T * N1 * 4), *y2 = malloc((size_t)T * N2 * 4),
          *got = malloc((size_t)T * N2 * 4);
    lg_tensor none = {0};
    double worst = 0;
    int ok = 1;
    for (int it = 0; it < 5; it++) { /* 0, 1: eager; 2: records; 3, 4: replays */
        for (int i = 0; i < T * K; i++) x32h[i] = frand();
        G->i.upload(G, dx32, x32h, (size_t)T * K * 4);
        bool replayed = false;
        const char key[] = "test_gemv_chain";
        if (it >= 2)
            ok &= G->i.graph_begin(G, key, sizeof key, &replayed) == 0;
        if (!replayed) {
            int rc = G->i.convert(G, lg_tensor_2d(dx, dt, T, K), lg_tensor_2d(dx32, LG_F32, T, K));
            rc |= G->i.matmul(G, lg_tensor_2d(dy1, dt, T, N1), lg_tensor_2d(dx, dt, T, K), lg_tensor_2d(dw1, dt, N1, K),
                              none, false);
            rc |= G->i.matmul(G, lg_tensor_2d(dy2, LG_F32, T, N2), lg_tensor_2d(dy1, dt, T, N1),
                              lg_tensor_2d(dw2, dt, N2, N1), none, false);
            ok &= rc == 0;
        }
        if (it >= 2)
            ok &= G->i.graph_end(G, true) == 0;
        ok &= G->i.sync(G) == 0 && G->i.download(G, got, dy2, (size_t)T * N2 * 4) == 0;
        /* oracle: the same roundings as the device (x and y1 in dt) */
        lg_from_f32(hb, dt, x32h, (size_t)T * K), lg_to_f32(xr, hb, dt, (size_t)T * K);
        C->i.matmul(C, host_t(y1, T, N1), host_t(xr, T, K), host_t(w1, N1, K), none, false);
        lg_from_f32(hb, dt, y1, (size_t)T * N1), lg_to_f32(y1, hb, dt, (size_t)T * N1);
        C->i.matmul(C, host_t(y2, T, N2), host_t(y1, T, N1), host_t(w2, N2, N1), none, false);
        double e = rel_l2(got, y2, (size_t)T * N2);
        worst = isnan(e) || e > worst ? e : worst;
    }
    G->i.graph_reset(G);
    char cas[48];
    snprintf(cas, sizeof cas, "T%d convert>gemv>gemv, graph", T);
    record(gemv_op, cas, dt, worst, lim_for(dt), ok);
    G->i.dealloc(G, dw1), G->i.dealloc(G, dw2), G->i.dealloc(G, dx32), G->i.dealloc(G, dy2), G->i.dealloc(G, dx),
        G->i.dealloc(G, dy1);
    free(x32h), free(w1), free(w2), free(hb), free(xr), free(y1), free(y2), free(got);
}

/* The stream-K matmul (kernels/gemm_tma.cu: 2..64 rows by default, 1..64 forced) through the same checks:
 * as dispatched and each variant forced. Cases cover T not a multiple of 8, N not a multiple of
 * the tile, K not a multiple of the chunk, tiles split between blocks (few tiles, long K: the
 * workspace and the last block's sum), strided and unaligned y slices, bias and accumulate, and
 * chains eager then replayed in a step graph (PDL ordering, counters left at zero). */
static void test_streamk_all(lg_dtype dt)
{
    const int modes[] = {2, 20, 21, 22, 23, 24, 25};
    const char *names[] = {"tma", "tma/v0", "tma/v1", "tma/v2", "tma/v3", "tma/v4", "tma/v5"};
    for (int mi = 0; mi < 7; mi++) {
        G->tune.streamk = modes[mi];
        gemv_op = names[mi];
        const unsigned long tma0 = lg_cuda_tma_launches();
        /*        T   N      K    y32 bias acc  c0  ytot  xpad */
        test_gemv(dt, 5, 384, 1032, 0, 1, 0, 0, 384, 0);
        test_gemv(dt, 8, 1000, 520, 0, 0, 0, 0, 1000, 0);     /* N % 64 != 0, K % 64 != 0 */
        test_gemv(dt, 13, 777, 4104, 0, 1, 1, 3, 800, 8);    /* odd N, unaligned y slice */
        test_gemv(dt, 32, 256, 4096, 0, 0, 0, 0, 256, 0);     /* 4 tiles: split between blocks */
        test_gemv(dt, 32, 4096, 4096, 0, 2, 0, 0, 4096, 0);
        test_gemv(dt, 33, 520, 11008, 1, 1, 1, 5, 600, 0);    /* split tiles, f32 y, accumulate */
        test_gemv(dt, 48, 1536, 1024, 0, 0, 1, 0, 1536, 8);
        test_gemv(dt, 64, 2048, 2056, 0, 1, 0, 16, 2100, 0);
        test_gemv(dt, 64, 32000, 256, 1, 0, 0, 0, 32000, 0);  /* many tiles, f32 logits */
        test_gemv(dt, 17, 64, 8, 0, 0, 0, 0, 64, 0);          /* K = 8: one vector per row */
        test_gemv(dt, 24, 12288, 4096, 0, 0, 0, 0, 12288, 0); /* qkv of a 7B decode step (TMA: hybrid plan) */
        test_gemv(dt, 16, 8448, 1032, 0, 1, 0, 0, 8448, 0);   /* 132 tiles: whole tiles only on 132 SMs */
        test_gemv(dt, 2, 777, 4104, 0, 1, 1, 3, 800, 8);      /* 2..4 rows: the 8-row form, rows past T zero */
        test_gemv(dt, 4, 1001, 2056, 0, 2, 1, 1, 1010, 8);
        test_gemv(dt, 1, 4096, 4096, 0, 1, 0, 0, 4096, 0);    /* one row: the GEMV's unless forced */
        /* the TMA kernel really ran (not the cuBLAS fallback): 2..64 rows by default, forced 1..64 */
        const unsigned long got = lg_cuda_tma_launches() - tma0;
        record(names[mi], modes[mi] == 2 ? "took the 14 cases T >= 2" : "took all 15 cases", dt,
               got == (modes[mi] == 2 ? 14u : 15u) ? 0.0 : 1.0, 0.0, 1);
    }
    G->tune.streamk = 2;
    gemv_op = "tma";
    test_gemv_chain(dt, 32);
    test_gemv_chain(dt, 64);
    test_gemv_chain(dt, 8);
    test_gemv_chain(dt, 2);
    G->tune.streamk = env_tune.streamk;
}

static void test_gemv_all(lg_dtype dt)
{
    for (int forced = 0; forced < 2; forced++) {
        G->tune.gemv = forced ? 11 : 1;
        gemv_op = forced ? "gemv/forced" : "gemv";
        /*        T   N      K    y32 bias acc  c0  ytot  xpad */
        test_gemv(dt, 1, 1000, 520, 0, 0, 0, 0, 1000, 0);     /* K8 = 65: ragged batch tail */
        test_gemv(dt, 2, 777, 4104, 0, 1, 1, 3, 800, 8);      /* odd N, unaligned y slice */
        test_gemv(dt, 3, 384, 1032, 1, 0, 0, 40, 1000, 16);
        test_gemv(dt, 4, 1001, 2056, 0, 2, 1, 1, 1010, 8);
        test_gemv(dt, 1, 4096, 4096, 0, 1, 0, 0, 4096, 0);
        test_gemv(dt, 4, 257, 11008, 1, 1, 1, 5, 300, 0);
        test_gemv(dt, 2, 130, 8, 0, 0, 0, 0, 130, 0);         /* K = 8: one word per row */
        test_gemv(dt, 3, 33, 264, 0, 1, 0, 7, 64, 0);
        test_gemv(dt, 1, 3, 4096, 1, 0, 1, 0, 3, 0);          /* fewer rows than one warp's group */
        test_gemv(dt, 4, 32000, 256, 1, 0, 0, 0, 32000, 0);   /* many blocks, f32 logits */
        test_gemv(dt, 2, 500, 1000, 0, 1, 1, 2, 520, 3);      /* x stride % 8 != 0: cuBLAS fallback */
        test_gemv(dt, 1, 64, 1004, 0, 0, 0, 0, 64, 0);        /* K % 8 != 0: cuBLAS fallback */
        test_gemv_chain(dt, 1);
        test_gemv_chain(dt, 4);
    }
    G->tune.gemv = env_tune.gemv;
}

/* cu_carve_for, the preferred carveout the resident decode attention launches with (one block of 130 KB at the
 * Llama-2-7B shape; other sizes and block counts too): the fewest percent of the SM's shared memory (the CUDA
 * runtime's figures) that holds the blocks with their reserve; 100 when they need all of it or more. */
static void test_carve_for(lg_dtype dt)
{
    int per = 0, rsv = 0;
    int ok = cudaDeviceGetAttribute(&per, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) == cudaSuccess &&
             cudaDeviceGetAttribute(&rsv, cudaDevAttrReservedSharedMemoryPerBlock, 0) == cudaSuccess && per > 0;
    const size_t cases[][2] = {{132240, 1}, {0, 5}, {8192 + 144, 5}, {67224, 3}, {(size_t)per, 1}, {(size_t)per / 2, 2}};
    for (size_t i = 0; ok && i < sizeof cases / sizeof cases[0]; i++) {
        const double need = ((double)cases[i][0] + rsv) * (double)cases[i][1];
        const int p = lg_cuda_carve_for(G, cases[i][0], (int)cases[i][1]);
        ok = need >= per ? p == 100 : p >= 0 && p <= 100 && p * (double)per >= need * 100 && (p - 1) * (double)per < need * 100;
        if (!ok)
            fprintf(stderr, "carve_for(%zu, %zu) = %d (SM %d bytes, reserve %d)\n", cases[i][0], cases[i][1], p, per, rsv);
    }
    record("misc", "carveout: the fewest percent that holds the blocks", dt, 0, 0, ok);
}

int main(int argc, char **argv)
{
    int bench = !(argc > 1 && !strcmp(argv[1], "--no-bench"));
    lg_err err = {0};
    lg_backend_opts o = {0};
    if (lg_backend_cpu_create(&o, &C, &err) != 0) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 2;
    }
    for (int di = 0; di < 2; di++) {
        lg_dtype dt = di ? LG_BF16 : LG_F16;
        o.act_dtype_hint = dt;
        if (lg_backend_create("cuda", &o, &G, &err) != 0) {
            fprintf(stderr, "cuda backend: %s\n", err.msg);
            return 3;
        }
        env_tune = G->tune;
        if (G->act_dtype != dt) {
            fprintf(stderr, "act dtype %s, expected %s\n", lg_dtype_name(G->act_dtype), lg_dtype_name(dt));
            n_fail++;
        }
        rng_s = 0x9E3779B97F4A7C15ull + (uint64_t)di * 7919;

        if (only("misc")) {
            test_embed(dt, 37, 1000, 520);
            test_add_rmsnorm(dt, 33, 1000, 1);
            test_add_rmsnorm(dt, 5, 4096, 0);
            test_matmul(dt, 7, 1000, 520, 0, 0, 0, 0);
            test_matmul(dt, 64, 768, 1024, 0, 1, 0, 256);
            test_matmul(dt, 3, 384, 256, 0, 1, 1, 40);
            test_matmul(dt, 5, 32000, 256, 1, 0, 0, 0);
            test_rope(dt, 19, 8, 2, 64, 4096);
            test_rope(dt, 7, 4, 4, 16, 100);
            test_rope(dt, 9, 32, 8, 128, 32768);
            test_silu_mul(dt, 13, 1376);
            test_get_rows(dt, 50, 520, 9);
            test_convert(LG_F32, dt, 17, 333);
            test_convert(dt, LG_F32, 17, 333);
            test_convert(dt, dt == LG_F16 ? LG_BF16 : LG_F16, 5, 64);
            test_carve_for(dt);
        }

        if (only("attention")) {   /* attention */
            int q1[] = {37, 1, 100}, k1[] = {37, 51, 300};
            attn_case prefill = {3, q1, k1};
            test_attention(dt, "prefill", &prefill, 8, 2, 64, 0);
            test_attention(dt, "prefill", &prefill, 4, 4, 16, 0);
            test_attention(dt, "prefill", &prefill, 6, 2, 32, 0);
            test_attention(dt, "prefill", &prefill, 12, 4, 80, 0);
            test_attention(dt, "prefill", &prefill, 4, 2, 256, 0);
            int q2[] = {1, 1, 1, 1, 1}, k2[] = {1, 17, 300, 2000, 5000};
            attn_case dec = {5, q2, k2};
            test_attention(dt, "decode", &dec, 32, 8, 128, 0);
            test_attention(dt, "decode", &dec, 16, 1, 128, 0);
            test_attention(dt, "decode", &dec, 12, 4, 80, 0);
            test_attention(dt, "decode", &dec, 8, 8, 64, 0);
            /* short contexts, few tokens, one query head per kv head: the resident form (whole context in shared
             * memory, the rows of earlier steps loaded before pdl_wait, this step's after it: kv_write runs just
             * before); then the same cases on the split form; grouped heads keep the split form */
            int q5[] = {1, 1, 1}, k5[] = {1, 40, 256}, q6[] = {5, 1, 3}, k6[] = {20, 9, 3};
            attn_case dres = {3, q5, k5}, dres_run = {3, q6, k6};
            for (int r = 0; r < 2; r++) {
                G->tune.dec_resident_kb = r ? 0 : 200;
                const char *nm = r ? "decode split" : "decode resident";
                const long n0 = lg_cuda_dec_resident_launches();
                test_attention(dt, nm, &dres, 32, 32, 128, 0);
                test_attention(dt, nm, &dres, 8, 8, 64, 0);
                test_attention(dt, nm, &dres_run, 4, 4, 40, 0); /* head_dim % 16 != 0: query runs too */
                attn_pt = 12;
                test_attention(dt, nm, &dres_run, 8, 8, 24, 0);
                attn_pt = 16;
                const long n_res = lg_cuda_dec_resident_launches() - n0;
                record("attention", r ? "split form taken (4 of 4)" : "resident form taken (4 of 4)", dt, 0, 0,
                       n_res == (r ? 0 : 4));
            }
            G->tune.dec_resident_kb = 200;
            {
                const long n0 = lg_cuda_dec_resident_launches();
                test_attention(dt, "decode gqa", &dres, 32, 8, 128, 0);
                test_attention(dt, "decode gqa", &dres, 9, 3, 64, 0);
                const long n = lg_cuda_dec_resident_launches() - n0;
                record("attention", "grouped heads: split form taken", dt, 0, 0, n == 0);
            }
            G->tune.dec_resident_kb = env_tune.dec_resident_kb;
            int q3[] = {1, 200, 1, 33}, k3[] = {3000, 200, 70, 1500};
            attn_case mixed = {4, q3, k3};
            test_attention(dt, "mixed", &mixed, 32, 8, 128, 0);
            test_attention(dt, "mixed", &mixed, 28, 4, 128, 0);
            int q4[] = {300, 1, 64, 129}, k4[] = {300, 900, 64, 1000};
            attn_case pf = {4, q4, k4};
            test_attention(dt, "prefill", &pf, 32, 32, 128, 0); /* FA2: partial tiles, chunk after cache */
            test_attention(dt, "prefill", &pf, 16, 2, 64, 0);
            attn_pt = 12; /* page_tokens not a power of two */
            test_attention(dt, "prefill pt12", &pf, 32, 8, 128, 0);
            attn_pt = 16;
            G->tune.attn_fa2 = 0; /* the wmma kernel at the FA2 head dims too */
            test_attention(dt, "prefill wmma", &pf, 32, 32, 128, 0);
            G->tune.attn_fa2 = env_tune.attn_fa2;
            /* an e4m3 cache (--kv-cache-dtype fp8): kv_write's bytes and attention: prefill steps of head_dim
             * 64 / 128 on FA2 (tiles widened from e4m3, scales folded), other head_dims and decode steps on the
             * split-K kernel (8-byte lane words: register loads for one query head a kv head, the cp.async ring
             * for 2, 4, 8), windowed and soft-capped layers on the window kernel; then prefill with FA2 off */
            test_attention_e4m3(dt, "prefill", &prefill, 8, 2, 64, 0, 0);
            test_attention_e4m3(dt, "prefill", &pf, 32, 8, 128, 0, 0);
            test_attention_e4m3(dt, "decode", &dec, 32, 8, 128, 0, 0);
            test_attention_e4m3(dt, "decode", &dec, 32, 4, 128, 0, 0);
            test_attention_e4m3(dt, "decode", &dec, 16, 8, 64, 0, 0);
            test_attention_e4m3(dt, "decode", &dres, 8, 8, 64, 0, 0);
            test_attention_e4m3(dt, "mixed", &mixed, 12, 4, 80, 0, 0);
            test_attention_e4m3(dt, "mixed", &mixed, 16, 8, 256, 100, 0);
            test_attention_e4m3(dt, "prefill", &pf, 8, 4, 128, 0, 50.0f);
            attn_pt = 12;
            test_attention_e4m3(dt, "prefill pt12", &pf, 16, 4, 64, 0, 0);
            attn_pt = 16;
            G->tune.attn_fa2 = 0; /* the split-K kernel for prefill */
            test_attention_e4m3(dt, "prefill split-K", &pf, 32, 8, 128, 0, 0);
            test_attention_e4m3(dt, "prefill split-K", &prefill, 8, 8, 64, 0, 0);
            G->tune.attn_fa2 = env_tune.attn_fa2;
        }
        if (only("lora")) {   /* LoRA */
            int len1[] = {1, 5, 17, 1, 0, 64, 3, 1, 9}, r1[] = {8, 0, 64, 1, 16, 13, 32, 0, 2};
            test_lora(dt, LG_F32, "ragged", 9, len1, r1, 1024, 768, 256, 2048, 0);
            test_lora(dt, dt, "ragged", 9, len1, r1, 1000, 333, 5, 400, 0);
            int len2[32], r2[32];
            for (int i = 0; i < 32; i++) len2[i] = 1, r2[i] = (int[]){0, 1, 4, 8, 16, 32, 64, 7}[i % 8];
            test_lora(dt, LG_F32, "decode 32x1", 32, len2, r2, 4096, 4096, 0, 4096, 0);
            int len9[300], r9[300]; /* a decode expand of more blocks than are resident at once (several waves) */
            for (int i = 0; i < 300; i++) len9[i] = 1, r9[i] = (int[]){0, 1, 4, 8, 16, 32, 64, 7}[i % 8];
            test_lora(dt, LG_F32, "decode 300x1", 300, len9, r9, 1024, 4096, 0, 4096, 0);
            test_lora(dt, dt, "decode 300x1", 300, len9, r9, 1000, 2000, 8, 2008, 0);
            /* prefill segments (> 4 tokens): the tensor-core shrink and the tile expand, forced on
             * (small grids take the CUDA-core kernels by default), then W1's whole prefill by default;
             * the shrink in its wide form (the default), then in its shared-memory form */
            for (int wide = 1; wide >= 0; wide--) {
                G->tune.shrink_wide = wide;
                case_sfx = wide ? "" : " shm";
                if (!sgmv_forced_off())
                    set_sgmv_prefill(sgmv_mode = 2);
                int len3[] = {128, 128, 128, 128}, r3[] = {16, 16, 16, 16};
                test_lora(dt, LG_F32, "prefill 4x128 r16", 4, len3, r3, 4096, 4096, 4096, 3 * 4096, 0);
                int len4[] = {37, 1, 130, 6, 64, 5, 33}, r4[] = {16, 8, 13, 64, 0, 32, 1};
                test_lora(dt, LG_F32, "prefill ragged", 7, len4, r4, 1024, 1000, 24, 1100, 0);
                test_lora(dt, dt, "prefill ragged", 7, len4, r4, 1000, 333, 5, 400, 0); /* k tail, odd y column */
                int len5[] = {100, 7, 33}, r5[] = {16, 16, 8};
                lora_cap = 64; /* a server's cap above the step's ranks: step_max_rank picks the shapes */
                test_lora(dt, LG_F32, "prefill cap64 r16", 3, len5, r5, 2048, 1536, 0, 1536, 0);
                lora_a_off = 2; /* A not 16-byte aligned: copied element by element */
                test_lora(dt, LG_F32, "prefill A unaligned", 3, len5, r5, 1024, 512, 0, 512, 0);
                lora_cap = 0, lora_a_off = 0;
                int r7[] = {8, 4, 0}; /* step rank 8 (RM 8, two columns per thread) on an odd, unaligned y slice */
                test_lora(dt, dt, "prefill r8 odd y", 3, len5, r7, 1000, 333, 5, 400, 0);
                int r8[] = {32, 16, 3};
                test_lora(dt, LG_F32, "prefill r32 odd cols", 3, len5, r8, 1024, 777, 4, 800, 0); /* pairs but the last column */
                int r6[] = {96, 100, 7}; /* ranks past 64: two rank chunks in the shrink, the 8-token expand */
                test_lora(dt, LG_F32, "prefill r100", 3, len5, r6, 512, 256, 0, 256, 0);
                /* q,k,v of a prefill step: W1's shape (4 of its 32 segments) and GQA outputs with mixed ranks */
                int lq[] = {128, 128, 128, 128}, rq[12], oq[] = {4096, 4096, 4096};
                for (int i = 0; i < 12; i++) rq[i] = 16;
                test_lora_multi_prefill(dt, "W1 prefill 4x128 r16", 4, lq, rq, 4096, oq, 0);
                int lm_[] = {50, 3, 77, 9}, rm_[] = {8, 16, 0, 32, 0, 8, 16, 16, 16, 4, 13, 2}, om[] = {2048, 512, 512};
                test_lora_multi_prefill(dt, "GQA ragged mixed ranks", 4, lm_, rm_, 2048, om, 0);
                test_lora_multi_prefill(dt, "GQA ragged cap 64", 4, lm_, rm_, 2048, om, 64);
                set_sgmv_prefill(sgmv_mode = -1);
                int lw1[32], rw1[96];
                for (int i = 0; i < 32; i++) lw1[i] = 128, rw1[3 * i] = rw1[3 * i + 1] = rw1[3 * i + 2] = 16;
                test_lora_multi_prefill(dt, "W1 prefill 32x128 default", 32, lw1, rw1, 4096, oq, 0);
            }
            G->tune.shrink_wide = env_tune.shrink_wide;
            case_sfx = "";
            /* decode steps: W3's down shrink (in 11,008) and rows that are not 16-byte multiples */
            int l1[128], rd[384], od[] = {512, 256, 128};
            for (int i = 0; i < 384; i++) rd[i] = (int[]){8, 16, 0, 13, 8, 4}[i % 6];
            for (int i = 0; i < 128; i++) l1[i] = 1;
            test_lora_multi_prefill(dt, "decode 32 in11008", 32, l1, rd, 11008, od, 0);
            test_lora_multi_prefill(dt, "decode 7 in1004", 7, l1, rd, 1004, od, 0);
            const int o3[] = {4096, 4096, 4096};
            test_lora_multi_prefill(dt, "decode 128 q,k,v", 128, l1, rd, 4096, o3, 0); /* W2's: several waves */
        }
        if (only("graph")) {
            test_graph(dt, 0);
            test_graph(dt, 1);
            graph_kv8 = 1; /* the same steps over an e4m3 cache: rope + kv_write instead of the rope forms */
            case_sfx = " e4m3 KV";
            test_graph(dt, 0);
            test_graph(dt, 1);
            graph_kv8 = 0;
            case_sfx = "";
            test_graph_kv_key(dt);
        }
        if (only("matmul")) {
            test_gemv_all(dt);
            test_streamk_all(dt);
            test_matmul_lora(dt);
        }
        if (only("rope_kv"))
            test_rope_kv(dt);
        if (only("norm")) { /*           T  K     N     silu delta bias wpad g16 taken */
            test_norm_matmul(dt, 1, 4096, 1536, 0, 1, 1, 0, 0, 1); /* q,k,v of a 7B step (part), with bias */
            test_norm_matmul(dt, 2, 4096, 2048, 1, 1, 0, 0, 0, 1); /* gate,up + silu, two rows */
            test_norm_matmul(dt, 1, 576, 384, 1, 0, 0, 0, 0, 1);   /* SmolLM2's width, layer 0 (no delta) */
            test_norm_matmul(dt, 2, 1000, 258, 0, 1, 1, 0, 0, 1);  /* a ragged last norm warp, N % 4 != 0 */
            test_norm_matmul(dt, 1, 4096, 22, 1, 1, 0, 0, 0, 1);   /* fewer features than a block's warps */
            test_norm_matmul(dt, 1, 2000, 300, 1, 1, 1, 8, 0, 1);  /* ragged second pass, silu + bias, W stride */
            test_norm_matmul(dt, 2, 3072, 512, 0, 0, 0, 0, 1, 1);  /* two rows, no delta, f16 norm weights */
            test_norm_matmul(dt, 3, 4096, 512, 0, 1, 0, 0, 0, 0);  /* T > 2: the separate ops */
            test_norm_matmul(dt, 1, 8192, 256, 0, 1, 0, 0, 0, 0);  /* rows wider than 4096 */
            test_norm_matmul_rope(dt, 1, 8, 8, 128, 1, 0);          /* a 7B-like layer (fewer heads) */
            test_norm_matmul_rope(dt, 2, 12, 4, 64, 0, 1);          /* GQA, two rows (one without slot), bias */
            test_norm_matmul_rope(dt, 1, 9, 3, 80, 1, 1);           /* head_dim 80 */
        }
        if (bench && !getenv("LG_ONLY")) {
            bench_matmul(dt, 1, 4096, 4096);
            bench_matmul(dt, 32, 4096, 4096);
            bench_matmul(dt, 32, 28672, 4096);
            bench_matmul(dt, 2048, 4096, 4096);
            int qd[64], kd[64];
            for (int i = 0; i < 32; i++) qd[i] = 1, kd[i] = 2048;
            attn_case d32 = {32, qd, kd};
            test_attention(dt, "bench dec 32x2048", &d32, 32, 8, 128, 1);
            int qa[] = {1}, ka[] = {32768};
            attn_case d1 = {1, qa, ka};
            test_attention(dt, "bench dec 1x32k", &d1, 32, 8, 128, 1);
            int qp[] = {2048}, kp[] = {2048};
            attn_case p1 = {1, qp, kp};
            test_attention(dt, "bench prefill 2048", &p1, 32, 8, 128, 1);
            test_attention(dt, "bench prefill 2048 mha", &p1, 32, 32, 128, 1);
            G->tune.attn_fa2 = 0;
            test_attention(dt, "bench prefill 2048 mha wmma", &p1, 32, 32, 128, 1);
            G->tune.attn_fa2 = env_tune.attn_fa2;
            int ls[64], rs[64];
            for (int i = 0; i < 64; i++) ls[i] = 1, rs[i] = 64;
            test_lora(dt, LG_F32, "bench dec 64x1 r64", 64, ls, rs, 4096, 4096, 0, 4096, 1);
            for (int i = 0; i < 64; i++) rs[i] = 16;
            test_lora(dt, LG_F32, "bench dec 64x1 r16", 64, ls, rs, 4096, 4096, 0, 4096, 1);
            int lp[] = {512}, rp[] = {16};
            test_lora(dt, LG_F32, "bench pre 1x512 r16", 1, lp, rp, 4096, 4096, 0, 4096, 1);
        }
        lg_backend_free(G);
        G = NULL;
    }
    lg_backend_free(C);

    printf("\n%-12s %-32s %-5s %10s %8s %10s  %s\n", "op", "case", "dtype", "rel_l2", "limit", "us", "result");
    for (int i = 0; i < n_rows; i++) {
        row_t *r = &rows[i];
        char us[32] = "";
        if (r->us >= 0) snprintf(us, sizeof us, "%.1f", r->us);
        printf("%-12s %-32s %-5s %10.2e %8.0e %10s  %s\n", r->op, r->cas, r->dt, r->err, r->lim, us,
               r->ok ? "ok" : "FAIL");
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
