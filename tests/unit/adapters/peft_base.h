/*
 * peft_base.h — the tiny base model the PEFT fixtures were made for
 * (tests/fixtures/peft/make_fixtures.py): n_layers 2, d_model 64, n_heads 4,
 * n_kv_heads 2, head_dim 16, d_ff 128. Shared by the adapter unit tests.
 */
#ifndef LG_TEST_PEFT_BASE_H
#define LG_TEST_PEFT_BASE_H

#include <stdio.h>
#include <string.h>

#include "engine/model/model_config.h"

static inline lg_model_config base_config(void)
{
    lg_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "llama");
    c.n_layers = 2;
    c.d_model = 64;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.d_ff = 128;
    c.vocab_size = 100;
    c.max_pos = 128;
    c.rope_theta = 10000.0f;
    c.rms_eps = 1e-5f;
    c.weight_dtype = LG_F32;
    c.bos_id = -1;
    return c;
}

#endif
