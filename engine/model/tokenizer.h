/*
 * tokenizer.h — BPE tokenizers of the Llama family, read from a HF
 * tokenizer.json or from a GGUF vocabulary, with HF `tokenizers` parity.
 *
 * Two model kinds:
 *   LG_TOK_BYTE_BPE — byte-level BPE (GPT-2, Llama-3, SmolLM, Qwen2): text is
 *                     split by a pre-tokenizer regex, bytes mapped to the
 *                     GPT-2 printable alphabet, merges applied by rank.
 *   LG_TOK_SPM_BPE  — SentencePiece-style BPE (Llama-2, Mistral): spaces
 *                     become U+2581, a U+2581 is prepended, merges by rank
 *                     (tokenizer.json) or by score (GGUF), unknown bytes fall
 *                     back to <0xXX> tokens.
 * Special/added tokens are matched in the raw text before pre-tokenization
 * (longest match first), as HF does, when parse_special is true.
 *
 * Thread-safety: a built lg_tokenizer is immutable; encode/decode may be
 * called from many threads at once. lg_detok state is per sequence.
 */
#ifndef LG_TOKENIZER_H
#define LG_TOKENIZER_H

#include "engine/base/common.h"

typedef struct lg_tokenizer lg_tokenizer;

typedef enum lg_tok_kind {
    LG_TOK_BYTE_BPE = 0,
    LG_TOK_SPM_BPE = 1,
} lg_tok_kind;

/* GGUF token types (llama.cpp's llama_token_type). */
enum {
    LG_TOKTYPE_NORMAL = 1,
    LG_TOKTYPE_UNKNOWN = 2,
    LG_TOKTYPE_CONTROL = 3,
    LG_TOKTYPE_USER_DEFINED = 4,
    LG_TOKTYPE_UNUSED = 5,
    LG_TOKTYPE_BYTE = 6,
};

/* A vocabulary as GGUF describes it (tokenizer.ggml.*). Arrays are borrowed
 * for the duration of the call only. */
typedef struct lg_vocab_spec {
    lg_tok_kind kind;       /* "gpt2" -> BYTE_BPE, "llama" -> SPM_BPE */
    const char *pre;        /* tokenizer.ggml.pre ("smollm", "llama-bpe", "qwen2", "default", ...) or NULL */
    int n_tokens;
    const char *const *tokens;    /* [n_tokens] UTF-8 token text */
    const float *scores;          /* [n_tokens] or NULL */
    const int32_t *types;         /* [n_tokens] LG_TOKTYPE_* or NULL */
    int n_merges;
    const char *const *merges;    /* [n_merges] "a b" or NULL (SPM: use scores) */
    int bos_id, eos_id, unk_id, pad_id; /* -1 if absent */
    bool add_bos;
    bool add_space_prefix;        /* SPM only */
} lg_vocab_spec;

/* Builds from a tokenizer.json text (and, optionally, the tokenizer_config.json
 * text for add_bos_token and the special-token names; may be NULL). */
int lg_tokenizer_from_json(const char *tokenizer_json, const char *tokenizer_config_json,
                           lg_tokenizer **out, lg_err *err);
int lg_tokenizer_from_vocab(const lg_vocab_spec *spec, lg_tokenizer **out, lg_err *err);
void lg_tokenizer_free(lg_tokenizer *t); /* NULL is a no-op */

int lg_tokenizer_n_vocab(const lg_tokenizer *t);
int lg_tokenizer_bos(const lg_tokenizer *t); /* -1 if none */
int lg_tokenizer_eos(const lg_tokenizer *t); /* -1 if none */
bool lg_tokenizer_add_bos(const lg_tokenizer *t); /* whether encode adds BOS by default */
/* Id of a token by its exact text (special tokens included), -1 if none. */
int lg_tokenizer_token_id(const lg_tokenizer *t, const char *text);
/* Token text as stored in the vocab (not decoded), NULL if out of range. */
const char *lg_tokenizer_token_text(const lg_tokenizer *t, int id);
/* true for control/special tokens (skipped by decode when skip_special). */
bool lg_tokenizer_is_special(const lg_tokenizer *t, int id);

/* Encodes text (len bytes, need not be NUL-terminated). add_bos: prepend BOS
 * if the tokenizer has one (HF add_special_tokens=True semantics for the
 * Llama family). parse_special: recognise special/added tokens in the text.
 * *out is malloc'd (caller frees). */
int lg_tokenizer_encode(const lg_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **out, int *n_out, lg_err *err);

/* Decodes ids to a malloc'd NUL-terminated string (HF decode semantics,
 * skip_special_tokens as given). Invalid UTF-8 from partial byte tokens is
 * replaced with U+FFFD as HF does. */
int lg_tokenizer_decode(const lg_tokenizer *t, const int32_t *ids, int n, bool skip_special,
                        char **out, lg_err *err);

/* Incremental detokenizer for streaming: feed one id at a time; it appends to
 * an internal buffer and releases only complete UTF-8 sequences, so the
 * concatenation of all emitted pieces equals lg_tokenizer_decode of all ids
 * (and no piece is ever broken UTF-8). */
typedef struct lg_detok lg_detok;
lg_detok *lg_detok_new(const lg_tokenizer *t, bool skip_special);
void lg_detok_free(lg_detok *d); /* NULL is a no-op */
/* Returns a pointer to the newly releasable text (valid until the next call)
 * and its length in *len (may be 0). */
const char *lg_detok_push(lg_detok *d, int32_t id, size_t *len);
/* Flushes whatever is held back (invalid trailing bytes become U+FFFD). */
const char *lg_detok_flush(lg_detok *d, size_t *len);

/* As lg_tokenizer_decode, also returning the length: decoded text may contain
 * NUL bytes (a <0x00> token, U+0000 in the vocab), which strlen would cut. */
int lg_tokenizer_decode_n(const lg_tokenizer *t, const int32_t *ids, int n, bool skip_special,
                          char **out, size_t *out_len, lg_err *err);

#endif
