/*
 * cgrammar.h — the grammar IR every constraint compiles to (internal).
 *
 * A context-free grammar over bytes: a set of rules, each a deterministic
 * automaton over bytes whose edges may also call another rule (XGrammar's
 * "rules as FSMs"). Regular parts (regexes, literals, JSON primitives) are
 * plain byte transitions inside a rule; recursion and sharing go through
 * calls. The compilers (json_schema.c, lark.c, compile.c) build rules as
 * NFAs with lg_cgb; lg_cgram_build determinizes them with one global set of
 * byte classes and lays every state of every rule out in flat arrays:
 *
 *   next[node * n_cls + cls[byte]]  the byte transition (or -1)
 *   call_off[node] .. call_off[node+1]  (call_rule, call_ret) pairs
 *   flags[node]  FINAL (the rule may return here), HAS_BYTES, HAS_CALLS
 *
 * Build-time checks: rules that can never finish are dropped and every
 * edge into a state that cannot reach a final state is cut (so every state
 * a parse can be in can still complete: a mask never offers a dead end);
 * left recursion (a rule reachable from its own start without consuming a
 * byte) is refused by name, since the matcher expands calls eagerly.
 *
 * A built lg_cgram is immutable and shared by every matcher of the
 * constraint.
 */
#ifndef LG_CONSTRAIN_CGRAMMAR_H
#define LG_CONSTRAIN_CGRAMMAR_H

#include "engine/runtime/constrain/automaton.h"

typedef struct lg_cgb {
    lg_nfa **rules;       /* each rule's NFA: start node 0 */
    char **names;
    int n, cap;
    int max_rules;
    lg_cbudget *b;
} lg_cgb;

void lg_cgb_init(lg_cgb *g, lg_cbudget *b, int max_rules);
void lg_cgb_clear(lg_cgb *g);
/* A new empty rule (its NFA has the start node 0); -1 on failure. */
int lg_cgb_rule(lg_cgb *g, const char *name);
static inline lg_nfa *lg_cgb_nfa(lg_cgb *g, int r) { return g->rules[r]; }

enum { LG_CN_FINAL = 1, LG_CN_BYTES = 2, LG_CN_CALLS = 4 };

typedef struct lg_cgram {
    int n_rules;
    int32_t *rule_start;      /* [n_rules] global node of each rule's start */
    char **rule_name;         /* [n_rules] */
    int32_t root;             /* root rule */
    int32_t n_nodes;
    int32_t *node_rule;       /* [n_nodes] */
    uint8_t *flags;           /* [n_nodes] LG_CN_* */
    int n_cls;
    uint8_t cls[256];
    uint8_t cls_bytes[256][32]; /* the bytes of each class, as a 256-bit set */
    int32_t *next;            /* [n_nodes * n_cls] */
    int32_t *call_off;        /* [n_nodes + 1] */
    int32_t *call_rule, *call_ret;
    size_t bytes;             /* memory held */
} lg_cgram;

/* Determinizes and checks the builder's rules; root is the start rule.
 * On success *out is a new grammar (lg_cgram_free). */
int lg_cgram_build(lg_cgb *g, int root, lg_cgram **out);
void lg_cgram_free(lg_cgram *c);

static inline int32_t lg_cg_next(const lg_cgram *c, int32_t node, uint8_t byte)
{
    return c->next[(size_t)node * c->n_cls + c->cls[byte]];
}

#endif
