/*
 * fuzz_gguf.c — libFuzzer harness for the GGUF reader (engine/model/gguf.c) and
 * the dequantizers it feeds (engine/model/quant.c): a model file is the operator's,
 * but a bad one must get a clear error, never a crash.
 *
 * The input is the file. When it parses: every key is read with the getter
 * of its type (arrays converted, as the loaders do), every tensor's data must
 * lie inside the buffer, find_tensor must return the same entry, and tensors
 * of up to 64 Ki elements of a supported type are dequantized row by row.
 * A file that does not parse must say why.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_gguf
 *   mkdir -p build-fuzz/corpus_gguf && cp tests/fixtures/gguf/*.gguf build-fuzz/corpus_gguf/
 *   build-fuzz/fuzz_gguf build-fuzz/corpus_gguf -max_total_time=300 -max_len=140000
 *   (the small GGUF files of tests/fixtures/gguf are the seeds; they are copied because libFuzzer
 *   adds its findings to the first directory given)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/model/quant.h"

static void read_kv(const lg_gguf *g, int i)
{
    const char *key = lg_gguf_kv_key(g, i);
    if (!key || lg_gguf_find_kv(g, key) < 0)
        abort();
    lg_err err = {0};
    int64_t iv;
    double fv;
    bool bv;
    const char *sv;
    size_t n;
    switch (lg_gguf_kv_type(g, i)) {
    case LG_GGUF_STR:
        if (lg_gguf_get_str(g, key, &sv, &n, &err) == 1 && strlen(sv) > n)
            abort();
        break;
    case LG_GGUF_BOOL:
        (void)lg_gguf_get_bool(g, key, &bv, &err);
        break;
    case LG_GGUF_F32:
    case LG_GGUF_F64:
        (void)lg_gguf_get_float(g, key, &fv, &err);
        break;
    case LG_GGUF_ARR: {
        lg_gguf_vtype et;
        uint64_t cnt;
        if (lg_gguf_get_arr_info(g, key, &et, &cnt, &err) != 1)
            break;
        if (et == LG_GGUF_STR) {
            char **s = NULL;
            if (lg_gguf_get_arr_str(g, key, &s, &n, &err) == 1) {
                for (size_t j = 0; j < n; j++)
                    if (!s[j])
                        abort();
                free(s);
            }
        } else {
            float *f = NULL;
            int32_t *v = NULL;
            if (lg_gguf_get_arr_f32(g, key, &f, &n, &err) == 1)
                free(f);
            if (lg_gguf_get_arr_i32(g, key, &v, &n, &err) == 1)
                free(v);
        }
        break;
    }
    default:
        (void)lg_gguf_get_int(g, key, &iv, &err);
        (void)lg_gguf_get_float(g, key, &fv, &err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    uint8_t *buf = malloc(n ? n : 1); /* its own copy: reads past the end are caught */
    memcpy(buf, d, n);
    lg_gguf *g = NULL;
    lg_err err = {0};
    if (lg_gguf_open_mem(buf, n, &g, &err) != 0) {
        if (g || !err.msg[0])
            abort(); /* a refusal leaves nothing and says why */
        free(buf);
        return 0;
    }
    for (int i = 0; i < lg_gguf_n_kv(g); i++) read_kv(g, i);
    for (int i = 0; i < lg_gguf_n_tensors(g); i++) {
        const lg_gguf_tensor *t = lg_gguf_tensor_at(g, i);
        if (!t || !t->name || lg_gguf_find_tensor(g, t->name) != t)
            abort();
        const uint8_t *p = t->data;
        if (t->nbytes && (p < buf || t->offset > n || t->nbytes > n - t->offset || p + t->nbytes > buf + n))
            abort(); /* data outside the file */
        const int64_t row = t->ne[0];
        if (!lg_quant_supported(t->type) || t->n_elems == 0 || t->n_elems > 65536 || row <= 0 ||
            t->n_elems % (uint64_t)row != 0)
            continue;
        size_t rb;
        if (lg_ggml_nbytes(t->type, (uint64_t)row, &rb, &err) != 0)
            continue;
        float *f = malloc(sizeof *f * (size_t)row);
        for (uint64_t r = 0; r < t->n_elems / (uint64_t)row; r++)
            if ((r + 1) * rb <= t->nbytes)
                (void)lg_dequant_row(t->type, p + r * rb, f, row, &err);
        free(f);
    }
    lg_gguf_free(g);
    free(buf);
    return 0;
}
