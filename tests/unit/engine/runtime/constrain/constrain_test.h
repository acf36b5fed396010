/*
 * constrain_test.h — what the constrain/ unit tests share: small
 * vocabularies, compiling with a checked error, language membership through
 * a matcher, fixture lines (JSON-encoded fields), and a brute-force mask
 * (every token tried by lg_cmatch_accepts) to hold lg_cmatch_mask against.
 */
#ifndef LG_CONSTRAIN_TEST_H
#define LG_CONSTRAIN_TEST_H

#include <jansson.h>

#include "engine/runtime/constrain/constrain.h"
#include "tests/unit/test.h"

/* 256 single bytes, then the extra tokens given, then one EOS token (id returned in *eos). */
static __attribute__((unused)) lg_cvocab *ct_vocab(const char *const *extra, int n_extra, int32_t *eos)
{
    int n = 256 + n_extra + 1;
    const char **t = calloc((size_t)n, sizeof *t);
    uint32_t *len = calloc((size_t)n, sizeof *len);
    bool *sp = calloc((size_t)n, sizeof *sp);
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        t[i] = &bytes[i];
        len[i] = 1;
    }
    for (int i = 0; i < n_extra; i++) {
        t[256 + i] = extra[i];
        len[256 + i] = (uint32_t)strlen(extra[i]);
    }
    int32_t e = n - 1;
    t[e] = "</s>";
    len[e] = 4;
    sp[e] = true;
    lg_cvocab *v = NULL;
    lg_err err = {{0}};
    if (lg_cvocab_from_bytes(n, t, len, sp, &e, 1, &v, &err))
        fprintf(stderr, "vocab: %s\n", err.msg);
    free(t);
    free(len);
    free(sp);
    if (eos)
        *eos = e;
    return v;
}

static __attribute__((unused)) lg_constraint *ct_compile(const lg_cvocab *v, lg_ckind kind, const char *src, lg_cerr *err)
{
    lg_copts o = {.kind = kind};
    lg_constraint *c = NULL;
    lg_cerr e;
    if (!err)
        err = &e;
    if (lg_constraint_compile(v, &o, src, src ? strlen(src) : 0, &c, err))
        return NULL;
    return c;
}

/* 1 if text (n bytes) is in the language, 0 if not */
static __attribute__((unused)) int ct_member(lg_constraint *c, const char *text, size_t n)
{
    lg_cmatch *m = lg_cmatch_new(c);
    lg_err err;
    int r = lg_cmatch_advance_bytes(m, text, n, &err) == 0 && lg_cmatch_is_accepting(m);
    lg_cmatch_free(m);
    return r;
}

/* a JSON string field -> malloc'd bytes (NUL-terminated), length in *n */
static __attribute__((unused)) char *ct_json_str(const char *field, size_t *n)
{
    json_t *j = json_loads(field, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!json_is_string(j)) {
        json_decref(j);
        return NULL;
    }
    *n = json_string_length(j);
    char *s = malloc(*n + 1);
    memcpy(s, json_string_value(j), *n + 1);
    json_decref(j);
    return s;
}

/* splits a tab-separated line in place; returns the number of fields */
static __attribute__((unused)) int ct_split(char *line, char **f, int max)
{
    int k = 0;
    line[strcspn(line, "\n")] = 0;
    while (k < max) {
        f[k++] = line;
        char *t = strchr(line, '\t');
        if (!t)
            break;
        *t = 0;
        line = t + 1;
    }
    return k;
}

/* Checks lg_cmatch_mask against accepts() of every token; returns mismatches. */
static __attribute__((unused)) int ct_mask_vs_brute(lg_cmatch *m, const lg_cvocab *v)
{
    int nw = lg_cvocab_mask_words(v), nv = lg_cvocab_n_vocab(v), bad = 0;
    uint32_t *mask = calloc((size_t)nw, 4);
    lg_err err;
    int cnt = lg_cmatch_mask(m, mask, nw, &err);
    int brute = 0;
    for (int i = 0; i < nv; i++) {
        bool a = lg_cmatch_accepts(m, i), b = mask[i >> 5] >> (i & 31) & 1;
        brute += a;
        if (a != b && bad++ < 5)
            fprintf(stderr, "token %d: accepts %d, mask %d\n", i, a, b);
    }
    if (cnt != brute)
        bad++;
    free(mask);
    return bad;
}

#endif
