/*
 * test_gguf.c — the GGUF reader (engine/model/gguf.c), dequantization
 * (engine/model/quant.c) and the GGUF model loader (engine/model/weights_gguf.c).
 *
 *   1. every decodable ggml type against gguf-py's dequantize (fixtures made
 *      by tests/fixtures/gguf/make_fixtures.py);
 *   2. hostile files: hand-built bad headers, truncation at every offset,
 *      random byte flips — each must fail cleanly with a message (run under
 *      -fsanitize=address,undefined or valgrind to prove no bad access);
 *   3. tiny llama / qwen2 models: config, name mapping, q/k un-permute,
 *      biases, Llama-3 rope factors, vocab_only;
 *   4. the real SmolLM2-135M Q4_1 model when .models/ has it (skipped
 *      otherwise): config and un-permuted q/k rows against gguf-py + numpy,
 *      expanded at load (dequantize) and kept in their Q4_1 blocks (the
 *      default: rows moved by the un-permute, blocks unchanged; tensors
 *      that need no un-permute used in place from the file, their bytes
 *      the file's).
 * Runs with the repo root as working directory.
 */
#include <stdint.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/quant.h"
#include "tests/unit/test.h"
#include "engine/model/weights.h"

#define FIX "tests/fixtures/gguf/"

static float *read_f32(const char *path, size_t *n)
{
    char *buf;
    size_t len;
    lg_err err;
    if (lg_read_file(path, 1 << 26, &buf, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    *n = len / 4;
    return (float *)buf;
}

static bool close_rel(float a, float b, float tol)
{
    return fabsf(a - b) <= tol * fabsf(b) + 1e-30f || (isnan(a) && isnan(b));
}

/* ---- 1. dequantization vs gguf-py ------------------------------------------ */

static void test_dequant(void)
{
    static const char *types[] = {"F32",  "F16",  "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                  "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    lg_err err = {{0}};
    lg_gguf *g;
    CHECK_MSG(lg_gguf_open(FIX "quant_types.gguf", &g, &err) == 0, "%s", err.msg);
    if (!g)
        return;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        char name[32], path[128];
        snprintf(name, sizeof name, "t_%s", types[k]);
        snprintf(path, sizeof path, FIX "ref_%s.f32", types[k]);
        const lg_gguf_tensor *t = lg_gguf_find_tensor(g, name);
        size_t n_ref = 0;
        float *ref = read_f32(path, &n_ref);
        CHECK_MSG(t && ref && n_ref == 1024, "%s", name);
        if (!t || !ref || n_ref != 1024) {
            free(ref);
            continue;
        }
        CHECK(t->n_dims == 2 && t->ne[0] == 512 && t->ne[1] == 2 && !strcmp(lg_ggml_type_name(t->type), types[k]));
        float out[1024];
        CHECK_MSG(lg_dequant_row(t->type, t->data, out, 1024, &err) == 0, "%s: %s", name, err.msg);
        int bad = 0;
        for (int i = 0; i < 1024; i++)
            bad += !close_rel(out[i], ref[i], 1e-6f);
        CHECK_MSG(bad == 0, "%s: %d of 1024 values differ from gguf-py", name, bad);

        /* whole-tensor path: to F32 with 2 threads, and to F16 / BF16 */
        float out2[1024];
        CHECK(lg_dequant(t->type, t->data, 2, 512, LG_F32, out2, NULL, 2, &err) == 0);
        CHECK_MSG(!memcmp(out, out2, sizeof out), "%s: threaded lg_dequant differs from lg_dequant_row", name);
        uint16_t h[1024], want[1024];
        int64_t swap[2] = {1, 0};
        CHECK(lg_dequant(t->type, t->data, 2, 512, LG_F16, h, swap, 2, &err) == 0);
        lg_from_f32(want, LG_F16, ref, 1024);
        CHECK_MSG(!memcmp(h, want + 512, 1024) && !memcmp(h + 512, want, 1024), "%s: f16 with row_map", name);
        CHECK(lg_dequant(t->type, t->data, 2, 512, LG_BF16, h, NULL, 1, &err) == 0);
        lg_from_f32(want, LG_BF16, ref, 1024);
        CHECK_MSG(!memcmp(h, want, sizeof h), "%s: bf16", name);
        free(ref);
    }
    /* a type we refuse is named in the error */
    const lg_gguf_tensor *t = lg_gguf_find_tensor(g, "t_IQ4_NL");
    float out[1024];
    CHECK(t && lg_dequant_row(t->type, t->data, out, 1024, &err) == -1 && strstr(err.msg, "IQ4_NL"));
    CHECK(lg_dequant_row(LG_GGML_Q4_K, t->data, out, 100, &err) == -1); /* not a block multiple */
    CHECK(lg_ggml_type_name(31) == NULL && lg_ggml_type_name(1000) == NULL);
    CHECK(!strcmp(lg_ggml_type_name(LG_GGML_Q6_K), "Q6_K"));
    lg_gguf_free(g);
    lg_gguf_free(NULL);
}

/* ---- 2. hostile files ------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (!n)
        return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void put_kv_str(buf *b, const char *k, const char *v) { put_str(b, k); put_u32(b, LG_GGUF_STR); put_str(b, v); }
static void put_tinfo(buf *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off)
{
    put_str(b, name);
    put_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++)
        put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, off);
}
static void put_header(buf *b, uint64_t n_t, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, n_t);
    put_u64(b, n_kv);
}
/* pads to 32 and appends n zero bytes of data */
static void put_data(buf *b, size_t n)
{
    static const uint8_t z[256];
    while (b->n % 32) put(b, z, 1);
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        put(b, z, k);
        n -= k;
    }
}

/* Opens a copy of exactly n bytes (so ASan sees any over-read). */
static int open_exact(const uint8_t *p, size_t n, lg_err *err, lg_gguf **g)
{
    uint8_t *c = malloc(n ? n : 1);
    if (n)
        memcpy(c, p, n);
    int rc = lg_gguf_open_mem(c, n, g, err);
    if (rc == 0) { /* touch everything the reader hands out */
        for (int i = 0; i < lg_gguf_n_tensors(*g); i++) {
            const lg_gguf_tensor *t = lg_gguf_tensor_at(*g, i);
            volatile uint8_t x = ((const uint8_t *)t->data)[0];
            x = ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)x;
        }
        for (int i = 0; i < lg_gguf_n_kv(*g); i++) {
            const char *k = lg_gguf_kv_key(*g, i);
            char **s; float *f; int32_t *v; size_t m; int64_t iv; double dv; bool bv; const char *sv;
            lg_err e2;
            if (lg_gguf_get_arr_str(*g, k, &s, &m, &e2) == 1) free(s);
            if (lg_gguf_get_arr_f32(*g, k, &f, &m, &e2) == 1) free(f);
            if (lg_gguf_get_arr_i32(*g, k, &v, &m, &e2) == 1) free(v);
            lg_gguf_get_int(*g, k, &iv, &e2);
            lg_gguf_get_float(*g, k, &dv, &e2);
            lg_gguf_get_bool(*g, k, &bv, &e2);
            lg_gguf_get_str(*g, k, &sv, NULL, &e2);
        }
        lg_gguf_free(*g);
    }
    free(c);
    return rc;
}

#define EXPECT_FAIL(b, what)                                                                  \
    do {                                                                                      \
        lg_err e_ = {{0}};                                                                    \
        lg_gguf *g_;                                                                          \
        int rc_ = open_exact((b).p, (b).n, &e_, &g_);                                         \
        CHECK_MSG(rc_ == -1 && e_.msg[0], "%s: expected an error", what);                     \
        if (getenv("LG_TEST_VERBOSE")) printf("  %-28s -> %s\n", what, e_.msg);               \
        free((b).p);                                                                          \
        (b) = (buf){0};                                                                       \
    } while (0)

static void test_hostile_built(void)
{
    buf b = {0};
    uint64_t ne8[1] = {8}, ne2[2] = {32, 2};
    lg_err err = {{0}};
    lg_gguf *g;

    /* baseline: valid */
    put_header(&b, 2, 1);
    put_kv_str(&b, "general.architecture", "llama");
    put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 0);
    put_tinfo(&b, "b", 2, ne2, LG_GGML_Q4_0, 32);
    put_data(&b, 32 + 36);
    CHECK_MSG(open_exact(b.p, b.n, &err, &g) == 0, "baseline: %s", err.msg);
    CHECK(lg_gguf_open_mem(b.p, b.n, &g, &err) == 0);
    if (g) {
        const char *s;
        CHECK(lg_gguf_get_str(g, "general.architecture", &s, NULL, &err) == 1 && !strcmp(s, "llama"));
        CHECK(lg_gguf_get_int(g, "general.architecture", &(int64_t){0}, &err) == -1);
        CHECK(lg_gguf_get_int(g, "absent", &(int64_t){0}, &err) == 0);
        CHECK(lg_gguf_find_tensor(g, "b") && lg_gguf_find_tensor(g, "b")->nbytes == 36);
        CHECK(lg_gguf_data_offset(g) % 32 == 0 && lg_gguf_alignment(g) == 32 && lg_gguf_version(g) == 3);
        lg_gguf_free(g);
    }
    free(b.p);
    b = (buf){0};

    put(&b, "GGUX", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 0);
    EXPECT_FAIL(b, "bad magic");
    put(&b, "GG", 2);
    EXPECT_FAIL(b, "2-byte file");
    EXPECT_FAIL(b, "empty buffer");
    put(&b, "GGUF", 4); put_u32(&b, 1); put_u32(&b, 0); put_u32(&b, 0); put_u64(&b, 0);
    EXPECT_FAIL(b, "version 1");
    put(&b, "GGUF", 4); put_u32(&b, 0x03000000); put_u64(&b, 0); put_u64(&b, 0);
    EXPECT_FAIL(b, "big-endian");
    put_header(&b, (uint64_t)1 << 40, 0); put_data(&b, 64);
    EXPECT_FAIL(b, "huge n_tensors");
    put_header(&b, 0, UINT64_MAX); put_data(&b, 64);
    EXPECT_FAIL(b, "huge n_kv");
    put_header(&b, 0, 1); put_u64(&b, UINT64_MAX); put(&b, "k", 1); put_data(&b, 64);
    EXPECT_FAIL(b, "key length 2^64-1");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, LG_GGUF_STR); put_u64(&b, 1000); put(&b, "abc", 3);
    EXPECT_FAIL(b, "string past end of file");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, LG_GGUF_STR); put_u64(&b, (1u << 20) + 1); put_data(&b, 64);
    EXPECT_FAIL(b, "string over 1 MiB");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, 13); put_u32(&b, 0);
    EXPECT_FAIL(b, "unknown value type");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, LG_GGUF_ARR); put_u32(&b, LG_GGUF_ARR); put_u64(&b, 1);
    put_u32(&b, LG_GGUF_U8); put_u64(&b, 1); put(&b, "x", 1);
    EXPECT_FAIL(b, "nested array");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, LG_GGUF_ARR); put_u32(&b, LG_GGUF_U64);
    put_u64(&b, (uint64_t)1 << 61); put_data(&b, 64);
    EXPECT_FAIL(b, "array bytes overflow");
    put_header(&b, 0, 1); put_str(&b, "k"); put_u32(&b, LG_GGUF_ARR); put_u32(&b, LG_GGUF_STR);
    put_u64(&b, UINT64_MAX); put_str(&b, "x"); put_str(&b, "y");
    EXPECT_FAIL(b, "string array count huge");
    put_header(&b, 0, 2); put_kv_str(&b, "k", "a"); put_kv_str(&b, "k", "b");
    EXPECT_FAIL(b, "duplicate key");
    put_header(&b, 0, 1); put_u64(&b, 3); put(&b, "a\0b", 3); put_u32(&b, LG_GGUF_U8); put(&b, "x", 1);
    EXPECT_FAIL(b, "NUL in key");
    put_header(&b, 0, 1); put_str(&b, "general.alignment"); put_u32(&b, LG_GGUF_U32); put_u32(&b, 24);
    EXPECT_FAIL(b, "alignment 24");
    put_header(&b, 0, 1); put_kv_str(&b, "general.alignment", "32");
    EXPECT_FAIL(b, "alignment is a string");

    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 4096); put_data(&b, 32);
    EXPECT_FAIL(b, "tensor offset past end");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, UINT64_MAX - 31); put_data(&b, 32);
    EXPECT_FAIL(b, "tensor offset overflow");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 4); put_data(&b, 64);
    EXPECT_FAIL(b, "unaligned tensor offset");
    put_header(&b, 2, 0); put_tinfo(&b, "a", 2, (uint64_t[]){8, 2}, LG_GGML_F32, 0);
    put_tinfo(&b, "b", 1, ne8, LG_GGML_F32, 32); put_data(&b, 128);
    EXPECT_FAIL(b, "overlapping tensors");
    put_header(&b, 2, 0); put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 0);
    put_tinfo(&b, "b", 1, ne8, LG_GGML_F32, 0); put_data(&b, 128);
    EXPECT_FAIL(b, "same offset");
    put_header(&b, 2, 0); put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 0);
    put_tinfo(&b, "a", 1, ne8, LG_GGML_F32, 32); put_data(&b, 128);
    EXPECT_FAIL(b, "duplicate tensor name");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 5, (uint64_t[]){1, 1, 1, 1, 1}, LG_GGML_F32, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "n_dims 5");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 0, NULL, LG_GGML_F32, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "n_dims 0");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 2, (uint64_t[]){8, 0}, LG_GGML_F32, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "zero dimension");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, ne8, 200, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "unknown type 200");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, ne8, 31, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "retired type 31");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, (uint64_t[]){16}, LG_GGML_Q4_0, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "row not a block multiple");
    put_header(&b, 1, 0);
    put_tinfo(&b, "a", 3, (uint64_t[]){(uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)1 << 32}, LG_GGML_F32, 0);
    put_data(&b, 32);
    EXPECT_FAIL(b, "element count overflow");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 2, (uint64_t[]){(uint64_t)1 << 61, 2}, LG_GGML_F32, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "byte size overflow");
    put_header(&b, 1, 0); put_tinfo(&b, "a", 1, (uint64_t[]){UINT64_MAX}, LG_GGML_F32, 0); put_data(&b, 32);
    EXPECT_FAIL(b, "dimension > INT64_MAX");
    put_header(&b, 1, 0); put_str(&b, ""); put_u32(&b, 1); put_u64(&b, 8); put_u32(&b, 0); put_u64(&b, 0);
    put_data(&b, 32);
    EXPECT_FAIL(b, "empty tensor name");
}

/* Truncation at every offset and random byte flips of a real fixture. */
static void test_hostile_mutations(void)
{
    char *file;
    size_t n;
    lg_err err = {{0}};
    if (lg_read_file(FIX "quant_types.gguf", 1 << 24, &file, &n, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    lg_gguf *g;
    size_t data_end = 0;
    CHECK(lg_gguf_open_mem(file, n, &g, &err) == 0);
    for (int i = 0; i < lg_gguf_n_tensors(g); i++) {
        const lg_gguf_tensor *t = lg_gguf_tensor_at(g, i);
        if (t->offset + t->nbytes > data_end)
            data_end = t->offset + t->nbytes;
    }
    size_t header_end = lg_gguf_data_offset(g);
    lg_gguf_free(g);

    int wrong = 0, no_msg = 0;
    for (size_t len = 0; len < n; len++) {
        err.msg[0] = 0;
        int rc = open_exact((const uint8_t *)file, len, &err, &g);
        wrong += (rc == 0) != (len >= data_end);
        no_msg += rc != 0 && !err.msg[0];
    }
    CHECK_MSG(wrong == 0 && no_msg == 0, "truncation: %d wrong results, %d errors without a message", wrong, no_msg);

    uint64_t s = 0x9e3779b97f4a7c15ull;
    uint8_t *m = malloc(n);
    int ok = 0, failed = 0;
    for (int it = 0; it < 4000; it++) {
        memcpy(m, file, n);
        int flips = 1 + (int)(s % 4);
        for (int f = 0; f < flips; f++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            size_t pos = (size_t)(s % header_end);
            uint8_t v = (uint8_t)(s >> 32);
            m[pos] = (s >> 40) & 1 ? v : (uint8_t)(m[pos] ^ (1u << (v & 7)));
        }
        err.msg[0] = 0;
        if (open_exact(m, n, &err, &g) == 0) ok++;
        else { failed++; no_msg += !err.msg[0]; }
    }
    CHECK_MSG(no_msg == 0, "%d byte-flip failures without a message", no_msg);
    printf("byte flips: %d parsed, %d refused\n", ok, failed);
    free(m);
    free(file);
}

/* ---- 3. tiny models ------------------------------------------------------------ */

static float at_f(const lg_wtensor *t, int64_t r, int64_t c)
{
    size_t i = (size_t)(r * t->shape[1] + c);
    float v;
    lg_to_f32(&v, (const uint8_t *)t->data + i * lg_dtype_size(t->dtype), t->dtype, 1);
    return v;
}

/* q/k hold f(r, c) at HF row r (see make_fixtures.py). */
static int check_qk(const lg_weights *w, int layer)
{
    char name[96];
    int bad = 0;
    snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", layer);
    const lg_wtensor *q = lg_weights_get(w, name);
    snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.weight", layer);
    const lg_wtensor *k = lg_weights_get(w, name);
    if (!q || !k || q->shape[0] != 64 || q->shape[1] != 64 || k->shape[0] != 32 || k->shape[1] != 64)
        return -1;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++) {
            bad += at_f(q, r, c) != r + 0.25f * (c % 4) + 100 * layer;
            if (r < 32)
                bad += at_f(k, r, c) != -(r + 0.25f * (c % 4)) - 100 * layer;
        }
    return bad;
}

static void test_tiny_llama(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    lg_load_opts o = {.dequant_dtype = LG_F32};
    CHECK_MSG(lg_weights_load_gguf(FIX "tiny_llama.gguf", &o, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    const lg_model_config *c = lg_weights_config(w);
    CHECK(!strcmp(c->arch, "llama") && c->n_layers == 2 && c->d_model == 64 && c->n_heads == 4 &&
          c->n_kv_heads == 2 && c->head_dim == 16 && c->d_ff == 128 && c->vocab_size == 264 && c->max_pos == 4096);
    CHECK(c->tie_embeddings && !c->qkv_bias && c->rope_theta == 500000.0f && c->rms_eps == 1e-6f);
    CHECK_MSG(c->rope_scaling == LG_ROPE_LLAMA3 && c->rope_factor == 8 && c->rope_low_freq_factor == 1 &&
                  c->rope_high_freq_factor == 4 && c->rope_orig_max_pos == 8192,
              "rope_scaling %d factor %g", c->rope_scaling, c->rope_factor);
    CHECK(lg_weights_get(w, "rope_freqs") == NULL && lg_weights_get(w, "lm_head.weight") == NULL);
    CHECK(c->bos_id == 1 && c->n_eos == 2 && c->eos_ids[0] == 2 && c->eos_ids[1] == 0);
    CHECK(c->weight_dtype == LG_F32);
    CHECK_MSG(check_qk(w, 0) == 0 && check_qk(w, 1) == 0, "q/k not un-permuted to the HF layout");
    const lg_wtensor *n = lg_weights_get(w, "model.layers.1.post_attention_layernorm.weight");
    CHECK(n && n->dtype == LG_F32 && n->n_dims == 1 && n->shape[0] == 64);
    const lg_wtensor *e = lg_weights_get(w, "model.embed_tokens.weight");
    CHECK(e && e->dtype == LG_F32 && e->shape[0] == 264 && e->shape[1] == 64);
    const lg_wtensor *d = lg_weights_get(w, "model.layers.0.mlp.down_proj.weight");
    CHECK(d && d->shape[0] == 64 && d->shape[1] == 128);
    CHECK(lg_weights_chat_template(w) && strstr(lg_weights_chat_template(w), "<|im_start|>"));
    CHECK(lg_weights_tokenizer(w) && lg_tokenizer_n_vocab(lg_weights_tokenizer(w)) == 264);
    lg_weights_free(w);

    /* F16: values are exact in f16; norms stay F32 */
    o.dequant_dtype = LG_F16;
    CHECK_MSG(lg_weights_load_gguf(FIX "tiny_llama.gguf", &o, &w, &err) == 0, "%s", err.msg);
    if (w) {
        CHECK(lg_weights_config(w)->weight_dtype == LG_F16);
        CHECK(lg_weights_get(w, "model.layers.0.self_attn.q_proj.weight")->dtype == LG_F16);
        CHECK(lg_weights_get(w, "model.norm.weight")->dtype == LG_F32);
        CHECK(check_qk(w, 0) == 0 && check_qk(w, 1) == 0);
        lg_weights_free(w);
    }

    /* vocab_only */
    o.vocab_only = true;
    CHECK_MSG(lg_weights_load_gguf(FIX "tiny_llama.gguf", &o, &w, &err) == 0, "%s", err.msg);
    if (w) {
        CHECK(lg_weights_count(w) == 0 && lg_weights_tokenizer(w) && lg_weights_config(w)->n_layers == 2);
        lg_weights_free(w);
    }
    lg_weights_free(NULL);
}

static void test_tiny_qwen2(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    CHECK_MSG(lg_weights_load_gguf(FIX "tiny_qwen2.gguf", NULL, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    const lg_model_config *c = lg_weights_config(w);
    CHECK(!strcmp(c->arch, "qwen2") && c->n_layers == 1 && c->qkv_bias && c->weight_dtype == LG_F16);
    CHECK(c->rope_scaling == LG_ROPE_NONE);
    CHECK_MSG(check_qk(w, 0) == 0, "qwen2 q/k must not be permuted");
    const lg_wtensor *b = lg_weights_get(w, "model.layers.0.self_attn.k_proj.bias");
    CHECK(b && b->dtype == LG_F32 && b->shape[0] == 32 && ((const float *)b->data)[31] == 31);
    const lg_wtensor *rf = lg_weights_get(w, "rope_freqs");
    CHECK(rf && rf->dtype == LG_F32 && rf->n_dims == 1 && rf->shape[0] == 8 && ((const float *)rf->data)[7] == 21);
    lg_weights_free(w);
}

/* Writes a patched copy of a fixture to a temp file; returns its path (static). */
static const char *patched(const char *src, const char *find, size_t skip, const void *with, size_t with_n)
{
    static char path[64];
    char *f;
    size_t n;
    lg_err err;
    if (lg_read_file(src, 1 << 24, &f, &n, &err))
        return NULL;
    char *p = memmem(f, n, find, strlen(find));
    if (!p) {
        free(f);
        return NULL;
    }
    memcpy(p + strlen(find) + skip, with, with_n);
    snprintf(path, sizeof path, "/tmp/lg_test_gguf_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, f, n) != (ssize_t)n) {
        free(f);
        return NULL;
    }
    close(fd);
    free(f);
    return path;
}

static void test_load_errors(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    /* arch "llama" -> "gemma" (the value follows key, u32 type, u64 length) */
    const char *p = patched(FIX "tiny_llama.gguf", "general.architecture", 12, "gemma", 5);
    CHECK(p && lg_weights_load_gguf(p, NULL, &w, &err) == -1 && strstr(err.msg, "gemma") && !w);
    if (p) unlink(p);
    /* blk.0.attn_v.weight Q4_0 -> IQ4_NL (same block size, refused by name) */
    uint32_t iq4nl = 20;
    p = patched(FIX "tiny_llama.gguf", "blk.0.attn_v.weight", 4 + 16, &iq4nl, 4);
    CHECK(p && lg_weights_load_gguf(p, NULL, &w, &err) == -1 && strstr(err.msg, "IQ4_NL") && !w);
    if (getenv("LG_TEST_VERBOSE")) printf("  %s\n", err.msg);
    if (p) unlink(p);
    CHECK(lg_weights_load_gguf(FIX "quant_types.gguf", NULL, &w, &err) == -1 && strstr(err.msg, "block_count"));
    CHECK(lg_weights_load_gguf(FIX "absent.gguf", NULL, &w, &err) == -1 && err.msg[0]);
}

/* Byte flips in tiny_llama's header, loaded through the whole loader. */
static void test_loader_fuzz(void)
{
    char *file, path[64] = "/tmp/lg_test_gguf_fuzz_XXXXXX";
    size_t n;
    lg_err err = {{0}};
    if (lg_read_file(FIX "tiny_llama.gguf", 1 << 24, &file, &n, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    lg_gguf *g;
    CHECK(lg_gguf_open_mem(file, n, &g, &err) == 0);
    size_t header_end = g ? lg_gguf_data_offset(g) : 64;
    lg_gguf_free(g);
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) {
        free(file);
        return;
    }
    close(fd);
    uint8_t *m = malloc(n);
    uint64_t s = 0x1234567887654321ull;
    int ok = 0, failed = 0, no_msg = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(m, file, n);
        for (int f = 0; f < 1 + (int)(s % 3); f++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            m[s % header_end] ^= (uint8_t)(1u << ((s >> 32) & 7));
        }
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(m, 1, n, fp) != n) {
            CHECK(0);
            if (fp) fclose(fp);
            break;
        }
        fclose(fp);
        lg_weights *w = NULL;
        err.msg[0] = 0;
        if (lg_weights_load_gguf(path, NULL, &w, &err) == 0) ok++;
        else { failed++; no_msg += !err.msg[0]; }
        lg_weights_free(w);
    }
    CHECK_MSG(no_msg == 0, "%d loader failures without a message", no_msg);
    printf("loader byte flips: %d loaded, %d refused\n", ok, failed);
    unlink(path);
    free(m);
    free(file);
}

/* ---- 4. the real model ----------------------------------------------------------- */

static void test_smollm(void)
{
    const char *path = ".models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) {
        printf("skip: %s absent\n", path);
        return;
    }
    lg_err err = {{0}};
    lg_weights *w = NULL;
    lg_load_opts o = {.dequant_dtype = LG_F32, .dequantize = true, .progress = true};
    double t0 = lg_now();
    CHECK_MSG(lg_weights_load_gguf(path, &o, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    printf("SmolLM2-135M Q4_1 -> f32 loaded in %.2fs\n", lg_now() - t0);
    const lg_model_config *c = lg_weights_config(w);
    CHECK(!strcmp(c->arch, "llama") && c->n_layers == 30 && c->d_model == 576 && c->n_heads == 9 &&
          c->n_kv_heads == 3 && c->head_dim == 64 && c->d_ff == 1536 && c->vocab_size == 49152);
    CHECK(c->rope_theta == 100000.0f && c->tie_embeddings && c->rope_scaling == LG_ROPE_NONE && c->max_pos == 8192);
    CHECK(c->bos_id == 1 && c->n_eos >= 1 && c->eos_ids[0] == 2 && fabsf(c->rms_eps - 1e-5f) < 1e-9f);
    CHECK(lg_weights_tokenizer(w) && lg_weights_chat_template(w));

    size_t n;
    float *ref = read_f32(FIX "smollm_ref.f32", &n);
    const lg_wtensor *q = lg_weights_get(w, "model.layers.0.self_attn.q_proj.weight");
    const lg_wtensor *k = lg_weights_get(w, "model.layers.29.self_attn.k_proj.weight");
    CHECK(ref && n == 9 * 576 && q && k && q->dtype == LG_F32 && k->shape[0] == 192 && k->shape[1] == 576);
    if (ref && n == 9 * 576 && q && k) {
        static const int qrows[6] = {0, 1, 31, 32, 63, 575}, krows[3] = {0, 17, 191};
        int bad = 0;
        for (int i = 0; i < 9; i++)
            for (int j = 0; j < 576; j++) {
                float got = i < 6 ? at_f(q, qrows[i], j) : at_f(k, krows[i - 6], j);
                bad += !close_rel(got, ref[i * 576 + j], 1e-6f);
            }
        CHECK_MSG(bad == 0, "%d q/k values differ from gguf-py + numpy", bad);
    }
    free(ref);
    lg_weights_free(w);

    o.dequant_dtype = LG_F16;
    t0 = lg_now();
    CHECK_MSG(lg_weights_load_gguf(path, &o, &w, &err) == 0, "%s", err.msg);
    printf("SmolLM2-135M Q4_1 -> f16 loaded in %.2fs\n", lg_now() - t0);
    lg_weights_free(w);

    /* the default: Q4_1 blocks kept, the same values once decoded */
    o.dequantize = false;
    CHECK_MSG(lg_weights_load_gguf(path, &o, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    ref = read_f32(FIX "smollm_ref.f32", &n);
    q = lg_weights_get(w, "model.layers.0.self_attn.q_proj.weight");
    k = lg_weights_get(w, "model.layers.29.self_attn.k_proj.weight");
    const lg_wtensor *v = lg_weights_get(w, "model.layers.3.self_attn.v_proj.weight");
    CHECK(q && k && v && q->q == LG_Q4_1 && k->q == LG_Q4_1 && v->q == LG_Q4_1);
    CHECK(q && q->shape[0] == 576 && q->shape[1] == 576 && q->nbytes == (size_t)576 * 576 / 32 * 20);
    if (ref && n == 9 * 576 && q && k && q->q == LG_Q4_1 && k->q == LG_Q4_1) {
        static const int qrows[6] = {0, 1, 31, 32, 63, 575}, krows[3] = {0, 17, 191};
        int bad = 0;
        for (int i = 0; i < 9; i++) {
            float row[576];
            const lg_wtensor *t = i < 6 ? q : k;
            const int r = i < 6 ? qrows[i] : krows[i - 6];
            CHECK(lg_dequant_row(LG_GGML_Q4_1, (const char *)t->data + (size_t)r * (576 / 32 * 20), row, 576, &err) == 0);
            for (int j = 0; j < 576; j++) bad += !close_rel(row[j], ref[i * 576 + j], 1e-6f);
        }
        CHECK_MSG(bad == 0, "%d q/k values of the kept blocks differ from gguf-py + numpy", bad);
    }
    free(ref);
    /* v is not permuted: its blocks are the file's, in place */
    lg_gguf *g = NULL;
    CHECK(lg_gguf_open(path, &g, &err) == 0);
    const lg_gguf_tensor *fv = g ? lg_gguf_find_tensor(g, "blk.3.attn_v.weight") : NULL;
    CHECK(fv && v && fv->nbytes == v->nbytes && !memcmp(fv->data, v->data, v->nbytes));
    lg_gguf_free(g);
    lg_weights_free(w);
}

int main(void)
{
    test_dequant();
    test_hostile_built();
    test_hostile_mutations();
    test_tiny_llama();
    test_tiny_qwen2();
    test_load_errors();
    test_loader_fuzz();
    test_smollm();
    TEST_DONE();
}
