/*
 * fuzz_adapter.c — libFuzzer harness for the PEFT adapter parser
 * (adapters/peft.c over engine/safetensors.c): the bytes a tenant uploads
 * (adapter_config.json and adapter_model.safetensors) are untrusted.
 *
 * Input layout: bytes 0-1 (little endian) the config's length L (clamped to
 * what follows), then L bytes of adapter_config.json, then the safetensors
 * file. The base model is the golden LoRA fixtures' (tests/golden/
 * lora_fixtures/base: 2 layers, d 128, 4 heads of 32, 2 KV heads, d_ff 256),
 * so the fixtures' adapters, packed this way, are the seed corpus. A parse
 * that succeeds is checked for sane accessors; one that fails must say why.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_adapter
 *   python3 tests/fuzz/pack_adapter_seeds.py build-fuzz/corpus_adapter     # the fixtures as seeds
 *   build-fuzz/fuzz_adapter build-fuzz/corpus_adapter -max_total_time=300 -max_len=70000
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/peft.h"

static const lg_model_config k_base = {
    .arch = "llama", .n_layers = 2, .d_model = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
    .d_ff = 256, .vocab_size = 320, .max_pos = 2048, .rope_theta = 10000.0f, .rms_eps = 1e-5f,
    .weight_dtype = LG_F32, .bos_id = 1, .eos_ids = {2}, .n_eos = 1,
};

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
            strlen(lg_adapter_digest(a)) != 64)
            abort();
    } else if (a || !err.msg[0]) {
        abort(); /* a failure leaves nothing behind and says why */
    }
    lg_adapter_free(a);
    free(cfg);
    free(st);
    return 0;
}
