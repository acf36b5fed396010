/*
 * cinternal.h — what the constrain/ files share (internal): the vocabulary
 * and its token trie, the parser (a pushdown automaton over lg_cgram with
 * hash-consed stack frames), the constraint object and its lazy table.
 *
 * The parser. A parse is a stack of frames; a frame is (grammar node,
 * parent frame): the top frame's node is where the parse is, every other
 * frame's node is where its rule resumes when the callee returns. Frames
 * are hash-consed in an arena (lg_frames), so a stack is one int32 id and
 * equal stacks are equal ids. A parser state (lg_pstate) is the set of
 * stacks alive after a closure: their tops all sit on nodes with byte
 * transitions ("tops"), plus `accept` (some stack returned from the root:
 * the output is complete) and `exit` (only while precomputing: the rule
 * under study returned). A closure expands calls (push the callee's start
 * over a frame for the return node; a return node that is final with no
 * edges is skipped: a tail call does not grow the stack) and returns
 * (pop to the parent). Nondeterminism (anyOf branches, grammar ambiguity)
 * is just several tops; max_tops bounds them, max_stack the nesting.
 *
 * Arenas layer: a matcher's committed frames live in its main arena; masks,
 * acceptance checks and look-aheads intern their transient frames in a
 * scratch arena over it (reads fall through to main; a reset drops them
 * in O(1) by bumping an epoch), so looking never grows the matcher.
 */
#ifndef LG_CONSTRAIN_CINTERNAL_H
#define LG_CONSTRAIN_CINTERNAL_H

#include <stdatomic.h>

#include "engine/runtime/constrain/cgrammar.h"

/* ---- vocabulary (vocab.c) --------------------------------------------------------- */

struct lg_cvocab {
    int n_vocab, n_words;
    uint8_t *blob;            /* token bytes, concatenated */
    uint32_t *off, *len;      /* [n_vocab] */
    uint8_t *excluded;        /* [n_vocab] special or empty: never in the trie */
    int32_t *eos;
    int n_eos;
    /* the trie, in preorder: node 0 is the root (no byte) */
    int32_t n_nodes;
    uint8_t *t_byte;          /* [n_nodes] */
    uint16_t *t_depth;        /* [n_nodes] */
    int32_t *t_end;           /* [n_nodes] one past the subtree */
    int32_t *t_tok0, *t_ntok; /* [n_nodes] tokens ending here: tok_sorted[t_tok0 .. +t_ntok) */
    int32_t *tok_sorted;
    int max_len;
    uint64_t digest;
};

/* ---- frames and parser states (pda.c) ------------------------------------------------ */

#define LG_FR_NONE (-1)
#define LG_FR_EXIT (-2)
#define LG_FR_SCRATCH 0x40000000

typedef struct lg_frames {
    int32_t *node, *parent, *depth;
    uint32_t *mark;
    int32_t n, cap, max;
    int32_t *ht;              /* slot -> local index */
    uint32_t *ht_epoch;       /* slot valid iff == epoch */
    uint32_t htmask, epoch;
    struct lg_frames *base;   /* scratch layer: read-through arena, else NULL */
    int32_t bit;              /* 0 (main / standalone) or LG_FR_SCRATCH */
} lg_frames;

typedef struct lg_pstate {
    int32_t *tops;
    int n, cap;
    uint8_t accept, exit;
} lg_pstate;

typedef struct lg_pda {
    const lg_cgram *g;
    lg_frames *fr;            /* interning arena */
    uint32_t gen;
    int32_t *work, *seeds;
    int capwork, capseeds;
    int max_stack, max_tops;
    bool failed;
    char why[160];
} lg_pda;

int lg_frames_init(lg_frames *f, lg_frames *base, int32_t bit, int32_t max);
void lg_frames_free(lg_frames *f);
void lg_frames_reset(lg_frames *f);   /* drop every frame (scratch layers) */
int lg_frames_copy(lg_frames *dst, const lg_frames *src);
static inline lg_frames *lg_fr_layer(lg_frames *f, int32_t id)
{
    return ((id & LG_FR_SCRATCH) == f->bit || !f->base) ? f : f->base;
}
static inline int32_t lg_fr_node(lg_frames *f, int32_t id) { return lg_fr_layer(f, id)->node[id & ~LG_FR_SCRATCH]; }
static inline int32_t lg_fr_parent(lg_frames *f, int32_t id) { return lg_fr_layer(f, id)->parent[id & ~LG_FR_SCRATCH]; }
int32_t lg_frames_intern(lg_pda *p, int32_t node, int32_t parent);

void lg_pda_init(lg_pda *p, const lg_cgram *g, lg_frames *fr, const lg_climits *lim);
void lg_pda_free(lg_pda *p);
int lg_pstate_reserve(lg_pda *p, lg_pstate *s, int n);
void lg_pstate_free(lg_pstate *s);
int lg_pstate_copy(lg_pda *p, lg_pstate *dst, const lg_pstate *src);
/* Closure of the configurations seeds[0..ns) (frame ids, or NONE/EXIT) into
 * out; tops sorted. -1 on a runtime limit (p->why). */
int lg_pda_closure(lg_pda *p, const int32_t *seeds, int ns, lg_pstate *out);
/* One byte from `in` into `out` (out != in). */
int lg_pda_step(lg_pda *p, const lg_pstate *in, uint8_t byte, lg_pstate *out);
/* The start state of the grammar. */
int lg_pda_start(lg_pda *p, lg_pstate *out);
/* Union of the bytes the tops can consume, as a 256-bit set. */
void lg_pda_next_bytes(lg_pda *p, const lg_pstate *s, uint8_t set[32]);

/* ---- the constraint and its lazy table (mask.c) ------------------------------------- */

typedef struct lg_centry {
    int32_t n_acc;
    uint32_t *bits;           /* dense: [n_words], or NULL */
    int32_t *ids;             /* sparse: token ids */
    int32_t n_exit;
    int32_t *exits;           /* trie nodes where the rule can return mid-token */
    size_t bytes;
} lg_centry;

struct lg_constraint {
    atomic_int refs;
    const lg_cvocab *v;
    lg_cgram *g;
    lg_climits lim;
    _Atomic(lg_centry *) *table;  /* [g->n_nodes] */
    atomic_size_t table_bytes;
    atomic_int table_entries;
    size_t bytes;             /* grammar + struct */
};

/* The entry of grammar node `node` (a node with byte transitions),
 * computing it if needed. If the table is over its budget the entry is
 * computed into *tmp and returned without being published (the caller
 * frees it with lg_centry_free). NULL on failure (err). */
const lg_centry *lg_constraint_entry(lg_constraint *c, int32_t node, lg_centry **tmp, lg_err *err);
void lg_centry_free(lg_centry *e);

/* Per-depth parser states for walking the trie. */
typedef struct lg_walker {
    lg_pstate *lvl;
    int nlvl;
} lg_walker;
int lg_walker_init(lg_walker *w, int max_len);
void lg_walker_free(lg_walker *w);

/* Marks into mask the tokens below trie node x (not x itself) that are
 * viable when the bytes of x have been consumed and the parser is in state
 * `at` (frames interned through p). */
int lg_walk_subtree(lg_pda *p, lg_walker *w, const lg_cvocab *v, int32_t x, const lg_pstate *at, uint32_t *mask);

#endif
