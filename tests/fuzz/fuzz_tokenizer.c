/*
 * fuzz_tokenizer.c — libFuzzer harness for the tokenizer
 * (engine/model/tokenizer*.c, unicode.c): every prompt a tenant sends is
 * encoded by it and every token the model emits is decoded, whole and streamed.
 *
 * Input layout: byte 0: bit 0 the tokenizer (SmolLM2's byte-level BPE or
 * Mistral's SentencePiece-style BPE, tests/tokenizer/fixtures), bit 1
 * add_bos, bit 2 parse_special, bit 3 skip_special, bit 4 the rest is token
 * ids (little-endian u16s, taken modulo the vocabulary) instead of text.
 * Checks: the ids encode gives are in the vocabulary; decoding them (or the
 * given ids) whole equals the concatenation of the streaming detokenizer's
 * pieces (its contract), and every piece is valid UTF-8 on its own.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_tokenizer
 *   build-fuzz/fuzz_tokenizer -max_total_time=300 -max_len=2048      (from the repo root)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_impl.h" /* lg_utf8_next */

static lg_tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *dirs[2] = {"tests/tokenizer/fixtures/smollm2", "tests/tokenizer/fixtures/mistral"};
    const char *root = getenv("LG_ROOT"); /* the repo root when not run from it */
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s%s%s/tokenizer.json", root ? root : "", root ? "/" : "", dirs[i]);
        char *js = NULL;
        lg_err err = {0};
        if (lg_read_file(path, 64u << 20, &js, NULL, &err) != 0 ||
            lg_tokenizer_from_json(js, NULL, &g_tok[i], &err) != 0) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, err.msg);
            exit(1);
        }
        free(js);
    }
    return 0;
}

static bool utf8_ok(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l;
        if (lg_utf8_next((const unsigned char *)p + i, n - i, &cp, &l) != LG_U8_OK)
            return false;
        i += (size_t)l;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    const lg_tokenizer *t = g_tok[d[0] & 1];
    const bool add_bos = d[0] & 2, special = d[0] & 4, skip = d[0] & 8, as_ids = d[0] & 16;
    const int V = lg_tokenizer_n_vocab(t);
    int32_t *ids = NULL;
    int n_ids = 0;
    lg_err err = {0};
    if (as_ids) {
        n_ids = (int)((n - 1) / 2);
        ids = malloc(sizeof *ids * (size_t)(n_ids ? n_ids : 1));
        for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)((d[1 + 2 * i] | d[2 + 2 * i] << 8) % V);
    } else {
        char *text = malloc(n - 1 ? n - 1 : 1); /* its own copy: reads past the end are caught */
        memcpy(text, d + 1, n - 1);
        const int rc = lg_tokenizer_encode(t, text, n - 1, add_bos, special, &ids, &n_ids, &err);
        free(text);
        if (rc != 0) {
            if (!err.msg[0])
                abort(); /* a refusal says why */
            return 0;
        }
        for (int i = 0; i < n_ids; i++)
            if (ids[i] < 0 || ids[i] >= V)
                abort();
    }
    char *whole = NULL;
    size_t whole_n = 0;
    if (lg_tokenizer_decode_n(t, ids, n_ids, skip, &whole, &whole_n, &err) != 0)
        abort();
    lg_detok *dt = lg_detok_new(t, skip);
    if (!dt)
        abort();
    char *cat = malloc(whole_n + 1);
    size_t at = 0;
    for (int i = 0; i <= n_ids; i++) {
        size_t len = 0;
        const char *piece = i < n_ids ? lg_detok_push(dt, ids[i], &len) : lg_detok_flush(dt, &len);
        if (!piece && len)
            abort();
        if (len && (at + len > whole_n || !utf8_ok(piece, len)))
            abort(); /* longer than the whole decode, or a piece of broken UTF-8 */
        if (len)
            memcpy(cat + at, piece, len);
        at += len;
    }
    if (at != whole_n || memcmp(cat, whole, whole_n) != 0)
        abort(); /* the streamed pieces are the whole decode */
    lg_detok_free(dt);
    free(cat);
    free(whole);
    free(ids);
    return 0;
}
