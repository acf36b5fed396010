/*
 * test_tokenizer.c — C-level checks of the tokenizer that the Python parity
 * tests (tests/tokenizer/) cannot see: the GPT-2 byte alphabet, UTF-8
 * safety of the incremental detokenizer on split multi-byte chars, SPM
 * byte fallback / strip, score-based SPM merging, and hostile tokenizer.json
 * input failing cleanly.
 */
#include "tests/unit/test.h"
#include "engine/model/tokenizer_impl.h"

#include <jansson.h>

/* A byte-level tokenizer.json: the 256 alphabet chars, a few merges, one
 * special token. Caller frees. */
static char *bytelevel_json(void)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char u[5] = { 0 };
        lg_utf8_encode(lg_byte_to_cp((unsigned char)b), u);
        json_object_set_new(vocab, u, json_integer(b));
    }
    json_object_set_new(vocab, "he", json_integer(256));
    json_object_set_new(vocab, "ll", json_integer(257));
    json_object_set_new(vocab, "hell", json_integer(258));
    json_object_set_new(vocab, "hello", json_integer(259));
    json_object_set_new(vocab, "<|end|>", json_integer(260));
    json_t *merges = json_pack("[s, s, s, [s, s]]", "h e", "l l", "he ll", "hell", "o");
    json_t *root = json_pack("{s:{s:s, s:o, s:o}, s:{s:s, s:b, s:b}, s:{s:s}, s:[{s:i, s:s, s:b}]}",
                             "model", "type", "BPE", "vocab", vocab, "merges", merges,
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1,
                             "decoder", "type", "ByteLevel",
                             "added_tokens", "id", 260, "content", "<|end|>", "special", 1);
    char *s = json_dumps(root, 0);
    json_decref(root);
    return s;
}

static void test_byte_alphabet(void)
{
    int seen[324] = { 0 };
    for (int b = 0; b < 256; b++) {
        uint32_t cp = lg_byte_to_cp((unsigned char)b);
        CHECK(cp < 324);
        if (cp < 324)
            seen[cp]++;
        CHECK_MSG(lg_cp_to_byte(cp) == b, "byte %d -> U+%04X -> %d", b, cp, lg_cp_to_byte(cp));
    }
    CHECK(lg_byte_to_cp(' ') == 0x120);  /* 'Ġ' */
    CHECK(lg_byte_to_cp('\n') == 0x10A); /* 'Ċ' */
    CHECK(lg_byte_to_cp('A') == 'A');
    CHECK(lg_byte_to_cp(0xAD) == 0x143);
    CHECK(lg_cp_to_byte(0x144) == -1 && lg_cp_to_byte(0x2581) == -1);
}

static void test_utf8(void)
{
    uint32_t cp;
    int l;
    CHECK(lg_utf8_next((const unsigned char *)"\xE4\xB8", 2, &cp, &l) == LG_U8_SHORT);
    CHECK(lg_utf8_next((const unsigned char *)"\xE4\xB8\x41", 3, &cp, &l) == LG_U8_BAD && l == 2);
    CHECK(lg_utf8_next((const unsigned char *)"\xF0\x80", 2, &cp, &l) == LG_U8_BAD && l == 1);
    CHECK(lg_utf8_next((const unsigned char *)"\xED\xA0\x80", 3, &cp, &l) == LG_U8_BAD); /* surrogate */
    CHECK(lg_utf8_next((const unsigned char *)"\xF0\x9F\x98\x80", 4, &cp, &l) == LG_U8_OK && cp == 0x1F600);
    CHECK(!lg_utf8_valid("\xC0\xAF", 2) && lg_utf8_valid("a\xC3\xA9", 3));
}

static void test_bytelevel_encode_detok(void)
{
    lg_err err = { { 0 } };
    lg_tokenizer *t = NULL;
    char *js = bytelevel_json();
    CHECK_MSG(lg_tokenizer_from_json(js, NULL, &t, &err) == 0, "%s", err.msg);
    free(js);
    if (!t)
        return;
    int32_t *ids;
    int n;
    CHECK(lg_tokenizer_encode(t, "hello<|end|>", 12, false, true, &ids, &n, &err) == 0);
    CHECK(n == 2 && ids[0] == 259 && ids[1] == 260);
    free(ids);
    CHECK(lg_tokenizer_encode(t, "hello<|end|>", 12, false, false, &ids, &n, &err) == 0);
    CHECK(n > 2 && ids[0] == 259 && ids[1] == '<');
    free(ids);
    CHECK(lg_tokenizer_encode(t, "\xFF", 1, false, true, &ids, &n, &err) == -1); /* invalid UTF-8 */

    /* an emoji is 4 byte tokens: nothing is released until the 4th */
    const char *emoji = "a\xF0\x9F\x98\x80!";
    CHECK(lg_tokenizer_encode(t, emoji, strlen(emoji), false, true, &ids, &n, &err) == 0);
    CHECK(n == 6);
    lg_detok *d = lg_detok_new(t, false);
    char got[64] = { 0 };
    size_t len, total = 0;
    for (int i = 0; i < n; i++) {
        const char *p = lg_detok_push(d, ids[i], &len);
        CHECK(lg_utf8_valid(p, len));
        if (i >= 1 && i <= 3)
            CHECK_MSG(len == 0, "piece %d released %zu bytes of a split emoji", i, len);
        memcpy(got + total, p, len);
        total += len;
    }
    lg_detok_flush(d, &len);
    CHECK(len == 0 && total == strlen(emoji) && !memcmp(got, emoji, total));
    lg_detok_free(d);

    /* cut short: the flush turns the dangling prefix into one U+FFFD */
    d = lg_detok_new(t, false);
    const char *p = lg_detok_push(d, ids[1], &len);
    CHECK(len == 0);
    lg_detok_push(d, ids[2], &len);
    CHECK(len == 0);
    p = lg_detok_flush(d, &len);
    CHECK(len == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
    lg_detok_free(d);
    char *dec;
    CHECK(lg_tokenizer_decode(t, ids + 1, 2, false, &dec, &err) == 0 && !strcmp(dec, "\xEF\xBF\xBD"));
    free(dec);
    free(ids);

    int32_t bad = 99999;
    CHECK(lg_tokenizer_decode(t, &bad, 1, false, &dec, &err) == -1);
    lg_detok_free(NULL);
    lg_tokenizer_free(t);
    lg_tokenizer_free(NULL);
}

/* SPM from a GGUF-like vocab, merged by score, with byte fallback. */
static void test_spm_vocab(void)
{
    const char *toks[3 + 256 + 6];
    float scores[3 + 256 + 6];
    int32_t types[3 + 256 + 6];
    static char bytes[256][8];
    int n = 0;
    toks[n] = "<unk>"; types[n] = LG_TOKTYPE_UNKNOWN; scores[n++] = 0;
    toks[n] = "<s>"; types[n] = LG_TOKTYPE_CONTROL; scores[n++] = 0;
    toks[n] = "</s>"; types[n] = LG_TOKTYPE_CONTROL; scores[n++] = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = bytes[b]; types[n] = LG_TOKTYPE_BYTE; scores[n++] = 0;
    }
    const char *extra[] = { "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab" };
    float es[] = { -1, -2, -3, -6, -4, -5 };
    for (int i = 0; i < 6; i++) {
        toks[n] = extra[i]; types[n] = LG_TOKTYPE_NORMAL; scores[n++] = es[i];
    }
    lg_vocab_spec spec = { .kind = LG_TOK_SPM_BPE, .n_tokens = n, .tokens = toks, .scores = scores,
                           .types = types, .bos_id = 1, .eos_id = 2, .unk_id = 0, .pad_id = -1,
                           .add_bos = true, .add_space_prefix = true };
    lg_err err = { { 0 } };
    lg_tokenizer *t = NULL;
    CHECK_MSG(lg_tokenizer_from_vocab(&spec, &t, &err) == 0, "%s", err.msg);
    if (!t)
        return;
    CHECK(lg_tokenizer_add_bos(t) && lg_tokenizer_bos(t) == 1 && lg_tokenizer_is_special(t, 1));
    int32_t *ids;
    int m;
    /* "ab" -> "▁ab": "ab" (-4) merges before "▁a" (-6), then "▁"+"ab" */
    CHECK(lg_tokenizer_encode(t, "ab", 2, true, true, &ids, &m, &err) == 0);
    CHECK(m == 2 && ids[0] == 1 && ids[1] == 264);
    free(ids);
    /* "é" is not in the vocab: <0xC3><0xA9> */
    CHECK(lg_tokenizer_encode(t, "\xC3\xA9", 2, false, true, &ids, &m, &err) == 0);
    CHECK(m == 3 && ids[0] == 259 && ids[1] == 3 + 0xC3 && ids[2] == 3 + 0xA9);
    char *dec;
    CHECK(lg_tokenizer_decode(t, ids, m, false, &dec, &err) == 0 && !strcmp(dec, "\xC3\xA9"));
    free(dec);
    /* a broken run: every byte becomes U+FFFD (HF ByteFallback) */
    int32_t run[] = { 3 + 0xC3, 3 + 0x41 };
    CHECK(lg_tokenizer_decode(t, run, 2, false, &dec, &err) == 0 && !strcmp(dec, "\xEF\xBF\xBD\xEF\xBF\xBD"));
    free(dec);
    free(ids);
    lg_tokenizer_free(t);
}

static void expect_fail(const char *what, const char *js)
{
    lg_err err = { { 0 } };
    lg_tokenizer *t = NULL;
    int rc = lg_tokenizer_from_json(js, NULL, &t, &err);
    CHECK_MSG(rc == -1 && t == NULL && err.msg[0], "%s: rc %d", what, rc);
    lg_tokenizer_free(t);
}

static void test_hostile_json(void)
{
    expect_fail("not json", "{\"model\": ");
    expect_fail("array top", "[1,2,3]");
    expect_fail("no model", "{\"added_tokens\": []}");
    expect_fail("model not object", "{\"model\": 3}");
    expect_fail("wordpiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}");
    expect_fail("vocab array", "{\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"]}}");
    expect_fail("vocab id string", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}}}");
    expect_fail("vocab id negative", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}");
    expect_fail("vocab id huge", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 4000000000}}}");
    expect_fail("empty vocab", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}");
    expect_fail("dup id", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}");
    expect_fail("merges object", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": {}}}");
    expect_fail("merge number", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [5]}}");
    expect_fail("merge no space", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"aa\"]}}");
    expect_fail("merge oov", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]}}");
    expect_fail("bool as string", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"byte_fallback\": \"yes\"}}");
    expect_fail("bad regex", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": "
                "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}");
    expect_fail("unknown pretok", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": "
                "{\"type\": \"BertPreTokenizer\"}}");
    expect_fail("added bad", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": \"x\"}]}");
    expect_fail("unk missing", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"unk_token\": \"<unk>\"}}");

    /* a huge merge entry (1 MiB, not in the vocab) */
    size_t big = 1 << 20;
    char *js = malloc(big + 200);
    int k = sprintf(js, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a ");
    memset(js + k, 'a', big);
    strcpy(js + k + big, "\"]}}");
    expect_fail("huge merge", js);
    free(js);
}

int main(void)
{
    test_byte_alphabet();
    test_utf8();
    test_bytelevel_encode_detok();
    test_spm_vocab();
    test_hostile_json();
    TEST_DONE();
}
