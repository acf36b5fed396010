/*
 * json_body.h — request bodies parsed as JSON, with limits a hostile client
 * cannot get around.
 *
 * jansson parses recursively and only stops at depth 2048; we refuse deeper
 * nesting than LG_JSON_MAX_DEPTH (64) with a linear pre-scan that tracks
 * strings and escapes, so brackets inside strings do not count and the
 * recursion never starts. Then jansson parses with JSON_REJECT_DUPLICATES
 * (a body with two "model" keys is ambiguous: we refuse it), without
 * JSON_DECODE_ANY, and we require an object at the top level. Embedded NUL
 * bytes, invalid UTF-8, trailing garbage and integers beyond int64 are
 * refused by jansson. Every failure gives one message naming the problem
 * and where it is (line, column).
 */
#ifndef LG_GW_JSON_BODY_H
#define LG_GW_JSON_BODY_H

#include <jansson.h>
#include <stddef.h>

#include "engine/base/common.h"

#define LG_JSON_MAX_DEPTH 64

typedef struct lg_json_limits {
    size_t max_bytes; /* 0: no size limit here (the router already applied the route's) */
    int max_depth;    /* 0: LG_JSON_MAX_DEPTH */
} lg_json_limits;

/* Deepest nesting of arrays/objects in buf, ignoring brackets inside strings
 * (a linear scan; it does not validate the JSON). Stops early and returns
 * limit + 1 as soon as the depth passes limit, with *offset (may be NULL) the
 * byte offset where it did. */
int lg_json_depth(const char *buf, size_t len, int limit, size_t *offset);

/* Parses buf as a JSON object under the limits (lim NULL: defaults). Returns
 * a new reference, or NULL with err set ("invalid JSON in the request body:
 * ... (line L, column C)", "the request body must be a JSON object, not an
 * array", "JSON nesting deeper than 64 levels ...", "duplicate key ..."). */
json_t *lg_json_parse_object(const char *buf, size_t len, const lg_json_limits *lim, lg_err *err);

#endif
