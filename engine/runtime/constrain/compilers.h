/*
 * compilers.h — the front ends that build an lg_cgb grammar (internal):
 * JSON Schema (json_schema.c, with json_numeric.c for number ranges and
 * json_formats.c for string formats) and Lark EBNF (lark.c). Each returns
 * 0 with *root set to the start rule, or -1 with the error in the builder's
 * budget (message + JSON pointer / line).
 */
#ifndef LG_CONSTRAIN_COMPILERS_H
#define LG_CONSTRAIN_COMPILERS_H

#include "engine/runtime/constrain/cgrammar.h"

/* kind: LG_CK_JSON_SCHEMA (src is the schema), LG_CK_JSON_OBJECT, LG_CK_JSON_VALUE. */
int lg_cjson_compile(lg_cgb *g, lg_ckind kind, const char *src, size_t len, lg_cws ws,
                     const lg_climits *lim, int *root);
int lg_clark_compile(lg_cgb *g, const char *src, size_t len, const lg_climits *lim, int *root);

/* JSON number literals whose value lies within the bounds, as a regex
 * (json_numeric.c): integers -?(0|[1-9][0-9]*), other numbers with an
 * optional fraction and no exponent; no negative zero but integer "-0" where
 * llguidance has it (both bounds, 0 and negatives inside). A double bound
 * counts as its shortest round-trip decimal. Returns a malloc'd regex, or
 * NULL with *why set (no number satisfies the bounds, out of memory). */
char *lg_rx_number_range(bool integer, bool has_lo, double lo, bool lo_excl, bool has_hi, double hi,
                         bool hi_excl, const char **why);
/* A double as JSON text the way serde_json/ryu writes it (shortest
 * round-trip digits; "1.0", "1e+20" -> "1e20", "1.5e-7"). */
void lg_num_to_str(double x, char *buf, size_t cap);

/* The regex of a JSON Schema string format (date-time, date, time,
 * duration, email, hostname, ipv4, ipv6, uuid, uri), NULL if unknown. */
const char *lg_json_format_regex(const char *name);

#endif
