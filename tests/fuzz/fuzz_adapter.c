/*
 * fuzz_adapter.c — libFuzzer harness for the PEFT adapter parser
 * (adapters/peft.c over engine/model/safetensors.c): the bytes a tenant uploads
 * (adapter_config.json and adapter_model.safetensors) are untrusted.
 *
 * Input layout: bytes 0-1 (little endian) the config's length L (clamped to
 * what follows), then L bytes of adapter_config.json, then the safetensors
 * file. The base model is the golden LoRA fixtures' (tests/golden/
 * lora_fixtures/base: 2 layers, d 128, 4 heads of 32, 2 KV heads, d_ff 256),
 * so the fixtures' adapters, packed this way, are the seed corpus. A parse
 * that succeeds is checked for sane accessors and finite weights (NaN and
 * Inf are refused by the parser); one that fails must say why in one line.
 * The safetensors header is read by a streaming parser whose memory is
 * bounded by 3 x the header, so -rss_limit_mb catches any amplification.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_adapter
 *   python3 tests/fuzz/pack_adapter_seeds.py build-fuzz/corpus_adapter     # the fixtures as seeds
 *   build-fuzz/fuzz_adapter build-fuzz/corpus_adapter -max_total_time=300 -max_len=70000
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/peft.h"

static const lg_model_config k_base = {
    .arch = "llama", .n_layers = 2, .d_model = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
    .d_ff = 256, .vocab_size = 320, .max_pos = 2048, .rope_theta = 10000.0f, .rms_eps = 1e-5f,
    .weight_dtype = LG_F32, .bos_id = 1, .eos_ids = {2}, .n_eos = 1,
};

static int all_finite(const lg_adapter *a)
{
    const lg_dtype dt = lg_adapter_dtype(a);
    const size_t es = lg_dtype_size(dt);
    for (int i = 0; i < lg_adapter_n_modules(a); i++) {
        const lg_lora_module *m = lg_adapter_module(a, i);
        const void *w[2] = {m->A, m->B};
        const size_t cnt[2] = {(size_t)m->rank * (size_t)m->in_dim, (size_t)m->out_dim * (size_t)m->rank};
        for (int k = 0; k < 2; k++)
            for (size_t e = 0; e < cnt[k]; e++) {
                float f;
                lg_to_f32(&f, (const char *)w[k] + e * es, dt, 1);
                if (!isfinite(f))
                    return 0;
            }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 2)
        return 0;
    size_t L = (size_t)d[0] | (size_t)d[1] << 8;
    if (L > n - 2)
        L = n - 2;
    /* separate copies, so that reads past either part are caught */
    char *cfg = malloc(L ? L : 1);
    const size_t sn = n - 2 - L;
    uint8_t *st = malloc(sn ? sn : 1);
    memcpy(cfg, d + 2, L);
    memcpy(st, d + 2 + L, sn);
    lg_adapter *a = NULL;
    lg_err err = {0};
    const int rc = lg_adapter_parse(cfg, L, st, sn, "fuzz", &k_base, 64, &a, &err);
    if (rc == 0) {
        if (!a || lg_adapter_max_rank(a) < 1 || lg_adapter_max_rank(a) > 64 || lg_adapter_n_modules(a) < 1 ||
            strlen(lg_adapter_digest(a)) != 64 || !all_finite(a))
            abort();
    } else if (a || !err.msg[0] || strchr(err.msg, '\n')) {
        abort(); /* a failure leaves nothing behind and says why */
    }
    lg_adapter_free(a);
    free(cfg);
    free(st);
    return 0;
}
