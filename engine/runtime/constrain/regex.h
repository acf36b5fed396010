/*
 * regex.h — regular expressions for constrained decoding (internal).
 *
 * Syntax: Python `re` / JavaScript without backreferences and lookarounds:
 * literals and escapes (\n \t \r \f \v \a \0 \xHH \uHHHH \u{H..} \UHHHHHHHH
 * \ooo), `.`, classes [...] with ranges, negation and escapes, \d \D \w \W
 * \s \S, \p{..}/\P{..} with a Unicode general category (L, Lu, Nd, ...),
 * groups ( ), (?: ), (?P<n> ), (?<n> ), inline flags (?i) (?s) (?i: ) (?-i: ),
 * alternation, quantifiers * + ? {n} {n,} {,m} {n,m} and their lazy forms
 * (laziness does not change the language), ^ and $ at the start and end.
 * Refused by name, with the offset: backreferences (\1, \k<n>, (?P=n)),
 * lookarounds ((?= (?! (?<= (?<!), word boundaries (\b \B), atomic groups
 * and possessive quantifiers, conditionals, (?m) and (?x), anchors anywhere
 * but the ends.
 *
 * Semantics: matching is over Unicode scalar values encoded as UTF-8 (no
 * surrogates, no overlong forms). \d and \w are ASCII ([0-9],
 * [0-9A-Za-z_]) for JSON Schema patterns (as llguidance) and Unicode with
 * LG_RX_UNICODE (regex constraints and grammars, as Rust's regex crate:
 * \d = Nd, \w = letters, marks, digits, connectors); \s = Unicode
 * White_Space; (?i) is Unicode simple case folding; [[:alpha:]] and the
 * other POSIX classes are ASCII. `.` excludes \n unless (?s). Unicode
 * scripts (\p{Greek}) are not supported.
 *
 * Two modes: whole-match (the regex must match the entire text: regex
 * constraints, grammar terminals, formats) and search (JSON Schema
 * `pattern`: the text must contain a match; ^ / $ anchor it, as derivre
 * does: unanchored sides get `(?s:.*)`).
 */
#ifndef LG_CONSTRAIN_REGEX_H
#define LG_CONSTRAIN_REGEX_H

#include "engine/runtime/constrain/automaton.h"

enum {
    LG_RX_SEARCH = 1,      /* JSON Schema pattern semantics */
    LG_RX_DOTALL = 2,      /* start with (?s) */
    LG_RX_ICASE = 4,       /* start with (?i) */
    LG_RX_UNICODE = 8,     /* \d and \w are Unicode (regex constraints, grammars) */
};

/* Compiles a regex into an NFA fragment between from and to of `a`.
 * param_prefix names the place in error messages ("/properties/x/pattern");
 * errors go to a->b with param "<prefix> offset N". */
int lg_rx_emit(const char *re, size_t len, int flags, lg_nfa *a, int from, int to,
               const char *param_prefix, int max_depth);
/* Compiles a regex into a trimmed pure byte DFA. */
int lg_rx_dfa(const char *re, size_t len, int flags, lg_cbudget *b, lg_dfa *out,
              const char *param_prefix, int max_depth);
/* Appends the UTF-8 byte sequences of code points [lo, hi] (surrogates
 * skipped) as paths from -> to. */
void lg_rx_emit_cp_range(lg_nfa *a, int from, int to, uint32_t lo, uint32_t hi);

#endif
