/*
 * automaton.h — byte automata for constrained decoding (internal to
 * engine/runtime/constrain/).
 *
 * lg_nfa: a Thompson-style automaton over bytes with epsilon edges and
 * "call" edges (a call to another grammar rule, which returns to the
 * edge's target). Regexes, JSON-schema primitives and grammar rules are all
 * built as lg_nfa, then determinized by subset construction (lg_nfa_to_dfa)
 * into lg_dfa: deterministic on bytes (through byte classes: bytes no edge
 * tells apart share a class), at most one call edge per callee per state
 * (targets of calls to the same rule are merged: calling R once and
 * returning to the union of the targets has the same language).
 *
 * Pure byte DFAs (no calls) also support the operations regexes need but a
 * Thompson construction does not give: intersection, difference (A and not
 * B), and JSON quoting (a regex over string contents -> a regex over the
 * JSON-encoded contents, with the escapes llguidance/derivre accept).
 *
 * Every construction is bounded: lg_cbudget counts NFA and DFA states
 * against the compile limits and checks the compile deadline; the first
 * failure records an LG_CERR_LIMIT error and every later call is a no-op
 * returning failure, so builders check once at the end.
 */
#ifndef LG_CONSTRAIN_AUTOMATON_H
#define LG_CONSTRAIN_AUTOMATON_H

#include "engine/runtime/constrain/constrain.h"

/* Shared by everything one compilation builds. */
typedef struct lg_cbudget {
    long nfa_states, max_nfa;
    long dfa_states, max_dfa;
    double deadline;   /* lg_now() seconds */
    int max_ms;        /* the limit the deadline came from (messages) */
    int ticks;         /* deadline checked every 1024 ticks */
    bool failed;
    lg_cerr *err;
} lg_cbudget;

/* Records an error (first one wins), marks the budget failed, returns -1. */
int lg_cfail(lg_cbudget *b, int code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Deadline check; -1 (and an error) when past it. */
int lg_cbudget_tick(lg_cbudget *b);

enum { LG_NE_EPS = 0, LG_NE_BYTES = 1, LG_NE_CALL = 2 };
typedef struct lg_nfa_edge {
    int32_t from, to;
    int32_t callee;   /* LG_NE_CALL */
    uint8_t lo, hi;   /* LG_NE_BYTES: inclusive byte range */
    uint8_t kind;
} lg_nfa_edge;

typedef struct lg_nfa {
    int32_t n, cap;        /* nodes */
    uint8_t *final;        /* [cap] */
    int32_t start;         /* node 0 unless changed */
    lg_nfa_edge *e;
    size_t ne, cape;
    lg_cbudget *b;
} lg_nfa;

void lg_nfa_init(lg_nfa *a, lg_cbudget *b); /* one start node (0), not final */
void lg_nfa_clear(lg_nfa *a);
int lg_nfa_node(lg_nfa *a);                 /* new node id, -1 on failure */
void lg_nfa_eps(lg_nfa *a, int from, int to);
void lg_nfa_range(lg_nfa *a, int from, int to, uint8_t lo, uint8_t hi);
void lg_nfa_call(lg_nfa *a, int from, int to, int callee);
/* A chain of literal bytes from -> to. */
void lg_nfa_lit(lg_nfa *a, int from, int to, const char *s, size_t n);

typedef struct lg_dfa {
    int32_t n;             /* states, 0 is the start */
    int n_cls;
    uint8_t cls[256];      /* byte -> class */
    int32_t *next;         /* [n * n_cls] target or -1 */
    uint8_t *final;        /* [n] */
    int32_t *call_off;     /* [n + 1]; NULL when the automaton has no calls */
    int32_t *call_rule, *call_to;
} lg_dfa;

void lg_dfa_free(lg_dfa *d);
/* Byte classes of an NFA's byte edges (refinement of every edge's range);
 * merged into cls (call with cls all-zero / n_cls 1 to start). */
void lg_cls_refine(uint8_t cls[256], int *n_cls, const lg_nfa *a);
/* Subset construction with the given byte classes (a refinement of a's
 * edges, e.g. from lg_cls_refine). 0 / -1 (budget). */
int lg_nfa_to_dfa(const lg_nfa *a, const uint8_t cls[256], int n_cls, lg_dfa *out);
/* The same with a's own classes. */
int lg_nfa_determinize(const lg_nfa *a, lg_dfa *out);
/* Removes states that cannot reach a final state (pure byte DFAs). The
 * start state is kept even if dead (then the DFA matches nothing:
 * lg_dfa_empty). */
int lg_dfa_trim(lg_dfa *d, lg_cbudget *b);
bool lg_dfa_empty(const lg_dfa *d);
/* Product automata of two pure byte DFAs: A and B, or A and not B. */
int lg_dfa_and(const lg_dfa *a, const lg_dfa *b, bool negate_b, lg_dfa *out, lg_cbudget *bud);
/* JSON string quoting: the DFA of the JSON-encoded forms of a's strings
 * (no surrounding quotes: the caller adds them). Bytes < 0x20, '"', '\\' and
 * 0x7F must be escaped: '"' as \", '\\' as \\, 0x08 0x0C 0x0A 0x0D 0x09 as
 * \b \f \n \r \t or as \u00XX, other controls and 0x7F as \u00XX (hex digits
 * in either case); every other byte stands for itself. */
int lg_dfa_json_quote(const lg_dfa *a, lg_dfa *out, lg_cbudget *bud);
/* Copies a pure byte DFA into an NFA between from and to (final -> to). */
int lg_dfa_emit(const lg_dfa *d, lg_nfa *a, int from, int to);
/* Single-string DFA (exact bytes). */
int lg_dfa_literal(const char *s, size_t n, lg_dfa *out, lg_cbudget *b);
/* Whether the DFA matches exactly these bytes (tests, enum filters). */
bool lg_dfa_matches(const lg_dfa *d, const char *s, size_t n);

#endif
