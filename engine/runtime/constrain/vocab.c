/*
 * vocab.c — a tokenizer's vocabulary as byte strings and a token trie.
 *
 * Token bytes: the tokenizer stores token text as its vocabulary spells it.
 * Byte-level BPE (GPT-2, Llama-3, SmolLM, Qwen2) spells bytes with the GPT-2
 * alphabet; a token whose every character is in the alphabet is mapped back
 * to bytes, any other (an added token with a raw space, say) is its own
 * UTF-8, which is what HF's ByteLevel decoder does. SentencePiece-style
 * vocabularies (Llama-2, Mistral: recognised by their "▁" or <0x00> tokens)
 * spell a space as U+2581 and a raw byte as <0xXX>. A token may be a partial
 * UTF-8 sequence; the grammar works on bytes, so that is fine. Special
 * tokens and empty ones are excluded: never allowed, except the EOS ids.
 *
 * The trie: tokens sorted by bytes, laid out in preorder so a subtree is
 * the contiguous range [i, t_end[i]) and a walk that fails at a node skips
 * its subtree with one assignment. Tokens with equal bytes share a node.
 * For a 128k vocabulary: ~0.4 M nodes, ~6 MB, built in ~50 ms.
 */
#include "engine/runtime/constrain/cinternal.h"

#include <stdio.h>
#include <stdlib.h>

/* GPT-2 byte-level alphabet: code point -> byte, -1 if not in it. */
static int lg_gpt2_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 68) {
        int k = (int)cp - 256, n = 0;
        for (int b = 0; b < 256; b++) {
            if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
                continue;
            if (n++ == k)
                return b;
        }
    }
    return -1;
}

static int lg_utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > n)
        return 0;
    uint32_t v = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 63);
    }
    *cp = v;
    return len;
}

typedef struct lg_tb {
    uint8_t *p;
    size_t n, cap;
} lg_tb;

static int lg_tb_put(lg_tb *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1 << 16;
        while (nc < b->n + n)
            nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np)
            return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* Appends the bytes a token's vocabulary text stands for. */
static int lg_token_bytes(const char *text, bool spm, lg_tb *out)
{
    size_t n = strlen(text);
    const unsigned char *s = (const unsigned char *)text;
    if (spm) {
        if (n == 6 && !memcmp(text, "<0x", 3) && text[5] == '>') {
            unsigned v;
            if (sscanf(text + 3, "%2x", &v) == 1) {
                uint8_t b = (uint8_t)v;
                return lg_tb_put(out, &b, 1);
            }
        }
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                if (lg_tb_put(out, " ", 1))
                    return -1;
                i += 3;
            } else {
                if (lg_tb_put(out, s + i, 1))
                    return -1;
                i++;
            }
        }
        return 0;
    }
    size_t start = out->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = lg_utf8_dec(s + i, n - i, &cp);
        int b = k ? lg_gpt2_byte(cp) : -1;
        if (b < 0) {
            out->n = start; /* not in the alphabet: the raw text */
            return lg_tb_put(out, text, n);
        }
        uint8_t by = (uint8_t)b;
        if (lg_tb_put(out, &by, 1))
            return -1;
        i += (size_t)k;
    }
    return 0;
}

static int lg_cmp_tok(const void *a, const void *b, void *ctx)
{
    const lg_cvocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static uint64_t lg_fnv64(uint64_t h, const void *p, size_t n)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int lg_vocab_build_trie(lg_cvocab *v, lg_err *err)
{
    int32_t nt = 0;
    for (int i = 0; i < v->n_vocab; i++)
        if (!v->excluded[i])
            nt++;
    v->tok_sorted = malloc((size_t)nt * 4 + 4);
    if (!v->tok_sorted)
        return lg_fail(err, "constrain: out of memory building the token trie");
    nt = 0;
    for (int i = 0; i < v->n_vocab; i++)
        if (!v->excluded[i])
            v->tok_sorted[nt++] = i;
    qsort_r(v->tok_sorted, (size_t)nt, 4, lg_cmp_tok, v);
    /* upper bound on nodes: 1 + total bytes */
    size_t cap = 1;
    for (int32_t k = 0; k < nt; k++)
        cap += v->len[v->tok_sorted[k]];
    if (cap > 0x7fffffff)
        return lg_fail(err, "constrain: vocabulary too large");
    v->t_byte = malloc(cap);
    v->t_depth = malloc(cap * 2);
    v->t_end = malloc(cap * 4);
    v->t_tok0 = malloc(cap * 4);
    v->t_ntok = calloc(cap, 4);
    int32_t *open = malloc(((size_t)v->max_len + 2) * 4); /* open node per depth */
    if (!v->t_byte || !v->t_depth || !v->t_end || !v->t_tok0 || !v->t_ntok || !open) {
        free(open);
        return lg_fail(err, "constrain: out of memory building the token trie");
    }
    int32_t n = 1;
    v->t_byte[0] = 0;
    v->t_depth[0] = 0;
    v->t_tok0[0] = 0;
    open[0] = 0;
    int depth = 0; /* depth of the deepest open node */
    const uint8_t *prev = NULL;
    uint32_t plen = 0;
    for (int32_t k = 0; k < nt; k++) {
        int32_t id = v->tok_sorted[k];
        const uint8_t *s = v->blob + v->off[id];
        uint32_t len = v->len[id];
        uint32_t lcp = 0;
        while (prev && lcp < len && lcp < plen && s[lcp] == prev[lcp])
            lcp++;
        /* close open nodes deeper than lcp */
        while (depth > (int)lcp) {
            v->t_end[open[depth]] = n;
            depth--;
        }
        for (uint32_t d = lcp; d < len; d++) {
            v->t_byte[n] = s[d];
            v->t_depth[n] = (uint16_t)(d + 1);
            v->t_tok0[n] = k;
            v->t_ntok[n] = 0;
            open[++depth] = n;
            n++;
        }
        int32_t at = open[depth];
        if (v->t_ntok[at] == 0)
            v->t_tok0[at] = k;
        v->t_ntok[at]++;
        prev = s;
        plen = len;
    }
    while (depth > 0) {
        v->t_end[open[depth]] = n;
        depth--;
    }
    v->t_end[0] = n;
    v->n_nodes = n;
    free(open);
    return 0;
}

static int lg_vocab_finish(lg_cvocab *v, const int32_t *eos_ids, int n_eos, lg_err *err)
{
    v->n_words = (v->n_vocab + 31) / 32;
    v->eos = malloc((size_t)(n_eos > 0 ? n_eos : 1) * 4);
    if (!v->eos)
        return lg_fail(err, "constrain: out of memory");
    for (int i = 0; i < n_eos; i++) {
        if (eos_ids[i] < 0 || eos_ids[i] >= v->n_vocab)
            return lg_fail(err, "constrain: EOS id %d outside the vocabulary (%d)", eos_ids[i], v->n_vocab);
        v->eos[v->n_eos++] = eos_ids[i];
        v->excluded[eos_ids[i]] = 1;
    }
    v->max_len = 0;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < v->n_vocab; i++) {
        if (!v->excluded[i] && (int)v->len[i] > v->max_len)
            v->max_len = (int)v->len[i];
        uint32_t meta[2] = {v->len[i], v->excluded[i]};
        h = lg_fnv64(h, meta, sizeof meta);
        h = lg_fnv64(h, v->blob + v->off[i], v->len[i]);
    }
    h = lg_fnv64(h, v->eos, (size_t)v->n_eos * 4);
    v->digest = h;
    if (v->max_len > 60000)
        return lg_fail(err, "constrain: a token of %d bytes is too long", v->max_len);
    return lg_vocab_build_trie(v, err);
}

/* A vocabulary of n tokens with its per-token arrays allocated (offsets,
 * lengths, excluded flags: all zero); NULL when out of memory. */
static lg_cvocab *vocab_alloc(int n)
{
    lg_cvocab *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n_vocab = n;
    v->off = calloc((size_t)n, 4);
    v->len = calloc((size_t)n, 4);
    v->excluded = calloc((size_t)n, 1);
    if (!v->off || !v->len || !v->excluded) {
        lg_cvocab_free(v);
        return NULL;
    }
    return v;
}

int lg_cvocab_from_bytes(int n_vocab, const char *const *tokens, const uint32_t *lens, const bool *special,
                         const int32_t *eos_ids, int n_eos, lg_cvocab **out, lg_err *err)
{
    *out = NULL;
    if (n_vocab <= 0)
        return lg_fail(err, "constrain: empty vocabulary");
    lg_cvocab *v = vocab_alloc(n_vocab);
    lg_tb tb = {0};
    if (!v)
        return lg_fail(err, "constrain: out of memory");
    for (int i = 0; i < n_vocab; i++) {
        v->off[i] = (uint32_t)tb.n;
        v->len[i] = tokens[i] ? lens[i] : 0;
        if (tokens[i] && lg_tb_put(&tb, tokens[i], lens[i]))
            goto oom;
        if (!tokens[i] || lens[i] == 0 || (special && special[i]))
            v->excluded[i] = 1;
    }
    v->blob = tb.p;
    tb.p = NULL;
    if (lg_vocab_finish(v, eos_ids, n_eos, err)) {
        lg_cvocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
oom:
    free(tb.p);
    lg_cvocab_free(v);
    return lg_fail(err, "constrain: out of memory");
}

int lg_cvocab_from_tokenizer(const lg_tokenizer *t, const int32_t *eos_ids, int n_eos, lg_cvocab **out, lg_err *err)
{
    *out = NULL;
    int n = lg_tokenizer_n_vocab(t);
    if (n <= 0)
        return lg_fail(err, "constrain: empty vocabulary");
    bool spm = lg_tokenizer_token_id(t, "\xe2\x96\x81") >= 0 || lg_tokenizer_token_id(t, "<0x00>") >= 0;
    lg_cvocab *v = vocab_alloc(n);
    lg_tb tb = {0};
    if (!v)
        return lg_fail(err, "constrain: out of memory");
    for (int i = 0; i < n; i++) {
        const char *text = lg_tokenizer_token_text(t, i);
        v->off[i] = (uint32_t)tb.n;
        if (!text || lg_tokenizer_is_special(t, i)) {
            v->len[i] = 0;
            v->excluded[i] = 1;
            continue;
        }
        if (lg_token_bytes(text, spm, &tb))
            goto oom;
        v->len[i] = (uint32_t)(tb.n - v->off[i]);
        if (v->len[i] == 0)
            v->excluded[i] = 1;
    }
    v->blob = tb.p;
    tb.p = NULL;
    int32_t def_eos = lg_tokenizer_eos(t);
    if (n_eos <= 0 || !eos_ids) {
        eos_ids = &def_eos;
        n_eos = def_eos >= 0 ? 1 : 0;
    }
    if (lg_vocab_finish(v, eos_ids, n_eos, err)) {
        lg_cvocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
oom:
    free(tb.p);
    lg_cvocab_free(v);
    return lg_fail(err, "constrain: out of memory");
}

void lg_cvocab_free(lg_cvocab *v)
{
    if (!v)
        return;
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v->excluded);
    free(v->eos);
    free(v->t_byte);
    free(v->t_depth);
    free(v->t_end);
    free(v->t_tok0);
    free(v->t_ntok);
    free(v->tok_sorted);
    free(v);
}

int lg_cvocab_n_vocab(const lg_cvocab *v) { return v->n_vocab; }
int lg_cvocab_mask_words(const lg_cvocab *v) { return v->n_words; }
uint64_t lg_cvocab_digest(const lg_cvocab *v) { return v->digest; }

const char *lg_cvocab_token_bytes(const lg_cvocab *v, int32_t id, uint32_t *len)
{
    if (id < 0 || id >= v->n_vocab || v->excluded[id]) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = v->len[id];
    return (const char *)v->blob + v->off[id];
}
