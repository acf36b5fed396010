/*
 * tokenizer_json.c — builds an lg_tokenizer from a HF tokenizer.json (and
 * optionally tokenizer_config.json).
 *
 * Accepted (what Llama-family tokenizer.json files use); anything else is a
 * clean "unsupported" error rather than a silently different tokenization:
 *   model        BPE (vocab object, merges as "a b" strings or [a, b] pairs,
 *                unk_token, fuse_unk, byte_fallback, ignore_merges; no
 *                dropout, continuing_subword_prefix, end_of_word_suffix)
 *   normalizer   null, Sequence, Prepend, Replace(String), NFC (libutf8proc)
 *   pre_tokenizer null, Sequence, ByteLevel, Split(Regex|String), Digits,
 *                Metaspace
 *   decoder      null, ByteLevel, Metaspace, Sequence of Replace(U+2581->' '),
 *                ByteFallback, Fuse, Strip(' ', n, 0)
 *   post_processor TemplateProcessing (a special token before $A = BOS),
 *                ByteLevel, Sequence; tokenizer_config's add_bos_token wins.
 * Every field is type-checked: hostile files fail with the JSON path.
 */
#include "engine/model/tokenizer_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#define LG_MAX_MERGES (1 << 24)

static const char *lg_jstr(json_t *o, const char *key) /* NULL if absent or not a string */
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int lg_jbool(json_t *o, const char *key, bool dflt, bool *out, lg_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return lg_fail(err, "\"%s\" must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int lg_parse_pattern(json_t *pat, bool *literal, const char **text, lg_err *err)
{
    const char *s;
    if (!json_is_object(pat))
        return lg_fail(err, "pattern must be an object {\"Regex\"|\"String\": ...}");
    if ((s = lg_jstr(pat, "Regex"))) {
        *literal = false;
    } else if ((s = lg_jstr(pat, "String"))) {
        *literal = true;
    } else {
        return lg_fail(err, "pattern must have a string \"Regex\" or \"String\"");
    }
    *text = s;
    return 0;
}

static int lg_parse_normalizer(lg_tokenizer *t, json_t *n, lg_err *err)
{
    if (!n || json_is_null(n))
        return 0;
    const char *ty = json_is_object(n) ? lg_jstr(n, "type") : NULL;
    if (!ty)
        return lg_fail(err, "normalizer: expected an object with a \"type\"");
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(n, "normalizers");
        if (!json_is_array(a))
            return lg_fail(err, "normalizer Sequence: \"normalizers\" must be an array");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (lg_parse_normalizer(t, json_array_get(a, i), err))
                return -1;
        return 0;
    }
    if (!strcmp(ty, "Prepend")) {
        const char *p = lg_jstr(n, "prepend");
        if (!p)
            return lg_fail(err, "normalizer Prepend: \"prepend\" must be a string");
        return lg_tok_push_norm(t, LG_NORM_PREPEND, p, NULL, err);
    }
    if (!strcmp(ty, "Replace")) {
        bool lit;
        const char *pat, *content = lg_jstr(n, "content");
        if (lg_parse_pattern(json_object_get(n, "pattern"), &lit, &pat, err))
            return -1;
        if (!content)
            return lg_fail(err, "normalizer Replace: \"content\" must be a string");
        if (!lit)
            return lg_fail(err, "normalizer Replace with a Regex pattern is unsupported");
        if (!pat[0])
            return lg_fail(err, "normalizer Replace: empty pattern");
        return lg_tok_push_norm(t, LG_NORM_REPLACE, pat, content, err);
    }
    if (!strcmp(ty, "NFC"))
        return lg_tok_push_norm(t, LG_NORM_NFC, NULL, NULL, err);
    return lg_fail(err, "normalizer \"%s\" is unsupported", ty);
}

static int lg_parse_pretok(lg_tokenizer *t, json_t *p, lg_err *err)
{
    if (!p || json_is_null(p))
        return 0;
    const char *ty = json_is_object(p) ? lg_jstr(p, "type") : NULL;
    if (!ty)
        return lg_fail(err, "pre_tokenizer: expected an object with a \"type\"");
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(p, "pretokenizers");
        if (!json_is_array(a))
            return lg_fail(err, "pre_tokenizer Sequence: \"pretokenizers\" must be an array");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (lg_parse_pretok(t, json_array_get(a, i), err))
                return -1;
        return 0;
    }
    lg_pt_step st = { .behavior = LG_SPLIT_ISOLATED };
    if (!strcmp(ty, "ByteLevel")) {
        bool use_regex = true;
        st.kind = LG_PT_BYTELEVEL;
        if (lg_jbool(p, "add_prefix_space", false, &st.add_prefix_space, err) ||
            lg_jbool(p, "use_regex", true, &use_regex, err))
            return -1;
        if (use_regex && !(st.re = lg_tok_regex(lg_tok_re_gpt2, false, err)))
            return -1;
        return lg_tok_push_pt(t, st, err);
    }
    if (!strcmp(ty, "Split")) {
        bool lit;
        const char *pat, *bh = lg_jstr(p, "behavior");
        st.kind = LG_PT_SPLIT;
        if (lg_parse_pattern(json_object_get(p, "pattern"), &lit, &pat, err) ||
            lg_jbool(p, "invert", false, &st.invert, err))
            return -1;
        if (!bh)
            return lg_fail(err, "pre_tokenizer Split: \"behavior\" must be a string");
        if (!strcmp(bh, "Removed")) st.behavior = LG_SPLIT_REMOVED;
        else if (!strcmp(bh, "Isolated")) st.behavior = LG_SPLIT_ISOLATED;
        else if (!strcmp(bh, "MergedWithPrevious")) st.behavior = LG_SPLIT_MERGED_PREV;
        else if (!strcmp(bh, "MergedWithNext")) st.behavior = LG_SPLIT_MERGED_NEXT;
        else if (!strcmp(bh, "Contiguous")) st.behavior = LG_SPLIT_CONTIGUOUS;
        else return lg_fail(err, "pre_tokenizer Split: unknown behavior \"%s\"", bh);
        if (!(st.re = lg_tok_regex(pat, lit, err))) {
            lg_err_prefix(err, "pre_tokenizer Split");
            return -1;
        }
        return lg_tok_push_pt(t, st, err);
    }
    if (!strcmp(ty, "Digits")) {
        bool ind = false;
        if (lg_jbool(p, "individual_digits", false, &ind, err))
            return -1;
        st.kind = LG_PT_SPLIT;
        st.behavior = ind ? LG_SPLIT_ISOLATED : LG_SPLIT_CONTIGUOUS;
        if (!(st.re = lg_tok_regex("\\p{N}", false, err)))
            return -1;
        return lg_tok_push_pt(t, st, err);
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *rep = lg_jstr(p, "replacement"), *sch = lg_jstr(p, "prepend_scheme");
        bool split = true, aps = true;
        if (rep && strcmp(rep, "\xE2\x96\x81"))
            return lg_fail(err, "pre_tokenizer Metaspace: only replacement U+2581 is supported");
        if (lg_jbool(p, "split", true, &split, err) || lg_jbool(p, "add_prefix_space", true, &aps, err))
            return -1;
        st.kind = LG_PT_METASPACE;
        st.prepend_scheme = aps ? 2 : 0;
        if (sch) {
            if (!strcmp(sch, "first")) st.prepend_scheme = 1;
            else if (!strcmp(sch, "always")) st.prepend_scheme = 2;
            else if (!strcmp(sch, "never")) st.prepend_scheme = 0;
            else return lg_fail(err, "pre_tokenizer Metaspace: unknown prepend_scheme \"%s\"", sch);
        }
        if (split && !(st.re = lg_tok_regex("\xE2\x96\x81", true, err)))
            return -1;
        return lg_tok_push_pt(t, st, err);
    }
    return lg_fail(err, "pre_tokenizer \"%s\" is unsupported", ty);
}

static int lg_parse_decoder(lg_tokenizer *t, json_t *d, bool top, lg_err *err)
{
    if (!d || json_is_null(d)) {
        if (top)
            t->dec = LG_DEC_JOIN;
        return 0;
    }
    const char *ty = json_is_object(d) ? lg_jstr(d, "type") : NULL;
    if (!ty)
        return lg_fail(err, "decoder: expected an object with a \"type\"");
    if (top)
        t->dec = LG_DEC_SPM;
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(d, "decoders");
        if (!json_is_array(a))
            return lg_fail(err, "decoder Sequence: \"decoders\" must be an array");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (lg_parse_decoder(t, json_array_get(a, i), false, err))
                return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) {
        t->dec = LG_DEC_BYTELEVEL;
        return 0;
    }
    if (!strcmp(ty, "Replace")) {
        bool lit;
        const char *pat, *content = lg_jstr(d, "content");
        if (lg_parse_pattern(json_object_get(d, "pattern"), &lit, &pat, err))
            return -1;
        if (!lit || strcmp(pat, "\xE2\x96\x81") || !content || strcmp(content, " "))
            return lg_fail(err, "decoder Replace: only U+2581 -> \" \" is supported");
        t->dec_replace_meta = true;
        return 0;
    }
    if (!strcmp(ty, "ByteFallback")) {
        t->dec_byte_fallback = true;
        return 0;
    }
    if (!strcmp(ty, "Fuse"))
        return 0;
    if (!strcmp(ty, "Strip")) {
        const char *c = lg_jstr(d, "content");
        json_t *start = json_object_get(d, "start"), *stop = json_object_get(d, "stop");
        if (!c || strcmp(c, " ") || !json_is_integer(start) || !json_is_integer(stop) ||
            json_integer_value(start) < 0 || json_integer_value(start) > 64 || json_integer_value(stop) != 0)
            return lg_fail(err, "decoder Strip: only content \" \", start 0..64, stop 0 is supported");
        t->dec_strip_left = (int)json_integer_value(start);
        return 0;
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *sch = lg_jstr(d, "prepend_scheme");
        bool aps = true;
        if (lg_jbool(d, "add_prefix_space", true, &aps, err))
            return -1;
        bool never = sch ? !strcmp(sch, "never") : !aps;
        t->dec_replace_meta = true;
        t->dec_meta_first = !never;
        return 0;
    }
    return lg_fail(err, "decoder \"%s\" is unsupported", ty);
}

/* Finds the BOS of a TemplateProcessing "single" template. */
static int lg_parse_post(lg_tokenizer *t, json_t *p, lg_err *err)
{
    if (!p || json_is_null(p))
        return 0;
    const char *ty = json_is_object(p) ? lg_jstr(p, "type") : NULL;
    if (!ty)
        return lg_fail(err, "post_processor: expected an object with a \"type\"");
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(p, "processors");
        if (!json_is_array(a))
            return lg_fail(err, "post_processor Sequence: \"processors\" must be an array");
        for (size_t i = 0; i < json_array_size(a); i++)
            if (lg_parse_post(t, json_array_get(a, i), err))
                return -1;
        return 0;
    }
    if (strcmp(ty, "TemplateProcessing"))
        return 0; /* ByteLevel etc.: no tokens added */
    json_t *single = json_object_get(p, "single"), *sp = json_object_get(p, "special_tokens");
    if (!json_is_array(single))
        return lg_fail(err, "post_processor TemplateProcessing: \"single\" must be an array");
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *e = json_array_get(single, i);
        if (json_object_get(e, "Sequence"))
            break;
        json_t *st = json_object_get(e, "SpecialToken");
        const char *name = json_is_object(st) ? lg_jstr(st, "id") : NULL;
        if (!name)
            continue;
        json_t *ids = json_object_get(json_object_get(sp, name), "ids");
        json_t *id0 = json_array_get(ids, 0);
        int32_t id = json_is_integer(id0) ? (int32_t)json_integer_value(id0) : lg_tokenizer_token_id(t, name);
        if (id < 0 || id >= t->n_vocab)
            return lg_fail(err, "post_processor: special token \"%s\" not in the vocabulary", name);
        t->bos_id = id;
        t->add_bos = true;
        break;
    }
    return 0;
}

static const char *lg_cfg_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return lg_jstr(v, "content");
    return NULL;
}

static int lg_parse_merge(json_t *m, const char **a, size_t *la, const char **b, size_t *lb)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp)
            return -1;
        *a = s;
        *la = (size_t)(sp - s);
        *b = sp + 1;
        *lb = n - *la - 1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *la = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *lb = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static int lg_build(lg_tokenizer *t, json_t *root, json_t *cfg, lg_err *err)
{
    if (!json_is_object(root))
        return lg_fail(err, "tokenizer.json: top level must be an object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return lg_fail(err, "tokenizer.json: missing \"model\" object");
    const char *mty = lg_jstr(model, "type");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (mty && strcmp(mty, "BPE"))
        return lg_fail(err, "model type \"%s\" is unsupported (BPE only)", mty);
    if (!json_is_object(vocab))
        return lg_fail(err, "model: \"vocab\" must be an object {token: id}");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return lg_fail(err, "model: \"merges\" must be an array");
    size_t n_merges = json_is_array(merges) ? json_array_size(merges) : 0;
    if (n_merges > LG_MAX_MERGES)
        return lg_fail(err, "model: %zu merges (max %d)", n_merges, LG_MAX_MERGES);
    json_t *v;
    if ((v = json_object_get(model, "dropout")) && !json_is_null(v) &&
        !(json_is_number(v) && json_number_value(v) == 0))
        return lg_fail(err, "model: BPE dropout is unsupported");
    if ((v = json_object_get(model, "continuing_subword_prefix")) && !json_is_null(v) &&
        !(json_is_string(v) && !json_string_value(v)[0]))
        return lg_fail(err, "model: continuing_subword_prefix is unsupported");
    if ((v = json_object_get(model, "end_of_word_suffix")) && !json_is_null(v) &&
        !(json_is_string(v) && !json_string_value(v)[0]))
        return lg_fail(err, "model: end_of_word_suffix is unsupported");
    if (lg_jbool(model, "fuse_unk", false, &t->fuse_unk, err) ||
        lg_jbool(model, "byte_fallback", false, &t->byte_fallback, err) ||
        lg_jbool(model, "ignore_merges", false, &t->ignore_merges, err)) {
        lg_err_prefix(err, "model");
        return -1;
    }

    /* ids: max over vocab and added_tokens */
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return lg_fail(err, "\"added_tokens\" must be an array");
    long long max_id = -1;
    const char *key;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return lg_fail(err, "model.vocab[\"%.40s\"]: id must be an integer in [0, 16M)", key);
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    size_t n_added = json_is_array(added) ? json_array_size(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_object(a) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !json_is_string(json_object_get(a, "content")))
            return lg_fail(err, "added_tokens[%zu]: needs integer \"id\" in [0,16M) and string \"content\"", i);
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }
    if (max_id < 0)
        return lg_fail(err, "model: empty vocabulary");
    if (lg_tok_alloc_vocab(t, (int)max_id + 1, err))
        return -1;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->text[id])
            return lg_fail(err, "model.vocab: id %d used twice (\"%.40s\", \"%.40s\")", id, t->text[id], key);
        if (lg_tok_set_text(t, id, key, strlen(key), err))
            return -1;
    }
    if (lg_tok_strmap_init(&t->vocab, (size_t)t->n_vocab))
        return lg_fail(err, "out of memory");
    for (int i = 0; i < t->n_vocab; i++)
        if (t->text[i])
            lg_tok_strmap_put(&t->vocab, t, i);

    const char *unk = lg_jstr(model, "unk_token");
    if (unk && (t->unk_id = lg_tok_strmap_get(&t->vocab, t, unk, strlen(unk))) < 0)
        return lg_fail(err, "model: unk_token \"%.40s\" is not in the vocabulary", unk);

    /* merges */
    if (n_merges) {
        if (lg_tok_pairmap_init(&t->merges, n_merges))
            return lg_fail(err, "out of memory");
        lg_tbuf tmp = { 0 };
        for (size_t r = 0; r < n_merges; r++) {
            const char *a, *b;
            size_t la, lb;
            if (lg_parse_merge(json_array_get(merges, r), &a, &la, &b, &lb)) {
                lg_tbuf_free(&tmp);
                return lg_fail(err, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", r);
            }
            tmp.n = 0;
            if (lg_tbuf_put(&tmp, a, la) || lg_tbuf_put(&tmp, b, lb)) {
                lg_tbuf_free(&tmp);
                return lg_fail(err, "out of memory");
            }
            int32_t ia = lg_tok_strmap_get(&t->vocab, t, a, la), ib = lg_tok_strmap_get(&t->vocab, t, b, lb);
            int32_t iab = lg_tok_strmap_get(&t->vocab, t, tmp.p, tmp.n);
            if (ia < 0 || ib < 0 || iab < 0) {
                lg_fail(err, "model.merges[%zu]: \"%.40s\" + \"%.40s\" uses a token not in the vocabulary",
                        r, ia < 0 ? "?" : a, ib < 0 ? "?" : b);
                lg_tbuf_free(&tmp);
                return -1;
            }
            lg_tok_pairmap_put(&t->merges, ia, ib, (int32_t)r, iab);
        }
        lg_tbuf_free(&tmp);
    }

    /* added tokens */
    t->added = calloc(n_added + 1, sizeof *t->added);
    if (!t->added)
        return lg_fail(err, "out of memory");
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        lg_added_tok *at = &t->added[t->n_added];
        json_t *c = json_object_get(a, "content");
        at->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        at->len = json_string_length(c);
        if (at->len == 0 || at->len > 65536)
            return lg_fail(err, "added_tokens[%zu]: content length %zu out of range", i, at->len);
        if (lg_jbool(a, "special", false, &at->special, err) || lg_jbool(a, "lstrip", false, &at->lstrip, err) ||
            lg_jbool(a, "rstrip", false, &at->rstrip, err) ||
            lg_jbool(a, "single_word", false, &at->single_word, err) ||
            lg_jbool(a, "normalized", !at->special, &at->normalized, err)) {
            lg_err_prefix(err, "added_tokens[%zu]", i);
            return -1;
        }
        at->text = malloc(at->len + 1);
        if (!at->text)
            return lg_fail(err, "out of memory");
        memcpy(at->text, json_string_value(c), at->len + 1);
        t->n_added++;
    }

    if (lg_parse_normalizer(t, json_object_get(root, "normalizer"), err) ||
        lg_parse_pretok(t, json_object_get(root, "pre_tokenizer"), err) ||
        lg_parse_decoder(t, json_object_get(root, "decoder"), true, err))
        return -1;
    t->kind = t->dec == LG_DEC_BYTELEVEL ? LG_TOK_BYTE_BPE : LG_TOK_SPM_BPE;
    if (lg_tok_finish(t, err))
        return -1;
    if (lg_parse_post(t, json_object_get(root, "post_processor"), err))
        return -1;

    /* special token names: config first, then conventional names */
    const char *bos = lg_cfg_token(cfg, "bos_token"), *eos = lg_cfg_token(cfg, "eos_token");
    if (bos && lg_tokenizer_token_id(t, bos) >= 0)
        t->bos_id = lg_tokenizer_token_id(t, bos);
    if (eos)
        t->eos_id = lg_tokenizer_token_id(t, eos);
    static const char *const bos_names[] = { "<s>", "<|begin_of_text|>", NULL };
    static const char *const eos_names[] = { "</s>", "<|end_of_text|>", "<|endoftext|>", NULL };
    for (int i = 0; bos_names[i] && t->bos_id < 0; i++)
        t->bos_id = lg_tokenizer_token_id(t, bos_names[i]);
    for (int i = 0; eos_names[i] && t->eos_id < 0; i++)
        t->eos_id = lg_tokenizer_token_id(t, eos_names[i]);
    json_t *ab = json_object_get(cfg, "add_bos_token");
    if (json_is_boolean(ab))
        t->add_bos = json_is_true(ab);
    if (t->bos_id < 0)
        t->add_bos = false;
    return 0;
}

int lg_tokenizer_from_json(const char *tokenizer_json, const char *tokenizer_config_json,
                           lg_tokenizer **out, lg_err *err)
{
    *out = NULL;
    if (!tokenizer_json)
        return lg_fail(err, "tokenizer.json: no text");
    json_error_t je;
    json_t *root = json_loads(tokenizer_json, JSON_ALLOW_NUL, &je);
    if (!root)
        return lg_fail(err, "tokenizer.json: line %d: %s", je.line, je.text);
    json_t *cfg = NULL;
    if (tokenizer_config_json) {
        cfg = json_loads(tokenizer_config_json, 0, &je);
        if (!cfg || !json_is_object(cfg)) {
            json_decref(root);
            json_decref(cfg);
            return lg_fail(err, "tokenizer_config.json: line %d: %s", je.line, cfg ? "not an object" : je.text);
        }
    }
    lg_tokenizer *t = lg_tok_alloc();
    int rc = t ? lg_build(t, root, cfg, err) : lg_fail(err, "out of memory");
    json_decref(root);
    json_decref(cfg);
    if (rc) {
        lg_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
