/*
 * test_vocab.c — the vocabulary: token bytes from a real tokenizer equal
 * llguidance's (fixtures/smollm2_tokens.tsv: LLTokenizer.decode_bytes of
 * single ids, specials excluded), EOS handling, the digest, and the trie's
 * invariants checked by brute force (a mask of every state equals the
 * tokens that can be accepted one by one; test_matcher.c does that over
 * grammars, here the structure itself).
 */
#include "engine/runtime/constrain/cinternal.h"
#include "tests/unit/engine/runtime/constrain/constrain_test.h"

int main(void)
{
    lg_err err = {{0}};
    char *text = NULL;
    size_t len;
    CHECK(!lg_read_file("tests/tokenizer/fixtures/smollm2/tokenizer.json", (size_t)1 << 30, &text, &len, &err));
    lg_tokenizer *t = NULL;
    CHECK(text && !lg_tokenizer_from_json(text, NULL, &t, &err));
    free(text);
    lg_cvocab *v = NULL;
    CHECK(t && !lg_cvocab_from_tokenizer(t, NULL, 0, &v, &err));
    if (!v)
        TEST_DONE();
    CHECK(lg_cvocab_n_vocab(v) == 49152);
    CHECK(lg_cvocab_mask_words(v) == 49152 / 32);
    FILE *f = fopen("tests/unit/engine/runtime/constrain/fixtures/smollm2_tokens.tsv", "r");
    CHECK(f != NULL);
    char line[1024];
    int rows = 0, bad = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *fl[2];
        if (ct_split(line, fl, 2) != 2)
            continue;
        int id = atoi(fl[0]);
        uint32_t n;
        const char *b = lg_cvocab_token_bytes(v, id, &n);
        if (!strcmp(fl[1], "special")) {
            if (b && id != lg_tokenizer_eos(t))
                bad++;
        } else {
            char hex[512] = "";
            for (uint32_t i = 0; b && i < n && i < 200; i++)
                sprintf(hex + 2 * i, "%02x", (unsigned char)b[i]);
            if (!b || strcmp(hex, fl[1])) {
                if (bad++ < 5)
                    fprintf(stderr, "token %d: ours %s, llguidance %s\n", id, hex, fl[1]);
            }
        }
        rows++;
    }
    if (f)
        fclose(f);
    CHECK(rows > 3000);
    CHECK_MSG(bad == 0, "%d tokens differ", bad);

    /* EOS: the tokenizer's, allowed only when complete */
    lg_constraint *c = ct_compile(v, LG_CK_CHOICE, "[\"yes\",\"no\"]", NULL);
    CHECK(c != NULL);
    lg_cmatch *m = lg_cmatch_new(c);
    int32_t eos = lg_tokenizer_eos(t);
    CHECK(!lg_cmatch_accepts(m, eos));
    CHECK(!lg_cmatch_advance_bytes(m, "yes", 3, &err));
    CHECK(lg_cmatch_accepts(m, eos));
    CHECK(ct_mask_vs_brute(m, v) == 0);
    CHECK(!lg_cmatch_advance(m, eos, &err) && lg_cmatch_is_done(m));
    lg_cmatch_free(m);
    lg_constraint_unref(c);

    /* the digest tells vocabularies apart */
    lg_cvocab *small = ct_vocab(NULL, 0, NULL);
    const char *x[] = {"ab"};
    lg_cvocab *small2 = ct_vocab(x, 1, NULL);
    CHECK(lg_cvocab_digest(small) != lg_cvocab_digest(v) && lg_cvocab_digest(small) != lg_cvocab_digest(small2));

    /* trie: preorder, subtree ranges, tokens sorted by bytes */
    for (int32_t i = 1; i < v->n_nodes; i++) {
        if (v->t_end[i] <= i || v->t_end[i] > v->t_end[0])
            bad++;
        for (int32_t j = i + 1; j < v->t_end[i]; j++)
            if (v->t_depth[j] <= v->t_depth[i]) {
                bad++;
                break;
            }
        if (i > 1 && v->t_depth[i] > v->t_depth[i - 1] + 1)
            bad++;
    }
    CHECK_MSG(bad == 0, "trie invariants: %d", bad);
    /* every non-excluded token is reachable by its bytes */
    int reach_bad = 0;
    for (int id = 0; id < v->n_vocab; id += 7) {
        if (v->excluded[id])
            continue;
        int32_t node = 0;
        for (uint32_t k = 0; k < v->len[id] && node >= 0; k++) {
            int32_t found = -1;
            for (int32_t ch = node + 1; ch < v->t_end[node]; ch = v->t_end[ch])
                if (v->t_byte[ch] == v->blob[v->off[id] + k]) {
                    found = ch;
                    break;
                }
            node = found;
        }
        bool has = false;
        for (int32_t k = 0; node >= 0 && k < v->t_ntok[node]; k++)
            has |= v->tok_sorted[v->t_tok0[node] + k] == id;
        reach_bad += !has;
    }
    CHECK_MSG(reach_bad == 0, "%d tokens not found in the trie", reach_bad);
    lg_cvocab_free(small);
    lg_cvocab_free(small2);
    lg_cvocab_free(v);
    lg_tokenizer_free(t);
    TEST_DONE();
}
