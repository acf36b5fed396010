/*
 * fuzz_constrain.c — constraints from tenants: any bytes as a JSON schema, a
 * regex, a Lark grammar or a choice list, compiled under small limits, then
 * a matcher driven by the rest of the input (mask, advance by an allowed
 * token, advance by raw bytes, rollback, clone, forced bytes, completion).
 *
 * Input: byte 0 picks the kind (mod 6) and the whitespace; the source runs to
 * the first NUL; every later byte is one matcher command. Checks: compile
 * either succeeds or fails with a code in 1..5, a one-line message; every
 * mask has the same bits as lg_cmatch_accepts for a sample of tokens; an
 * allowed token is always accepted; after a refused advance the mask is
 * unchanged; rollback restores the mask of that step; nothing leaks
 * (ASan/LSan) or hangs (limits keep every step small).
 *
 * libFuzzer: cmake -DCMAKE_C_COMPILER=clang, target fuzz_constrain. Without
 * clang the same file builds as a plain program (target fuzz_constrain_main,
 * -DLG_FUZZ_MAIN): it runs each file named on the command line as one
 * input, or a built-in set of inputs when none is given.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/constrain/constrain.h"

static lg_cvocab *fz_vocab(void)
{
    static lg_cvocab *v;
    if (v)
        return v;
    static const char *const extra[] = {"\"", "\",", "\"}", "{\"", "\":", "ab", "abc", "true", "null", "12", "],",
                                        "[{", "\\n", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f", "a\"b", "  ", "-0"};
    int ne = (int)(sizeof extra / sizeof extra[0]), n = 256 + ne + 1;
    const char *t[256 + 19 + 1];
    uint32_t len[256 + 19 + 1];
    bool sp[256 + 19 + 1] = {0};
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        t[i] = &bytes[i];
        len[i] = 1;
    }
    for (int i = 0; i < ne; i++) {
        t[256 + i] = extra[i];
        len[256 + i] = (uint32_t)strlen(extra[i]);
    }
    int32_t eos = n - 1;
    t[eos] = "";
    len[eos] = 0;
    sp[eos] = true;
    lg_err err;
    if (lg_cvocab_from_bytes(n, t, len, sp, &eos, 1, &v, &err))
        abort();
    return v;
}

static void fz_check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_constrain: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    lg_cvocab *v = fz_vocab();
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    size_t slen = nul ? (size_t)(nul - data - 1) : size - 1;
    const uint8_t *cmd = nul ? nul + 1 : data + size, *end = data + size;
    lg_copts o = {.kind = (lg_ckind)(data[0] % 6), .whitespace = (data[0] / 6) & 1 ? LG_CWS_SPACED : LG_CWS_COMPACT};
    o.limits = (lg_climits){.max_compile_ms = 300, .max_nfa_states = 200000, .max_dfa_states = 20000,
                            .max_rules = 2000, .max_frames = 100000, .max_stack = 128, .max_tops = 64};
    lg_constraint *c = NULL;
    lg_cerr e;
    if (lg_constraint_compile(v, &o, (const char *)data + 1, slen, &c, &e)) {
        fz_check(e.code >= 1 && e.code <= 5 && e.msg[0] && !strchr(e.msg, '\n'), "bad refusal");
        return 0;
    }
    int nw = lg_cvocab_mask_words(v), nv = lg_cvocab_n_vocab(v);
    uint32_t *mask = calloc((size_t)nw, 4), *m2 = calloc((size_t)nw, 4);
    lg_cmatch *m = lg_cmatch_new(c), *clone = NULL;
    lg_err err;
    char buf[256];
    for (; m && cmd < end; cmd++) {
        uint8_t op = *cmd;
        int cnt = lg_cmatch_mask(m, mask, nw, &err);
        if (cnt < 0)
            break;
        for (int i = op % 7; i < nv; i += 7) /* a sample of tokens against accepts() */
            fz_check((int)((mask[i >> 5] >> (i & 31)) & 1) == (int)lg_cmatch_accepts(m, i), "mask != accepts");
        switch (op >> 5) {
        case 0:
        case 1:
        case 2: { /* advance by the k-th allowed token */
            if (cnt == 0)
                break;
            int k = op % cnt, tok = -1;
            for (int i = 0; i < nv && tok < 0; i++)
                if ((mask[i >> 5] >> (i & 31) & 1) && k-- == 0)
                    tok = i;
            fz_check(lg_cmatch_advance(m, tok, &err) == 0, "allowed token refused");
            break;
        }
        case 3: { /* a raw byte, maybe refused: then nothing changes */
            char b = (char)(op * 37);
            if (lg_cmatch_advance_bytes(m, &b, 1, &err)) {
                lg_cmatch_mask(m, m2, nw, &err);
                fz_check(!memcmp(mask, m2, (size_t)nw * 4), "refusal changed the state");
            }
            break;
        }
        case 4: { /* rollback */
            int k = op % 4, h = lg_cmatch_history(m);
            fz_check(lg_cmatch_rollback(m, k) == (k <= h ? 0 : -1), "rollback");
            break;
        }
        case 5: /* clone, or swap to the clone */
            if (!clone)
                clone = lg_cmatch_clone(m);
            else {
                lg_cmatch_free(m);
                m = clone;
                clone = NULL;
            }
            break;
        case 6:
            lg_cmatch_forced_bytes(m, buf, sizeof buf);
            break;
        default:
            lg_cmatch_shortest_completion(m, buf, sizeof buf);
            break;
        }
    }
    lg_cmatch_free(clone);
    lg_cmatch_free(m);
    lg_constraint_unref(c);
    free(mask);
    free(m2);
    return 0;
}

#ifdef LG_FUZZ_MAIN
static const char *const SEEDS[] = {
    "\x00{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^x+$\"}},\"required\":[\"a\"]}",
    "\x03(ab|a)*[0-9]{2,3}",
    "\x04start: \"[\" (start (\",\" start)*)? \"]\" | /[a-z]+/",
    "\x05[\"yes\",\"no\",\"n\\u00e9\"]",
    "\x01",
    "\x02",
    "\x06{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"$ref\":\"#/$defs/t\"}",
};

int main(int argc, char **argv)
{
    int runs = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            continue;
        static uint8_t buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    if (argc < 2)
        for (size_t s = 0; s < sizeof SEEDS / sizeof SEEDS[0]; s++) {
            /* the seed, a NUL, then a run of commands derived from it */
            uint8_t in[4096];
            size_t n = strlen(SEEDS[s] + 1) + 1;
            memcpy(in, SEEDS[s], n);
            in[n++] = 0;
            for (int k = 0; k < 400; k++)
                in[n++] = (uint8_t)(k * 73 + s * 11);
            LLVMFuzzerTestOneInput(in, n);
            runs++;
        }
    printf("%d inputs\n", runs);
    return 0;
}
#endif
