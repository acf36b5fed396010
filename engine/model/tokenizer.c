/*
 * tokenizer.c — encode/decode pipeline of lg_tokenizer, construction from a
 * GGUF vocabulary, and the incremental detokenizer.
 *
 * Encode, as HF tokenizers does it (TokenizerImpl::encode_single_sequence):
 *   1. added tokens that are not "normalized" are cut out of the raw text
 *      (leftmost, then longest; lstrip/rstrip/single_word as HF; special ones
 *      only when parse_special);
 *   2. each remaining span is normalized (Prepend / Replace / NFC), then
 *      "normalized" added tokens are cut out of it;
 *   3. pre-tokenizer steps split spans into words (Split regex, ByteLevel,
 *      Metaspace; HF split behaviours), ByteLevel maps bytes to its alphabet;
 *   4. the BPE model turns each word into ids (tokenizer_bpe.c).
 * Text flows between steps as a list of pieces {offset, length} in one
 * buffer; each step writes a fresh list. The optional BOS is prepended.
 *
 * Decode is a small state machine over ids so that lg_tokenizer_decode and
 * lg_detok share one code path (their outputs agree by construction):
 *   byte-level: token chars -> bytes, bytes -> UTF-8 with from_utf8_lossy
 *     rules; a trailing incomplete sequence is held until more bytes come;
 *   SPM: U+2581 -> ' ' per token; a run of <0xXX> tokens becomes its bytes
 *     if the whole run is valid UTF-8, else one U+FFFD per byte (HF
 *     ByteFallback), so a run is held until it ends; Strip(' ', N) drops up
 *     to N leading spaces of the whole output.
 * The NFC normalizer (Qwen2) is Unicode NFC as libutf8proc computes it.
 */
#include <utf8proc.h>
#include "engine/model/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>

const char *const lg_tok_re_gpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char *const lg_tok_re_llama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const lg_tok_re_qwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char LG_META[] = "\xE2\x96\x81"; /* U+2581 */

/* ---- construction ------------------------------------------------------------ */

lg_tokenizer *lg_tok_alloc(void)
{
    lg_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->unk_id = t->bos_id = t->eos_id = -1;
    t->fuse_unk = false;
    for (int i = 0; i < 256; i++)
        t->byte_tok[i] = -1;
    return t;
}

int lg_tok_alloc_vocab(lg_tokenizer *t, int n, lg_err *err)
{
    if (n <= 0 || n > (1 << 24))
        return lg_fail(err, "vocabulary size %d out of range (1..16M)", n);
    t->n_vocab = n;
    t->text = calloc((size_t)n, sizeof *t->text);
    t->text_len = calloc((size_t)n, sizeof *t->text_len);
    t->special = calloc((size_t)n, sizeof *t->special);
    if (!t->text || !t->text_len || !t->special)
        return lg_fail(err, "out of memory for %d tokens", n);
    return 0;
}

int lg_tok_set_text(lg_tokenizer *t, int32_t id, const char *s, size_t n, lg_err *err)
{
    if (id < 0 || id >= t->n_vocab)
        return lg_fail(err, "token id %d out of range [0,%d)", id, t->n_vocab);
    if (n > 65536)
        return lg_fail(err, "token %d is %zu bytes long (max 65536)", id, n);
    char *p = malloc(n + 1);
    if (!p)
        return lg_fail(err, "out of memory");
    memcpy(p, s, n);
    p[n] = 0;
    free(t->text[id]);
    t->text[id] = p;
    t->text_len[id] = (uint32_t)n;
    return 0;
}

pcre2_code *lg_tok_regex(const char *pattern, bool literal, lg_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opt, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        lg_fail(err, "bad regex at offset %zu: %s", (size_t)eo, (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return re;
}

static int lg_added_cmp_len(const void *a, const void *b, void *ctx)
{
    const lg_added_tok *x = &((const lg_added_tok *)ctx)[*(const int32_t *)a];
    const lg_added_tok *y = &((const lg_added_tok *)ctx)[*(const int32_t *)b];
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int lg_tok_finish(lg_tokenizer *t, lg_err *err)
{
    if (!t->vocab.slots) {
        if (lg_tok_strmap_init(&t->vocab, (size_t)t->n_vocab))
            return lg_fail(err, "out of memory");
        for (int i = 0; i < t->n_vocab; i++)
            if (t->text[i])
                lg_tok_strmap_put(&t->vocab, t, i);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = lg_tok_strmap_get(&t->vocab, t, name, 6);
    }
    if (lg_tok_strmap_init(&t->added_map, (size_t)t->n_added + 1))
        return lg_fail(err, "out of memory");
    int count[256] = { 0 };
    for (int i = 0; i < t->n_added; i++) {
        lg_added_tok *a = &t->added[i];
        if (a->len == 0)
            return lg_fail(err, "added token %d has empty content", a->id);
        if (a->id < 0 || a->id >= t->n_vocab)
            return lg_fail(err, "added token id %d out of range", a->id);
        if (!t->text[a->id] && lg_tok_set_text(t, a->id, a->text, a->len, err))
            return -1;
        if (a->special)
            t->special[a->id] = true;
        count[(unsigned char)a->text[0]]++;
    }
    /* added_map must resolve the added token's own text, even when the model
     * vocab stores another text at that id */
    for (int i = 0; i < t->n_added; i++) {
        lg_added_tok *a = &t->added[i];
        if (t->text_len[a->id] == a->len && !memcmp(t->text[a->id], a->text, a->len))
            lg_tok_strmap_put(&t->added_map, t, a->id);
    }
    for (int b = 0; b < 256; b++) {
        if (!count[b])
            continue;
        int32_t *v = malloc(((size_t)count[b] + 1) * sizeof *v);
        if (!v)
            return lg_fail(err, "out of memory");
        int k = 0;
        for (int i = 0; i < t->n_added; i++)
            if ((unsigned char)t->added[i].text[0] == b)
                v[k++] = i;
        qsort_r(v, (size_t)k, sizeof *v, lg_added_cmp_len, t->added);
        v[k] = -1;
        t->added_by_byte[b] = v;
    }
    return 0;
}

void lg_tokenizer_free(lg_tokenizer *t)
{
    if (!t)
        return;
    if (t->text)
        for (int i = 0; i < t->n_vocab; i++)
            free(t->text[i]);
    free(t->text);
    free(t->text_len);
    free(t->special);
    free(t->scores);
    lg_tok_strmap_free(&t->vocab);
    lg_tok_strmap_free(&t->added_map);
    lg_tok_pairmap_free(&t->merges);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].text);
    free(t->added);
    for (int b = 0; b < 256; b++)
        free(t->added_by_byte[b]);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    for (int i = 0; i < t->n_pt; i++)
        pcre2_code_free(t->pt[i].re);
    free(t->pt);
    free(t);
}

static int lg_tok_add_pt(lg_tokenizer *t, lg_pt_step st, lg_err *err)
{
    lg_pt_step *p = realloc(t->pt, (size_t)(t->n_pt + 1) * sizeof *p);
    if (!p) {
        pcre2_code_free(st.re);
        return lg_fail(err, "out of memory");
    }
    t->pt = p;
    t->pt[t->n_pt++] = st;
    return 0;
}

static int lg_tok_add_norm(lg_tokenizer *t, lg_norm_kind k, const char *a, const char *b, lg_err *err)
{
    lg_norm_step *p = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *p);
    if (!p)
        return lg_fail(err, "out of memory");
    t->norm = p;
    lg_norm_step s = { .kind = k, .a = a ? strdup(a) : NULL, .b = b ? strdup(b) : NULL };
    t->norm[t->n_norm++] = s;
    return 0;
}

/* Exported for tokenizer_json.c through these two thin wrappers. */
int lg_tok_push_pt(lg_tokenizer *t, lg_pt_step st, lg_err *err) { return lg_tok_add_pt(t, st, err); }
int lg_tok_push_norm(lg_tokenizer *t, lg_norm_kind k, const char *a, const char *b, lg_err *err)
{
    return lg_tok_add_norm(t, k, a, b, err);
}

int lg_tokenizer_from_vocab(const lg_vocab_spec *spec, lg_tokenizer **out, lg_err *err)
{
    *out = NULL;
    if (!spec || spec->n_tokens <= 0 || !spec->tokens)
        return lg_fail(err, "vocab: no tokens");
    lg_tokenizer *t = lg_tok_alloc();
    if (!t)
        return lg_fail(err, "out of memory");
    t->kind = spec->kind;
    if (lg_tok_alloc_vocab(t, spec->n_tokens, err))
        goto fail;
    for (int i = 0; i < spec->n_tokens; i++) {
        if (!spec->tokens[i]) {
            lg_fail(err, "vocab: token %d is NULL", i);
            goto fail;
        }
        if (lg_tok_set_text(t, i, spec->tokens[i], strlen(spec->tokens[i]), err))
            goto fail;
    }
    if (spec->scores) {
        t->scores = malloc((size_t)spec->n_tokens * sizeof *t->scores);
        if (!t->scores) {
            lg_fail(err, "out of memory");
            goto fail;
        }
        memcpy(t->scores, spec->scores, (size_t)spec->n_tokens * sizeof *t->scores);
    }
    /* added tokens: control, user-defined and unknown types */
    if (spec->types) {
        int n = 0;
        for (int i = 0; i < spec->n_tokens; i++) {
            int ty = spec->types[i];
            n += ty == LG_TOKTYPE_CONTROL || ty == LG_TOKTYPE_USER_DEFINED || ty == LG_TOKTYPE_UNKNOWN;
        }
        t->added = calloc((size_t)n + 1, sizeof *t->added);
        if (!t->added) {
            lg_fail(err, "out of memory");
            goto fail;
        }
        for (int i = 0; i < spec->n_tokens; i++) {
            int ty = spec->types[i];
            if (!(ty == LG_TOKTYPE_CONTROL || ty == LG_TOKTYPE_USER_DEFINED || ty == LG_TOKTYPE_UNKNOWN))
                continue;
            if (t->text_len[i] == 0)
                continue;
            lg_added_tok *a = &t->added[t->n_added++];
            a->id = i;
            a->text = strdup(t->text[i]);
            a->len = t->text_len[i];
            a->special = ty != LG_TOKTYPE_USER_DEFINED;
            if (!a->text) {
                lg_fail(err, "out of memory");
                goto fail;
            }
        }
    }
    /* merges */
    if (spec->n_merges > 0 && spec->merges) {
        if (lg_tok_pairmap_init(&t->merges, (size_t)spec->n_merges)) {
            lg_fail(err, "out of memory");
            goto fail;
        }
    }
    if (lg_tok_strmap_init(&t->vocab, (size_t)t->n_vocab)) {
        lg_fail(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < t->n_vocab; i++)
        lg_tok_strmap_put(&t->vocab, t, i);
    if (spec->n_merges > 0 && spec->merges) {
        char *tmp = NULL;
        size_t tcap = 0;
        for (int r = 0; r < spec->n_merges; r++) {
            const char *m = spec->merges[r];
            const char *sp = m && m[0] ? strchr(m + 1, ' ') : NULL;
            if (!sp) {
                free(tmp);
                lg_fail(err, "vocab: merge %d (\"%.40s\") is not \"a b\"", r, m ? m : "(null)");
                goto fail;
            }
            size_t la = (size_t)(sp - m), lb = strlen(sp + 1);
            if (la + lb + 1 > tcap) {
                tcap = la + lb + 64;
                char *nt = realloc(tmp, tcap);
                if (!nt) {
                    free(tmp);
                    lg_fail(err, "out of memory");
                    goto fail;
                }
                tmp = nt;
            }
            memcpy(tmp, m, la);
            memcpy(tmp + la, sp + 1, lb);
            int32_t a = lg_tok_strmap_get(&t->vocab, t, m, la);
            int32_t b = lg_tok_strmap_get(&t->vocab, t, sp + 1, lb);
            int32_t ab = lg_tok_strmap_get(&t->vocab, t, tmp, la + lb);
            if (a < 0 || b < 0 || ab < 0) {
                free(tmp);
                lg_fail(err, "vocab: merge %d (\"%.40s\") uses a token not in the vocabulary", r, m);
                goto fail;
            }
            lg_tok_pairmap_put(&t->merges, a, b, r, ab);
        }
        free(tmp);
    } else if (spec->kind == LG_TOK_BYTE_BPE) {
        lg_fail(err, "vocab: byte-level BPE (gpt2) needs tokenizer.ggml.merges");
        goto fail;
    } else {
        t->merge_by_score = true;
        if (!t->scores) {
            lg_fail(err, "vocab: SPM vocabulary without merges needs scores");
            goto fail;
        }
    }

    if (spec->kind == LG_TOK_SPM_BPE) {
        if (spec->add_space_prefix && lg_tok_add_norm(t, LG_NORM_PREPEND, LG_META, NULL, err))
            goto fail;
        if (lg_tok_add_norm(t, LG_NORM_REPLACE, " ", LG_META, err))
            goto fail;
        t->byte_fallback = true;
        t->fuse_unk = true;
        t->unk_id = spec->unk_id >= 0 && spec->unk_id < t->n_vocab ? spec->unk_id : -1;
        t->dec = LG_DEC_SPM;
        t->dec_replace_meta = true;
        t->dec_byte_fallback = true;
        t->dec_strip_left = spec->add_space_prefix ? 1 : 0;
    } else {
        const char *pre = spec->pre ? spec->pre : "default";
        lg_pt_step bl = { .kind = LG_PT_BYTELEVEL };
        t->dec = LG_DEC_BYTELEVEL;
        if (!strcmp(pre, "default") || !strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2")) {
            bl.re = lg_tok_regex(lg_tok_re_gpt2, false, err);
            if (!bl.re || lg_tok_add_pt(t, bl, err))
                goto fail;
        } else if (!strcmp(pre, "smollm")) {
            lg_pt_step dg = { .kind = LG_PT_SPLIT, .behavior = LG_SPLIT_ISOLATED };
            dg.re = lg_tok_regex("\\p{N}", false, err);
            if (!dg.re || lg_tok_add_pt(t, dg, err))
                goto fail;
            bl.re = lg_tok_regex(lg_tok_re_gpt2, false, err);
            if (!bl.re || lg_tok_add_pt(t, bl, err))
                goto fail;
        } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "qwen2")) {
            bool q = !strcmp(pre, "qwen2");
            lg_pt_step sp = { .kind = LG_PT_SPLIT, .behavior = LG_SPLIT_ISOLATED };
            sp.re = lg_tok_regex(q ? lg_tok_re_qwen2 : lg_tok_re_llama3, false, err);
            if (!sp.re || lg_tok_add_pt(t, sp, err) || lg_tok_add_pt(t, bl, err))
                goto fail;
            t->ignore_merges = !q;
            if (q && lg_tok_add_norm(t, LG_NORM_NFC, NULL, NULL, err))
                goto fail;
        } else {
            lg_fail(err, "vocab: unsupported pre-tokenizer \"%s\" (supported: default, gpt2, smollm, "
                         "llama-bpe, qwen2)", pre);
            goto fail;
        }
    }
    t->bos_id = spec->bos_id >= 0 && spec->bos_id < t->n_vocab ? spec->bos_id : -1;
    t->eos_id = spec->eos_id >= 0 && spec->eos_id < t->n_vocab ? spec->eos_id : -1;
    t->add_bos = spec->add_bos && t->bos_id >= 0;
    if (lg_tok_finish(t, err))
        goto fail;
    *out = t;
    return 0;
fail:
    lg_tokenizer_free(t);
    return -1;
}

/* ---- accessors ------------------------------------------------------------------- */

int lg_tokenizer_n_vocab(const lg_tokenizer *t) { return t->n_vocab; }
int lg_tokenizer_bos(const lg_tokenizer *t) { return t->bos_id; }
int lg_tokenizer_eos(const lg_tokenizer *t) { return t->eos_id; }
bool lg_tokenizer_add_bos(const lg_tokenizer *t) { return t->add_bos; }

int lg_tokenizer_token_id(const lg_tokenizer *t, const char *text)
{
    size_t n = strlen(text);
    int32_t id = lg_tok_strmap_get(&t->added_map, t, text, n);
    return id >= 0 ? id : lg_tok_strmap_get(&t->vocab, t, text, n);
}

const char *lg_tokenizer_token_text(const lg_tokenizer *t, int id)
{
    return id >= 0 && id < t->n_vocab ? t->text[id] : NULL;
}

bool lg_tokenizer_is_special(const lg_tokenizer *t, int id)
{
    return id >= 0 && id < t->n_vocab && t->special[id];
}

/* ---- encode ------------------------------------------------------------------------ */

typedef struct {
    size_t off, len; /* into the list's buffer */
    int32_t id;      /* >= 0: an added token, no text */
    bool at0;        /* starts at offset 0 of the original text */
} lg_piece;

typedef struct {
    lg_tbuf buf;
    lg_piece *p;
    int n, cap;
} lg_plist;

static void lg_plist_free(lg_plist *l)
{
    lg_tbuf_free(&l->buf);
    free(l->p);
    memset(l, 0, sizeof *l);
}

static int lg_plist_add(lg_plist *l, const char *s, size_t n, int32_t id, bool at0)
{
    if (id < 0 && n == 0)
        return 0; /* HF drops empty splits */
    if (l->n == l->cap) {
        int c = l->cap ? l->cap * 2 : 32;
        lg_piece *p = realloc(l->p, (size_t)c * sizeof *p);
        if (!p)
            return -1;
        l->p = p;
        l->cap = c;
    }
    lg_piece pc = { .off = l->buf.n, .len = n, .id = id, .at0 = at0 };
    if (lg_tbuf_put(&l->buf, s, n))
        return -1;
    l->p[l->n++] = pc;
    return 0;
}

static bool lg_is_word_char(const char *s, size_t n, bool last)
{
    /* Rust char::is_alphanumeric || '_' on the char before/after a match. */
    if (n == 0)
        return false;
    const unsigned char *u = (const unsigned char *)s;
    if (!last) {
        uint32_t cp;
        int l;
        if (lg_utf8_next(u, n, &cp, &l) != LG_U8_OK)
            return false;
        return cp == '_' || (cp < 128 ? (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z')
                                      : !lg_cp_is_whitespace(cp));
    }
    size_t i = n - 1;
    while (i > 0 && (u[i] & 0xC0) == 0x80)
        i--;
    return lg_is_word_char(s + i, n - i, false);
}

/* Cuts added tokens (those with .normalized == normalized) out of s[0..n),
 * HF AddedVocabulary::find_matches. Appends pieces to out. */
static int lg_split_added(const lg_tokenizer *t, const char *s, size_t n, bool at0, bool normalized,
                          bool parse_special, lg_plist *out)
{
    size_t start_off = 0, i = 0;
    bool any = false;
    for (int k = 0; k < t->n_added && !any; k++)
        any = t->added[k].normalized == normalized;
    while (any && i < n) {
        const int32_t *cand = t->added_by_byte[(unsigned char)s[i]];
        const lg_added_tok *m = NULL;
        if (cand)
            for (; *cand >= 0; cand++) {
                const lg_added_tok *a = &t->added[*cand];
                if (a->normalized == normalized && a->len <= n - i && !memcmp(s + i, a->text, a->len)) {
                    m = a;
                    break;
                }
            }
        if (!m) {
            i++;
            continue;
        }
        size_t ms = i, me = i + m->len;
        i = me;
        if (!parse_special && m->special)
            continue;
        if (m->single_word && (lg_is_word_char(s, ms, true) || lg_is_word_char(s + me, n - me, false)))
            continue;
        if (m->lstrip) {
            size_t ns = ms;
            while (ns > start_off) {
                size_t q = ns - 1;
                while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80)
                    q--;
                uint32_t cp;
                int l;
                if (lg_utf8_next((const unsigned char *)s + q, n - q, &cp, &l) != LG_U8_OK ||
                    !lg_cp_is_whitespace(cp))
                    break;
                ns = q;
            }
            ms = ns;
        }
        if (m->rstrip) {
            while (me < n) {
                uint32_t cp;
                int l;
                if (lg_utf8_next((const unsigned char *)s + me, n - me, &cp, &l) != LG_U8_OK ||
                    !lg_cp_is_whitespace(cp))
                    break;
                me += (size_t)l;
            }
        }
        if (ms > start_off && lg_plist_add(out, s + start_off, ms - start_off, -1, at0 && start_off == 0))
            return -1;
        if (lg_plist_add(out, "", 0, m->id, false))
            return -1;
        start_off = me;
        if (i < me)
            i = me;
    }
    if (start_off < n && lg_plist_add(out, s + start_off, n - start_off, -1, at0 && start_off == 0))
        return -1;
    return 0;
}

static int lg_normalize(const lg_tokenizer *t, const char *s, size_t n, lg_tbuf *out)
{
    lg_tbuf a = { 0 }, b = { 0 };
    if (lg_tbuf_put(&a, s, n))
        return -1;
    for (int k = 0; k < t->n_norm; k++) {
        const lg_norm_step *st = &t->norm[k];
        b.n = 0;
        switch (st->kind) {
        case LG_NORM_PREPEND:
            if (a.n && (lg_tbuf_put(&b, st->a, strlen(st->a)) || lg_tbuf_put(&b, a.p, a.n)))
                goto oom;
            if (!a.n && lg_tbuf_put(&b, "", 0))
                goto oom;
            break;
        case LG_NORM_REPLACE: {
            size_t pl = strlen(st->a), cl = strlen(st->b);
            for (size_t i = 0; i < a.n;) {
                if (pl && i + pl <= a.n && !memcmp(a.p + i, st->a, pl)) {
                    if (lg_tbuf_put(&b, st->b, cl))
                        goto oom;
                    i += pl;
                } else {
                    if (lg_tbuf_put(&b, a.p + i, 1))
                        goto oom;
                    i++;
                }
            }
            if (lg_tbuf_put(&b, "", 0))
                goto oom;
            break;
        }
        case LG_NORM_NFC: { /* Unicode NFC via utf8proc (input is valid UTF-8) */
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t nn = a.n ? utf8proc_map((const utf8proc_uint8_t *)a.p, (utf8proc_ssize_t)a.n, &nfc,
                                                     UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                                      : 0;
            if (nn < 0 || lg_tbuf_put(&b, nfc ? (const char *)nfc : "", (size_t)(nn > 0 ? nn : 0))) {
                free(nfc);
                goto oom;
            }
            free(nfc);
            break;
        }
        }
        lg_tbuf tmp = a;
        a = b;
        b = tmp;
    }
    lg_tbuf_free(&b);
    *out = a;
    return 0;
oom:
    lg_tbuf_free(&a);
    lg_tbuf_free(&b);
    return -1;
}

typedef struct {
    size_t s, e;
    bool match;
} lg_span;

/* HF NormalizedString::split(pattern, behavior) on s[0..n); spans into *sp. */
static int lg_regex_split(const pcre2_code *re, pcre2_match_data *md, bool invert, lg_split_behavior bh,
                          const char *s, size_t n, lg_span **sp, int *nsp, int *cap)
{
    *nsp = 0;
#define LG_SPAN_ADD(S, E, M)                                                         \
    do {                                                                             \
        if (*nsp == *cap) {                                                          \
            int c_ = *cap ? *cap * 2 : 64;                                           \
            lg_span *p_ = realloc(*sp, (size_t)c_ * sizeof *p_);                     \
            if (!p_)                                                                 \
                return -1;                                                           \
            *sp = p_;                                                                \
            *cap = c_;                                                               \
        }                                                                            \
        (*sp)[(*nsp)++] = (lg_span){ (S), (E), (M) };                                \
    } while (0)
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter uses the heap instead */
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return -2; /* never split silently wrong */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (prev != ms)
            LG_SPAN_ADD(prev, ms, invert);
        LG_SPAN_ADD(ms, me, !invert);
        prev = me;
        if (me == ms) { /* empty match: step one char */
            if (me >= n)
                break;
            uint32_t cp;
            int l;
            if (lg_utf8_next((const unsigned char *)s + me, n - me, &cp, &l) != LG_U8_OK)
                l = 1;
            pos = me + (size_t)l;
        } else {
            pos = me;
        }
    }
    if (prev != n)
        LG_SPAN_ADD(prev, n, invert);
    /* behaviours: reuse .match as "remove" for the final list */
    int k = 0;
    switch (bh) {
    case LG_SPLIT_REMOVED:
        break;
    case LG_SPLIT_ISOLATED:
        for (int i = 0; i < *nsp; i++)
            (*sp)[i].match = false;
        break;
    case LG_SPLIT_CONTIGUOUS: {
        bool pm = false;
        for (int i = 0; i < *nsp; i++) {
            lg_span v = (*sp)[i];
            if (v.match == pm && k > 0)
                (*sp)[k - 1].e = v.e;
            else
                (*sp)[k++] = (lg_span){ v.s, v.e, false };
            pm = v.match;
        }
        *nsp = k;
        break;
    }
    case LG_SPLIT_MERGED_PREV: {
        bool pm = false;
        for (int i = 0; i < *nsp; i++) {
            lg_span v = (*sp)[i];
            if (v.match && !pm && k > 0)
                (*sp)[k - 1].e = v.e;
            else
                (*sp)[k++] = (lg_span){ v.s, v.e, false };
            pm = v.match;
        }
        *nsp = k;
        break;
    }
    case LG_SPLIT_MERGED_NEXT: {
        /* walk right to left, writing from the end */
        bool pm = false;
        int w = *nsp;
        for (int i = *nsp - 1; i >= 0; i--) {
            lg_span v = (*sp)[i];
            if (v.match && !pm && w < *nsp)
                (*sp)[w].s = v.s;
            else
                (*sp)[--w] = (lg_span){ v.s, v.e, false };
            pm = v.match;
        }
        memmove(*sp, *sp + w, (size_t)(*nsp - w) * sizeof **sp);
        *nsp -= w;
        break;
    }
    }
#undef LG_SPAN_ADD
    return 0;
}

static int lg_bytelevel_map(const char *s, size_t n, lg_tbuf *out)
{
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int l = lg_utf8_encode(lg_byte_to_cp((unsigned char)s[i]), u);
        if (lg_tbuf_put(out, u, (size_t)l))
            return -1;
    }
    return 0;
}

/* Applies one pre-tokenizer step to every text piece of in -> out. */
static int lg_pretok_step(const lg_pt_step *st, const lg_plist *in, lg_plist *out, lg_span **sp, int *spcap)
{
    pcre2_match_data *md = st->re ? pcre2_match_data_create_from_pattern(st->re, NULL) : NULL;
    lg_tbuf tmp = { 0 };
    int rc = -1;
    if (st->re && !md)
        return -1;
    for (int i = 0; i < in->n; i++) {
        const lg_piece *pc = &in->p[i];
        if (pc->id >= 0) {
            if (lg_plist_add(out, "", 0, pc->id, false))
                goto out;
            continue;
        }
        const char *s = in->buf.p + pc->off;
        size_t n = pc->len;
        tmp.n = 0;
        lg_split_behavior bh = st->behavior;
        if (st->kind == LG_PT_BYTELEVEL) {
            if (st->add_prefix_space && !(n && s[0] == ' ') && lg_tbuf_put(&tmp, " ", 1))
                goto out;
            if (lg_tbuf_put(&tmp, s, n))
                goto out;
            bh = LG_SPLIT_ISOLATED;
        } else if (st->kind == LG_PT_METASPACE) {
            /* HF: replace first, then prepend unless it now starts with U+2581 */
            bool pre = st->prepend_scheme == 2 || (st->prepend_scheme == 1 && pc->at0);
            if (pre && !(n && s[0] == ' ') && !(n >= 3 && !memcmp(s, LG_META, 3)) &&
                lg_tbuf_put(&tmp, LG_META, 3))
                goto out;
            for (size_t k = 0; k < n; k++)
                if (lg_tbuf_put(&tmp, s[k] == ' ' ? LG_META : s + k, s[k] == ' ' ? 3 : 1))
                    goto out;
            if (lg_tbuf_put(&tmp, "", 0))
                goto out;
            bh = LG_SPLIT_MERGED_NEXT;
        } else {
            if (lg_tbuf_put(&tmp, s, n))
                goto out;
        }
        int nsp = 1;
        if (st->re) {
            int sr = lg_regex_split(st->re, md, st->invert, bh, tmp.p, tmp.n, sp, &nsp, spcap);
            if (sr) {
                rc = sr;
                goto out;
            }
        } else {
            if (*spcap < 1) {
                lg_span *p = realloc(*sp, 16 * sizeof *p);
                if (!p)
                    goto out;
                *sp = p;
                *spcap = 16;
            }
            (*sp)[0] = (lg_span){ 0, tmp.n, false };
        }
        for (int k = 0; k < nsp; k++) {
            lg_span v = (*sp)[k];
            if (v.match || v.e == v.s)
                continue;
            bool at0 = pc->at0 && v.s == 0;
            if (st->kind == LG_PT_BYTELEVEL) {
                lg_tbuf m = { 0 };
                if (lg_bytelevel_map(tmp.p + v.s, v.e - v.s, &m) || lg_plist_add(out, m.p, m.n, -1, at0)) {
                    lg_tbuf_free(&m);
                    goto out;
                }
                lg_tbuf_free(&m);
            } else if (lg_plist_add(out, tmp.p + v.s, v.e - v.s, -1, at0)) {
                goto out;
            }
        }
    }
    rc = 0;
out:
    lg_tbuf_free(&tmp);
    pcre2_match_data_free(md);
    return rc;
}

int lg_tokenizer_encode(const lg_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **out, int *n_out, lg_err *err)
{
    *out = NULL;
    *n_out = 0;
    if (!text && len)
        return lg_fail(err, "encode: NULL text");
    if (len && !lg_utf8_valid(text, len))
        return lg_fail(err, "encode: text is not valid UTF-8");
    int32_t *ids = NULL;
    int n = 0, cap = 0;
    lg_plist a = { 0 }, b = { 0 }, c = { 0 };
    lg_span *sp = NULL;
    int spcap = 0;
    lg_tbuf norm = { 0 };

    if (add_bos && t->bos_id >= 0) {
        ids = malloc(64 * sizeof *ids);
        if (!ids)
            goto oom;
        cap = 64;
        ids[n++] = t->bos_id;
    }
    /* 1. non-normalized added tokens on the raw text */
    if (lg_split_added(t, text ? text : "", len, true, false, parse_special, &a))
        goto oom;
    /* 2. normalize, then normalized added tokens */
    for (int i = 0; i < a.n; i++) {
        if (a.p[i].id >= 0) {
            if (lg_plist_add(&b, "", 0, a.p[i].id, false))
                goto oom;
            continue;
        }
        if (t->n_norm) {
            if (lg_normalize(t, a.buf.p + a.p[i].off, a.p[i].len, &norm))
                goto oom;
        } else {
            norm.n = 0;
            if (lg_tbuf_put(&norm, a.buf.p + a.p[i].off, a.p[i].len))
                goto oom;
        }
        if (lg_split_added(t, norm.p, norm.n, a.p[i].at0, true, parse_special, &b))
            goto oom;
        lg_tbuf_free(&norm);
    }
    /* 3. pre-tokenize */
    for (int k = 0; k < t->n_pt; k++) {
        c.n = 0;
        c.buf.n = 0;
        int pr = lg_pretok_step(&t->pt[k], &b, &c, &sp, &spcap);
        if (pr == -2) {
            lg_fail(err, "encode: pre-tokenizer regex failed (match limit) on a %zu-byte text", len);
            goto fail;
        }
        if (pr)
            goto oom;
        lg_plist tmp = b;
        b = c;
        c = tmp;
    }
    /* 4. model */
    for (int i = 0; i < b.n; i++) {
        if (b.p[i].id >= 0) {
            if (n == cap) {
                int nc = cap ? cap * 2 : 64;
                int32_t *p = realloc(ids, (size_t)nc * sizeof *p);
                if (!p)
                    goto oom;
                ids = p;
                cap = nc;
            }
            ids[n++] = b.p[i].id;
        } else if (lg_tok_bpe_word(t, b.buf.p + b.p[i].off, b.p[i].len, &ids, &n, &cap, err)) {
            goto fail;
        }
    }
    lg_plist_free(&a);
    lg_plist_free(&b);
    lg_plist_free(&c);
    lg_tbuf_free(&norm);
    free(sp);
    if (!ids)
        ids = malloc(sizeof *ids); /* callers may free(*out) uniformly */
    *out = ids;
    *n_out = n;
    return 0;
oom:
    lg_fail(err, "encode: out of memory");
fail:
    lg_plist_free(&a);
    lg_plist_free(&b);
    lg_plist_free(&c);
    lg_tbuf_free(&norm);
    free(sp);
    free(ids);
    return -1;
}

/* ---- decode ------------------------------------------------------------------------ */

struct lg_detok {
    const lg_tokenizer *t;
    bool skip_special;
    lg_tbuf pend;   /* byte-level: undecided bytes; SPM: current <0xXX> run */
    int strip_left; /* SPM Strip: leading spaces still to drop */
    bool any;       /* a token has been emitted (JOIN separator, Metaspace first) */
    lg_tbuf out;    /* what the last push/flush released */
};

static const char LG_FFFD[] = "\xEF\xBF\xBD";

static int lg_dec_emit(struct lg_detok *d, const char *s, size_t n)
{
    while (d->strip_left > 0 && n > 0) {
        if (s[0] != ' ') {
            d->strip_left = 0;
            break;
        }
        s++;
        n--;
        d->strip_left--;
    }
    return lg_tbuf_put(&d->out, s, n);
}

/* Byte-level: release the decided prefix of pend (final: everything). */
static int lg_dec_settle(struct lg_detok *d, bool final)
{
    const unsigned char *p = (const unsigned char *)d->pend.p;
    size_t i = 0, n = d->pend.n;
    while (i < n) {
        uint32_t cp;
        int l;
        lg_u8_status st = lg_utf8_next(p + i, n - i, &cp, &l);
        if (st == LG_U8_SHORT && !final)
            break;
        if (st == LG_U8_OK) {
            if (lg_dec_emit(d, (const char *)p + i, (size_t)l))
                return -1;
        } else if (lg_dec_emit(d, LG_FFFD, 3)) {
            return -1;
        }
        i += (size_t)l;
    }
    if (n > i) /* pend.p may be NULL when nothing was ever pending */
        memmove(d->pend.p, d->pend.p + i, n - i);
    d->pend.n = n - i;
    return 0;
}

/* SPM: end of a <0xXX> run. */
static int lg_dec_end_run(struct lg_detok *d)
{
    if (!d->pend.n)
        return 0;
    int rc = 0;
    if (lg_utf8_valid(d->pend.p, d->pend.n))
        rc = lg_dec_emit(d, d->pend.p, d->pend.n);
    else
        for (size_t i = 0; i < d->pend.n && !rc; i++)
            rc = lg_dec_emit(d, LG_FFFD, 3);
    d->pend.n = 0;
    return rc;
}

static int lg_byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static int lg_dec_push(struct lg_detok *d, int32_t id)
{
    const lg_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_vocab || !t->text[id])
        return 0; /* HF drops ids it does not know */
    if (d->skip_special && t->special[id])
        return 0;
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    bool first = !d->any;
    d->any = true;
    switch (t->dec) {
    case LG_DEC_BYTELEVEL: {
        size_t mark = d->pend.n;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l, b;
            if (lg_utf8_next((const unsigned char *)s + i, n - i, &cp, &l) != LG_U8_OK ||
                (b = lg_cp_to_byte(cp)) < 0) {
                /* a char outside the alphabet: the token's raw UTF-8 */
                d->pend.n = mark;
                if (lg_tbuf_put(&d->pend, s, n))
                    return -1;
                break;
            }
            unsigned char ub = (unsigned char)b;
            if (lg_tbuf_put(&d->pend, &ub, 1))
                return -1;
            i += (size_t)l;
        }
        return lg_dec_settle(d, false);
    }
    case LG_DEC_SPM: {
        int bv = t->dec_byte_fallback ? lg_byte_token_value(s, n) : -1;
        if (bv >= 0) {
            unsigned char ub = (unsigned char)bv;
            return lg_tbuf_put(&d->pend, &ub, 1);
        }
        if (lg_dec_end_run(d))
            return -1;
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && !memcmp(s + i, LG_META, 3) && (t->dec_replace_meta || t->dec_meta_first)) {
                if (!(t->dec_meta_first && first) && lg_dec_emit(d, " ", 1))
                    return -1;
                i += 3;
                continue;
            }
            size_t j = i + 1;
            while (j < n && !(n - j >= 3 && !memcmp(s + j, LG_META, 3)))
                j++;
            if (lg_dec_emit(d, s + i, j - i))
                return -1;
            i = j;
        }
        return 0;
    }
    case LG_DEC_JOIN:
        if (!first && lg_dec_emit(d, " ", 1))
            return -1;
        return lg_dec_emit(d, s, n);
    }
    return 0;
}

static int lg_dec_flush(struct lg_detok *d)
{
    if (d->t->dec == LG_DEC_BYTELEVEL)
        return lg_dec_settle(d, true);
    if (d->t->dec == LG_DEC_SPM)
        return lg_dec_end_run(d);
    return 0;
}

static void lg_detok_init(struct lg_detok *d, const lg_tokenizer *t, bool skip_special)
{
    memset(d, 0, sizeof *d);
    d->t = t;
    d->skip_special = skip_special;
    d->strip_left = t->dec == LG_DEC_SPM ? t->dec_strip_left : 0;
}

int lg_tokenizer_decode(const lg_tokenizer *t, const int32_t *ids, int n, bool skip_special,
                        char **out, lg_err *err)
{
    size_t len;
    return lg_tokenizer_decode_n(t, ids, n, skip_special, out, &len, err);
}

int lg_tokenizer_decode_n(const lg_tokenizer *t, const int32_t *ids, int n, bool skip_special,
                          char **out, size_t *out_len, lg_err *err)
{
    *out = NULL;
    *out_len = 0;
    struct lg_detok d;
    lg_detok_init(&d, t, skip_special);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            lg_tbuf_free(&d.pend);
            lg_tbuf_free(&d.out);
            return lg_fail(err, "decode: token id %d out of range [0,%d)", ids[i], t->n_vocab);
        }
        rc = lg_dec_push(&d, ids[i]);
    }
    if (!rc)
        rc = lg_dec_flush(&d);
    if (!rc)
        rc = lg_tbuf_put(&d.out, "", 0);
    lg_tbuf_free(&d.pend);
    if (rc) {
        lg_tbuf_free(&d.out);
        return lg_fail(err, "decode: out of memory");
    }
    *out = d.out.p;
    *out_len = d.out.n;
    return 0;
}

lg_detok *lg_detok_new(const lg_tokenizer *t, bool skip_special)
{
    lg_detok *d = malloc(sizeof *d);
    if (d)
        lg_detok_init(d, t, skip_special);
    return d;
}

void lg_detok_free(lg_detok *d)
{
    if (!d)
        return;
    lg_tbuf_free(&d->pend);
    lg_tbuf_free(&d->out);
    free(d);
}

const char *lg_detok_push(lg_detok *d, int32_t id, size_t *len)
{
    d->out.n = 0;
    if (lg_dec_push(d, id) || lg_tbuf_put(&d->out, "", 0)) {
        *len = 0;
        return "";
    }
    *len = d->out.n;
    return d->out.p;
}

const char *lg_detok_flush(lg_detok *d, size_t *len)
{
    d->out.n = 0;
    if (lg_dec_flush(d) || lg_tbuf_put(&d->out, "", 0)) {
        *len = 0;
        return "";
    }
    *len = d->out.n;
    return d->out.p;
}
