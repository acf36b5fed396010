/*
 * tokenizer_impl.h — internals shared by the tokenizer's files (not a public
 * API; include only from engine/tokenizer*.c and engine/model/unicode.c).
 *
 *   unicode.c        UTF-8 walking (Rust from_utf8_lossy rules), the GPT-2
 *                    byte<->unicode alphabet, Unicode White_Space.
 *   tokenizer_bpe.c  string->id and pair->merge hash maps, BPE word merging
 *                    by rank (HF) or by score (llama.cpp SPM).
 *   tokenizer_json.c tokenizer.json (+ tokenizer_config.json) -> lg_tokenizer.
 *   tokenizer.c      construction from a GGUF vocab, the encode pipeline
 *                    (added tokens -> normalizer -> pre-tokenizer -> model),
 *                    decode and the incremental detokenizer.
 *
 * A built lg_tokenizer is immutable; every per-call scratch lives on the
 * caller's stack or heap, so encode/decode are reentrant.
 */
#ifndef LG_TOKENIZER_IMPL_H
#define LG_TOKENIZER_IMPL_H

#include "engine/model/tokenizer.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

/* ---- unicode.c ----------------------------------------------------------- */

/* Result of looking at the UTF-8 sequence at s[0..n). */
typedef enum { LG_U8_OK, LG_U8_BAD, LG_U8_SHORT } lg_u8_status;
/* OK: *len bytes form code point *cp. BAD: the first *len bytes are a maximal
 * invalid subpart (one U+FFFD in lossy conversion). SHORT: the n bytes are a
 * valid but truncated prefix (more input could complete them). n >= 1. */
lg_u8_status lg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *len);
bool lg_utf8_valid(const char *s, size_t n);
int lg_utf8_encode(uint32_t cp, char out[4]);
/* GPT-2 byte-level alphabet: byte -> code point and back (-1 if not in it). */
uint32_t lg_byte_to_cp(unsigned char b);
int lg_cp_to_byte(uint32_t cp);
bool lg_cp_is_whitespace(uint32_t cp); /* Rust char::is_whitespace */

/* ---- growable byte buffer -------------------------------------------------- */
typedef struct lg_tbuf {
    char *p;
    size_t n, cap;
} lg_tbuf;
int lg_tbuf_put(lg_tbuf *b, const void *s, size_t n); /* 0 / -1 on OOM */
void lg_tbuf_free(lg_tbuf *b);

/* ---- tokenizer_bpe.c ------------------------------------------------------- */

/* text -> id, open addressing; keys are the strings in the owner's table. */
typedef struct lg_tok_strmap {
    uint32_t mask;
    int32_t *slots; /* id or -1 */
} lg_tok_strmap;

/* (left id, right id) -> (rank, merged id). */
typedef struct lg_tok_pairmap {
    uint32_t mask;
    uint64_t *keys; /* (a << 32 | b) + 1; 0 = empty */
    int32_t *rank, *merged;
} lg_tok_pairmap;

/* Pre-tokenizer / normalizer steps, applied in order. */
typedef enum {
    LG_PT_SPLIT,      /* regex split with a behaviour */
    LG_PT_BYTELEVEL,  /* optional prefix space + optional GPT-2 split + byte map */
    LG_PT_METASPACE,  /* ' ' -> U+2581, prepend by scheme, optional split */
} lg_pt_kind;

typedef enum {
    LG_SPLIT_REMOVED, LG_SPLIT_ISOLATED, LG_SPLIT_MERGED_PREV, LG_SPLIT_MERGED_NEXT,
    LG_SPLIT_CONTIGUOUS,
} lg_split_behavior;

typedef struct lg_pt_step {
    lg_pt_kind kind;
    pcre2_code *re;          /* SPLIT, BYTELEVEL(use_regex), METASPACE(split) */
    lg_split_behavior behavior;
    bool invert;
    bool add_prefix_space;   /* BYTELEVEL */
    int prepend_scheme;      /* METASPACE: 0 never, 1 first, 2 always */
} lg_pt_step;

typedef enum { LG_NORM_PREPEND, LG_NORM_REPLACE, LG_NORM_NFC } lg_norm_kind;
typedef struct lg_norm_step {
    lg_norm_kind kind;
    char *a;  /* PREPEND: text; REPLACE: literal pattern */
    char *b;  /* REPLACE: content */
} lg_norm_step;

typedef enum { LG_DEC_BYTELEVEL, LG_DEC_SPM, LG_DEC_JOIN } lg_dec_kind;

typedef struct lg_added_tok {
    int32_t id;
    char *text;
    size_t len;
    bool special, lstrip, rstrip, single_word, normalized;
} lg_added_tok;

struct lg_tokenizer {
    lg_tok_kind kind;
    int n_vocab;               /* max id + 1 over model and added vocab */
    char **text;               /* [n_vocab] token text (NULL for holes) */
    uint32_t *text_len;        /* [n_vocab] */
    bool *special;             /* [n_vocab] skipped by decode(skip_special) */
    float *scores;             /* [n_vocab] or NULL (merge by score when no merges) */
    lg_tok_strmap vocab;       /* model vocab (ids the BPE model may emit) */
    lg_tok_pairmap merges;     /* empty when merging by score */
    bool merge_by_score;
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;            /* BPE unk, -1 if none */
    int32_t byte_tok[256];     /* id of "<0xXX>" or -1 */

    lg_added_tok *added;       /* [n_added], sorted by id */
    int n_added;
    int32_t *added_by_byte[256]; /* indices into added, per first byte, longest first; -1 terminated */
    lg_tok_strmap added_map;

    lg_norm_step *norm;
    int n_norm;
    lg_pt_step *pt;
    int n_pt;

    lg_dec_kind dec;
    bool dec_replace_meta;     /* SPM: U+2581 -> ' ' per token */
    bool dec_byte_fallback;    /* SPM: <0xXX> runs -> bytes */
    int dec_strip_left;        /* SPM: strip up to N leading ' ' of the output */
    bool dec_meta_first;       /* SPM via Metaspace decoder: first token drops U+2581 */

    int32_t bos_id, eos_id;
    bool add_bos;
};

int lg_tok_strmap_init(lg_tok_strmap *m, size_t n_keys);
void lg_tok_strmap_free(lg_tok_strmap *m);
/* Inserts id (text from t->text[id]); keeps the first id for a repeated text. */
void lg_tok_strmap_put(lg_tok_strmap *m, const lg_tokenizer *t, int32_t id);
int32_t lg_tok_strmap_get(const lg_tok_strmap *m, const lg_tokenizer *t, const char *s, size_t n);

int lg_tok_pairmap_init(lg_tok_pairmap *m, size_t n_keys);
void lg_tok_pairmap_free(lg_tok_pairmap *m);
/* Keeps the first (lowest) rank for a repeated pair, as HF does. */
void lg_tok_pairmap_put(lg_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
bool lg_tok_pairmap_get(const lg_tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

/* Runs the BPE model on one pre-token (UTF-8, len bytes), appending ids. */
int lg_tok_bpe_word(const lg_tokenizer *t, const char *w, size_t len, int32_t **ids, int *n,
                    int *cap, lg_err *err);

/* ---- tokenizer.c (used by tokenizer_json.c) ------------------------------ */
lg_tokenizer *lg_tok_alloc(void);
/* Allocates text/len/special arrays for n ids (all holes). */
int lg_tok_alloc_vocab(lg_tokenizer *t, int n, lg_err *err);
int lg_tok_set_text(lg_tokenizer *t, int32_t id, const char *s, size_t n, lg_err *err);
/* After texts, added tokens, merges are set: builds lookup tables. */
int lg_tok_finish(lg_tokenizer *t, lg_err *err);
int lg_tok_push_pt(lg_tokenizer *t, lg_pt_step st, lg_err *err); /* takes st.re */
int lg_tok_push_norm(lg_tokenizer *t, lg_norm_kind k, const char *a, const char *b, lg_err *err);
pcre2_code *lg_tok_regex(const char *pattern, bool literal, lg_err *err);

extern const char *const lg_tok_re_gpt2;
extern const char *const lg_tok_re_llama3;
extern const char *const lg_tok_re_qwen2;

#endif
