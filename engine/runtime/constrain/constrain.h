/*
 * constrain.h — constrained decoding: JSON schemas, regular expressions,
 * Lark-style grammars and choice lists, enforced token by token.
 *
 * Three objects, three lifetimes:
 *
 *   lg_cvocab      one per tokenizer (per served model). Every token's byte
 *                  string (byte-level BPE tokens decoded through the GPT-2
 *                  alphabet, SentencePiece "▁" -> ' ' and <0xXX> -> the byte;
 *                  special tokens excluded) laid out as a token trie. Immutable
 *                  after creation: share it between threads freely.
 *   lg_constraint  one compiled grammar bound to one vocabulary: the grammar
 *                  IR (a context-free grammar over bytes whose rules are
 *                  deterministic automata with calls, constrain/cgrammar.h)
 *                  plus a lazily filled table of per-automaton-state token
 *                  sets (the context-independent part of every mask,
 *                  constrain/mask.c). Reference counted; thread-safe: many
 *                  matchers on many threads share one (the lazy table is
 *                  filled lock-free, an entry published by compare-and-swap).
 *   lg_cmatch      one per request (per sequence): the parser state advanced
 *                  by each accepted token, with a history for rollback. Not
 *                  thread-safe: one thread at a time (the engine computes a
 *                  sequence's mask on a CPU worker while the GPU runs the
 *                  step, then advances it on the engine thread after
 *                  sampling: the two never overlap for one sequence).
 *
 * Compilation (lg_constraint_compile) is the slow part and runs on the
 * caller's thread: the real-world schemas of tests/constrain compile in
 * 1-80 ms; the limits below bound the worst case (max_compile_ms, default
 * 2000 ms, is checked throughout; automaton sizes are bounded before they
 * are built), so a hostile schema costs at most that and a bounded amount of
 * memory and never hangs. Do it off the HTTP loop thread, and cache it
 * (lg_ccache). The first masks of a new constraint also fill its table: a
 * state never seen before costs one walk of the token trie (~0.5-20 ms for
 * a 131k vocabulary, once per grammar state; states inside strings and
 * numbers are the cheap end), then a lookup: ~1-10 us per mask.
 *
 * Whitespace policy (JSON schemas and JSON mode): none. The output is
 * compact JSON (`{"a":1,"b":[true,null]}`), like OpenAI's structured
 * outputs; LG_CWS_SPACED instead asks for exactly ", " and ": " between
 * items and after keys (Python's json.dumps). No whitespace is allowed
 * before the value or after it. Property order is the schema's.
 *
 * JSON Schema, what is enforced (json_schema.c):
 *   type (a name or a list; absent: every type, each with its keywords),
 *   boolean schemas, null, boolean;
 *   objects: properties in schema order, each optional unless in required;
 *     additionalProperties false: nothing else; absent, true or {}: any other
 *     properties (any value) after the listed ones, keys other than the
 *     listed names (llguidance's reading; OpenAI's strict mode requires
 *     false, we do not); a schema: other properties of that schema, after
 *     the listed ones; required names that are not properties come after
 *     the properties with the additionalProperties schema;
 *   arrays: items (a schema), minItems, maxItems;
 *   strings: minLength, maxLength (code points), pattern (ECMA-style search:
 *     unanchored sides are open; \d \w are ASCII), format (date-time, date,
 *     time, duration, email, hostname, ipv4, ipv6, uuid, uri; json_formats.c
 *     says which choices), enum, const; escapes as llguidance: \" \\ \b
 *     \f \n \r \t and \u00XX for other controls and DEL, nothing else;
 *   numbers and integers: minimum, maximum, exclusiveMinimum,
 *     exclusiveMaximum (numbers, or draft-4 booleans); without bounds the
 *     full JSON number syntax, with any bound no exponent (json_numeric.c);
 *   enum / const of any JSON value (written compact, numbers as serde_json
 *     writes them), filtered by type;
 *   anyOf; oneOf only when its branches' types are disjoint (then it is
 *     anyOf); allOf with one schema; $ref to "#", "#/..." pointers ($defs,
 *     definitions, anything), recursive and mutually recursive;
 *   annotations and unknown keywords are ignored.
 * Refused with LG_CERR_UNSUPPORTED and the keyword's pointer: not, if/then/
 * else, patternProperties, propertyNames, dependent*, min/maxProperties,
 * uniqueItems (true), contains, prefixItems, additionalItems, unevaluated*,
 * multipleOf, remote $refs, unknown formats, $ref / anyOf / oneOf / allOf
 * next to other validation keywords, left recursion (a $ref cycle that
 * consumes nothing first). A bare $ref cycle is LG_CERR_INVALID; bounds or
 * lengths that nothing satisfies are LG_CERR_UNSATISFIABLE.
 *
 * Regular expressions (regex.h): Python/Rust syntax without backreferences,
 * lookarounds and word boundaries; \d \w \s Unicode, (?i) Unicode simple
 * case folding, whole-match. Lark grammars (lark.c): rules, terminals,
 * strings ("..."i), regexes (/.../is), "a".."z", ( ) [ ] ? * + ~n ~n..m,
 * %import common.X, %json { schema }; context-free over bytes (no lexer:
 * adjacent terminals are not split by longest match), no %ignore, no left
 * recursion, no templates. Choice lists: the output is one of the strings.
 *
 * Masks differ from llguidance 1.9's in documented ways only:
 *   - where the grammar forces bytes (one continuation), llguidance allows
 *     only the first token of its tokenizer's spelling of them; we allow
 *     every token that fits (lg_cmatch_forced_bytes gives the bytes; the
 *     engine may spell them itself);
 *   - bounded non-integer numbers are judged by value: "2.50" for minimum
 *     2.5 and "2.0" for [2, 2] are allowed, negative zero is not (llguidance
 *     differs on such trailing-zero and negative-zero spellings);
 *   - a schema nothing satisfies is refused at compile time (llguidance
 *     compiles it and allows nothing).
 *
 * Errors: every refusal fills an lg_cerr: a one-line message naming what was
 * refused and where, and `param`, the place: a JSON pointer into the schema
 * ("/properties/x/not"), "offset N" into a regular expression, "line L" of a
 * grammar, "choices/N" of a choice list. The gateway answers 400 with it.
 */
#ifndef LG_CONSTRAIN_H
#define LG_CONSTRAIN_H

#include "engine/base/common.h"
#include "engine/model/tokenizer.h"

typedef struct lg_cvocab lg_cvocab;
typedef struct lg_constraint lg_constraint;
typedef struct lg_cmatch lg_cmatch;

typedef enum lg_ckind {
    LG_CK_JSON_SCHEMA = 0, /* source: a JSON schema (text) */
    LG_CK_JSON_OBJECT = 1, /* JSON mode (OpenAI "json_object"): any JSON object; source ignored */
    LG_CK_JSON_VALUE = 2,  /* any JSON value; source ignored */
    LG_CK_REGEX = 3,       /* source: a regular expression the whole output must match */
    LG_CK_LARK = 4,        /* source: a Lark-style EBNF grammar, start rule `start` */
    LG_CK_CHOICE = 5,      /* source: a JSON array of strings; the output is one of them */
} lg_ckind;

typedef enum lg_cws {
    LG_CWS_COMPACT = 0, /* "," and ":" with no whitespace anywhere (the default) */
    LG_CWS_SPACED = 1,  /* ", " and ": " exactly, no other whitespace */
} lg_cws;

/* Limits, checked while compiling and while matching. Zero fields take the
 * default (lg_climits_default). */
typedef struct lg_climits {
    size_t max_source_bytes;  /* schema / grammar / regex text (default 1 MiB) */
    int max_depth;            /* schema nesting, regex and grammar nesting (default 64) */
    int max_ref_expansions;   /* $ref resolutions, counted as compiled (default 10000) */
    int max_rules;            /* grammar rules after compilation (default 20000) */
    int max_nfa_states;       /* automaton states while building (default 2,000,000) */
    int max_dfa_states;       /* deterministic states in total (default 200,000) */
    int max_compile_ms;       /* wall-clock bound on one compilation (default 2000) */
    int max_stack;            /* runtime: grammar nesting of one parse (default 1024) */
    int max_tops;             /* runtime: simultaneous parses (ambiguity) (default 256) */
    int max_frames;           /* runtime: parser frames of one matcher (default 1,000,000) */
    size_t max_table_bytes;   /* a constraint's lazy mask table (default 256 MiB) */
} lg_climits;
void lg_climits_default(lg_climits *l);

typedef struct lg_copts {
    lg_ckind kind;
    lg_cws whitespace;        /* JSON kinds only */
    lg_climits limits;        /* zero fields: defaults */
} lg_copts;

enum {
    LG_CERR_INVALID = 1,      /* not valid JSON / regex / grammar syntax */
    LG_CERR_UNSUPPORTED = 2,  /* a valid feature we do not enforce (named) */
    LG_CERR_LIMIT = 3,        /* a limit above was exceeded (named) */
    LG_CERR_UNSATISFIABLE = 4,/* nothing can match (e.g. minimum > maximum) */
    LG_CERR_INTERNAL = 5,     /* out of memory */
};
typedef struct lg_cerr {
    int code;                 /* LG_CERR_* */
    char msg[512];            /* one line, includes param when there is one */
    char param[256];          /* JSON pointer / "offset N" / "line L" / "" */
} lg_cerr;

/* ---- vocabulary ------------------------------------------------------------ */

/* From a loaded tokenizer. eos_ids: the tokens that end generation (the
 * model's EOS ids; NULL/0: the tokenizer's EOS). They are allowed exactly
 * when the grammar is complete. */
int lg_cvocab_from_tokenizer(const lg_tokenizer *t, const int32_t *eos_ids, int n_eos,
                             lg_cvocab **out, lg_err *err);
/* From explicit byte strings: tokens[i] of lens[i] bytes; special[i] (may be
 * NULL) marks tokens that are never allowed (other than the EOS ids). */
int lg_cvocab_from_bytes(int n_vocab, const char *const *tokens, const uint32_t *lens,
                         const bool *special, const int32_t *eos_ids, int n_eos,
                         lg_cvocab **out, lg_err *err);
void lg_cvocab_free(lg_cvocab *v); /* NULL is a no-op; free after every constraint using it */
int lg_cvocab_n_vocab(const lg_cvocab *v);
/* The size of a mask: ceil(n_vocab / 32) uint32 words; bit (id % 32) of
 * word (id / 32) is token id. */
int lg_cvocab_mask_words(const lg_cvocab *v);
/* A token's byte string (not NUL-terminated); NULL for excluded tokens. */
const char *lg_cvocab_token_bytes(const lg_cvocab *v, int32_t id, uint32_t *len);
/* 64-bit digest of the vocabulary's bytes and EOS ids (part of cache keys). */
uint64_t lg_cvocab_digest(const lg_cvocab *v);

/* ---- compilation ----------------------------------------------------------- */

/* Compiles src (len bytes; ignored for JSON_OBJECT / JSON_VALUE) for vocab v.
 * v must outlive the constraint. Returns 0 with *out holding one reference,
 * or -1 with err filled (nothing allocated). */
int lg_constraint_compile(const lg_cvocab *v, const lg_copts *opts, const char *src, size_t len,
                          lg_constraint **out, lg_cerr *err);
lg_constraint *lg_constraint_ref(lg_constraint *c);
void lg_constraint_unref(lg_constraint *c); /* NULL is a no-op; frees at zero */
/* Sizes, for /metrics and tests. */
typedef struct lg_cstats {
    int n_rules, n_states;        /* grammar rules, automaton states */
    size_t grammar_bytes;         /* memory of the compiled grammar */
    size_t table_bytes;           /* memory of the lazy mask table so far */
    int table_entries;            /* grammar states whose token sets are cached */
} lg_cstats;
void lg_constraint_stats(const lg_constraint *c, lg_cstats *s);

/* ---- per-request matcher ----------------------------------------------------- */

/* A matcher at the start of the grammar; holds a reference to c. NULL on OOM. */
lg_cmatch *lg_cmatch_new(lg_constraint *c);
/* An independent copy (n > 1 choices, beams); NULL on OOM. */
lg_cmatch *lg_cmatch_clone(const lg_cmatch *m);
void lg_cmatch_free(lg_cmatch *m); /* NULL is a no-op */

/* Fills mask[0..n_words) (n_words >= lg_cvocab_mask_words) with the tokens
 * allowed next: those whose bytes extend the output to a prefix of some
 * string of the grammar, and the EOS ids exactly when the output so far is
 * complete. After an error or once done (EOS accepted) only nothing is
 * allowed. Does not change the matcher's state. Returns the number of
 * allowed tokens, or -1 (error in err: a runtime limit, e.g. max_stack).
 * Cost: a table lookup and a walk of the tokens that leave the current
 * grammar rule (constrain/mask.c); see docs/architecture.md for figures. */
int lg_cmatch_mask(lg_cmatch *m, uint32_t *mask, int n_words, lg_err *err);
/* Whether token could be accepted now (no state change). */
bool lg_cmatch_accepts(lg_cmatch *m, int32_t token);
/* Advances by one sampled token. 0: accepted; -1: refused (err says why:
 * not allowed here, or a runtime limit), the state is then unchanged. An
 * EOS id is accepted when the output is complete and makes the matcher done. */
int lg_cmatch_advance(lg_cmatch *m, int32_t token, lg_err *err);
/* Advances by raw bytes (forced bytes, tests); all or nothing; counts as one
 * step for rollback. */
int lg_cmatch_advance_bytes(lg_cmatch *m, const char *bytes, size_t n, lg_err *err);
/* Undoes the last k advances (k <= lg_cmatch_history). 0, or -1 if fewer
 * than k steps are kept. Speculative decoding rolls back rejected drafts. */
int lg_cmatch_rollback(lg_cmatch *m, int k);
/* How many steps can be rolled back (bounded by LG_CMATCH_HISTORY). */
int lg_cmatch_history(const lg_cmatch *m);
#define LG_CMATCH_HISTORY 256
/* EOS is allowed now (the output so far is a complete match). */
bool lg_cmatch_is_accepting(const lg_cmatch *m);
/* Nothing but EOS can follow (complete, no extension possible), or EOS was
 * accepted: the engine stops the sequence. */
bool lg_cmatch_is_done(const lg_cmatch *m);
/* The bytes forced next: while exactly one byte can follow and the output is
 * not complete. Writes up to cap bytes to buf and returns how many (0: no
 * forced byte). Exact, but turning them into tokens is not (a tokenizer
 * has many spellings of one string): skip sampling only when the mask has
 * a single token (lg_cmask_single). */
size_t lg_cmatch_forced_bytes(lg_cmatch *m, char *buf, size_t cap);
/* The only allowed token of a mask, or -1 if there are zero or several:
 * then the engine may skip sampling exactly. */
int32_t lg_cmask_single(const uint32_t *mask, int n_words);
/* For tests: the bytes of a shortest completion of the current output (the
 * grammar's breadth-first shortest extension to a complete match), at most
 * cap bytes; -1 if none within the search bound. */
long lg_cmatch_shortest_completion(lg_cmatch *m, char *buf, size_t cap);

/* ---- compile cache ------------------------------------------------------------ */

/* A bounded, thread-safe cache of compiled constraints keyed by (kind,
 * whitespace, limits, source text, vocabulary digest): the full key is
 * compared, not only its hash. Least recently used entries are dropped
 * beyond max_entries or max_bytes (grammar + mask tables); a dropped entry
 * still in use lives until its last reference goes. */
typedef struct lg_ccache lg_ccache;
lg_ccache *lg_ccache_new(int max_entries, size_t max_bytes);
void lg_ccache_free(lg_ccache *cc); /* NULL is a no-op */
/* A reference to the compiled constraint for (v, opts, src): from the cache,
 * or compiled now on the caller's thread (two threads missing on the same
 * key may both compile; one result is kept). Refusals are cached too (the
 * same error again, without compiling). Caller unrefs. */
int lg_ccache_get(lg_ccache *cc, const lg_cvocab *v, const lg_copts *opts, const char *src,
                  size_t len, lg_constraint **out, lg_cerr *err);
typedef struct lg_ccache_stats {
    long hits, misses, entries;
    size_t bytes;
} lg_ccache_stats;
void lg_ccache_stats_get(lg_ccache *cc, lg_ccache_stats *s);

#endif
