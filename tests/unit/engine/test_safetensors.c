/*
 * test_safetensors.c — the safetensors reader against fixtures written by
 * tests/fixtures/hf/make_fixtures.py (the real `safetensors` package for the
 * tiny models, hand-made bytes for the hostile files), plus a mutation loop
 * over an in-memory copy of a valid file. Every hostile input must give -1
 * and a one-line message; run under ASan/UBSan to prove "no crash".
 */
#include "safetensors.h"
#include "test.h"

#include <stdint.h>

#define FIX "tests/fixtures/hf/"

/* Value the generator wrote at flat index i of tensor `name` (its HF name). */
static float fixture_value(const char *name, size_t i)
{
    unsigned k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        k += *p;
    k %= 97;
    return (float)((long)((i * 7 + k) % 97) - 48) / 64.0f;
}

static void test_valid(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "hostile/valid.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    CHECK(lg_st_count(f) == 1);
    const lg_st_tensor *t = lg_st_get(f, "a");
    CHECK(t && t == lg_st_at(f, 0));
    if (t) {
        CHECK(t->has_lg_dtype && t->dtype == LG_F32 && t->st_dtype == LG_ST_F32);
        CHECK(!strcmp(t->dtype_name, "F32"));
        CHECK(t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 2);
        CHECK(t->n_elems == 4 && t->nbytes == 16);
        float v[4];
        memcpy(v, t->data, 16);
        CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2 && v[3] == 3);
    }
    CHECK(lg_st_get(f, "b") == NULL);
    CHECK(lg_st_at(f, 1) == NULL && lg_st_at(f, -1) == NULL);
    CHECK(lg_st_metadata(f, "format") == NULL);

    /* the mapping can be taken away and outlives the file handle */
    lg_mmap m = {0};
    CHECK(lg_st_take_mmap(f, &m, &err) == 0 && m.data);
    CHECK(lg_st_take_mmap(f, &m, &err) == -1);
    const uint8_t *d = t ? t->data : NULL; /* this writer did not pad: may be misaligned */
    lg_st_close(f);
    if (d) {
        float v3;
        memcpy(&v3, d + 12, 4);
        CHECK(v3 == 3.0f);
    }
    lg_mmap_close(&m);
    lg_st_close(NULL);
}

static void test_i64(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "hostile/i64.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    const lg_st_tensor *t = lg_st_get(f, "ids");
    CHECK(t && !t->has_lg_dtype && t->st_dtype == LG_ST_I64 && !strcmp(t->dtype_name, "I64"));
    if (t) {
        int64_t v[2];
        memcpy(v, t->data, 16);
        CHECK(v[0] == 5 && v[1] == -6);
    }
    CHECK(lg_st_metadata(f, "format") && !strcmp(lg_st_metadata(f, "format"), "pt"));
    CHECK(lg_st_dtype_size(LG_ST_BF16) == 2 && lg_st_dtype_size(LG_ST_F64) == 8);
    lg_st_close(f);
}

static void test_tiny_llama_values(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "tiny_llama/model.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    CHECK(lg_st_count(f) == 21);
    CHECK(lg_st_metadata(f, "format") && !strcmp(lg_st_metadata(f, "format"), "pt"));
    int bad = 0;
    size_t prev_end = 0;
    for (int i = 0; i < lg_st_count(f); i++) {
        const lg_st_tensor *t = lg_st_at(f, i);
        CHECK(lg_st_get(f, t->name) == t);
        CHECK(t->dtype == LG_F16 && t->has_lg_dtype);
        CHECK(i == 0 || t->offset == prev_end); /* sorted, contiguous */
        prev_end = t->offset + t->nbytes;
        for (size_t e = 0; e < t->n_elems; e++)
            bad += lg_f16_to_f32(((const uint16_t *)t->data)[e]) != fixture_value(t->name, e);
    }
    CHECK_MSG(bad == 0, "%d values differ from the generator's", bad);
    const lg_st_tensor *q = lg_st_get(f, "model.layers.1.self_attn.k_proj.weight");
    CHECK(q && q->n_dims == 2 && q->shape[0] == 16 && q->shape[1] == 32);
    lg_st_close(f);
}

static void test_hostile(void)
{
    static const struct {
        const char *file, *needle;
    } cases[] = {
        {"too_short.safetensors", "at least 8"},
        {"header_past_eof.safetensors", "past the end"},
        {"header_huge.safetensors", "exceeds the limit"},
        {"header_not_json.safetensors", "not valid JSON"},
        {"header_not_object.safetensors", "start with '{'"},
        {"offsets_out_of_range.safetensors", "past the"},
        {"offsets_reversed.safetensors", "end before"},
        {"overlap.safetensors", "overlaps"},
        {"hole.safetensors", "belong to no tensor"},
        {"trailing.safetensors", "cover 8 bytes of a 16-byte"},
        {"nbytes_mismatch.safetensors", "need 8 bytes"},
        {"shape_overflow.safetensors", "overflows"},
        {"bytes_overflow.safetensors", "overflow"},
        {"shape_negative.safetensors", "non-negative"},
        {"duplicate_names.safetensors", "duplicate"},
        {"bad_dtype.safetensors", "unknown dtype 'F99'"},
        {"metadata_not_string.safetensors", "not a string"},
        {"no_offsets.safetensors", "data_offsets"},
        {"does_not_exist.safetensors", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "hostile/%s", cases[i].file);
        lg_err err = {{0}};
        lg_st_file *f = (lg_st_file *)1;
        int rc = lg_st_open(path, &f, &err);
        CHECK_MSG(rc == -1 && f == NULL, "%s opened", cases[i].file);
        CHECK_MSG(strstr(err.msg, cases[i].needle) != NULL, "%s: message '%s' lacks '%s'", cases[i].file, err.msg,
                  cases[i].needle);
        CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n'), "%s: message not one line", cases[i].file);
    }
}

/* Every truncation of a real file and many random byte mutations of its
 * header: the reader must fail cleanly or succeed with in-bounds views. */
static void test_mutations(void)
{
    lg_mmap m;
    lg_err err = {{0}};
    if (lg_mmap_open(FIX "tiny_llama/model.safetensors", &m, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    size_t n = m.size;
    uint8_t *buf = malloc(n);
    uint64_t hl = 0;
    memcpy(&hl, m.data, 8);
    int opened = 0, failed = 0;
    for (size_t len = 0; len < n; len += (len < hl + 64 ? 1 : 997)) {
        memcpy(buf, m.data, n);
        lg_st_file *f;
        if (lg_st_open_buffer(buf, len, "trunc", &f, &err) == 0) {
            opened++;
            lg_st_close(f);
        } else
            failed++;
    }
    CHECK(opened == 0 && failed > 0); /* no strict prefix of a file is a valid file */
    uint64_t x = 88172645463325252ull;
    int ok_views = 1;
    for (int it = 0; it < 4000; it++) {
        memcpy(buf, m.data, n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t pos = 8 + (size_t)(x % hl);
            static const char alphabet[] = "0123456789[]{},:\"-eE. FBI";
            buf[pos] = (it & 1) ? (uint8_t)(x >> 32) : (uint8_t)alphabet[(x >> 24) % (sizeof alphabet - 1)];
        }
        lg_st_file *f;
        if (lg_st_open_buffer(buf, n, "mut", &f, &err) == 0) {
            for (int i = 0; i < lg_st_count(f); i++) {
                const lg_st_tensor *t = lg_st_at(f, i);
                const uint8_t *p = t->data;
                ok_views &= p >= buf && p + t->nbytes <= buf + n;
            }
            lg_st_close(f);
        } else {
            ok_views &= err.msg[0] != 0 && !strchr(err.msg, '\n');
        }
    }
    CHECK(ok_views);
    free(buf);
    lg_mmap_close(&m);
}

int main(void)
{
    test_valid();
    test_i64();
    test_tiny_llama_values();
    test_hostile();
    test_mutations();
    TEST_DONE();
}
